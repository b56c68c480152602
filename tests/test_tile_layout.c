/* The tile layouts' permutations (src/cuda/q4k_tile.cuh, q6k_tile.cuh), on
 * the host: each byte map against positions worked out by hand from the
 * layout's definition and against the loads the f16 decoder makes per
 * lane; that it is a bijection of every chunk and of whole tensors of odd
 * group counts; a random matrix repacked and every block gathered back;
 * the qualification rule. Needs no GPU (the device side is in
 * test_cuda_ops for Q4_K, test_cuda_q6kt for Q6_K). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/q4k_tile.cuh"
#include "cuda/q6k_tile.cuh"

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

/* Q6_K: positions worked out by hand from q6k_tile.cuh's definition. */
static void test_q6k_known_positions(void) {
    static const struct { int r, o, k; } c[] = {
        {0, 0, 0},       /* row 0, ql byte 0: P(0,0) of lane 0 */
        {0, 32, 8},      /* ql 32 (h 1, t 0): lane 0's P(0,0), second half */
        {0, 8, 16},      /* ql 8 (t 1): lane 1 */
        {1, 0, 64},      /* row 1 = g 1: lane 4 */
        {8, 0, 1536},    /* row 8 = R 1: P(1,0) of lane 0 */
        {0, 64, 512},    /* ql 64: P(0,1) */
        {0, 128, 1024},  /* qh 0: P(0,2) */
        {15, 191, 3071}, /* qh 63 (k 2, h 1, t 3) of g 7, R 1: lane 31's P(1,2), last byte: 2560 + 496 + 15 */
        {5, 100, 844},   /* ql 100 (k 1, h 1, t 0): P(0,1) of lane 20, byte 8 + 4: 512 + 320 + 12 */
        {0, 192, 3072},  /* row 0's first scale */
        {15, 207, 3327}, /* row 15's last scale */
        {0, 208, 3328},  /* row 0's d */
        {15, 209, 3359}, /* row 15's d, high byte: the chunk's last byte */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int k = q6k_tile_dst(c[i].r, c[i].o), r = -1, o = -1;
        CHECK(k == c[i].k, "Q6_K row %d byte %d -> %d, want %d", c[i].r, c[i].o, k, c[i].k);
        q6k_tile_src(c[i].k, &r, &o);
        CHECK(r == c[i].r && o == c[i].o, "Q6_K chunk byte %d <- row %d byte %d, want row %d byte %d", c[i].k, r, o,
              c[i].r, c[i].o);
    }
}

/* What lane (g, t) of k_mvh_q6k reads per super-block of rows g and g + 8
 * (mvh_q6k_load: ql words 0..7 from block bytes 32p + 8t.., p = 0..3, two
 * words each; qh words 0..3 from 128 + 32n + 8t.., n = 0..1; the 16
 * scales at 192; d at 208) must be where k_mvt_q6k reads it: ql words 0..3
 * as the 16 bytes at (3R) * 512 + 16 lane, words 4..7 at (3R + 1) * 512 +
 * 16 lane, qh at (3R + 2) * 512 + 16 lane, scales at 3072 + 16 (g + 8R),
 * d at 3328 + 2 (g + 8R). */
static void test_q6k_lane_loads(void) {
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int R = 0; R < 2; R++) {
            const int r = g + 8 * R;
            for (int w = 0; w < 8; w++) /* ql word w: piece p = w / 2, its byte 4 (w % 2) */
                for (int b = 0; b < 4; b++)
                    bad += q6k_tile_dst(r, 32 * (w / 2) + 8 * t + 4 * (w % 2) + b) != 3 * R * 512 + (w / 4) * 512 +
                                                                                          16 * lane + 4 * (w % 4) + b;
            for (int w = 0; w < 4; w++)
                for (int b = 0; b < 4; b++)
                    bad += q6k_tile_dst(r, 128 + 32 * (w / 2) + 8 * t + 4 * (w % 2) + b) !=
                           (3 * R + 2) * 512 + 16 * lane + 4 * w + b;
            for (int b = 0; b < 16; b++) bad += q6k_tile_dst(r, 192 + b) != Q6KT_SC + 16 * r + b;
            for (int b = 0; b < 2; b++) bad += q6k_tile_dst(r, 208 + b) != Q6KT_D + 2 * r + b;
        }
    }
    CHECK(bad == 0, "%d bytes of the Q6_K lanes' loads are not where the tiled kernel reads them", bad);
}

/* A layout as the tests see it: its block and chunk sizes, its maps, and
 * the unit its repack kernel moves whole (16 bytes for Q4_K; 2 for Q6_K,
 * whose d sits at byte 208 of a 210-byte block). */
typedef struct {
    const char *name;
    int block, chunk, unit;
    int (*dst)(int r, int o);
    void (*src)(int c, int *r, int *o);
    size_t (*offset)(size_t rb, int64_t row, int64_t sb, int o);
    void (*pack)(uint8_t *dst, const uint8_t *src, size_t rb);
} layout;
static const layout LAYOUTS[] = {
    {"Q4_K", Q4KT_BLOCK, Q4KT_CHUNK, 16, q4k_tile_dst, q4k_tile_src, q4k_tile_offset, q4k_tile_pack_group},
    {"Q6_K", Q6KT_BLOCK, Q6KT_CHUNK, 2, q6k_tile_dst, q6k_tile_src, q6k_tile_offset, q6k_tile_pack_group},
};

