/* PreSched's decision (moe/presched.c) against LayerScope's eq. 2-6 worked
 * by hand: which current-layer experts load on demand, how many of the
 * next layer's are copied ahead, how many two layers ahead when none of
 * the next layer's is worth a copy (Q4), and the edges (no link speed, a long
 * queue on the link, the eq. 6 rounding either way, the clamp to the list). */
#include <math.h>

#include "check.h"
#include "moe/moe.h"

#define US 1e-6

/* Room for every expert of the current layer to load on demand (max_load: the last case). */
static int g_room = 1 << 20;
/* The list two layers ahead (Q4), none unless a case sets it. */
static const int *g_m2;
static int g_n2;
static double g_rhit2 = -1; /* its copies' hit rate; < 0: r_hit's */

static tnd_presched_out run(const int *mc, int nc, const int *mn, int nn, double beta, double c0, double t_io,
                            double t_g, double t_attn, double alpha, double r_hit) {
    const tnd_presched_in in = {.m_cur = mc, .n_cur = nc, .m_next = mn, .n_next = nn, .max_load = g_room,
                                .beta = beta * US,
                                .c0 = c0 * US, .t_io = t_io * US, .t_g = t_g * US, .t_attn = t_attn * US,
                                .alpha = alpha * US, .r_hit = r_hit, .m_next2 = g_m2, .n_next2 = g_n2,
                                .r_hit2 = g_rhit2 < 0 ? r_hit : g_rhit2};
    tnd_presched_out o;
    tnd_presched(&in, &o);
    return o;
}

