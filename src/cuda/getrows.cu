/* Embedding lookup: rows of any decodable format to f32, one thread per
 * 32-value sub (the matvec's decoder). Out-of-range ids give NaN rows, so a
 * bad id is visible instead of reading outside the table. */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

template <int TY>
__global__ void k_get_rows(const uint8_t *__restrict__ T, size_t row_bytes, int64_t n, int64_t n_rows,
                           const int32_t *__restrict__ ids, int64_t n_ids, float *__restrict__ out) {
    const int64_t nsub = (n + 31) / 32;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_ids * nsub) return;
    int64_t r = idx / nsub, s = idx % nsub;
    int32_t id = ids[r];
    float *o = out + r * n + s * 32;
    int64_t left = n - s * 32;
    if (id < 0 || id >= n_rows) {
        for (int i = 0; i < 32 && i < left; i++) o[i] = __int_as_float(0x7fc00000);
        return;
    }
    sub32 w;
    load_sub<TY>(T + (size_t)id * row_bytes, s, n, w);
#pragma unroll
    for (int i = 0; i < 32; i++)
        if (i < left) o[i] = i < 16 ? w.a0 * w.q[i] + w.b0 : w.a1 * w.q[i] + w.b1;
}

extern "C" int tnd_cu_get_rows(int type, const void *table, int64_t n, int64_t n_rows, const int32_t *ids,
                               int64_t n_ids, float *out, tnd_cu_stream stream) {
    if (!tnd_cu_type_supported(type) || !table || !ids || !out || n < 1 || n_rows < 1 || n_ids < 0)
        return cudaErrorInvalidValue;
    size_t rb = tnd_cu_row_bytes(type, n);
    if (!rb) return cudaErrorInvalidValue;
    if ((uintptr_t)table & 15) return cudaErrorMisalignedAddress;
    if (n_ids == 0) return 0;
    int64_t total = n_ids * ((n + 31) / 32);
    unsigned grid = tnd_cu_blocks(total, 128);
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *t8 = (const uint8_t *)table;
    switch (type) {
#define X(t) case t: k_get_rows<t><<<grid, 128, 0, st>>>(t8, rb, n, n_rows, ids, n_ids, out); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}
