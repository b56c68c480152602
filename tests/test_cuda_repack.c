/* Resident Q4_K and Q6_K weights re-laid at upload (their tile layouts,
 * CUDA weight_prepare) in a whole model run (device machine; skips with 77
 * elsewhere). A tiny random-weight qwen3 (tandem synth: Q4_K and Q6_K
 * matrices, n_embd 256) runs all on the GPU and on the CPU:
 *   - every resident dense Q4_K and Q6_K matrix of 16-row multiples was
 *     re-laid (the backend refuses a GET_ROWS over it, naming the layout)
 *     and nothing else was (the embedding table);
 *   - logits of a prefill chunk (12 tokens: the tiled dequant + cuBLAS), a
 *     5-token chunk (the tiled matvec with 5 tokens), a 2-token chunk and
 *     6 decode steps (1 token) agree with the CPU's;
 *   - the 2-token chunk and the decode steps ran the gate and up (and q and
 *     k) matmuls as fused pairs (MATMUL_PAIR: one launch over both re-laid
 *     matrices).
 * With TND_CUDA_REPACK=0 in the environment the same run must re-lay
 * nothing, and its pairs run as two matvecs each; with TND_CUDA_PAIR=0 it
 * must fuse none (the A/B switches, ctest runs both).
 *
 * Tolerance: the GPU rounds weights and activations to f16 (2e-3 of
 * sum|w x| per matmul, test_cuda_ops) through 4 layers; logits are compared
 * as max |gpu - cpu| <= 0.05 * RMS(cpu logits) + 1e-3, and their
 * correlation must exceed 0.999. A scrambled layout gives uncorrelated
 * logits (differences of the order of the RMS itself). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "model/model.h"
#include "tandem.h"
#include "util.h"

#define N_DEC 6
#define N_ROWS (3 + N_DEC)

/* Logits after a 12-token chunk, a 5-token chunk, a 2-token chunk and N_DEC
 * decode steps (fixed tokens, so both sides see the same inputs) into
 * lg[N_ROWS]. */
static tnd_status run(tnd_model *m, tnd_device dev, float *lg, tnd_ctx **keep) {
    tnd_ctx_params p = tnd_ctx_default_params();
    p.device = dev;
    p.n_ctx = 64;
    p.cpu_exact = true; /* the reference: f32 activations (the tolerance above is the GPU's alone) */
    if (dev == TND_DEVICE_CUDA) p.placement = "gpu";
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &p, &c);
    if (st) return st;
    int nv = tnd_model_n_vocab(m);
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = (int32_t)((i * 37 + 11) % nv);
    st = tnd_ctx_eval(c, ids, 12, lg);
    if (!st) st = tnd_ctx_eval(c, ids + 12, 5, lg + nv);
    if (!st) st = tnd_ctx_eval(c, ids + 17, 2, lg + 2 * (size_t)nv);
    for (int i = 0; !st && i < N_DEC; i++) st = tnd_ctx_eval(c, ids + 19 + i, 1, lg + (size_t)(3 + i) * nv);
    if (st || !keep) tnd_ctx_free(c);
    else *keep = c;
    return st;
}

/* Whether the backend refuses a GET_ROWS over device tensor w (n rows of
 * n_in): it does exactly for re-laid weights. */
static bool relaid(tnd_backend *g, const tnd_weight *w, const void *dev, void *ids, void *out) {
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_GET_ROWS;
    op.in[0] = (tnd_tensor){(void *)dev, w->type, {w->n_in, w->n_out, 1, 1}};
    op.in[1] = (tnd_tensor){ids, TND_TYPE_I32, {1, 1, 1, 1}};
    op.out[0] = (tnd_tensor){out, TND_TYPE_F32, {w->n_in, 1, 1, 1}};
    tnd_status st = g->iface->op_supported(g, &op);
    bool r = st != TND_OK && strstr(tnd_last_error(), "re-laid") != NULL;
    tnd_clear_error();
    return r;
}

