/* Expert copies over the link: LayerScope's AsyncIO question, measured.
 * Is a batch of experts copied faster, or is its first expert ready sooner,
 * when each expert's gate, up and down go on three streams (one piece type
 * a stream) than when all go one after another on one stream, as tandem
 * queues them? On the H200, no (docs/DECISIONS.md, "AsyncIO's pieces: not
 * kept").
 *
 *   build/dev_expert_copy [reps] [--sim]
 *
 * Pieces have the sizes of a qwen3-30b-a3b expert as `tandem synth` writes
 * it (gate and up 2048x768 Q4_K, down 768x2048 Q6_K: 3.06 MB in all),
 * from pinned host memory (a store of 64 experts, each batch reads the next
 * ones, so no batch finds its source in a cache) into 16 device slots.
 * Batches of 1, 2, 3, 4, 8 and 16 experts, as the copies a layer ahead and
 * the loads on demand queue them; per batch the backend's event timer gives
 * the time to the last piece and to the first expert's last piece, median
 * of reps (default 50). GB/s counts the batch's bytes over the first.
 * --sim: SimGPU with the rtx3060-laptop profile (virtual time: one copy
 * engine, serial by construction), to check the program without a GPU.
 * Without CUDA in the build, --sim is the only choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dev_check.h"
#include "sim/hw.h"
#include "sim/sim.h"

#define N_STORE 64
#define N_SLOT 16

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = 50;
    bool sim = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sim")) sim = true;
        else if (atoi(argv[i]) > 0) reps = atoi(argv[i]);
        else {
            fprintf(stderr, "usage: %s [reps] [--sim]\n", argv[0]);
            return 2;
        }
    }
    tnd_backend *B = NULL;
    tnd_hw hw;
    if (!sim) {
        tnd_cuda_params cp = {0, 0};
        if (tnd_backend_cuda_new(&cp, &B) != TND_OK) {
            fprintf(stderr, "no CUDA backend (%s): run with --sim\n", tnd_last_error());
            return 77;
        }
    } else {
        CK(tnd_hw_load("rtx3060-laptop", &hw));
        tnd_sim_params sp = {.hw = &hw};
        CK(tnd_backend_sim_new(&sp, &B));
    }
    const size_t piece[3] = {2048 * 768 / 256 * 144, 2048 * 768 / 256 * 144, 2048 * 768 / 256 * 210};
    const size_t per = piece[0] + piece[1] + piece[2];
    void *host, *host_dev, *dev;
    CK(tnd_backend_host_alloc(B, per * N_STORE, &host, &host_dev));
    CK(tnd_backend_buf_alloc(B, per * N_SLOT, &dev));
    for (size_t i = 0; i < per * N_STORE; i += 4096) ((char *)host)[i] = (char)i;
    tnd_stream *s[3];
    tnd_event *start, *end, *first[3], *join[2];
    for (int j = 0; j < 3; j++) CK(tnd_backend_stream_new(B, &s[j]));
    CK(tnd_backend_event_new(B, &start));
    CK(tnd_backend_event_new(B, &end));
    for (int j = 0; j < 3; j++) CK(tnd_backend_event_new(B, &first[j]));
    for (int j = 0; j < 2; j++) CK(tnd_backend_event_new(B, &join[j]));
    float *t_all = malloc(sizeof(float) * (size_t)reps), *t_first = malloc(sizeof(float) * (size_t)reps);
    if (!t_all || !t_first) return 1;

    printf("backend: %s; an expert %.2f MB (gate %zu, up %zu, down %zu bytes); median of %d\n\n",
           tnd_backend_name(B), per / 1e6, piece[0], piece[1], piece[2], reps);
    printf("| experts | streams | batch, us | GB/s | first expert ready, us |\n|---:|---:|---:|---:|---:|\n");
    static const int batches[] = {1, 2, 3, 4, 8, 16};
    int next = 0;
    for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
        const int k = batches[bi];
        for (int ns = 1; ns <= 3; ns += 2) {
            for (int r = -2; r < reps; r++) { /* two warm-up batches */
                CK(tnd_backend_event_record(B, start, s[0]));
                for (int j = 1; j < ns; j++) CK(tnd_backend_stream_wait(B, s[j], start));
                for (int e = 0; e < k; e++) {
                    const char *src = (const char *)host + (size_t)(next++ % N_STORE) * per;
                    char *dst = (char *)dev + (size_t)e * per;
                    for (int j = 0, off = 0; j < 3; off += (int)piece[j], j++) {
                        tnd_stream *q = s[ns == 3 ? j : 0];
                        CK(tnd_backend_copy_h2d(B, dst + off, src + off, piece[j], q));
                        if (e == 0 && (ns == 3 || j == 2)) CK(tnd_backend_event_record(B, first[ns == 3 ? j : 0], q));
                    }
                }
                for (int j = 1; j < ns; j++) {
                    CK(tnd_backend_event_record(B, join[j - 1], s[j]));
                    CK(tnd_backend_stream_wait(B, s[0], join[j - 1]));
                }
                CK(tnd_backend_event_record(B, end, s[0]));
                CK(tnd_backend_event_sync(B, end));
                if (r < 0) continue;
                float ms, f = 0;
                CK(tnd_backend_event_elapsed(B, start, end, &ms));
                for (int j = 0; j < ns; j++) {
                    float m;
                    CK(tnd_backend_event_elapsed(B, start, first[j], &m));
                    f = m > f ? m : f;
                }
                t_all[r] = ms;
                t_first[r] = f;
            }
            qsort(t_all, (size_t)reps, sizeof *t_all, cmp_f);
            qsort(t_first, (size_t)reps, sizeof *t_first, cmp_f);
            const double a = t_all[reps / 2] * 1e3, f = t_first[reps / 2] * 1e3;
            printf("| %d | %d | %.1f | %.1f | %.1f |\n", k, ns, a, a > 0 ? (double)per * k / (a * 1e3) : 0.0, f);
        }
    }
    free(t_all);
    free(t_first);
    for (int j = 0; j < 2; j++) tnd_backend_event_free(B, join[j]);
    for (int j = 0; j < 3; j++) tnd_backend_event_free(B, first[j]);
    tnd_backend_event_free(B, start);
    tnd_backend_event_free(B, end);
    for (int j = 0; j < 3; j++) tnd_backend_stream_free(B, s[j]);
    tnd_backend_buf_free(B, dev);
    tnd_backend_host_free(B, host);
    tnd_backend_free(B);
    return 0;
}
