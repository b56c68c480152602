/* Hardware profiles and the per-op cost model (docs/ARCHITECTURE.md: SimGPU and
 * the timeline model): the inputs of
 * the timeline model that SimGPU runs and the planners optimize.
 *
 * A profile is a built-in name (tnd_hw_names()) or a text file:
 *
 *     # comment (also after a value)
 *     base = rtx4090-desktop     # optional, first key only: start from a built-in
 *     name = my-box
 *     gpu = RTX 4070 12 GB       # strings: the rest of the line ("quotes" optional)
 *     vram = 12 GiB              # bytes:      B, KB, MB, GB, KiB, MiB, GiB, TiB
 *     hbm_bw = 504 GB/s          # bandwidths: B/s, KB/s, MB/s, GB/s, TB/s (decimal)
 *     gpu_flops = 80 TFLOPS      # compute:    FLOPS, GFLOPS, TFLOPS, PFLOPS
 *     pcie_lat = 10 us           # times:      s, ms, us, ns
 *     cpu_threads = 8            # an integer
 *
 * A bare number is in base units (bytes, bytes/s, FLOP/s, seconds). Keys are
 * the tnd_hw field names; without `base`, every field must be given. A unit
 * of the wrong kind (vram = 3 GB/s) is an error.
 *
 * Cost model: an op takes max(bytes / bandwidth, flops / peak) + a fixed
 * cost (a kernel launch on the GPU, a thread-pool barrier on the CPU). Bytes
 * are the weight bytes read plus the activations read and written; see
 * tnd_hw_op_time_gpu for what each op kind counts. */
#ifndef TND_SIM_HW_H
#define TND_SIM_HW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "tandem.h"

typedef struct tnd_hw {
    char name[64];           /* "rtx3060-laptop" */
    char gpu[64], cpu[64];   /* descriptions */
    uint64_t vram;           /* bytes of GPU memory */
    double hbm_bw;           /* GPU memory read bandwidth, bytes/s */
    double gpu_flops;        /* dense f16 tensor-core FLOP/s usable by prefill GEMMs */
    double pcie_bw;          /* pinned host->device copy-engine bandwidth, bytes/s */
    double pcie_pageable_bw; /* pageable copies, bytes/s */
    double pcie_lat;         /* fixed latency per copy, s */
    double launch;           /* fixed cost per GPU op (kernel launch), s */
    double cpu_bw;           /* DRAM read bandwidth with all threads, bytes/s */
    double cpu_flops;        /* CPU FLOP/s with all threads (f32 FMA) */
    double cpu_op;           /* fixed cost per CPU op (thread-pool barrier), s */
    int cpu_threads;
} tnd_hw;

/* Fills *out from a built-in name or a profile file (format above). Unknown
 * key, bad value or unit, missing key: TND_ERR_ARG naming file and line;
 * unreadable file: TND_ERR_IO. *out is written only on success. */
tnd_status tnd_hw_load(const char *name_or_path, tnd_hw *out);
/* Comma-separated list of the built-in names, for help text and errors. */
const char *tnd_hw_names(void);

/* Predicted seconds for op on this machine's GPU / CPU:
 * max(bytes / bw, flops / peak) + launch (GPU) or cpu_op (CPU).
 * Only shapes and types are read, never tensor data, with one exception:
 * for MATMUL_ID (and MOE_GLU), a non-NULL in[2].data is read as host
 * memory (n_used * n_tok i32 ids) to count the distinct experts used; with data NULL all
 * min(n_used * n_tok, n_expert) are assumed distinct. Bytes counted:
 *   MATMUL     whole weight + x + y;       flops 2 * n_in * n_out * n_tok
 *   MATMUL_ID  used experts' slices + x + y + ids; flops 2 * n_in * n_out * n_used * n_tok
 *   MOE_GLU, MOE_FFN, ROPE_KV, MOE_SUM_NORM, MOE_ROUTE_PAIR  the sums of the
 *              ops they stand for (backend.h), in one launch
 *   GET_ROWS   the n_ids rows read + ids + out
 *   ATTN       q + out + the K and V rows seen (pos0 + n_tok, or the window);
 *              flops 4 * n_head * head_dim * (rows seen) * n_tok
 *   others     every tensor given (nonzero ne[0]); flops = elements of out[0]. */
double tnd_hw_op_time_gpu(const tnd_hw *hw, const tnd_op *op);
double tnd_hw_op_time_cpu(const tnd_hw *hw, const tnd_op *op);
/* Seconds to copy n bytes host->device (pinned or pageable), including the
 * fixed latency; 0 for n = 0. */
double tnd_hw_copy_time(const tnd_hw *hw, size_t n, bool pinned);

#endif
