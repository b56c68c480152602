/* AMX-INT8 prefill kernels: Q4_0, Q8_0 (Q8_0 activations), Q4_1 (Q8_1),
 * Q4_K, Q6_K (Q8_K activations), for n_tok >= TND_AMX_MIN_TOK on the int8
 * path.
 *
 * AMX: 8 tile registers of up to 16 rows x 64 bytes; TDPBSSD C += A.B with
 * A 16 x K int8 (K <= 64, row m = token m), B K/4 lines of 16 columns x 4
 * consecutive k ("VNNI" order), C 16 x 16 int32. A comes straight from the
 * quantized activations (a tile load takes a row stride: x_row), so only the
 * weights are repacked: per thread, panels of 16 weight rows into the B
 * order, cached while a group of panels meets every token block.
 *
 * Accuracy: the integer part of every weight block is exact, as in the
 * scalar reference (vec_dot); only the float summation over blocks differs
 * (order, FMA), so results match the reference to the same tolerance as the
 * other SIMD kernels (test_cpu_amx). No weight or activation is requantized:
 *   Q4_0, Q8_0: the scales are per 32 on both sides, so each 32-block is one
 *     tile product of K = 32 and its 16 x 16 int32 result is scaled in the
 *     AVX-512 epilogue: acc[m] += C[m] * (d_w * d_a[m]).
 *   Q4_1: the same with the unsigned nibbles (0..15) as the int8 weights;
 *     the block's min part m_w * s_a (s_a the Q8_1 block's stored d * sum,
 *     as the reference uses it) is added in the epilogue.
 *   Q4_K, Q6_K: the sub-block scales are integers, so the tile can do them:
 *     w = sc * q (Q4_K 0..945, Q6_K -4064..4096) is split as 128 hi + lo
 *     with hi, lo int8, and two tiles accumulate A.B_hi and A.B_lo over the
 *     whole 256-element super-block (K = 64 steps); 128 C_hi + C_lo is then
 *     exactly the reference's isum, scaled once per super-block. The tile
 *     does twice the products, but the epilogue runs 8x (Q4_K) or 16x (Q6_K)
 *     less often than one product per sub-block would need. Q4_K's min term
 *     (dmin * m_g times the group's activation sum, from tnd_act_aux) is
 *     subtracted in float per 32-group.
 *
 * Blocking: the driver gives each thread a contiguous range of output rows.
 * The thread repacks up to AMX_PANELS_MAX panels (16 rows each, within
 * AMX_PANEL_BYTES, so they stay in L2 beside the activation rows), then for
 * each block of 16 tokens runs every panel over all of K with the 16 x 16
 * float accumulators in registers. A last partial token block is shifted
 * back to end at n_tok; fewer than 16 tokens go through a zero-padded copy.
 *
 * The body (matmul_amx_body.h) is built twice: with AMX instructions under
 * a target attribute (so the rest of the library needs no AMX flags), and
 * with the tile operations emulated in C (tests run the same blocking on
 * machines without AMX). Tile configuration is per thread: each call loads
 * it on the thread that runs it and releases the tiles at the end. */
#include "cpu/matmul_amx.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "util.h"

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define AMX_BUILD 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define AMX_BUILD 0
#endif

/* 16 floats / int32: the epilogue works on whole C rows (one zmm each with
 * AVX-512; the compiler splits them elsewhere). */
typedef float amx_v16f __attribute__((vector_size(64)));
typedef int32_t amx_v16i __attribute__((vector_size(64)));
/* unpacking weights */
typedef uint8_t amx_v16u8 __attribute__((vector_size(16)));
typedef uint8_t amx_v32u8 __attribute__((vector_size(32)));
typedef int8_t amx_v32s8 __attribute__((vector_size(32)));
typedef int16_t amx_v32s16 __attribute__((vector_size(64)));
typedef uint16_t amx_v32u16 __attribute__((vector_size(64)));
typedef uint8_t amx_v64u8 __attribute__((vector_size(64)));

/* tile registers */
#define T_C0 0
#define T_C1 1
#define T_A0 2
#define T_A1 3
#define T_B0 4
#define T_B1 5
#define T_B2 6
#define T_B3 7
/* block formats: tiles 6, 7 are a second pair of C (tile_blk's pipeline) */
#define T_C2 6
#define T_C3 7

enum { AF_Q4_0, AF_Q8_0, AF_Q4_K, AF_Q6_K, AF_Q4_1 };

/* Shuffle masks of the 16 x 16 dword transpose (two sources: 0-15 the
 * first, 16-31 the second): LO keeps the columns without bit B of the first
 * row and takes the second row's with it, HI the others. */
#define AMX_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define AMX_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define AMX_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define AMX_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define AMX_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define AMX_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define AMX_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define AMX_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* Repacked panels kept per thread (two threads of a core share its L2). */
#define AMX_PANEL_BYTES (640u * 1024u)
#define AMX_PANELS_MAX 8
#define AMX_ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* LDTILECFG's 64-byte operand (palette 1). */
typedef struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row, per tile */
    uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "tile config is 64 bytes");

/* ---- tile emulation ------------------------------------------------------------
 * What the instructions do, for the configured shapes; a product whose
 * shapes the hardware would reject (#UD) poisons C instead. */

typedef struct amx_emu {
    int8_t t[8][16][64];
    uint16_t colsb[8];
    uint8_t rows[8];
} amx_emu;

static void emu_cfg(amx_emu *E, const amx_cfg *c) {
    memset(E, 0, sizeof *E);
    for (int t = 0; t < 8; t++) E->rows[t] = c->rows[t], E->colsb[t] = c->colsb[t];
}

