/* Host memory read bandwidth (membw.h). */
#include <math.h>
#include <stdint.h>

#include "cpu/matmul.h"
#include "cpu/matmul_impl.h"
#include "cpu/membw.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct bw_job {
    const uint8_t *buf;
    size_t n;
    uint64_t sums[512]; /* kept, so the reads cannot be optimized away */
} bw_job;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    return t[0] + t[1] + t[2] + t[3];
}
#endif

static uint64_t sum_scalar(const uint8_t *p, size_t n) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const uint64_t *q = (const uint64_t *)p;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) a0 += q[i], a1 += q[i + 1], a2 += q[i + 2], a3 += q[i + 3];
    return a0 + a1 + a2 + a3;
}

static void bw_task(void *arg, int ith, int nth) {
    bw_job *j = arg;
    /* a contiguous 4 KiB-aligned share per thread */
    size_t pages = j->n / 4096, p0 = pages * ith / nth, p1 = pages * (ith + 1) / nth;
    const uint8_t *p = j->buf + p0 * 4096;
    size_t n = (p1 - p0) * 4096;
#if defined(__x86_64__)
    j->sums[ith % 512] = tnd_cpu_isa_best() >= TND_ISA_AVX2 ? sum_avx2(p, n) : sum_scalar(p, n);
#else
    j->sums[ith % 512] = sum_scalar(p, n);
#endif
}

double tnd_cpu_read_once(tnd_pool *pool, const void *buf, size_t n) {
    bw_job j = {.buf = buf, .n = n};
    double t0 = tnd_time_s();
    tnd_pool_run(pool, bw_task, &j);
    return tnd_time_s() - t0;
}

double tnd_cpu_read_bw(tnd_pool *pool, const void *buf, size_t n, int reps) {
    size_t piece = (size_t)16 << 20;
    if (piece > n) piece = n;
    size_t pieces = n / piece;
    double best = 1e30;
    for (int r = 0; r < reps; r++)
        for (size_t k = 0; k < pieces; k++) best = fmin(best, tnd_cpu_read_once(pool, (const uint8_t *)buf + k * piece, piece));
    return (double)piece / best / 1e9;
}