int main(void) {
    if (tnd_cuda_device_count() <= 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    char path[64];
    int rc = fx_synth("tiny-qwen3", "--seed 5 -t 2", path, sizeof path);
    if (rc) return rc;
    tnd_model *m = fx_load(path, 0);
    if (!m) {
        unlink(path);
        return 1;
    }
    const bool off = getenv("TND_CUDA_REPACK") && strcmp(getenv("TND_CUDA_REPACK"), "0") == 0;
    const bool no_pair = getenv("TND_CUDA_PAIR") && strcmp(getenv("TND_CUDA_PAIR"), "0") == 0;
    int nv = tnd_model_n_vocab(m);
    size_t n_lg = (size_t)N_ROWS * nv;
    float *cpu = malloc(sizeof(float) * n_lg), *gpu = malloc(sizeof(float) * n_lg);
    CHECK(run(m, TND_DEVICE_CPU, cpu, NULL) == TND_OK, "cpu: %s", tnd_last_error());
    tnd_ctx *c = NULL;
    tnd_status st = run(m, TND_DEVICE_CUDA, gpu, &c);
    CHECK(st == TND_OK, "gpu: %s", tnd_last_error());
    if (!st) {
        /* which slices the backend re-laid */
        tnd_backend *g = c->side[1].be;
        void *ids = NULL, *out = NULL;
        CHECK(!g->iface->buf_alloc(g, 16, &ids) && !g->iface->buf_alloc(g, 4096 * 4, &out), "buffers");
        int n_relaid = 0, n_kq = 0;
        for (int i = 0; ids && out && i < m->n_slices; i++) {
            const tnd_weight *w = m->slices[i];
            if (!c->w[1][i] || w->n_in > 4096) continue;
            const bool kq = w->type == TND_TYPE_Q4_K || w->type == TND_TYPE_Q6_K;
            const bool want = !off && kq && w->n_expert <= 1 && w->n_out > 1 && w->n_out % 16 == 0 &&
                              w->n_in % 256 == 0 && w != &m->tok_embd;
            const bool got = relaid(g, w, c->w[1][i], ids, out);
            n_kq += kq;
            n_relaid += got;
            CHECK(got == want, "slice %.*s (%s, %lld x %lld): re-laid %d, expected %d", (int)w->t->name.len,
                  w->t->name.ptr, tnd_type_name(w->type), (long long)w->n_out, (long long)w->n_in, got, want);
        }
        printf("%d of %d Q4_K and Q6_K slices re-laid on the GPU%s\n", n_relaid, n_kq, off ? " (TND_CUDA_REPACK=0)" : "");
        CHECK(off ? n_relaid == 0 : n_relaid > 0, "re-laid %d slices", n_relaid);
        /* two pairs per layer (q k, gate up) in the 2-token chunk and each decode step */
        const uint64_t want_pairs = no_pair ? 0 : 2ull * (uint64_t)m->hp.n_layer * (N_DEC + 1);
        printf("%llu MATMUL pairs fused%s\n", (unsigned long long)c->n_pairs, no_pair ? " (TND_CUDA_PAIR=0)" : "");
        CHECK(c->n_pairs == want_pairs, "fused %llu MATMUL pairs, expected %llu", (unsigned long long)c->n_pairs,
              (unsigned long long)want_pairs);
        g->iface->buf_free(g, ids);
        g->iface->buf_free(g, out);
        tnd_ctx_free(c);
        static const char *what[N_ROWS] = {"12-token prefill", "5-token chunk", "2-token chunk",
                                           "decode 1",         "decode 2",      "decode 3",
                                           "decode 4",         "decode 5",      "decode 6"};
        for (int r = 0; r < N_ROWS; r++) {
            const float *a = cpu + (size_t)r * nv, *b = gpu + (size_t)r * nv;
            double ss = 0, sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0, worst = 0;
            for (int i = 0; i < nv; i++) {
                ss += (double)a[i] * a[i];
                sa += a[i], sb += b[i], sab += (double)a[i] * b[i], saa += (double)a[i] * a[i], sbb += (double)b[i] * b[i];
                double d = fabs((double)a[i] - b[i]);
                if (!(d <= worst)) worst = d; /* NaN sticks */
            }
            double rms = sqrt(ss / nv), tol = 0.05 * rms + 1e-3;
            double cov = sab / nv - sa / nv * sb / nv, va = saa / nv - sa / nv * sa / nv, vb = sbb / nv - sb / nv * sb / nv;
            double corr = cov / sqrt(va * vb);
            printf("%-16s max |gpu - cpu| %.5f (tol %.5f, logit RMS %.3f), correlation %.6f\n", what[r], worst, tol,
                   rms, corr);
            CHECK(worst <= tol && corr > 0.999, "%s: logits differ (max %.5f, tol %.5f, correlation %.6f)", what[r],
                  worst, tol, corr);
        }
    }
    free(cpu);
    free(gpu);
    tnd_model_free(m);
    unlink(path);
    return tc_summary();
}
