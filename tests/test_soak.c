/* Soak: many tokens through one context, which fills and is cut back
 * (tnd_ctx_truncate to the prompt, the cached prompt reused) or emptied and
 * prefilled anew, by turns. After the first cycle (warm-up) the process's
 * resident memory (/proc/self/statm) and the GPU backend's allocated bytes
 * must stay within 10% of their warm values, and every cycle must give
 * the first cycle's tokens (greedy: the same cache gives the same text).
 *
 *   TND_SOAK_TOKENS   tokens in all (default 1200, 576 in sanitizer builds, where
 *                     RSS is not checked; scripts/soak.sh: 10000)
 *   TND_SOAK_DEVICE   sim (default), cuda or cpu
 *   TND_MODEL         another model than the default one
 *
 * Skips (77) when the default model is absent, or with cuda and no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "tandem.h"
#include "util.h"

#define N_CTX 256
#define MIB (1024.0 * 1024.0)

/* Resident bytes of this process. */
static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Bytes the context's GPU backend holds (0 without a GPU). */
static uint64_t vram_bytes(const tnd_ctx *c) {
    if (!c->gpu) return 0;
    tnd_mem_info mi;
    tnd_backend_mem_info(c->side[1].be, &mi);
    return mi.used;
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, true)) return 77;
    const char *tv = getenv("TND_SOAK_TOKENS"), *dv = getenv("TND_SOAK_DEVICE");
    /* sanitizer builds: ASan's quarantine keeps freed memory on purpose, so
     * RSS says nothing there; a shorter run still checks the tokens */
    const bool sanitized = getenv("TND_SANITIZED") != NULL;
    const long total = tv ? atol(tv) : sanitized ? 2 * N_CTX + 64 : 1200;
    if (total < 2 * N_CTX) {
        fprintf(stderr, "TND_SOAK_TOKENS=%s: want at least %d (two cycles of the %d-token context)\n", tv, 2 * N_CTX,
                N_CTX);
        return 2;
    }
    tnd_ctx_params p = tnd_ctx_default_params();
    p.n_ctx = N_CTX;
    p.n_batch = 32;
    if (!dv || !strcmp(dv, "sim")) {
        p.device = TND_DEVICE_SIM;
        p.hw = "rtx3060-laptop";
        p.placement = "random:5"; /* both sides, switches between them */
    } else if (!strcmp(dv, "cuda")) {
        if (tnd_cuda_device_count() < 1) {
            printf("skipped: no CUDA GPU\n");
            return 77;
        }
        p.device = TND_DEVICE_CUDA;
        p.placement = "random:5";
    } else if (strcmp(dv, "cpu")) {
        fprintf(stderr, "TND_SOAK_DEVICE=%s: want sim, cuda or cpu\n", dv);
        return 2;
    }
    tnd_model *m = fx_load(path, 0);
    if (!m) return 1;
    const int nv = tnd_model_n_vocab(m);
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &p, &c));
    int32_t prompt[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190, 8, 400, 11, 23, 42,
                              9, 1000, 57, 33, 12, 8, 700, 21, 6, 3000, 44, 15, 27, 81, 5, 2};
    const int n_prompt = (int)(sizeof prompt / sizeof *prompt), n_gen = N_CTX - n_prompt;
    for (int i = 0; i < n_prompt; i++) prompt[i] %= nv; /* a small vocabulary (TND_MODEL: a synth model) */
    float *lg = tc_xmalloc(sizeof(float) * (size_t)nv);
    int32_t *first = tc_xmalloc(sizeof(int32_t) * (size_t)n_gen), *cur = tc_xmalloc(sizeof(int32_t) * (size_t)n_gen);
    uint64_t rss0 = 0, vram0 = 0, rss_max = 0, vram_max = 0;
    long done = 0;
    int cycles = 0, same = 0;
    double t0 = tnd_time_s();
    CHECK_ST(tnd_ctx_eval(c, prompt, n_prompt, lg));
    done += n_prompt;
    float *prompt_lg = tc_xmalloc(sizeof(float) * (size_t)nv);
    memcpy(prompt_lg, lg, sizeof(float) * (size_t)nv);
    while (done < total) {
        /* one cycle: fill the context from the prompt's logits */
        memcpy(lg, prompt_lg, sizeof(float) * (size_t)nv);
        int i = 0;
        for (; i < n_gen && done < total; i++, done++) {
            cur[i] = tc_argmax(lg, nv);
            if (tnd_ctx_n_past(c) < N_CTX) CHECK_ST(tnd_ctx_eval(c, &cur[i], 1, lg));
        }
        if (i < n_gen) break; /* the last, partial cycle */
        if (cycles == 0) memcpy(first, cur, sizeof(int32_t) * (size_t)n_gen);
        else same += !memcmp(first, cur, sizeof(int32_t) * (size_t)n_gen);
        cycles++;
        /* odd cycles keep the cached prompt; even ones empty the cache and prefill it again */
        if (cycles % 2) {
            CHECK_ST(tnd_ctx_truncate(c, n_prompt));
        } else {
            CHECK_ST(tnd_ctx_truncate(c, 0));
            float *re = tc_xmalloc(sizeof(float) * (size_t)nv);
            CHECK_ST(tnd_ctx_eval(c, prompt, n_prompt, re));
            CHECK(!memcmp(re, prompt_lg, sizeof(float) * (size_t)nv), "cycle %d: the prompt's logits changed", cycles);
            free(re);
            done += n_prompt;
        }
        uint64_t r = rss_bytes(), v = vram_bytes(c);
        if (cycles == 1) {
            rss0 = r;
            vram0 = v;
        }
        if (r > rss_max) rss_max = r;
        if (v > vram_max) vram_max = v;
    }
    double s = tnd_time_s() - t0;
    printf("%ld tokens in %d cycles of %d, %.1f s (%.1f tok/s): RSS %.1f MiB warm, %.1f MiB at most; GPU %.1f MiB "
           "warm, %.1f MiB at most\n",
           done, cycles, N_CTX, s, done / s, rss0 / MIB, rss_max / MIB, vram0 / MIB, vram_max / MIB);
    CHECK(cycles >= 2, "%d cycles", cycles);
    CHECK(same == cycles - 1, "%d of %d cycles gave the first cycle's tokens", same, cycles - 1);
    CHECK(sanitized || (rss0 > 0 && rss_max <= rss0 + rss0 / 10), "RSS grew from %.1f to %.1f MiB", rss0 / MIB,
          rss_max / MIB);
    CHECK(vram_max <= vram0 + vram0 / 10, "GPU memory grew from %.1f to %.1f MiB", vram0 / MIB, vram_max / MIB);
    free(lg);
    free(prompt_lg);
    free(first);
    free(cur);
    tnd_ctx_free(c);
    tnd_model_free(m);
    return tc_summary();
}
