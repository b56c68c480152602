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

#include "cpu/matmul_impl.h"
#include "util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- ISA detection and selection ----------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

/* cpuid rather than __builtin_cpu_supports: clang 14 does not know every
 * feature name we need (f16c), and the OS must enable the register state. */
tnd_cpu_isa_id tnd_cpu_isa_best(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TND_ISA_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(osxsave && avx && fma && f16c)) return TND_ISA_SCALAR;
    uint64_t xcr0 = xgetbv0();
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

static void isa_init(void) {
    build_tables();
    tnd_cpu_isa_id best = tnd_cpu_isa_best(), use = best;
    const char *e = getenv("TND_CPU_ISA");
    if (e && *e) {
        int want = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(e, k_isa_names[i])) want = i;
        if (want < 0) TND_WARN("TND_CPU_ISA=%s unknown (scalar, avx2, avx512); using %s", e, k_isa_names[best]);
        else if (want > (int)best) TND_WARN("TND_CPU_ISA=%s not supported here; using %s", e, k_isa_names[best]);
        else use = (tnd_cpu_isa_id)want;
    }
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

/* ---- activation scratch ---------------------------------------------------- */

/* One growing buffer per calling thread: matmuls may run at once from several
 * threads (e.g. SimGPU streams), each with its own pool or none. */
typedef struct scratch { void *p; size_t n; } scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static bool g_scratch_ok;

static void scratch_free(void *v) {
    scratch *s = v;
    if (s) tnd_aligned_free(s->p);
    free(s);
}
static void scratch_init(void) { g_scratch_ok = pthread_key_create(&g_scratch_key, scratch_free) == 0; }

static void *scratch_get(size_t n) {
    pthread_once(&g_scratch_once, scratch_init);
    if (!g_scratch_ok) return NULL;
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        if (pthread_setspecific(g_scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->n < n) {
        tnd_aligned_free(s->p);
        s->n = 0;
        s->p = tnd_aligned_alloc(n + n / 4);
        if (!s->p) return NULL;
        s->n = n + n / 4;
    }
    return s->p;
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
    tnd_vec_dot_fn dot; /* generic path when fn is NULL */
    float *y;
} mm_job;

/* Rows handed to threads in multiples of this, so a thread's share of y
 * starts on a cache line (no false sharing) and kernels get full tiles. */
#define ROW_GRAIN 16

static void mm_task(void *arg, int ith, int nth) {
    mm_job *j = arg;
    if (j->quant) {
        int64_t nbr = j->n_in / j->act_bs, total = nbr * j->n_tok;
        int64_t b0 = total * ith / nth, b1 = total * (ith + 1) / nth;
        while (b0 < b1) {
            int64_t t = b0 / nbr, b = b0 % nbr, n = TND_MIN(nbr - b, b1 - b0);
            j->quant(j->x + t * j->n_in + b * j->act_bs, j->xq + (size_t)t * j->x_row + (size_t)b * j->act_ts,
                     n * j->act_bs);
            b0 += n;
        }
        tnd_pool_barrier(j->pool);
    }
    int64_t nr = j->r1 - j->r0, ng = (nr + ROW_GRAIN - 1) / ROW_GRAIN;
    int64_t g0 = ng * ith / nth, g1 = ng * (ith + 1) / nth;
    int64_t a = j->r0 + g0 * ROW_GRAIN, b = TND_MIN(j->r0 + g1 * ROW_GRAIN, j->r1);
    if (a >= b) return;
    const char *w = j->W + (size_t)a * j->w_row;
    float *y = j->y + a;
    if (j->fn) j->fn(j->n_in, w, j->w_row, b - a, j->xq, j->x_row, j->n_tok, y, j->n_out);
    else mm_generic(j->dot, j->n_in, w, j->w_row, b - a, j->xq, j->x_row, j->n_tok, y, j->n_out);
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
    if (k->mm[wt].fn && k->mm[wt].act == tr->vec_dot_type) j.fn = k->mm[wt].fn;
    if (tr->vec_dot_type == TND_TYPE_F32) {
        j.xq = (char *)x;
        j.x_row = (size_t)n_in * sizeof(float);
    } else {
        j.quant = k->quant[tr->vec_dot_type] ? k->quant[tr->vec_dot_type] : at->from_float;
        j.act_bs = at->block_size;
        j.act_ts = at->type_size;
        j.x_row = tnd_row_size(tr->vec_dot_type, n_in);
        j.xq = scratch_get(j.x_row * (size_t)n_tok);
        if (!j.xq) {
            TND_WARN("tnd_cpu_matmul: out of memory for activations");
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = r0; r < r1; r++) y[t * n_out + r] = NAN;
            return;
        }
    }
    tnd_pool_run(pool, mm_task, &j);
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
