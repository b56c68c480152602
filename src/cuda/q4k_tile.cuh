/* The Q4_K tile layout: resident Q4_K weights re-laid once, at upload, in
 * the order the f16 tensor-core decoder reads them (matvec_tile.cu,
 * k_mvt_q4k), so a warp's loads of one super-block are one contiguous
 * 2304-byte run instead of 16 pieces a row apart (docs/ARCHITECTURE.md,
 * "CUDA: the Q4_K and Q6_K tile layouts").
 *
 * Only for tensors of n_out % 16 == 0 rows of n_in % 256 == 0 values
 * (q4k_tile_ok). A group of 16 consecutive rows keeps its 16 * row_bytes
 * bytes, ordered by super-block: chunk sb (Q4KT_CHUNK bytes at group_base +
 * sb * Q4KT_CHUNK) holds super-block sb of the 16 rows as the warp's lanes
 * (g = lane / 4, t = lane % 4) load it, lane-contiguous:
 *
 *   [q00 of lanes 0..31: 512 B][q01: 512 B][q10: 512 B][q11: 512 B]
 *   [16 headers (d, dmin, scales: bytes 0..15) of rows 0..15: 256 B]
 *
 * qRJ of lane (g, t) is the 16-byte piece at qs offset 16t + 64J of row
 * g + 8R (block bytes 16 + 16t + 64J ..). Every piece moves as a whole, so
 * the permutation is one of 16-byte units (9 per block, 144 per chunk).
 *
 * Plain C and CUDA: the repack kernel, the tiled decoders and the host test
 * (tests/test_q4k_tile.c) share these functions.
 */
#ifndef TND_CUDA_Q4K_TILE_CUH
#define TND_CUDA_Q4K_TILE_CUH

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define Q4KT_FN static __host__ __device__ __forceinline__
#else
#define Q4KT_FN static inline
#endif

#define Q4KT_ROWS 16                        /* rows per group (one mma tile) */
#define Q4KT_BLOCK 144                      /* bytes of a Q4_K super-block */
#define Q4KT_CHUNK (Q4KT_ROWS * Q4KT_BLOCK) /* 2304: one super-block of a group */
#define Q4KT_HDR 2048                       /* offset of the headers in a chunk */

/* True if a Q4_K tensor of n_out rows of n_in values can take the layout
 * (the device may still lack the shared memory to repack it in place). */
Q4KT_FN bool q4k_tile_ok(int64_t n_in, int64_t n_out) {
    return n_in > 0 && n_in % 256 == 0 && n_out > 0 && n_out % Q4KT_ROWS == 0;
}

/* Where byte o (0..143) of row r's (0..15) super-block goes within its
 * chunk. */
Q4KT_FN int q4k_tile_dst(int r, int o) {
    if (o < 16) return Q4KT_HDR + 16 * r + o;
    const int q = o - 16, p = q >> 4;            /* piece p of the qs: offset 16p */
    const int j = p >> 2, t = p & 3;             /* qs offset 16t + 64j */
    const int R = r >> 3, g = r & 7, lane = 4 * g + t;
    return (2 * R + j) * 512 + 16 * lane + (q & 15);
}

/* The inverse: which row (*r) and block byte (*o) byte k (0..2303) of a
 * chunk holds. */
Q4KT_FN void q4k_tile_src(int k, int *r, int *o) {
    if (k >= Q4KT_HDR) {
        *r = (k - Q4KT_HDR) >> 4;
        *o = (k - Q4KT_HDR) & 15;
        return;
    }
    const int A = k >> 9, lane = (k >> 4) & 31; /* A = 2R + j */
    const int R = A >> 1, j = A & 1, g = lane >> 2, t = lane & 3;
    *r = 8 * R + g;
    *o = 16 + 16 * (4 * j + t) + (k & 15);
}

/* Byte offset, in the tiled tensor (rows of rb bytes), of byte o of
 * super-block sb of row `row`: the gather that undoes the layout. */
Q4KT_FN size_t q4k_tile_offset(size_t rb, int64_t row, int64_t sb, int o) {
    const int64_t grp = row / Q4KT_ROWS;
    const int r = (int)(row % Q4KT_ROWS);
    return (size_t)grp * Q4KT_ROWS * rb + (size_t)sb * Q4KT_CHUNK + (size_t)q4k_tile_dst(r, o);
}

/* Host (or device) repack of one group of 16 rows (rb bytes each) from src
 * to dst (distinct buffers): dst[chunk sb][q4k_tile_dst(r, o)] =
 * src[r][sb * 144 + o]. */
Q4KT_FN void q4k_tile_pack_group(uint8_t *dst, const uint8_t *src, size_t rb) {
    const size_t nsb = rb / Q4KT_BLOCK;
    for (size_t sb = 0; sb < nsb; sb++)
        for (int r = 0; r < Q4KT_ROWS; r++)
            for (int u = 0; u < 9; u++) { /* 16-byte units of the block */
                const uint8_t *s = src + (size_t)r * rb + sb * Q4KT_BLOCK + 16 * u;
                uint8_t *d = dst + sb * Q4KT_CHUNK + q4k_tile_dst(r, 16 * u);
                for (int b = 0; b < 16; b++) d[b] = s[b];
            }
}

#endif
