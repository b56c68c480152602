/* CUDA graphs of collected GPU work (docs/ARCHITECTURE.md: CUDA graphs):
 * the cache of instantiated graphs of one stream, and the capture, update
 * and replay of a run of work. backend_cuda.cu collects the run (its items)
 * and issues it; this file decides whether an instantiated graph can be
 * replayed as it is, updated in place, or must be instantiated anew.
 * Internal to src/cuda (C++ linkage). */
#ifndef TND_CUDA_GRAPH_H
#define TND_CUDA_GRAPH_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "backend.h"

/* One piece of collected work. Zeroed before it is filled, so two items of
 * the same work compare equal byte for byte (the key of a replay). */
enum { CU_GI_OP = 1, CU_GI_COPY, CU_GI_RECORD, CU_GI_WAIT };
typedef struct cu_gitem {
    int kind;        /* CU_GI_* */
    int w_tiled;     /* OP: which inputs are re-laid weights (part of the key) */
    tnd_op op;       /* OP */
    void *dst;       /* COPY: an SM copy (mapped memory) */
    const void *src;
    size_t n;
    cudaEvent_t ev;  /* RECORD, WAIT */
    tnd_event *tev;  /* RECORD: the backend's event (its pend is cleared once launched) */
} cu_gitem;

typedef struct cu_gcache cu_gcache;

/* Issues the collected items on the stream; capturing: inside a stream
 * capture (event records and waits are then external nodes). Returns a
 * cudaError_t (or a nonzero tnd_status); nonzero fails the capture. */
typedef int (*cu_gissue_fn)(void *arg, bool capturing);

cu_gcache *cu_gcache_new(void);
void cu_gcache_free(cu_gcache *gc);

/* Runs items [0, n) on cs as a graph: replays the instantiated graph whose
 * key (the items, then extra: what else the launches depend on) is the
 * same; else captures them (issue) and updates the most similar graph of
 * the same shape, or instantiates a new one in the least recently used
 * place. Returns 0 when the graph was launched; else nothing ran, the
 * capture was abandoned, why says what failed, and the caller issues the
 * items as plain launches. */
int cu_graph_run(cu_gcache *gc, cudaStream_t cs, const cu_gitem *items, int n, const void *extra, size_t extra_len,
                 cu_gissue_fn issue, void *arg, tnd_backend_counters *cnt, char *why, size_t why_len);

#endif
