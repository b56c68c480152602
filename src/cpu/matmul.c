/* Matmul driver: ISA selection, activation quantization, splitting work over
 * the pool, and the generic (scalar) kernels built on the quant/ references.
 *
 * One call = one pool run with two phases: every thread quantizes a share of
 * the activation blocks, a barrier, then every thread computes a contiguous
 * range of output rows (so it streams its own part of W) for all tokens. */
#include "cpu/matmul.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpu/matmul_amx.h"
#include "cpu/matmul_impl.h"
#include "util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- ISA detection and selection ----------------------------------------- */

uint64_t tnd_cpu_xgetbv0(void) {
#if defined(__x86_64__) || defined(__i386__)
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
#else
    return 0;
#endif
}

/* cpuid rather than __builtin_cpu_supports: clang 14 does not know every
 * feature name we need (f16c), and the OS must enable the register state. */
static tnd_cpu_isa_id detect_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TND_ISA_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(osxsave && avx && fma && f16c)) return TND_ISA_SCALAR;
    uint64_t xcr0 = tnd_cpu_xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return TND_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return TND_ISA_SCALAR;
    bool avx2 = b & (1u << 5);
    if (!avx2) return TND_ISA_SCALAR;
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    if (f && dq && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0) return TND_ISA_AVX512;
    return TND_ISA_AVX2;
#else
    return TND_ISA_SCALAR;
#endif
}

/* Detected once: cpuid traps to the hypervisor in a VM (microseconds, far
 * more under some sandboxes), and kernels ask per call and per worker. */
static pthread_once_t g_best_once = PTHREAD_ONCE_INIT;
static tnd_cpu_isa_id g_best;
static void best_init(void) { g_best = detect_isa(); }

tnd_cpu_isa_id tnd_cpu_isa_best(void) {
    pthread_once(&g_best_once, best_init);
    return g_best;
}

static const char *const k_isa_names[] = {"scalar", "avx2", "avx512"};

static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;
static _Atomic int g_isa;
static tnd_cpu_kernels g_kernels[3];

static void build_tables(void) {
    /* Every level starts from the generic table (zeros = generic) and adds
     * its kernels over the level below, so a format without an AVX-512
     * kernel still gets the AVX2 one on an AVX-512 machine. */
    memset(g_kernels, 0, sizeof g_kernels);
    tnd_cpu_kernels_avx2(&g_kernels[TND_ISA_AVX2]);
    g_kernels[TND_ISA_AVX512] = g_kernels[TND_ISA_AVX2];
    tnd_cpu_kernels_avx512(&g_kernels[TND_ISA_AVX512]);
}

int tnd_cpu_pf_dist = 3072; /* until isa_init reads the config's */

static void isa_init(void) {
    /* TND_CPU_PF_DIST (bytes, a multiple of 64 up to 16 KiB): for tuning
     * the decode kernels' prefetch on a new machine (dev_matvec_f32_bw) */
    const tnd_config *cfg = tnd_config_get();
    tnd_cpu_pf_dist = cfg->cpu_pf_dist;
    build_tables();
    tnd_cpu_isa_id best = tnd_cpu_isa_best(), use = best;
    const int want = cfg->cpu_isa;
    /* a set the CPU lacks is a fact of the machine, not a typo: a warning */
    if (want > (int)best) TND_WARN("TND_CPU_ISA=%s not supported here; using %s", k_isa_names[want], k_isa_names[best]);
    else if (want >= 0) use = (tnd_cpu_isa_id)want;
    atomic_store(&g_isa, (int)use);
}

tnd_cpu_isa_id tnd_cpu_isa_id_current(void) {
    pthread_once(&g_isa_once, isa_init);
    return (tnd_cpu_isa_id)atomic_load_explicit(&g_isa, memory_order_relaxed);
}

bool tnd_cpu_isa_force(tnd_cpu_isa_id isa) {
    pthread_once(&g_isa_once, isa_init);
    if ((int)isa < 0 || isa > tnd_cpu_isa_best()) return false;
    atomic_store(&g_isa, (int)isa);
    return true;
}

