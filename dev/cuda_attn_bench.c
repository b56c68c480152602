/* Decode attention on the GPU: time tnd_cu_attn (one query token, the
 * f16 KV cache of one layer) for the GQA shapes of the speed rows, at a few
 * context lengths, in both forms the engine uses: the length in the op
 * (pos0) and positions in memory with a launch sized by kv_cap (decode
 * rounds replayed as CUDA graphs: docs/ARCHITECTURE.md).
 *
 *   build/dev_cuda_attn_bench [reps]
 *
 * Each row: the mean of reps calls back to back on one stream, in us, and
 * the KV bytes read over that time. Each call is two launches (the key
 * ranges, then their combine) queued by the host one by one, so at short
 * contexts a row is the host's launch rate (~17 us on the H200,
 * 2026-12-02), not the kernels' time: a row that changes there changed
 * the kernels' time; one that does not may not have. The results are checked against each other:
 * both forms must give the same output to 1e-4 (test_cuda_ops checks each
 * against the double reference).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dev_check.h"
#include "quant/quant.h"
#include "util.h"
#ifdef TND_HAVE_CUDA
#include "cuda/cuda_ops.h"
#endif

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("cuda_attn_bench: built without CUDA\n");
    return 0;
}
#else

static tnd_backend *B;
static tnd_stream *S;
static tnd_event *E0, *E1;

static void *dev_from(const void *host, size_t n) {
    void *d;
    CK(B->iface->buf_alloc(B, n, &d));
    CK(B->iface->copy_h2d(B, d, host, n, S));
    CK(B->iface->stream_sync(B, S));
    return d;
}

typedef struct {
    const char *name;
    int n_head, n_head_kv, hd;
} shape;

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 1) {
        fprintf(stderr, "usage: %s [reps >= 1]\n", argv[0]);
        return 2;
    }
    tnd_cuda_params cp = {0, 0};
    CK(tnd_backend_cuda_new(&cp, &B));
    CK(B->iface->stream_new(B, &S));
    CK(B->iface->event_new(B, &E0));
    CK(B->iface->event_new(B, &E1));
    void *st = tnd_cuda_stream_handle(S);
    const shape shapes[] = {{"qwen3-8b", 32, 8, 128}, {"qwen3-14b", 40, 8, 128}, {"qwen3-30b-a3b", 32, 4, 128}};
    const int64_t ctx[] = {100, 500, 2000};
    const int64_t n_max = 4096;
    printf("%-14s %6s %8s | %9s %9s | %9s %9s\n", "shape", "n_kv", "kv_cap", "pos0 us", "GB/s", "pos us", "GB/s");
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const shape *sh = &shapes[si];
        const size_t kv_n = (size_t)n_max * sh->n_head_kv * sh->hd;
        uint16_t *kv = malloc(kv_n * sizeof *kv);
        float *q = malloc(sizeof *q * (size_t)sh->n_head * sh->hd), *o1 = malloc(sizeof *q * (size_t)sh->n_head * sh->hd),
              *o2 = malloc(sizeof *q * (size_t)sh->n_head * sh->hd);
        if (!kv || !q || !o1 || !o2) return 1;
        for (size_t i = 0; i < kv_n; i++) kv[i] = tnd_fp32_to_fp16(unif(-1.f, 1.f));
        void *K = dev_from(kv, kv_n * 2);
        for (size_t i = 0; i < kv_n; i++) kv[i] = tnd_fp32_to_fp16(unif(-1.f, 1.f));
        void *V = dev_from(kv, kv_n * 2);
        for (int i = 0; i < sh->n_head * sh->hd; i++) q[i] = unif(-1.f, 1.f);
        void *Q = dev_from(q, sizeof *q * (size_t)sh->n_head * sh->hd), *O;
        CK(B->iface->buf_alloc(B, sizeof *q * (size_t)sh->n_head * sh->hd, &O));
        const size_t scr_n = tnd_cu_attn_scratch(1, sh->n_head, sh->hd, n_max);
        void *scr, *P;
        CK(B->iface->buf_alloc(B, scr_n, &scr));
        CK(B->iface->buf_alloc(B, sizeof(int32_t), &P));
        for (size_t ci = 0; ci < sizeof ctx / sizeof *ctx; ci++) {
            const int64_t pos0 = ctx[ci] - 1, cap = (ctx[ci] + 255) / 256 * 256;
            int32_t p32 = (int32_t)pos0;
            CK(B->iface->copy_h2d(B, P, &p32, sizeof p32, S));
            double us[2];
            float *outs[2] = {o1, o2};
            for (int form = 0; form < 2; form++) {
                const int32_t *pos = form ? P : NULL;
#define LAUNCH()                                                                                               \
    tnd_cu_attn(Q, K, V, O, 1, sh->n_head, sh->n_head_kv, sh->hd, pos0, pos, cap, 0, 0,                      \
                1.f / sqrtf((float)sh->hd), 0.f, 0, scr, scr_n, st)
                if (LAUNCH()) {
                    fprintf(stderr, "tnd_cu_attn failed\n");
                    return 1;
                }
                CK(B->iface->event_record(B, E0, S));
                for (int r = 0; r < reps; r++) LAUNCH();
                CK(B->iface->event_record(B, E1, S));
                float ms;
                CK(B->iface->event_sync(B, E1));
                CK(B->iface->event_elapsed(B, E0, E1, &ms));
                us[form] = ms * 1e3 / reps;
                CK(B->iface->copy_d2h(B, outs[form], O, sizeof *q * (size_t)sh->n_head * sh->hd, S));
                CK(B->iface->stream_sync(B, S));
            }
            double err = 0;
            for (int i = 0; i < sh->n_head * sh->hd; i++) err = fmax(err, fabs((double)o1[i] - o2[i]));
            bad += !(err <= 1e-4);
            const double gb = 2.0 * 2 * (double)ctx[ci] * sh->n_head_kv * sh->hd / 1e9;
            printf("%-14s %6lld %8lld | %9.2f %9.1f | %9.2f %9.1f%s\n", sh->name, (long long)ctx[ci],
                   (long long)cap, us[0], gb / (us[0] * 1e-6), us[1], gb / (us[1] * 1e-6),
                   err <= 1e-4 ? "" : "  MISMATCH");
        }
        B->iface->buf_free(B, K);
        B->iface->buf_free(B, V);
        B->iface->buf_free(B, Q);
        B->iface->buf_free(B, O);
        B->iface->buf_free(B, scr);
        B->iface->buf_free(B, P);
        free(kv), free(q), free(o1), free(o2);
    }
    B->iface->event_free(B, E0);
    B->iface->event_free(B, E1);
    B->iface->stream_free(B, S);
    B->iface->free(B);
    printf("SUMMARY: cuda_attn_bench %s\n", bad ? "MISMATCH" : "ok");
    return bad ? 1 : 0;
}
#endif