/* Every chunk byte is hit exactly once, and src undoes dst. */
static void test_chunk_bijection(const layout *L) {
    int hits[Q6KT_CHUNK] = {0}, bad_inv = 0, bad_range = 0;
    for (int r = 0; r < 16; r++)
        for (int o = 0; o < L->block; o++) {
            int k = L->dst(r, o), r2, o2;
            if (k < 0 || k >= L->chunk) {
                bad_range++;
                continue;
            }
            hits[k]++;
            L->src(k, &r2, &o2);
            bad_inv += r2 != r || o2 != o;
        }
    int bad_hits = 0;
    for (int k = 0; k < L->chunk; k++) bad_hits += hits[k] != 1;
    CHECK(bad_range == 0 && bad_hits == 0 && bad_inv == 0,
          "%s chunk map: %d out of range, %d bytes not hit exactly once, %d not inverted", L->name, bad_range, bad_hits,
          bad_inv);
    /* units stay whole and aligned (the repack kernels move them whole) */
    int bad_unit = 0;
    for (int r = 0; r < 16; r++)
        for (int u = 0; u < L->block / L->unit; u++) {
            int k0 = L->dst(r, L->unit * u);
            bad_unit += k0 % L->unit != 0;
            for (int b = 1; b < L->unit; b++) bad_unit += L->dst(r, L->unit * u + b) != k0 + b;
        }
    CHECK(bad_unit == 0, "%s: %d bytes break a %d-byte unit", L->name, bad_unit, L->unit);
}

/* A random Q4_K matrix of `groups` groups and nsb super-blocks per row:
 * packed group by group, then every byte of every block gathered back
 * through q4k_tile_offset; the offsets must cover the tensor exactly once. */
static void test_matrix(const layout *L, int64_t groups, int64_t nsb) {
    const int64_t n_out = groups * 16;
    const size_t rb = (size_t)nsb * (size_t)L->block, n = rb * (size_t)n_out;
    uint8_t *w = malloc(n), *t = malloc(n), *back = malloc(n), *seen = calloc(n, 1);
    if (!w || !t || !back || !seen) {
        printf("out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) w[i] = rnd8();
    memset(t, 0xA5, n);
    for (int64_t grp = 0; grp < groups; grp++)
        L->pack(t + (size_t)grp * 16 * rb, w + (size_t)grp * 16 * rb, rb);
    size_t out_of_range = 0, twice = 0;
    for (int64_t row = 0; row < n_out; row++)
        for (int64_t sb = 0; sb < nsb; sb++)
            for (int o = 0; o < L->block; o++) {
                size_t at = L->offset(rb, row, sb, o);
                size_t src = (size_t)row * rb + (size_t)sb * (size_t)L->block + (size_t)o;
                if (at >= n) {
                    out_of_range++;
                    continue;
                }
                twice += seen[at]++ != 0;
                back[src] = t[at];
            }
    CHECK(out_of_range == 0 && twice == 0, "%s, %lld groups x %lld super-blocks: %zu offsets out of range, %zu twice",
          L->name, (long long)groups, (long long)nsb, out_of_range, twice);
    CHECK(memcmp(back, w, n) == 0, "%s, %lld groups x %lld super-blocks: gathered blocks differ from the original",
          L->name, (long long)groups, (long long)nsb);
    /* the layout really moved bytes (a repack that copied would pass the gather only if the map were identity) */
    CHECK(nsb == 0 || memcmp(t, w, n) != 0, "%s, %lld x %lld: tiled bytes equal the original", L->name,
          (long long)groups, (long long)nsb);
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
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        CHECK(q4k_tile_ok(c[i].n_in, c[i].n_out) == c[i].ok, "q4k_tile_ok(%lld, %lld) != %d", (long long)c[i].n_in,
              (long long)c[i].n_out, c[i].ok);
        CHECK(q6k_tile_ok(c[i].n_in, c[i].n_out) == c[i].ok, "q6k_tile_ok(%lld, %lld) != %d", (long long)c[i].n_in,
              (long long)c[i].n_out, c[i].ok);
    }
}

int main(void) {
    tc_rng = 0x243f6a8885a308d3ull;
    test_known_positions();
    test_lane_loads();
    test_q6k_known_positions();
    test_q6k_lane_loads();
    static const int64_t shapes[][2] = {{1, 1}, {3, 1}, {1, 3}, {5, 7}, {3, 68}, {7, 20}};
    for (size_t l = 0; l < sizeof LAYOUTS / sizeof LAYOUTS[0]; l++) {
        test_chunk_bijection(&LAYOUTS[l]);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            test_matrix(&LAYOUTS[l], shapes[i][0], shapes[i][1]);
    }
    test_qualify();
    return tc_summary();
}
