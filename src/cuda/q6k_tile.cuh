/* The Q6_K tile layout: resident Q6_K weights re-laid once, at upload, in
 * the order the f16 tensor-core decoder reads them (matvec_tile_q6k.cu,
 * k_mvt_q6k), so a warp's loads of one super-block are 16-byte pieces of
 * one contiguous 3360-byte run instead of 23 narrow loads per row a row
 * apart (docs/ARCHITECTURE.md, "CUDA: the Q4_K and Q6_K tile layouts").
 *
 * Only for tensors of n_out % 16 == 0 rows of n_in % 256 == 0 values
 * (q6k_tile_ok). A group of 16 consecutive rows keeps its 16 * row_bytes
 * bytes, ordered by super-block: chunk sb (Q6KT_CHUNK bytes at group_base +
 * sb * Q6KT_CHUNK) holds super-block sb of the 16 rows. Lane (g, t) (g =
 * lane / 4, t = lane % 4) decodes rows g and g + 8 (R = 0, 1) and reads, of
 * each, the 8-byte pieces at block offsets 64k + 32h + 8t (k = 0..2, h =
 * 0..1: ql for k = 0, 1, qh for k = 2), the row's 16 scales and its d:
 *
 *   [P(R=0,k=0) of lanes 0..31: 512 B][P(0,1)][P(0,2)][P(1,0)][P(1,1)][P(1,2)]
 *   [16 rows' scales (block bytes 192..207): 256 B][16 rows' d (208..209): 32 B]
 *
 * P(R, k) of lane L is 16 bytes at (3R + k) * 512 + 16L: the pieces h = 0
 * then h = 1. Every unit (8, 16 or 2 bytes) moves whole, and every unit
 * starts at an even offset on both sides, so the permutation is one of
 * 2-byte units.
 *
 * Plain C and CUDA: the repack kernel, the tiled decoders and the host test
 * (tests/test_q6k_tile.c) share these functions.
 */
#ifndef TND_CUDA_Q6K_TILE_CUH
#define TND_CUDA_Q6K_TILE_CUH

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define Q6KT_FN static __host__ __device__ __forceinline__
#else
#define Q6KT_FN static inline
#endif

#define Q6KT_ROWS 16                        /* rows per group (one mma tile) */
#define Q6KT_BLOCK 210                      /* bytes of a Q6_K super-block */
#define Q6KT_CHUNK (Q6KT_ROWS * Q6KT_BLOCK) /* 3360: one super-block of a group */
#define Q6KT_SC 3072                        /* offset of the scales in a chunk */
#define Q6KT_D 3328                         /* offset of the d's */

/* True if a Q6_K tensor of n_out rows of n_in values can take the layout
 * (the device may still lack the shared memory to repack it in place). */
Q6KT_FN bool q6k_tile_ok(int64_t n_in, int64_t n_out) {
    return n_in > 0 && n_in % 256 == 0 && n_out > 0 && n_out % Q6KT_ROWS == 0;
}

/* Where byte o (0..209) of row r's (0..15) super-block goes within its
 * chunk. */
Q6KT_FN int q6k_tile_dst(int r, int o) {
    if (o >= 208) return Q6KT_D + 2 * r + (o - 208);
    if (o >= 192) return Q6KT_SC + 16 * r + (o - 192);
    const int k = o >> 6, h = (o >> 5) & 1, t = (o >> 3) & 3;
    const int R = r >> 3, g = r & 7;
    return (3 * R + k) * 512 + 16 * (4 * g + t) + 8 * h + (o & 7);
}

/* The inverse: which row (*r) and block byte (*o) byte c (0..3359) of a
 * chunk holds. */
Q6KT_FN void q6k_tile_src(int c, int *r, int *o) {
    if (c >= Q6KT_D) {
        *r = (c - Q6KT_D) >> 1;
        *o = 208 + ((c - Q6KT_D) & 1);
        return;
    }
    if (c >= Q6KT_SC) {
        *r = (c - Q6KT_SC) >> 4;
        *o = 192 + ((c - Q6KT_SC) & 15);
        return;
    }
    const int A = c >> 9, lane = (c >> 4) & 31; /* A = 3R + k */
    const int R = A / 3, k = A - 3 * R, g = lane >> 2, t = lane & 3, h = (c >> 3) & 1;
    *r = 8 * R + g;
    *o = 64 * k + 32 * h + 8 * t + (c & 7);
}

/* Byte offset, in the tiled tensor (rows of rb bytes), of byte o of
 * super-block sb of row `row`: the gather that undoes the layout. */
Q6KT_FN size_t q6k_tile_offset(size_t rb, int64_t row, int64_t sb, int o) {
    const int64_t grp = row / Q6KT_ROWS;
    const int r = (int)(row % Q6KT_ROWS);
    return (size_t)grp * Q6KT_ROWS * rb + (size_t)sb * Q6KT_CHUNK + (size_t)q6k_tile_dst(r, o);
}

/* Host (or device) repack of one group of 16 rows (rb bytes each) from src
 * to dst (distinct buffers): dst[chunk sb][q6k_tile_dst(r, o)] =
 * src[r][sb * 210 + o]. */
Q6KT_FN void q6k_tile_pack_group(uint8_t *dst, const uint8_t *src, size_t rb) {
    const size_t nsb = rb / Q6KT_BLOCK;
    for (size_t sb = 0; sb < nsb; sb++)
        for (int r = 0; r < Q6KT_ROWS; r++)
            for (int o = 0; o < Q6KT_BLOCK; o++)
                dst[sb * Q6KT_CHUNK + (size_t)q6k_tile_dst(r, o)] = src[(size_t)r * rb + sb * Q6KT_BLOCK + (size_t)o];
}

#endif