static void emu_load(amx_emu *E, int t, const void *p, size_t stride) {
    for (int r = 0; r < E->rows[t]; r++) memcpy(E->t[t][r], (const char *)p + (size_t)r * stride, E->colsb[t]);
}

static void emu_zero(amx_emu *E, int t) { memset(E->t[t], 0, sizeof E->t[t]); }

static void emu_store(amx_emu *E, int t, void *p, size_t stride) {
    for (int r = 0; r < E->rows[t]; r++) memcpy((char *)p + (size_t)r * stride, E->t[t][r], E->colsb[t]);
}

static void emu_dpbssd(amx_emu *E, int c, int a, int b) {
    int M = E->rows[a], K4 = E->colsb[a] / 4, N = E->colsb[c] / 4;
    bool ok = E->rows[c] == M && E->rows[b] == K4 && E->colsb[b] == E->colsb[c] && M > 0 && K4 > 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t v;
            memcpy(&v, &E->t[c][m][4 * n], 4);
            if (!ok) v = INT32_MIN;
            else if (m < M && n < N)
                for (int k = 0; k < K4; k++)
                    for (int j = 0; j < 4; j++) v += E->t[a][m][4 * k + j] * E->t[b][k][4 * n + j];
            memcpy(&E->t[c][m][4 * n], &v, 4);
        }
}

/* ---- the two builds of the body ---------------------------------------------- */

#define AMX_HW 0
#define SFX(x) emu_##x
#define TGT
#define TGTI static inline
#include "cpu/matmul_amx_body.h"
#undef AMX_HW
#undef SFX
#undef TGT
#undef TGTI

#if AMX_BUILD
#define AMX_HW 1
#define SFX(x) hw_##x
#define TGT __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,fma,f16c")))
#define TGTI static inline __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,fma,f16c"), always_inline))
#include "cpu/matmul_amx_body.h"
#undef AMX_HW
#undef SFX
#undef TGT
#undef TGTI
#endif

/* ---- detection and mode --------------------------------------------------------- */

static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx_ok;
static const char *g_amx_state = "absent (not x86-64)";
static _Atomic int g_amx_mode;

static void amx_init(void) {
#if AMX_BUILD
    unsigned a, b, c, d;
    if (tnd_cpu_isa_best() != TND_ISA_AVX512) g_amx_state = "absent (no AVX-512)";
    else if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        g_amx_state = "absent (no AMX-TILE/AMX-INT8)";
    else if ((tnd_cpu_xgetbv0() & (3ull << 17)) != (3ull << 17)) g_amx_state = "absent (OS does not enable tile state)";
    /* Linux: the tile data state must be asked for once per process
     * (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first tile
     * instruction kills the process. */
    else if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) g_amx_state = "absent (OS denied tile data)";
    else g_amx_ok = true;
#endif
    int mode = g_amx_ok ? TND_AMX_HW : TND_AMX_OFF;
    if (g_amx_ok && !tnd_config_get()->cpu_amx) {
        mode = TND_AMX_OFF;
        g_amx_state = "off (TND_CPU_AMX=0)";
    } else if (g_amx_ok) g_amx_state = "on";
    atomic_store(&g_amx_mode, mode);
}

bool tnd_cpu_amx_supported(void) {
    pthread_once(&g_amx_once, amx_init);
    return g_amx_ok;
}

const char *tnd_cpu_amx_state(void) {
    pthread_once(&g_amx_once, amx_init);
    return g_amx_state;
}

tnd_amx_mode tnd_cpu_amx_mode(void) {
    pthread_once(&g_amx_once, amx_init);
    return (tnd_amx_mode)atomic_load_explicit(&g_amx_mode, memory_order_relaxed);
}

bool tnd_cpu_amx_force(tnd_amx_mode m) {
    pthread_once(&g_amx_once, amx_init);
    if (m != TND_AMX_OFF && m != TND_AMX_EMU && m != TND_AMX_HW) return false;
    if (m == TND_AMX_HW && !g_amx_ok) return false;
    atomic_store(&g_amx_mode, (int)m);
    return true;
}

tnd_gemm_kernel tnd_cpu_amx_kernel(tnd_type wt, tnd_amx_mode m) {
    if (m == TND_AMX_EMU) switch (wt) {
        case TND_TYPE_Q4_0: return emu_gemm_q4_0;
        case TND_TYPE_Q8_0: return emu_gemm_q8_0;
        case TND_TYPE_Q4_1: return emu_gemm_q4_1;
        case TND_TYPE_Q4_K: return emu_gemm_q4_K;
        case TND_TYPE_Q6_K: return emu_gemm_q6_K;
        default: return NULL;
        }
#if AMX_BUILD
    if (m == TND_AMX_HW) switch (wt) {
        case TND_TYPE_Q4_0: return hw_gemm_q4_0;
        case TND_TYPE_Q8_0: return hw_gemm_q8_0;
        case TND_TYPE_Q4_1: return hw_gemm_q4_1;
        case TND_TYPE_Q4_K: return hw_gemm_q4_K;
        case TND_TYPE_Q6_K: return hw_gemm_q6_K;
        default: return NULL;
        }
#endif
    return NULL;
}

tnd_gemm_kernel tnd_cpu_amx_select(tnd_type wt, int64_t n_tok) {
    if (n_tok < TND_AMX_MIN_TOK) return NULL;
    tnd_amx_mode m = tnd_cpu_amx_mode();
    if (m == TND_AMX_OFF) return NULL;
    /* a lower forced ISA (TND_CPU_ISA, tests) also means no AMX */
    if (m == TND_AMX_HW && tnd_cpu_isa_id_current() != TND_ISA_AVX512) return NULL;
    return tnd_cpu_amx_kernel(wt, m);
}
