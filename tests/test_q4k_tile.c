/* The Q4_K tile layout's permutation (src/cuda/q4k_tile.cuh), on the host:
 * the byte map against positions worked out by hand from the layout's
 * definition and against the loads the f16 decoder makes per lane; that
 * it is a bijection of every chunk and of whole tensors of odd group
 * counts; a random matrix repacked and every block gathered back; the
 * qualification rule. Needs no GPU (the device side is in test_cuda_ops). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/q4k_tile.cuh"

/* a random byte */
static uint8_t rnd8(void) { return (uint8_t)(tc_xorshift() >> 32); }

/* Positions worked out by hand from the definition in the header. */
static void test_known_positions(void) {
    static const struct { int r, o, k; } c[] = {
        {0, 0, 2048},    /* header of row 0 */
        {15, 15, 2303},  /* last header byte: the chunk's last byte */
        {3, 5, 2101},    /* 2048 + 48 + 5 */
        {0, 16, 0},      /* row 0 piece 0 (t 0, j 0): lane 0's q00 */
        {0, 32, 16},     /* piece 1: lane 1 */
        {0, 80, 512},    /* piece 4 (t 0, j 1): lane 0's q01 */
        {8, 16, 1024},   /* row 8 = g 0 of the second half: q10 of lane 0 */
        {9, 143, 1663},  /* piece 7 (t 3, j 1) of g 1: lane 7's q11, last byte: 1536 + 112 + 15 */
        {7, 100, 980},   /* q 84: piece 5 (t 1, j 1), g 7: lane 29's q01 byte 4: 512 + 464 + 4 */
        {12, 47, 1311},  /* q 31: piece 1 (t 1, j 0), R 1, g 4: lane 17's q10 byte 15: 1024 + 272 + 15 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int k = q4k_tile_dst(c[i].r, c[i].o), r = -1, o = -1;
        CHECK(k == c[i].k, "row %d byte %d -> %d, want %d", c[i].r, c[i].o, k, c[i].k);
        q4k_tile_src(c[i].k, &r, &o);
        CHECK(r == c[i].r && o == c[i].o, "chunk byte %d <- row %d byte %d, want row %d byte %d", c[i].k, r, o,
              c[i].r, c[i].o);
    }
}

/* What lane (g, t) of k_mvh_q4k_t loads per super-block (row g: h0 = bytes
 * 0..15, q00 = 16 + 16t.., q01 = 80 + 16t..; row g + 8: h1, q10, q11) must
 * be where the tiled kernel loads it: q00 at 16 lane, q01 at 512 + 16 lane,
 * q10 at 1024 + 16 lane, q11 at 1536 + 16 lane, h0 at 2048 + 16g, h1 at
 * 2048 + 16(g + 8), each 16 bytes in order. */
static void test_lane_loads(void) {
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        const struct { int r, o, k; } L[6] = {
            {g, 16 + 16 * t, 16 * lane},           {g, 80 + 16 * t, 512 + 16 * lane},
            {g + 8, 16 + 16 * t, 1024 + 16 * lane}, {g + 8, 80 + 16 * t, 1536 + 16 * lane},
            {g, 0, 2048 + 16 * g},                  {g + 8, 0, 2048 + 16 * (g + 8)},
        };
        for (int i = 0; i < 6; i++)
            for (int b = 0; b < 16; b++) bad += q4k_tile_dst(L[i].r, L[i].o + b) != L[i].k + b;
    }
    CHECK(bad == 0, "%d bytes of the lanes' loads are not where the tiled kernel reads them", bad);
}

/* Every chunk byte is hit exactly once, and src undoes dst. */
static void test_chunk_bijection(void) {
    int hits[Q4KT_CHUNK] = {0}, bad_inv = 0, bad_range = 0;
    for (int r = 0; r < Q4KT_ROWS; r++)
        for (int o = 0; o < Q4KT_BLOCK; o++) {
            int k = q4k_tile_dst(r, o), r2, o2;
            if (k < 0 || k >= Q4KT_CHUNK) {
                bad_range++;
                continue;
            }
            hits[k]++;
            q4k_tile_src(k, &r2, &o2);
            bad_inv += r2 != r || o2 != o;
        }
    int bad_hits = 0;
    for (int k = 0; k < Q4KT_CHUNK; k++) bad_hits += hits[k] != 1;
    CHECK(bad_range == 0 && bad_hits == 0 && bad_inv == 0,
          "chunk map: %d out of range, %d bytes not hit exactly once, %d not inverted", bad_range, bad_hits, bad_inv);
    /* 16-byte units stay whole and aligned (the kernels move them as uint4) */
    int bad_unit = 0;
    for (int r = 0; r < Q4KT_ROWS; r++)
        for (int u = 0; u < 9; u++) {
            int k0 = q4k_tile_dst(r, 16 * u);
            bad_unit += k0 % 16 != 0;
            for (int b = 1; b < 16; b++) bad_unit += q4k_tile_dst(r, 16 * u + b) != k0 + b;
        }
    CHECK(bad_unit == 0, "%d bytes break a 16-byte unit", bad_unit);
}

/* A random Q4_K matrix of `groups` groups and nsb super-blocks per row:
 * packed group by group, then every byte of every block gathered back
 * through q4k_tile_offset; the offsets must cover the tensor exactly once. */
static void test_matrix(int64_t groups, int64_t nsb) {
    const int64_t n_out = groups * Q4KT_ROWS;
    const size_t rb = (size_t)nsb * Q4KT_BLOCK, n = rb * (size_t)n_out;
    uint8_t *w = malloc(n), *t = malloc(n), *back = malloc(n), *seen = calloc(n, 1);
    if (!w || !t || !back || !seen) {
        printf("out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) w[i] = rnd8();
    memset(t, 0xA5, n);
    for (int64_t grp = 0; grp < groups; grp++)
        q4k_tile_pack_group(t + (size_t)grp * Q4KT_ROWS * rb, w + (size_t)grp * Q4KT_ROWS * rb, rb);
    size_t out_of_range = 0, twice = 0;
    for (int64_t row = 0; row < n_out; row++)
        for (int64_t sb = 0; sb < nsb; sb++)
            for (int o = 0; o < Q4KT_BLOCK; o++) {
                size_t at = q4k_tile_offset(rb, row, sb, o);
                size_t src = (size_t)row * rb + (size_t)sb * Q4KT_BLOCK + (size_t)o;
                if (at >= n) {
                    out_of_range++;
                    continue;
                }
                twice += seen[at]++ != 0;
                back[src] = t[at];
            }
    CHECK(out_of_range == 0 && twice == 0, "%lld groups x %lld super-blocks: %zu offsets out of range, %zu twice",
          (long long)groups, (long long)nsb, out_of_range, twice);
    CHECK(memcmp(back, w, n) == 0, "%lld groups x %lld super-blocks: gathered blocks differ from the original",
          (long long)groups, (long long)nsb);
    /* the layout really moved bytes (a repack that copied would pass the gather only if the map were identity) */
    CHECK(nsb == 0 || memcmp(t, w, n) != 0, "%lld x %lld: tiled bytes equal the original", (long long)groups,
          (long long)nsb);
    free(w);
    free(t);
    free(back);
    free(seen);
}

static void test_qualify(void) {
    static const struct { int64_t n_in, n_out; bool ok; } c[] = {
        {256, 16, true},     {5120, 17408, true}, {17408, 5120, true}, {4096, 14336, true}, {14336, 4096, true},
        {256 * 3, 48, true}, {256, 8, false},     {256, 24, false},    {256, 37, false},    {255, 16, false},
        {384, 16, false},    {0, 16, false},      {256, 0, false},     {-256, 16, false},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        CHECK(q4k_tile_ok(c[i].n_in, c[i].n_out) == c[i].ok, "q4k_tile_ok(%lld, %lld) != %d", (long long)c[i].n_in,
              (long long)c[i].n_out, c[i].ok);
}

int main(void) {
    tc_rng = 0x243f6a8885a308d3ull;
    test_known_positions();
    test_lane_loads();
    test_chunk_bijection();
    static const int64_t shapes[][2] = {{1, 1}, {3, 1}, {1, 3}, {5, 7}, {3, 68}, {7, 20}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_matrix(shapes[i][0], shapes[i][1]);
    test_qualify();
    return tc_summary();
}
