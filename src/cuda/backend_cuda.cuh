/* The CUDA backend's state, shared by its files (backend_cuda.cu: memory,
 * streams, copies, ops, graphs; pinned.cu: pinned host memory). Private to
 * src/cuda. */
#ifndef TND_CUDA_BACKEND_CUDA_CUH
#define TND_CUDA_BACKEND_CUDA_CUH

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "backend.h"
extern "C" {
#include "util.h"
}

#define CU_PIN_PIECE (256ull << 20) /* default piece of a region pinned in pieces */

struct cu_alloc {
    void *ptr;
    size_t size;
    uint64_t counted;
};
/* A weight re-laid by weight_prepare (a Q4_K or Q6_K tile layout): bytes
 * [base, base + size) of an n_out x n_in tensor. */
struct cu_tiled {
    uintptr_t base;
    size_t size;
    int64_t n_in, n_out;
    int type; /* Q4_K or Q6_K: which tile layout */
};
struct cu_host {
    void *host, *dev;
    size_t size;
    bool registered; /* mmap + cudaHostRegister pieces instead of cudaHostAlloc */
    size_t n_pieces, piece; /* registered: its pieces of `piece` bytes */
};

typedef struct cu_ctx {
    int device;
    char name[64]; /* the device's model name */
    uint64_t budget, used, peak;
    pthread_mutex_t mu;
    struct cu_alloc *allocs;
    size_t n_allocs, cap_allocs;
    struct cu_host *hosts;
    size_t n_hosts, cap_hosts;
    struct cu_tiled *tiled; /* sorted by base, disjoint (under mu) */
    size_t n_tiled, cap_tiled;
    tnd_stream *deferring[8]; /* streams collecting work (graph_defer), flushed before memory is freed */
    bool graph_warned;        /* the one warning about a failed capture was given */
} cu_ctx;

static inline cu_ctx *ctx_of(tnd_backend *b) { return (cu_ctx *)b->ctx; }

static inline tnd_status cu_err(cudaError_t e, const char *what) {
    cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
    return tnd_fail(TND_ERR_BACKEND, "cuda: %s: %s (%d)", what, cudaGetErrorString(e), (int)e);
}

static inline bool set_device(cu_ctx *c) { return cudaSetDevice(c->device) == cudaSuccess; }

/* Launches every stream's collected work (graph_defer): before memory the
 * work may read is freed (backend_cuda.cu). */
tnd_status cu_flush_all(tnd_backend *b);

/* pinned.cu: the backend's host_alloc, host_free, host_register and
 * host_unregister (backend.h), and at the backend's end every region still
 * pinned released. */
tnd_status cu_host_alloc(tnd_backend *b, size_t size, void **host, void **dev);
void cu_host_free(tnd_backend *b, void *host);
void cu_host_free_all(cu_ctx *c);
tnd_status cu_host_register(tnd_backend *b, void *p, size_t size);
void cu_host_unregister(tnd_backend *b, void *p);
bool cu_host_registered(tnd_backend *b, const void *p, size_t size);
/* The registration holding host address h, if any (host_alloc's pieces or
 * host_register's): its base and the size of its pieces. One copy may not
 * span two pieces (backend_cuda.cu: cu_copy_host). */
bool cu_host_piece(cu_ctx *c, uintptr_t h, uintptr_t *base, size_t *piece);

#endif