const tnd_cpu_kernels *tnd_cpu_kernels_current(void) { return &g_kernels[tnd_cpu_isa_id_current()]; }

const char *tnd_cpu_isa(void) { return k_isa_names[tnd_cpu_isa_id_current()]; }

/* ---- generic kernel -------------------------------------------------------- */

/* Scalar path: the reference vec_dot of the weight type, per (row, token).
 * Tokens inner so a weight row is read from memory once for all tokens. */
static void mm_generic(tnd_vec_dot_fn dot, int64_t n_in, const void *W, size_t w_row, int64_t nr,
                       const void *xq, size_t x_row, int64_t nt, float *y, int64_t y_stride) {
    for (int64_t r = 0; r < nr; r++) {
        const void *w = (const char *)W + (size_t)r * w_row;
        for (int64_t t = 0; t < nt; t++)
            y[t * y_stride + r] = dot(n_in, w, (const char *)xq + (size_t)t * x_row);
    }
}

/* ---- per-thread buffers ------------------------------------------------------ */

/* Growing buffers per thread: matmuls may run at once from several threads
 * (e.g. SimGPU streams), each with its own pool or none; pool workers keep
 * their kernel buffers between calls. Freed when the thread exits. */
#define N_SLOTS 3
typedef struct scratch { void *p[N_SLOTS]; size_t n[N_SLOTS]; } scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static bool g_scratch_ok;

static void scratch_free(void *v) {
    scratch *s = v;
    if (!s) return;
    for (int i = 0; i < N_SLOTS; i++) tnd_aligned_free(s->p[i]);
    free(s);
}
static void scratch_init(void) { g_scratch_ok = pthread_key_create(&g_scratch_key, scratch_free) == 0; }

