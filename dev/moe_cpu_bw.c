/* The CPU's share of an MoE decode step, alone: the expert matmuls of one
 * token (gate and up Q4_K, down Q6_K, qwen3-30b-a3b's shapes: 128 experts
 * of 2048 x 768, 6 of 8 routed ones on the CPU) through the CPU backend's
 * MATMUL_ID, in GB/s of expert weights read, next to a dense matmul of the
 * same bytes and the machine's read bandwidth; for each kind of host
 * memory the weights can live in: plain pages, transparent huge pages,
 * a mapped file (as GGUF weights are), the CUDA backend's pinned store (cudaHostAlloc), and huge pages pinned
 * afterwards (cudaHostRegister). The question it answers: is the CPU's
 * expert read below the DRAM's because of the memory, the split of the
 * work, or the kernels?
 *
 * Build: CMake builds it as build/dev_moe_cpu_bw.
 * Run:   build/dev_moe_cpu_bw [-t THREADS] [-l LAYERS] [-n TOKENS] [-e EXPERTS_ON_CPU]
 *
 * Each step goes through LAYERS layers (default 8: ~3 GiB, far beyond the
 * last-level cache) with fresh random experts, as decode does; GB/s counts
 * the bytes of the experts used. Best and mean of TOKENS steps.
 *
 * Each step also runs the layers' FFNs as the executor fuses them
 * (TND_OP_MOE_GLU: gate, up and SILU_MUL in one pool region, then down),
 * after the same step as three ops (gate, up, SILU_MUL), with experts of
 * their own: the second line per memory kind compares the two (the down
 * projection is the same op in both and is left out). The third line
 * compares MOE_GLU then down with TND_OP_MOE_FFN (all four in one
 * region), again with experts of their own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/matmul.h"
#include "cpu/membw.h"
#include "cpu/pool.h"
#include "quant/quant.h"
#include "util.h"

/* cudaHostRegister, when the CUDA runtime is linked in (weak: absent otherwise) */
extern int cudaHostRegister(void *p, size_t n, unsigned int flags) __attribute__((weak));
extern int cudaHostUnregister(void *p) __attribute__((weak));

#define N_EXP 128
#define N_EMBD 2048
#define N_FF 768
#define N_USED 8 /* routed experts a token: the slots past the CPU's are the GPU's, skipped here (id -1) */

enum { M_PLAIN, M_THP, M_FILE, M_PINNED, M_THP_REG, M_COUNT };
static const char *mem_name[M_COUNT] = {"plain 4K pages", "huge pages (THP)", "mmapped file (page cache)",
                                        "pinned (cudaHostAlloc)", "THP + cudaHostRegister"};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

typedef struct mem {
    void *p;
    size_t n;
    int kind;
    tnd_backend *g;
} mem;

static bool mem_alloc(mem *m, int kind, size_t n, tnd_backend *g) {
    m->kind = kind, m->n = n, m->g = g, m->p = NULL;
    if (kind == M_PINNED) {
        void *dev;
        if (!g || tnd_backend_host_alloc(g, n, &m->p, &dev)) return false;
        return true;
    }
    size_t al = (size_t)2 << 20;
    n = (n + al - 1) / al * al;
    m->n = n;
    if (!(m->p = aligned_alloc(al, n))) return false;
    madvise(m->p, n, kind == M_THP || kind == M_THP_REG ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(m->p, 0, n);
    if (kind == M_THP_REG) {
        if (!cudaHostRegister || cudaHostRegister(m->p, n, 0) != 0) {
            free(m->p);
            m->p = NULL;
            return false;
        }
    }
    return true;
}

static void mem_free(mem *m) {
    if (!m->p) return;
    if (m->kind == M_PINNED) tnd_backend_host_free(m->g, m->p);
    else if (m->kind == M_FILE) munmap(m->p, m->n);
    else {
        if (m->kind == M_THP_REG) cudaHostUnregister(m->p);
        free(m->p);
    }
    m->p = NULL;
}

/* M_FILE: the weights written to a file and mapped back, as a GGUF's are */
static const char *file_path = "/tmp/dev_moe_cpu_bw.bin";
static char *to_file(mem *m) {
    FILE *f = fopen(file_path, "wb");
    bool ok = f && fwrite(m->p, 1, m->n, f) == m->n;
    if (f && fclose(f)) ok = false;
    free(m->p);
    m->p = NULL;
    if (!ok) return NULL;
    int fd = open(file_path, O_RDONLY);
    if (fd < 0) return NULL;
    void *p = mmap(NULL, m->n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(file_path);
    if (p == MAP_FAILED) return NULL;
    volatile char sink = 0;
    for (size_t i = 0; i < m->n; i += 4096) sink += ((char *)p)[i]; /* fault it in */
    (void)sink;
    return m->p = p;
}

static tnd_tensor tens(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    tnd_tensor x = {.type = t, .data = data, .ne = {n0, n1, n2, 1}};
    return x;
}

/* one expert's rows from random floats, copied into every expert of every layer (speed only) */
static void fill(char *dst, tnd_type t, int64_t n_in, int64_t n_out, int64_t copies) {
    size_t rs = tnd_row_size(t, n_in), es = rs * (size_t)n_out;
    float *f = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) f[i] = (float)((next() >> 40) * (1.0 / (1 << 24))) * 2 - 1;
        tnd_type_traits_get(t)->from_float(f, dst + (size_t)r * rs, n_in);
    }
    for (int64_t c = 1; c < copies; c++) memcpy(dst + (size_t)c * es, dst, es);
    free(f);
}

