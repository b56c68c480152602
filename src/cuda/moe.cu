/* MoE router: softmax + top-k (with optional renormalization), or top-k +
 * softmax over the chosen. One warp per token; each lane holds up to 16
 * logits (n_expert <= 512). Experts are ranked by logit (the same order as by
 * probability, without the ties that rounding exp() can create); equal
 * logits rank the lower id first. The expert products themselves are
 * tnd_cu_matvec_id (decode) and tnd_cu_matmul_id (grouped by expert);
 * tnd_cu_moe_keep_rows lets them skip ids (split layers) by computing into a
 * temporary and keeping only the rows of valid ids. */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

#define MOE_PER_LANE 16

/* A second routing (MOE_ROUTE_PAIR: logits2 set) takes the warps past the
 * first's n_tok. */
__global__ void k_moe_route(const float *__restrict__ logits, int64_t n_tok, int n_expert, int n_used, int mode,
                            bool norm, float *__restrict__ weights, int32_t *__restrict__ ids,
                            const float *__restrict__ logits2, float *__restrict__ weights2,
                            int32_t *__restrict__ ids2) {
    const int lane = threadIdx.x & 31;
    int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (logits2 && t >= n_tok) { /* the second routing's token t - n_tok */
        t -= n_tok;
        logits = logits2, weights = weights2, ids = ids2;
    }
    if (t >= n_tok) return; /* whole warps leave together */
    const float *l = logits + t * n_expert;
    float v[MOE_PER_LANE];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        v[i] = e < n_expert ? l[e] : -INFINITY;
        m = fmaxf(m, v[i]);
    }
    m = warp_max(m);
    float total = 0.f; /* softmax denominator over all experts (mode 0) */
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++)
        if (lane + 32 * i < n_expert) total += expf(v[i] - m);
    total = warp_sum(total);
    uint32_t taken = 0;
    float my_w = 0.f, sel_sum = 0.f;
    int32_t my_id = 0;
    float first = 0.f;
    for (int k = 0; k < n_used; k++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < n_expert && !(taken >> i & 1) && (v[i] > bv || be == 0x7fffffff)) {
                bv = v[i];
                be = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (ov > bv || (ov == bv && oe < be)) {
                bv = ov;
                be = oe;
            }
        }
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
        if (k == 0) first = bv;
        float w = mode == 0 ? expf(bv - m) / total : expf(bv - first); /* mode 1: relative to the top logit */
        sel_sum += w;
        if (lane == k) {
            my_w = w;
            my_id = be;
        }
    }
    if (lane < n_used) {
        float w = my_w;
        if (mode == 1 || norm) w = w / sel_sum;
        weights[t * n_used + lane] = w;
        ids[t * n_used + lane] = my_id;
    }
}

static int route_launch(const float *logits, const float *logits2, int64_t n_tok, int n_expert, int n_used, int mode,
                        bool norm, float *weights, int32_t *ids, float *weights2, int32_t *ids2,
                        tnd_cu_stream stream) {
    if (!logits || !weights || !ids || n_tok < 0 || n_expert < 1 || n_expert > 32 * MOE_PER_LANE || n_used < 1 ||
        n_used > n_expert || n_used > 32 || (mode != 0 && mode != 1) || (logits2 && (!weights2 || !ids2)))
        return cudaErrorInvalidValue;
    if (n_tok == 0) return 0;
    const int warps = 4;
    k_moe_route<<<tnd_cu_blocks(logits2 ? 2 * n_tok : n_tok, warps), 32 * warps, 0, (cudaStream_t)stream>>>(
        logits, n_tok, n_expert, n_used, mode, norm, weights, ids, logits2, weights2, ids2);
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_moe_route(const float *logits, int64_t n_tok, int n_expert, int n_used, int mode, bool norm,
                                float *weights, int32_t *ids, tnd_cu_stream stream) {
    return route_launch(logits, NULL, n_tok, n_expert, n_used, mode, norm, weights, ids, NULL, NULL, stream);
}

extern "C" int tnd_cu_moe_route_pair(const float *logits, const float *logits2, int64_t n_tok, int n_expert,
                                     int n_used, int mode, bool norm, float *weights, int32_t *ids, float *weights2,
                                     int32_t *ids2, tnd_cu_stream stream) {
    if (!logits2) return cudaErrorInvalidValue;
    return route_launch(logits, logits2, n_tok, n_expert, n_used, mode, norm, weights, ids, weights2, ids2, stream);
}

/* One thread per output float; the row's id is read once per warp-ish run
 * of threads (rows are n_out >= 32 floats wide in every model). */
__global__ void k_keep_rows(const float *__restrict__ src, const int32_t *__restrict__ ids, int64_t n, int64_t n_out,
                            float *__restrict__ dst) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (ids[i / n_out] >= 0) dst[i] = src[i];
}

extern "C" int tnd_cu_moe_keep_rows(const float *src, const int32_t *ids, int64_t n_pairs, int64_t n_out, float *dst,
                                    tnd_cu_stream stream) {
    if (!src || !ids || !dst || n_pairs < 0 || n_out < 1) return cudaErrorInvalidValue;
    int64_t n = n_pairs * n_out;
    if (n == 0) return 0;
    k_keep_rows<<<tnd_cu_blocks(n, 256), 256, 0, (cudaStream_t)stream>>>(src, ids, n, n_out, dst);
    return (int)cudaGetLastError();
}