void *tnd_cpu_tls_buf(int slot, size_t n) {
    pthread_once(&g_scratch_once, scratch_init);
    if (!g_scratch_ok || slot < 0 || slot >= N_SLOTS) return NULL;
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        if (pthread_setspecific(g_scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->n[slot] < n) {
        tnd_aligned_free(s->p[slot]);
        s->n[slot] = 0;
        s->p[slot] = tnd_aligned_alloc(n + n / 4);
        if (!s->p[slot]) return NULL;
        s->n[slot] = n + n / 4;
    }
    return s->p[slot];
}

/* ---- the driver ------------------------------------------------------------ */

typedef struct mm_job {
    tnd_pool *pool;
    /* weights */
    const char *W;
    size_t w_row;
    int64_t n_in, n_out, r0, r1;
    /* activations */
    const float *x;
    int64_t n_tok;
    tnd_act_quant_fn quant; /* NULL: xq is x itself (f32 activations) */
    int64_t act_bs;         /* elements per activation block */
    size_t act_ts;          /* bytes per activation block */
    char *xq;
    size_t x_row;
    /* kernel */
    tnd_mm_kernel fn;
    tnd_mm_prep_fn prep; /* fn's activation layout, made once per call into xp */
    char *xp;
    size_t xp_row;
    bool xp_ok; /* xp holds this call's activations laid out already (reused) */
    tnd_vec_dot_fn dot; /* generic path when fn is NULL */
    tnd_gemm_kernel gemm; /* prefill path, or NULL */
    tnd_type act;
    tnd_act_aux *aux;   /* n_tok x n_in/16, when gemm */
    float *y;
} mm_job;

#define TND_ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* Scale and quant sums of each 16-chunk of one token's activations. */
static void act_aux(tnd_type act, const char *xq, int64_t n_in, tnd_act_aux *aux) {
    for (int64_t c = 0; c < n_in / TND_CHUNK; c++) {
        float da;
        int32_t sa = 0;
        if (act == TND_TYPE_Q8_K) {
            const block_q8_K *b = (const block_q8_K *)xq + c / (TND_QK_K / TND_CHUNK);
            da = b->d;
            sa = b->bsums[c % (TND_QK_K / TND_CHUNK)];
        } else {
            /* Q8_0 and Q8_1 differ only in the header before qs */
            const int8_t *qs;
            if (act == TND_TYPE_Q8_1) {
                /* Q4_1/Q5_1 use the block's stored (half-rounded) d * sum as
                 * the reference does: on the block's first chunk, 0 on the
                 * second. */
                const block_q8_1 *b = (const block_q8_1 *)xq + c / 2;
                da = tnd_fp16_to_fp32(b->d);
                qs = b->qs + (c % 2) * TND_CHUNK;
                for (int i = 0; i < TND_CHUNK; i++) sa += qs[i];
                aux[c] = (tnd_act_aux){.da = da, .dsa = c % 2 ? 0.0f : tnd_fp16_to_fp32(b->s), .sa = sa};
                continue;
            } else {
                const block_q8_0 *b = (const block_q8_0 *)xq + c / 2;
                da = tnd_fp16_to_fp32(b->d);
                qs = b->qs + (c % 2) * TND_CHUNK;
            }
            for (int i = 0; i < TND_CHUNK; i++) sa += qs[i];
        }
        aux[c] = (tnd_act_aux){.da = da, .dsa = da * (float)sa, .sa = sa};
    }
}

/* Rows handed to threads in multiples of this, so a thread's share of y
 * starts on a cache line (no false sharing) and kernels get full tiles. */
#define ROW_GRAIN 16

/* The phases of a matmul, each a pool run (items claimed by whichever
 * threads run: no barrier, so a descheduled thread delays nobody). */
static void quant_task(void *arg, int i, int n) {
    mm_job *j = arg;
    int64_t nbr = j->n_in / j->act_bs, total = nbr * j->n_tok;
    int64_t b0 = total * i / n, b1 = total * (i + 1) / n;
    while (b0 < b1) {
        int64_t t = b0 / nbr, b = b0 % nbr, k = TND_MIN(nbr - b, b1 - b0);
        j->quant(j->x + t * j->n_in + b * j->act_bs, j->xq + (size_t)t * j->x_row + (size_t)b * j->act_ts,
                 k * j->act_bs);
        b0 += k;
    }
}

/* Scale and quant sums per chunk, per token: after all blocks are quantized. */
static void aux_task(void *arg, int i, int n) {
    mm_job *j = arg;
    int64_t t0 = j->n_tok * i / n, t1 = j->n_tok * (i + 1) / n;
    for (int64_t t = t0; t < t1; t++)
        act_aux(j->act, j->xq + (size_t)t * j->x_row, j->n_in, j->aux + t * (j->n_in / TND_CHUNK));
}

static void rows_task(void *arg, int i, int n) {
    mm_job *j = arg;
    int64_t nr = j->r1 - j->r0, ng = (nr + ROW_GRAIN - 1) / ROW_GRAIN;
    int64_t g0 = ng * i / n, g1 = ng * (i + 1) / n;
    int64_t a = j->r0 + g0 * ROW_GRAIN, b = TND_MIN(j->r0 + g1 * ROW_GRAIN, j->r1);
    if (a >= b) return;
    const char *w = j->W + (size_t)a * j->w_row;
    float *y = j->y + a;
    if (j->gemm)
        j->gemm(j->n_in, w, j->w_row, b - a, j->xq, j->x_row, j->aux, j->n_tok, y, j->n_out);
    else if (j->fn) j->fn(j->n_in, w, j->w_row, b - a, j->xq, j->x_row, j->n_tok, y, j->n_out);
    else mm_generic(j->dot, j->n_in, w, j->w_row, b - a, j->xq, j->x_row, j->n_tok, y, j->n_out);
}

/* Quantizing one token's activations takes ~1 us: below this many values the
 * caller does it alone rather than wake the pool for it. */
#define QUANT_PAR_MIN 65536

static void mm_run(mm_job *j) {
    tnd_pool *pool = j->pool;
    if (j->quant) {
        if (j->n_in * j->n_tok < QUANT_PAR_MIN) quant_task(j, 0, 1);
        else tnd_pool_run(pool, quant_task, j);
        if (j->gemm) {
            if (j->n_tok == 1) aux_task(j, 0, 1);
            else tnd_pool_run_n(pool, aux_task, j, (int)TND_MIN(j->n_tok, tnd_pool_size(pool)));
        }
    }
    if (j->prep && !j->xp_ok) {
        /* once here rather than in every item of the rows run: a batched
         * round's few tokens cost each item as much to lay out as their rows */
        j->prep(j->n_in, j->xq, j->x_row, j->n_tok, j->xp);
    }
    if (j->prep) j->xq = j->xp, j->x_row = j->xp_row;
    /* more items than threads, so threads that run late or slow (other
     * processes on the cores) leave their share to the others; prefill
     * (gemm) keeps one item per thread: its tiles want long row ranges */
    const int64_t ng = (j->r1 - j->r0 + ROW_GRAIN - 1) / ROW_GRAIN;
    const int64_t items = j->gemm ? tnd_pool_size(pool) : tnd_pool_items(pool);
    tnd_pool_run_n(pool, rows_task, j, (int)TND_MAX(1, TND_MIN(ng, items)));
}

/* Decode matmuls over the same activations in a row (q, k and v of a layer;
 * gate and up) quantize them once: the calling thread keeps its last small
 * quantization (slot 2: the quantized rows, then a copy of the floats they
 * came from) and reuses it when the input is the same array with the same
 * contents (compared, so an input rewritten in place is quantized again;
 * the quantizers are deterministic, so reuse gives the same bits). Only
 * below QUANT_PAR_MIN, where the caller quantizes alone: that is a batched
 * round's per-token serial work. */
static _Thread_local struct {
    const float *x;
    int64_t n_in, n_tok;
    tnd_type act;
    char *buf;
    tnd_mm_prep_fn prep; /* what laid out the activations after them, or NULL */
} g_act_last;

static void act_reuse(mm_job *j, tnd_type act) {
    size_t xqb = TND_ALIGN64(j->x_row * (size_t)j->n_tok), xb = TND_ALIGN64((size_t)(j->n_in * j->n_tok) * sizeof(float));
    char *b = tnd_cpu_tls_buf(2, xqb + xb + j->xp_row * (size_t)j->n_tok);
    j->xq = b;
    if (!b) {
        g_act_last.x = NULL;
        return;
    }
    j->xp = b + xqb + xb; /* after the quantized rows and the floats' copy */
    if (g_act_last.x == j->x && g_act_last.n_in == j->n_in && g_act_last.n_tok == j->n_tok && g_act_last.act == act &&
        g_act_last.buf == b && !memcmp(b + xqb, j->x, (size_t)(j->n_in * j->n_tok) * sizeof(float))) {
        j->quant = NULL; /* b holds these activations quantized */
        if (j->prep && g_act_last.prep == j->prep) j->xp_ok = true; /* and laid out */
        g_act_last.prep = j->prep;
        return;
    }
    memcpy(b + xqb, j->x, (size_t)(j->n_in * j->n_tok) * sizeof(float));
    g_act_last.x = j->x, g_act_last.n_in = j->n_in, g_act_last.n_tok = j->n_tok, g_act_last.act = act;
    g_act_last.buf = b;
    g_act_last.prep = j->prep;
}

void tnd_cpu_matmul_rows(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out,
                         int64_t r0, int64_t r1, const float *x, int64_t n_tok, float *y) {
    if (r0 < 0) r0 = 0;
    if (r1 > n_out) r1 = n_out;
    if (r0 >= r1 || n_tok <= 0) return;
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    const tnd_type_traits *at = tr ? tnd_type_traits_get(tr->vec_dot_type) : NULL;
    size_t w_row = tnd_row_size(wt, n_in);
    if (!tr || !tr->supported || !tr->vec_dot || !at || w_row == 0 ||
        (tr->vec_dot_type != TND_TYPE_F32 && (!at->from_float || n_in % at->block_size))) {
        /* A caller bug (the model loader validates types and shapes): make it
         * visible in the output rather than crash. */
        TND_WARN("tnd_cpu_matmul: unsupported type %s or n_in %lld", tnd_type_name(wt), (long long)n_in);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = r0; r < r1; r++) y[t * n_out + r] = NAN;
        return;
    }
    const tnd_cpu_kernels *k = tnd_cpu_kernels_current();
    mm_job j = {
        .pool = pool, .W = W, .w_row = w_row, .n_in = n_in, .n_out = n_out, .r0 = r0, .r1 = r1,
        .x = x, .n_tok = n_tok, .y = y, .dot = tr->vec_dot,
    };
    if (k->mm[wt].act == tr->vec_dot_type) {
        j.fn = k->mm[wt].fn;
        j.prep = k->mm[wt].prep;
        /* The prefill kernel also serves small n_tok for formats without a
         * matvec kernel: its repack costs a few passes over the row, still
         * far less than the scalar path. */
        if ((n_tok >= TND_GEMM_MIN_TOK || !j.fn) && n_in % TND_CHUNK == 0) j.gemm = k->mm[wt].gemm;
    }
    /* AMX prefill kernels (matmul_amx.c) take over where the CPU has them */
    tnd_gemm_kernel amx = n_in % TND_CHUNK == 0 ? tnd_cpu_amx_select(wt, n_tok) : NULL;
    if (amx) j.gemm = amx;
    if (j.gemm || !j.fn) j.prep = NULL;
    if (j.prep) j.xp_row = j.prep(n_in, NULL, 0, n_tok, NULL);
    j.act = tr->vec_dot_type;
    size_t aux_bytes = j.gemm ? (size_t)(n_in / TND_CHUNK) * (size_t)n_tok * sizeof(tnd_act_aux) : 0;
    if (tr->vec_dot_type == TND_TYPE_F32) {
        j.prep = NULL;
        j.xq = (char *)x;
        j.x_row = (size_t)n_in * sizeof(float);
    } else {
        j.quant = k->quant[tr->vec_dot_type] ? k->quant[tr->vec_dot_type] : at->from_float;
        j.act_bs = at->block_size;
        j.act_ts = at->type_size;
        j.x_row = tnd_row_size(tr->vec_dot_type, n_in);
        if (!j.gemm && n_in * n_tok < QUANT_PAR_MIN) act_reuse(&j, tr->vec_dot_type);
        else {
            g_act_last.x = NULL;
            const size_t xqb = TND_ALIGN64(j.x_row * (size_t)n_tok);
            j.xq = tnd_cpu_tls_buf(0, xqb + TND_ALIGN64(aux_bytes) + j.xp_row * (size_t)n_tok);
            if (j.xq) j.aux = (tnd_act_aux *)(j.xq + xqb), j.xp = j.xq + xqb + TND_ALIGN64(aux_bytes);
        }
        if (!j.xq) {
            TND_WARN("tnd_cpu_matmul: out of memory for activations");
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = r0; r < r1; r++) y[t * n_out + r] = NAN;
            return;
        }
    }
    mm_run(&j);
}

void tnd_cpu_matmul(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out,
                    const float *x, int64_t n_tok, float *y) {
    tnd_cpu_matmul_rows(pool, wt, W, n_in, n_out, 0, n_out, x, n_tok, y);
}

void tnd_cpu_get_row(tnd_type wt, const void *W, int64_t n_in, int64_t row, float *out) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t rs = tnd_row_size(wt, n_in);
    if (!tr || !tr->to_float || rs == 0) {
        for (int64_t i = 0; i < n_in; i++) out[i] = NAN;
        return;
    }
    tr->to_float((const char *)W + (size_t)row * rs, out, n_in);
}