int main(void) {
    /* A decode step: one token an expert, 4 CPU-side experts, 4 predicted
     * ones. t_c = 30, t_io = 50, t_attn = 20 (us). E_all (ties: the current
     * layer first) c c c c n n n n; T^G_all(k) = 50 (8 - k), T^C_all(k) =
     * 30 (k + 1) + 20: first below at k = 5, so GPU_Q = the last 3 next-layer
     * experts, nothing of the current layer loads. Gap 120, f = 140 / 50 =
     * 2.8 -> 3; eq. 6 with R_hit 0.9: 0.9 * 0.8 - 0.1 * 0.2 = 0.70 > 0, keep 3. */
    {
        const int ones[4] = {1, 1, 1, 1};
        tnd_presched_out o = run(ones, 4, ones, 4, 0, 30, 50, 0, 20, 0, 0.9);
        CHECK(o.n_load == 0, "decode: %d loaded on demand, want 0", o.n_load);
        CHECK(o.n_prefetch == 3, "decode: %d copied ahead, want 3", o.n_prefetch);
        CHECK(fabs(o.f - 2.8) < 1e-9, "decode: f %.6f, want 2.8", o.f);
    }
    /* A batched round: current experts with 1, 2, 8, 20 tokens, two
     * predicted with 1; t_c = 5 m + 20, t_io = 50, t_g = 10, t_attn = 20.
     * E_all: c1 n1 n1 c2 c8 c20 (t_c 25 25 25 30 60 120); T^G_all(k) =
     * 50 (6 - k) + 10 against the prefix + 20: first below at k = 4 (110 <
     * 185), GPU_Q = {c8, c20}. On demand: i' = 2 has T_G = 110 >= T_C =
     * 55, i' = 3 has 60 < 115: the 20-token expert loads. GPU_Q holds no
     * next-layer expert: nothing copied ahead (Q4). */
    {
        const int mc[4] = {1, 2, 8, 20}, mn[2] = {1, 1};
        tnd_presched_out o = run(mc, 4, mn, 2, 5, 20, 50, 10, 20, 0, 0.5);
        CHECK(o.n_load == 1, "batch: %d loaded on demand, want 1", o.n_load);
        CHECK(o.n_prefetch == 0 && o.f == 0, "batch: %d copied ahead (f %.3f), want none", o.n_prefetch, o.f);
        /* the link busy for 100 us more: Q1 first below at k = 5 (160 <
         * 305), GPU_Q = {c20}, whose T_G = 160 >= T_C = 115: none loads */
        o = run(mc, 4, mn, 2, 5, 20, 50, 10, 20, 100, 0.5);
        CHECK(o.n_load == 0, "busy link: %d loaded on demand, want 0", o.n_load);
        /* twice the tokens on the heavy expert: still one (i' = 2: 110 >= 55) */
        const int mc2[4] = {1, 2, 8, 40};
        o = run(mc2, 4, mn, 2, 5, 20, 50, 10, 20, 0, 0.5);
        CHECK(o.n_load == 1, "heavier: %d loaded on demand, want 1", o.n_load);
        /* a fast link (t_io 10): Q1 below at k = 1 (10 * 5 + 10 = 60 < 70),
         * GPU_Q = n1 n1 c2 c8 c20; on demand i' = 1: T_G = 30 + 10 = 40 >= 25;
         * i' = 2: 20 + 10 = 30 < 55: c8 and c20 load. The gap 55 - 20 = 35,
         * f = (35 + 20) / 10 = 5.5 -> 6 (lround), eq. 6 at R_hit 0.5:
         * 0.5 * 0.5 - 0.5 * 0.5 = 0, not positive: 5, clamped to the 2 there */
        o = run(mc, 4, mn, 2, 5, 20, 10, 10, 20, 0, 0.5);
        CHECK(o.n_load == 2, "fast link: %d loaded on demand, want 2", o.n_load);
        CHECK(fabs(o.f - 5.5) < 1e-9, "fast link: f %.6f, want 5.5", o.f);
        CHECK(o.n_prefetch == 2, "fast link: %d copied ahead, want 2 (all there are)", o.n_prefetch);
        /* the same with eight predicted: the tie (gain exactly 0) drops to
         * 5. E_all c1, n1 x8, c2 c8 c20; Q1 below at k = 3 (9 * 10 + 10 =
         * 100 < 4 * 25 + 20 = 120): GPU_Q six n1, c2 c8 c20, the same loads */
        const int mn8[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        o = run(mc, 4, mn8, 8, 5, 20, 10, 10, 20, 0, 0.5);
        CHECK(o.n_load == 2 && fabs(o.f - 5.5) < 1e-9, "fast link, 8 predicted: load %d, f %.6f; want 2, 5.5",
              o.n_load, o.f);
        CHECK(o.n_prefetch == 5, "fast link, 8 predicted: %d copied ahead, want 5 (the tie drops)", o.n_prefetch);
        /* room for one load only: the heaviest (c20) loads, and the gap counts
         * c2 and c8 on the CPU: 25 + 30 + 60 - 10 = 105, f = 12.5 -> 13,
         * gain 0.5 * 0.5 - 0.5 * 0.5 = 0: 12, clamped to the 8 there are */
        g_room = 1;
        o = run(mc, 4, mn8, 8, 5, 20, 10, 10, 20, 0, 0.5);
        g_room = 1 << 20;
        CHECK(o.n_load == 1 && fabs(o.f - 12.5) < 1e-9 && o.n_prefetch == 8,
              "room for one: load %d, f %.6f, prefetch %d; want 1, 12.5, 8", o.n_load, o.f, o.n_prefetch);
    }
    /* eq. 6 rounding: one current expert (t_c 30), four predicted, t_io 50,
     * t_attn 50: GPU_Q from k = 3 (100 < 170) holds n n; f = 80 / 50 = 1.6
     * -> 2, gain R_hit 0.6 - 0.4 (1 - R_hit) = R_hit - 0.4: at 0.3 one copy,
     * at 0.5 two */
    {
        const int one[1] = {1}, four[4] = {1, 1, 1, 1};
        tnd_presched_out o = run(one, 1, four, 4, 0, 30, 50, 0, 50, 0, 0.3);
        CHECK(o.n_load == 0 && o.n_prefetch == 1, "R_hit 0.3: load %d, prefetch %d; want 0, 1", o.n_load,
              o.n_prefetch);
        o = run(one, 1, four, 4, 0, 30, 50, 0, 50, 0, 0.5);
        CHECK(o.n_prefetch == 2, "R_hit 0.5: prefetch %d, want 2", o.n_prefetch);
    }
    /* Q4, the window two layers ahead. Every current and next-layer
     * expert on the GPU already, four predicted two layers ahead; c0 30,
     * t_io 50, t_attn 120, R_hit 0.9. The first window is empty; the second:
     * T^G_all(k) = 50 (4 - k) against 30 (k + 1) + 120, first below at k =
     * 1 (150 < 180): GPU_Q holds three. Gap 0, f = 120 / 50 = 2.4 -> 2, eq. 6:
     * 0.9 * 1.4 - 0.1 * -0.4 > 0: two. */
    {
        const int four[4] = {1, 1, 1, 1};
        g_m2 = four, g_n2 = 4;
        tnd_presched_out o = run(NULL, 0, NULL, 0, 0, 30, 50, 0, 120, 0, 0.9);
        CHECK(o.n_load == 0 && o.n_prefetch == 0 && o.f == 0, "Q4, all on the GPU: load %d, prefetch %d (f %.3f)",
              o.n_load, o.n_prefetch, o.f);
        CHECK(o.n_prefetch2 == 2 && fabs(o.f2 - 2.4) < 1e-9, "Q4, all on the GPU: prefetch2 %d, f2 %.6f; want 2, 2.4",
              o.n_prefetch2, o.f2);
        /* t_attn 130: f = 2.6 -> 3, eq. 6 with two layers ahead's own hit
         * rate: R 0.6 - 0.4 (1 - R) = R - 0.4: at 0.9 three, at 0.3 two
         * (r_hit 0.9 for the copies a layer ahead does not count) */
        o = run(NULL, 0, NULL, 0, 0, 30, 50, 0, 130, 0, 0.9);
        CHECK(o.n_prefetch2 == 3 && fabs(o.f2 - 2.6) < 1e-9, "Q4, R_hit2 0.9: prefetch2 %d, f2 %.6f; want 3, 2.6",
              o.n_prefetch2, o.f2);
        g_rhit2 = 0.3;
        o = run(NULL, 0, NULL, 0, 0, 30, 50, 0, 130, 0, 0.9);
        g_rhit2 = -1;
        CHECK(o.n_prefetch2 == 2, "Q4, R_hit2 0.3: prefetch2 %d, want 2", o.n_prefetch2);
        /* the next layer's in GPU_Q (the first decode case): no wider window */
        o = run(four, 4, four, 4, 0, 30, 50, 0, 20, 0, 0.9);
        CHECK(o.n_prefetch == 3 && o.n_prefetch2 == 0, "Q4, next layer in GPU_Q: prefetch %d, prefetch2 %d; want 3, 0",
              o.n_prefetch, o.n_prefetch2);
        /* The batched round whose GPU_Q held nothing of the next layer (c20
         * loads on demand; gap 25 + 30 + 60 - 50 = 65), one expert with 30
         * tokens two layers ahead (t_c 170): E_all c1 c2 c8 c20 n30, T^G_all(k)
         * = 50 (5 - k) + 10 against 25, 55, 115, 235, 405 + 20: first below at
         * k = 3 (110 < 255), GPU_Q = {c20, n30}. f = (65 + 20) / 50 = 1.7 ->
         * 2, eq. 6 at 0.5: 0.35 - 0.15 > 0, clamped to the one there is. The
         * on-demand load stays the first window's. */
        const int mc[4] = {1, 2, 8, 20}, mn[2] = {1, 1}, m30[1] = {30};
        g_m2 = m30, g_n2 = 1;
        o = run(mc, 4, mn, 2, 5, 20, 50, 10, 20, 0, 0.5);
        CHECK(o.n_load == 1 && o.n_prefetch == 0, "Q4, batch: load %d, prefetch %d; want 1, 0", o.n_load,
              o.n_prefetch);
        CHECK(o.n_prefetch2 == 1 && fabs(o.f2 - 1.7) < 1e-9, "Q4, batch: prefetch2 %d, f2 %.6f; want 1, 1.7",
              o.n_prefetch2, o.f2);
        /* lighter two layers ahead (4 tokens each, t_c 40): E_all c1 c2 n4 n4
         * c8 c20, first below at k = 4 (110 < 215): GPU_Q = {c8, c20}, none */
        const int m4[2] = {4, 4};
        g_m2 = m4, g_n2 = 2;
        o = run(mc, 4, mn, 2, 5, 20, 50, 10, 20, 0, 0.5);
        CHECK(o.n_load == 1 && o.n_prefetch2 == 0, "Q4, light: load %d, prefetch2 %d; want 1, 0", o.n_load,
              o.n_prefetch2);
        g_m2 = NULL, g_n2 = 0;
    }
    /* no link speed, or nothing to decide: nothing */
    {
        const int ones[4] = {1, 1, 1, 1};
        tnd_presched_out o = run(ones, 4, ones, 4, 0, 30, 0, 0, 20, 0, 0.9);
        CHECK(o.n_load == 0 && o.n_prefetch == 0, "no t_io: load %d, prefetch %d", o.n_load, o.n_prefetch);
        o = run(ones, 0, ones, 0, 0, 30, 50, 0, 20, 0, 0.9);
        CHECK(o.n_load == 0 && o.n_prefetch == 0, "empty lists: load %d, prefetch %d", o.n_load, o.n_prefetch);
    }
    return tc_summary();
}
