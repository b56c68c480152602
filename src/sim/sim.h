/* SimGPU (docs/ARCHITECTURE.md: SimGPU and the timeline model): the backend interface of backend.h on CPU threads,
 * with CUDA's stream, event and copy semantics, so the executor's
 * synchronization is exercised (and checked under ThreadSanitizer) without a
 * GPU, plus an optional timeline from a hardware profile (sim/hw.h).
 *
 * - Device memory is a private heap: separate allocations, never handed out
 *   as host pointers; the budget is counted in requested bytes.
 * - Each stream is a worker thread running its queue in order; every call
 *   that queues work returns at once. Ops are computed by an internal CPU
 *   backend (bit-identical results), one op at a time across all streams
 *   (the CPU backend's pool and MATMUL_ID scratch are not reentrant), while
 *   copies on other streams run concurrently.
 * - Pointers are checked when work is queued, as a GPU would fault on them:
 *   op tensors and the device side of copies must lie inside a buf_alloc or
 *   host_alloc region; the host side of h2d/d2h must not be device memory.
 *   Violations are TND_ERR_ARG and nothing is queued.
 * - With a profile, each stream keeps a virtual clock, advanced when work is
 *   queued (so it never waits): an op by tnd_hw_op_time_gpu (MATMUL_ID assumes
 *   all min(n_used * n_tok, n_expert) experts used, the ids not being
 *   computed yet), an h2d/d2h copy by tnd_hw_copy_time on the one copy engine
 *   of its direction (pinned if the host side is host_alloc memory), a
 *   copy_mapped as an SM copy (n / pcie_bw + launch), d2d and memset at HBM
 *   speed; stream_wait takes the max with the event's clock. event_elapsed
 *   then reports virtual time; without a profile, wall time.
 */
#ifndef TND_SIM_SIM_H
#define TND_SIM_SIM_H

#include <stdint.h>

#include "backend.h"
#include "sim/hw.h"

typedef struct tnd_sim_params {
    uint64_t budget;  /* bytes of simulated device memory; 0 = unlimited */
    int n_threads;    /* CPU threads computing the simulated GPU's ops; 0 = 1 */
    const tnd_hw *hw; /* timing model (copied); NULL = none (event_elapsed then reports wall time) */
    bool cpu_exact;   /* compute with f32 activations, as a CPU backend in the exact mode
                         (tnd_backend_cpu_set_int8), so both sides agree bit for bit */
} tnd_sim_params;

/* The SimGPU backend: name "sim". p may be NULL (defaults). */
tnd_status tnd_backend_sim_new(const tnd_sim_params *p, tnd_backend **out);
/* Virtual time in seconds that stream s's queue will reach when all its
 * queued work is done, per the timing model (0 without one). Waits for
 * nothing. */
double tnd_sim_stream_clock(tnd_backend *b, tnd_stream *s);
/* Test hook: delays each queued item of every stream by up to us
 * microseconds of random busy-wait (seeded), so tests shake out missing
 * synchronization. 0 = off. */
void tnd_sim_set_jitter(tnd_backend *b, int us, uint64_t seed);
/* Test hook: each item of stream s queued or run from now on waits us
 * microseconds (busy) before it runs, so a test can make one stream the
 * slow one and see that work on others waits for it where it must. 0 = off. */
void tnd_sim_set_stream_delay(tnd_backend *b, tnd_stream *s, int us);
/* Test hook: host<->device copies queued from now on take factor times the
 * profile's time (a link slowed by another process's copies; 1: as the
 * profile says), so tests see the load-aware executor re-plan. */
void tnd_sim_set_copy_slowdown(tnd_backend *b, double factor);
/* Test hook: the GPU is shared with another process's kernels from now on:
 * the ping (backend.h) reports factor times the profile's switch latency
 * (1: as the profile says), so tests see the context re-place its weights
 * for few switches, and back. Ops' times are unchanged. */
void tnd_sim_set_gpu_slowdown(tnd_backend *b, double factor);
/* Test hook: another process holds `bytes` of the simulated device's memory
 * (the --hw profile's, else the budget) from now on, in every SimGPU: device
 * allocations beyond what is left fail as the driver's out of memory does,
 * and mem_info's dev_free drops; budgets already read stay as they were
 * (memory taken between a plan and its allocation). 0 = none. */
void tnd_sim_set_taken(uint64_t bytes);

#endif
