/* AMX-INT8 prefill kernels (Sapphire Rapids and later) for Q4_0, Q8_0, Q4_1,
 * Q4_K and Q6_K weights on the int8 path (the default). They have the
 * tnd_gemm_kernel contract of matmul_impl.h and replace the per-ISA prefill
 * kernel when n_tok >= TND_AMX_MIN_TOK, the CPU has AMX and the OS grants
 * the tile state. TND_CPU_AMX=0 turns them off.
 *
 * The same kernel body is also built with the tile instructions emulated in
 * plain C (TND_AMX_EMU), so the blocking and data flow are tested on machines
 * without AMX. Internal to cpu/. */
#ifndef TND_CPU_MATMUL_AMX_H
#define TND_CPU_MATMUL_AMX_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/matmul_impl.h"

/* Fewest tokens for which the driver uses the AMX kernels: one full 16-row
 * activation tile. Below it the tile work is mostly padding. */
#define TND_AMX_MIN_TOK 16

typedef enum tnd_amx_mode {
    TND_AMX_OFF = 0, /* per-ISA kernels only */
    TND_AMX_EMU = 1, /* AMX kernel body, tiles emulated in C (tests) */
    TND_AMX_HW = 2,  /* AMX instructions */
} tnd_amx_mode;

/* True when the CPU has AMX-TILE, AMX-INT8 and AVX-512 (the epilogue) and
 * the OS granted this process the tile data state (asked once). */
bool tnd_cpu_amx_supported(void);
/* A short description for logs and benches, e.g. "on", "off (TND_CPU_AMX=0)",
 * "absent (no AMX-INT8)". Static string. */
const char *tnd_cpu_amx_state(void);
/* Mode in use: TND_AMX_HW when supported and not disabled by TND_CPU_AMX=0,
 * else TND_AMX_OFF, until tnd_cpu_amx_force changes it. */
tnd_amx_mode tnd_cpu_amx_mode(void);
/* Selects the mode from now on (tests, benches); returns false and changes
 * nothing when TND_AMX_HW is asked on a machine without AMX. Not thread-safe
 * against concurrent matmuls. */
bool tnd_cpu_amx_force(tnd_amx_mode m);
/* The prefill kernel for weight type wt built for mode m (EMU or HW), or
 * NULL when wt has none or m is OFF. The activation type is wt's
 * vec_dot_type; calling the HW one without AMX support faults. */
tnd_gemm_kernel tnd_cpu_amx_kernel(tnd_type wt, tnd_amx_mode m);
/* The driver's choice for (wt, n_tok) under the current mode (HW also needs
 * the AVX-512 ISA in use), or NULL to use the per-ISA kernels. */
tnd_gemm_kernel tnd_cpu_amx_select(tnd_type wt, int64_t n_tok);

#endif