int main(int argc, char **argv) {
    int n_thr = 16, n_layers = 8, n_tok = 40, n_cpu_exp = 6;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) n_thr = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) n_layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_tok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) n_cpu_exp = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-t THREADS] [-l LAYERS] [-n TOKENS] [-e EXPERTS_ON_CPU]\n", argv[0]);
            return 2;
        }
    }
    if (n_thr < 1 || n_layers < 1 || n_tok < 1 || n_cpu_exp < 1 || n_cpu_exp > N_EXP) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const int n_used = n_cpu_exp > N_USED ? n_cpu_exp : N_USED;
    tnd_pool *pool = tnd_pool_new(n_thr);
    tnd_backend *cpu = NULL, *g = NULL;
    if (!pool || tnd_backend_cpu_new(pool, 0, &cpu)) return 1;
    tnd_backend_cpu_set_int8(cpu, true);
    tnd_cuda_params cp = {0};
    if (tnd_backend_cuda_new(&cp, &g)) g = NULL;
    const size_t gs = tnd_row_size(TND_TYPE_Q4_K, N_EMBD) * N_FF, ds = tnd_row_size(TND_TYPE_Q6_K, N_FF) * N_EMBD;
    const size_t layer = (2 * gs + ds) * N_EXP;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("threads %d, %d layers of %d experts (%.0f MiB), %d experts on the CPU a layer, %d steps\n", n_thr,
           n_layers, N_EXP, (double)layer * n_layers / (1 << 20), n_cpu_exp, n_tok);
    float *x = calloc(N_EMBD, sizeof(float)), *h = calloc((size_t)N_FF * N_EXP, sizeof(float));
    float *y = calloc((size_t)N_EMBD * N_EXP, sizeof(float)), *u = calloc((size_t)N_FF * N_EXP, sizeof(float));
    for (int i = 0; i < N_EMBD; i++) x[i] = (float)((next() >> 40) * (1.0 / (1 << 24))) - 0.5f;
    for (int i = 0; i < N_FF * N_EXP; i++) h[i] = (float)((next() >> 40) * (1.0 / (1 << 24))) - 0.5f;
    int32_t ids[N_EXP];
    for (int kind = 0; kind < M_COUNT; kind++) {
        mem m;
        if (!mem_alloc(&m, kind, layer * (size_t)n_layers, g)) {
            printf("%-26s not available here\n", mem_name[kind]);
            continue;
        }
        char *base = m.p;
        for (int l = 0; l < n_layers; l++) {
            char *L = base + layer * (size_t)l;
            fill(L, TND_TYPE_Q4_K, N_EMBD, N_FF, N_EXP);
            fill(L + gs * N_EXP, TND_TYPE_Q4_K, N_EMBD, N_FF, N_EXP);
            fill(L + 2 * gs * N_EXP, TND_TYPE_Q6_K, N_FF, N_EMBD, N_EXP);
        }
        if (kind == M_FILE && !(base = to_file(&m))) {
            printf("%-26s could not write %s\n", mem_name[kind], file_path);
            continue;
        }
        double bw = tnd_cpu_read_bw(pool, base, m.n, 3);
        /* t[0..2]: gate, up, down; t[3]: SILU_MUL; t[4]: the fused MOE_GLU; t[5]: its down; t[6]: MOE_FFN */
        double best[7] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9}, sum[7] = {0};
        for (int s = 0; s < n_tok + 2; s++) {
            double t[7] = {0};
            for (int l = 0; l < 3 * n_layers; l++) {
                /* the layers as four ops, again as MOE_GLU and down, again as one MOE_FFN */
                const int mode = l / n_layers;
                const bool fused = mode > 0;
                char *L = base + layer * (size_t)(l % n_layers);
                for (int k = 0; k < n_cpu_exp; k++) { /* distinct random experts */
                    int e, dup;
                    do {
                        e = (int)(next() % N_EXP), dup = 0;
                        for (int v = 0; v < k; v++) dup |= ids[v] == e;
                    } while (dup);
                    ids[k] = e;
                }
                for (int k = n_cpu_exp; k < n_used; k++) ids[k] = -1;
                tnd_op op = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = n_used > n_cpu_exp}, part[3];
                for (int w = 0; w < 2; w++) {
                    part[w] = op;
                    part[w].in[0] = tens(L + (size_t)w * gs * N_EXP, TND_TYPE_Q4_K, N_EMBD, N_FF, N_EXP);
                    part[w].in[1] = tens(x, TND_TYPE_F32, N_EMBD, 1, 1);
                    part[w].in[2] = tens(ids, TND_TYPE_I32, n_used, 1, 1);
                    part[w].out[0] = tens(w ? u : h, TND_TYPE_F32, N_FF, n_used, 1);
                }
                part[2] = (tnd_op){.kind = TND_OP_SILU_MUL}; /* over every slot, as the recipe's */
                part[2].in[0] = part[2].out[0] = tens(h, TND_TYPE_F32, (int64_t)N_FF * n_used, 1, 1);
                part[2].in[1] = tens(u, TND_TYPE_F32, (int64_t)N_FF * n_used, 1, 1);
                tnd_op f;
                if (fused && !tnd_op_moe_glu_fuse(part, &f)) return 1;
                op.in[0] = tens(L + 2 * gs * N_EXP, TND_TYPE_Q6_K, N_FF, N_EMBD, N_EXP);
                op.in[1] = tens(h, TND_TYPE_F32, N_FF, n_used, 1);
                op.in[2] = part[0].in[2];
                op.out[0] = tens(y, TND_TYPE_F32, N_EMBD, n_used, 1);
                if (mode == 2) {
                    const tnd_op gd[2] = {f, op};
                    tnd_op ff;
                    if (!tnd_op_moe_ffn_fuse(gd, &ff)) return 1;
                    double t0 = tnd_time_s();
                    if (tnd_backend_op_run(cpu, &ff, NULL)) return 1;
                    t[6] += tnd_time_s() - t0;
                    continue;
                }
                if (fused) {
                    double t0 = tnd_time_s();
                    if (tnd_backend_op_run(cpu, &f, NULL)) return 1;
                    t[4] += tnd_time_s() - t0;
                } else {
                    for (int w = 0; w < 3; w++) {
                        double t0 = tnd_time_s();
                        if (tnd_backend_op_run(cpu, &part[w], NULL)) return 1;
                        t[w == 2 ? 3 : w] += tnd_time_s() - t0;
                    }
                }
                double t0 = tnd_time_s();
                if (tnd_backend_op_run(cpu, &op, NULL)) return 1;
                t[fused ? 5 : 2] += tnd_time_s() - t0;
            }
            if (s < 2) continue; /* warm-up */
            for (int k = 0; k < 7; k++) best[k] = fmin(best[k], t[k]), sum[k] += t[k];
        }
        /* a dense matmul over the same bytes as one layer's gate experts, rotating over the layers */
        double dbest = 1e9;
        for (int s = 0; s < n_tok; s++) {
            double t0 = tnd_time_s();
            for (int l = 0; l < n_layers; l++) {
                char *L = base + layer * (size_t)l + gs * (size_t)(next() % (N_EXP - n_cpu_exp));
                tnd_cpu_matmul(pool, TND_TYPE_Q4_K, L, N_EMBD, (int64_t)N_FF * n_cpu_exp, x, 1, h);
            }
            dbest = fmin(dbest, tnd_time_s() - t0);
        }
        double gb = (double)n_cpu_exp * n_layers / 1e9;
        printf("%-26s read %5.1f GB/s | experts GB/s best (mean): gate %5.1f (%5.1f) up %5.1f (%5.1f) down %5.1f "
               "(%5.1f) | us a layer: %4.0f | dense gate-sized %5.1f GB/s\n",
               mem_name[kind], bw, gb * gs / best[0], gb * gs / (sum[0] / n_tok), gb * gs / best[1],
               gb * gs / (sum[1] / n_tok), gb * ds / best[2], gb * ds / (sum[2] / n_tok),
               1e6 * (sum[0] + sum[1] + sum[2]) / n_tok / n_layers, gb * gs / dbest);
        printf("%-26s gate+up+silu us a layer, best (mean): three ops %5.1f (%5.1f) [silu %4.1f (%4.1f)], "
               "moe_glu %5.1f (%5.1f) | gate+up GB/s: three ops %5.1f, moe_glu %5.1f\n",
               "", 1e6 * (best[0] + best[1] + best[3]) / n_layers, 1e6 * (sum[0] + sum[1] + sum[3]) / n_tok / n_layers,
               1e6 * best[3] / n_layers, 1e6 * sum[3] / n_tok / n_layers, 1e6 * best[4] / n_layers,
               1e6 * sum[4] / n_tok / n_layers, gb * 2 * gs / ((sum[0] + sum[1] + sum[3]) / n_tok),
               gb * 2 * gs / (sum[4] / n_tok));
        printf("%-26s gate+up+silu+down us a layer, best (mean): moe_glu + down %5.1f (%5.1f), moe_ffn %5.1f (%5.1f)"
               " | GB/s: %5.1f, %5.1f\n",
               "", 1e6 * (best[4] + best[5]) / n_layers, 1e6 * (sum[4] + sum[5]) / n_tok / n_layers,
               1e6 * best[6] / n_layers, 1e6 * sum[6] / n_tok / n_layers,
               gb * (2 * gs + ds) / ((sum[4] + sum[5]) / n_tok), gb * (2 * gs + ds) / (sum[6] / n_tok));
        mem_free(&m);
    }
    free(x), free(h), free(y), free(u);
    tnd_backend_free(cpu);
    if (g) tnd_backend_free(g);
    tnd_pool_free(pool);
    return 0;
}
