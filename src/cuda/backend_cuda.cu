/* The CUDA implementation of backend.h.
 *
 * Budget: every device allocation made through the backend (buffers, each
 * stream's scratch, each stream's cuBLAS workspace) is added to a running
 * total under a mutex and refused beyond the budget, so the budget holds from
 * the first allocation on. Sizes are counted as the driver hands them out
 * (large allocations in 2 MiB pages), so the count is never below what the
 * device really gives away.
 *
 * Each stream owns its scratch and its cuBLAS handle (a handle is bound to
 * one stream at a time and its workspace must not be shared by concurrent
 * GEMMs), so ops on different streams never touch each other's memory.
 *
 * The state shared with pinned.cu (pinned host memory) is in
 * backend_cuda.cuh.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "cuda/backend_cuda.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/graph.h"
extern "C" {
#include "util.h"
}

#define CU_DEFAULT_RESERVE (512ull << 20)
#define CU_BLAS_WORKSPACE (32ull << 20)
#define CU_MATVEC_MAX_TOK 8
/* Expert matmuls of up to TND_MMID_PAIRS_MAX_TOK tokens run the matvec
 * kernel over (token, slot) pairs, one launch for all of them: a batched
 * decode round of 16-64 sequences touches most experts with a token or two
 * each, where the grouped path's dequantize + GEMM launches per used expert
 * (hundreds a layer) cost more than the pairs' reads. */
#define CU_MATVEC_ID_MAX_TOK TND_MMID_PAIRS_MAX_TOK
#define CU_GRAPH_MIN_ITEMS 4 /* fewer collected items launch op by op */
#define CU_GRAPH_CHUNK 96     /* collected items launched as one graph at most */

#define CU_STAGES 4
struct tnd_stream {
    cudaStream_t s;
    void *scratch;
    size_t scratch_size;
    cublasHandle_t blas;
    void *blas_ws;
    uint64_t blas_own; /* device memory the cuBLAS handle took for itself, charged to the budget */
    /* Pinned, mapped staging for the grouped expert matmul's pair lists: a
     * pageable upload would queue on the copy engine behind the weight
     * copies of the transfer stream (milliseconds during prefill); an SM
     * copy out of mapped memory does not. A ring, each piece reused once the
     * kernels that read it are done (its event). */
    int32_t *stage_h[CU_STAGES], *stage_d[CU_STAGES];
    cudaEvent_t stage_ev[CU_STAGES];
    size_t stage_cap; /* int32s per piece */
    int stage_next;
    /* graph_defer (backend.h, graph.h): while defer is on, work is
     * collected in items and launched at a flush, as a graph unless
     * graphs_off (a capture failed here once: plain launches since). One
     * thread drives a collecting stream. */
    bool defer, graphs_off;
    cu_gitem *items;
    int n_items, cap_items;
    cu_gcache *gc;
};
struct tnd_event {
    cudaEvent_t e;
    tnd_stream *pend; /* a collecting stream whose items record e, not yet launched */
};


/* graph_defer: launches s's collected work (defined with the ops) */
static tnd_status flush(tnd_backend *b, tnd_stream *s);


static uint64_t counted_size(size_t n) {
    /* the driver maps large allocations in 2 MiB pages */
    if (n >= (1u << 20)) return ((uint64_t)n + (2u << 20) - 1) & ~((uint64_t)(2u << 20) - 1);
    return ((uint64_t)n + 511) & ~(uint64_t)511;
}


/* ---- device memory -------------------------------------------------------- */

static tnd_status cu_alloc_raw(cu_ctx *c, size_t size, void **out, const char *what) {
    if (size == 0) size = 1;
    /* backend.h: buffers are readable up to the next 16-byte boundary. The
     * decoders read 2-byte-aligned blocks with aligned 4- and 16-byte loads,
     * which can reach past the last row's end but never past that boundary. */
    size = (size + 15) & ~(size_t)15;
    uint64_t cnt = counted_size(size);
    pthread_mutex_lock(&c->mu);
    if (c->used + cnt > c->budget) {
        uint64_t used = c->used, budget = c->budget;
        pthread_mutex_unlock(&c->mu);
        return tnd_fail(TND_ERR_NOMEM,
                        "cuda: %s of %.1f MiB refused: the VRAM budget is %.1f MiB and %.1f MiB are in use",
                        what, cnt / 1048576.0, budget / 1048576.0, used / 1048576.0);
    }
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void *p = realloc(c->allocs, cap * sizeof *c->allocs);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
        }
        c->allocs = (struct cu_alloc *)p;
        c->cap_allocs = cap;
    }
    c->used += cnt; /* reserve before the (slow) cudaMalloc, outside the lock */
    pthread_mutex_unlock(&c->mu);
    void *p = NULL;
    set_device(c);
    cudaError_t e = cudaMalloc(&p, size);
    pthread_mutex_lock(&c->mu);
    if (e != cudaSuccess) {
        c->used -= cnt;
        pthread_mutex_unlock(&c->mu);
        cudaGetLastError();
        return tnd_fail(TND_ERR_NOMEM, "cuda: %s of %.1f MiB failed on the device: %s", what, size / 1048576.0,
                        cudaGetErrorString(e));
    }
    if (c->n_allocs == c->cap_allocs) { /* another thread filled the slot we checked */
        size_t cap = 2 * c->cap_allocs;
        void *q = realloc(c->allocs, cap * sizeof *c->allocs);
        if (!q) {
            c->used -= cnt;
            pthread_mutex_unlock(&c->mu);
            cudaFree(p);
            return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
        }
        c->allocs = (struct cu_alloc *)q;
        c->cap_allocs = cap;
    }
    c->allocs[c->n_allocs].ptr = p;
    c->allocs[c->n_allocs].size = size;
    c->allocs[c->n_allocs].counted = cnt;
    c->n_allocs++;
    if (c->used > c->peak) c->peak = c->used;
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return TND_OK;
}

static void tiled_forget(cu_ctx *c, uintptr_t lo, uintptr_t hi);

static void cu_free_raw(cu_ctx *c, void *ptr) {
    if (!ptr) return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_allocs; i++) {
        if (c->allocs[i].ptr == ptr) {
            /* a later buffer at the same address holds plain weights */
            tiled_forget(c, (uintptr_t)ptr, (uintptr_t)ptr + c->allocs[i].size);
            c->used -= c->allocs[i].counted;
            c->allocs[i] = c->allocs[--c->n_allocs];
            pthread_mutex_unlock(&c->mu);
            set_device(c);
            cudaFree(ptr); /* waits for the device's queued work */
            return;
        }
    }
    pthread_mutex_unlock(&c->mu);
    TND_WARN("cuda: buf_free of a pointer this backend did not allocate (%p)", ptr);
}

static tnd_status cu_buf_alloc(tnd_backend *b, size_t size, void **out) {
    return cu_alloc_raw(ctx_of(b), size, out, "buffer allocation");
}
static void cu_buf_free(tnd_backend *b, void *ptr) {
    cu_flush_all(b); /* collected work may read the buffer */
    cu_free_raw(ctx_of(b), ptr);
}

static void cu_mem_info(tnd_backend *b, tnd_mem_info *out) {
    cu_ctx *c = ctx_of(b);
    pthread_mutex_lock(&c->mu);
    out->budget = c->budget;
    out->used = c->used;
    out->peak = c->peak;
    pthread_mutex_unlock(&c->mu);
    size_t fr = 0, tot = 0;
    set_device(c);
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        fr = tot = 0;
    }
    out->dev_free = fr;
    out->dev_total = tot;
    memcpy(out->dev_name, c->name, sizeof out->dev_name);
}

/* ---- streams and events ------------------------------------------------------ */

static tnd_status cu_stream_new(tnd_backend *b, tnd_stream **out) {
    cu_ctx *c = ctx_of(b);
    tnd_stream *s = (tnd_stream *)calloc(1, sizeof *s);
    if (!s) return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
    set_device(c);
    cudaError_t e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(s);
        return cu_err(e, "cudaStreamCreate");
    }
    *out = s;
    return TND_OK;
}

static void cu_stream_free(tnd_backend *b, tnd_stream *s) {
    if (!s) return;
    cu_ctx *c = ctx_of(b);
    flush(b, s);
    for (int i = 0; i < 8; i++)
        if (c->deferring[i] == s) c->deferring[i] = NULL;
    free(s->items);
    set_device(c);
    cudaStreamSynchronize(s->s);
    cu_gcache_free(s->gc);
    if (s->blas) cublasDestroy(s->blas);
    pthread_mutex_lock(&c->mu);
    c->used -= s->blas_own;
    pthread_mutex_unlock(&c->mu);
    cu_free_raw(c, s->blas_ws);
    cu_free_raw(c, s->scratch);
    for (int i = 0; i < CU_STAGES; i++) {
        if (s->stage_h[i]) cudaFreeHost(s->stage_h[i]);
        if (s->stage_ev[i]) cudaEventDestroy(s->stage_ev[i]);
    }
    cudaStreamDestroy(s->s);
    free(s);
}

/* The next staging piece of s with room for n int32s, free to overwrite
 * (*idx: record stage_ev[*idx] on s after the work that reads it). */
static tnd_status stage_take(tnd_stream *s, size_t n, int32_t **h, int32_t **d, int *idx) {
    if (n > s->stage_cap) {
        cudaError_t e = cudaStreamSynchronize(s->s); /* queued kernels may read the old pieces */
        for (int i = 0; e == cudaSuccess && i < CU_STAGES; i++) {
            if (s->stage_h[i]) cudaFreeHost(s->stage_h[i]);
            s->stage_h[i] = s->stage_d[i] = NULL;
            if (!s->stage_ev[i]) e = cudaEventCreateWithFlags(&s->stage_ev[i], cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaHostAlloc((void **)&s->stage_h[i], n * sizeof(int32_t), cudaHostAllocMapped);
            if (e == cudaSuccess) e = cudaHostGetDevicePointer((void **)&s->stage_d[i], s->stage_h[i], 0);
        }
        if (e != cudaSuccess) {
            s->stage_cap = 0;
            return cu_err(e, "pinned staging for expert ids");
        }
        s->stage_cap = n;
    }
    int i = s->stage_next;
    s->stage_next = (i + 1) % CU_STAGES;
    cudaError_t e = cudaEventSynchronize(s->stage_ev[i]); /* its last reader is done */
    if (e != cudaSuccess) return cu_err(e, "waiting for a staging piece");
    *h = s->stage_h[i];
    *d = s->stage_d[i];
    *idx = i;
    return TND_OK;
}

static tnd_status cu_stream_sync(tnd_backend *b, tnd_stream *s) {
    tnd_status st = s->defer ? flush(b, s) : TND_OK;
    if (st) return st;
    set_device(ctx_of(b));
    cudaError_t e = cudaStreamSynchronize(s->s);
    return e == cudaSuccess ? TND_OK : cu_err(e, "work on the stream failed");
}

static tnd_status cu_event_new(tnd_backend *b, tnd_event **out) {
    set_device(ctx_of(b));
    tnd_event *ev = (tnd_event *)calloc(1, sizeof *ev);
    if (!ev) return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
    cudaError_t e = cudaEventCreate(&ev->e);
    if (e != cudaSuccess) {
        free(ev);
        return cu_err(e, "cudaEventCreate");
    }
    *out = ev;
    return TND_OK;
}
static void cu_event_free(tnd_backend *b, tnd_event *ev) {
    if (!ev) return;
    if (ev->pend) flush(b, ev->pend);
    cudaEventDestroy(ev->e);
    free(ev);
}
/* Appends an item to s's collected work. A long run is launched in pieces
 * of CU_GRAPH_CHUNK items, so the GPU starts on the first layers while the
 * host still collects the rest (one graph for the whole of a host-bound
 * step would put all of the GPU's time after all of the host's). The
 * pieces fall at the same items every step, so each keeps its graph. */
static tnd_status collect(tnd_backend *b, tnd_stream *s, const cu_gitem *it) {
    if (s->n_items >= CU_GRAPH_CHUNK) {
        tnd_status st = flush(b, s);
        if (st) return st;
    }
    if (s->n_items == s->cap_items) {
        int cap = s->cap_items ? 2 * s->cap_items : 256;
        cu_gitem *p = (cu_gitem *)realloc(s->items, sizeof *p * (size_t)cap);
        if (!p) return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
        s->items = p;
        s->cap_items = cap;
    }
    s->items[s->n_items++] = *it;
    return TND_OK;
}

static tnd_status cu_event_record(tnd_backend *b, tnd_event *ev, tnd_stream *s) {
    /* an earlier record still collected elsewhere must not land after this one */
    tnd_status st = ev->pend && ev->pend != s ? flush(b, ev->pend) : TND_OK;
    if (st) return st;
    if (s->defer) {
        cu_gitem it;
        memset(&it, 0, sizeof it);
        it.kind = CU_GI_RECORD;
        it.ev = ev->e;
        it.tev = ev;
        if ((st = collect(b, s, &it))) return st;
        ev->pend = s;
        return TND_OK;
    }
    cudaError_t e = cudaEventRecord(ev->e, s->s);
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaEventRecord");
}
static tnd_status cu_stream_wait(tnd_backend *b, tnd_stream *s, tnd_event *ev) {
    /* the record it waits for must be launched first (another stream's
     * collected work; in s's own, stream order already holds) */
    tnd_status st = ev->pend && ev->pend != s ? flush(b, ev->pend) : TND_OK;
    if (st) return st;
    if (s->defer) {
        cu_gitem it;
        memset(&it, 0, sizeof it);
        it.kind = CU_GI_WAIT;
        it.ev = ev->e;
        return collect(b, s, &it);
    }
    cudaError_t e = cudaStreamWaitEvent(s->s, ev->e, 0);
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaStreamWaitEvent");
}
static tnd_status cu_event_sync(tnd_backend *b, tnd_event *ev) {
    tnd_status st = ev->pend ? flush(b, ev->pend) : TND_OK;
    if (st) return st;
    cudaError_t e = cudaEventSynchronize(ev->e);
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaEventSynchronize");
}
static tnd_status cu_event_done(tnd_backend *b, tnd_event *ev, bool *done) {
    tnd_status st = ev->pend ? flush(b, ev->pend) : TND_OK;
    if (st) return st;
    cudaError_t e = cudaEventQuery(ev->e);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady) {
        /* not an error: leave no trace of it for a later launch check */
        if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
        return TND_OK;
    }
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaEventQuery");
}
static tnd_status cu_event_elapsed(tnd_backend *b, tnd_event *a, tnd_event *z, float *ms) {
    tnd_status st = a->pend ? flush(b, a->pend) : TND_OK;
    if (!st && z->pend) st = flush(b, z->pend);
    if (st) return st;
    cudaError_t e = cudaEventElapsedTime(ms, a->e, z->e);
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaEventElapsedTime");
}

/* ---- copies ------------------------------------------------------------------- */

static tnd_status cu_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k, tnd_stream *s, const char *what) {
    if (n == 0) return TND_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, s->s);
    return e == cudaSuccess ? TND_OK : cu_err(e, what);
}
/* A copy between the device and host memory h: one cudaMemcpyAsync may
 * not span two registrations (the runtime answers "invalid argument"), so
 * within a region pinned in pieces it goes piece by piece. */
static tnd_status cu_copy_host(cu_ctx *c, char *dst, const char *src, size_t n, cudaMemcpyKind k, tnd_stream *s,
                               const char *what) {
    const uintptr_t h = (uintptr_t)(k == cudaMemcpyHostToDevice ? src : dst);
    uintptr_t base = 0;
    size_t piece = CU_PIN_PIECE;
    if (!cu_host_piece(c, h, &base, &piece)) base = 0;
    size_t done = 0;
    while (done < n) {
        const size_t left = piece - (h + done - base) % piece;
        const size_t part = base && left < n - done ? left : n - done;
        tnd_status st = cu_copy(dst + done, src + done, part, k, s, what);
        if (st) return st;
        done += part;
    }
    return TND_OK;
}
/* The copy engine's copies are launched as they come: what s collected goes first. */
#define FLUSH_FIRST(b, s)                                            \
    do {                                                             \
        tnd_status fst_ = (s)->defer ? flush((b), (s)) : TND_OK;     \
        if (fst_) return fst_;                                       \
    } while (0)
static tnd_status cu_copy_h2d(tnd_backend *b, void *d, const void *h, size_t n, tnd_stream *s) {
    FLUSH_FIRST(b, s);
    return cu_copy_host(ctx_of(b), (char *)d, (const char *)h, n, cudaMemcpyHostToDevice, s, "copy host to device");
}
static tnd_status cu_copy_d2h(tnd_backend *b, void *h, const void *d, size_t n, tnd_stream *s) {
    FLUSH_FIRST(b, s);
    return cu_copy_host(ctx_of(b), (char *)h, (const char *)d, n, cudaMemcpyDeviceToHost, s, "copy device to host");
}
static tnd_status cu_copy_d2d(tnd_backend *b, void *d, const void *s2, size_t n, tnd_stream *s) {
    FLUSH_FIRST(b, s);
    return cu_copy(d, s2, n, cudaMemcpyDeviceToDevice, s, "copy device to device");
}
static tnd_status cu_copy_mapped(tnd_backend *b, void *d, const void *src, size_t n, tnd_stream *s) {
    if (s->defer && n) { /* an SM copy: a kernel, collected like an op */
        cu_gitem it;
        memset(&it, 0, sizeof it);
        it.kind = CU_GI_COPY;
        it.dst = d;
        it.src = src;
        it.n = n;
        return collect(b, s, &it);
    }
    b->cnt.launches++;
    int e = tnd_cu_copy_sm(d, src, n, s->s);
    return e ? cu_err((cudaError_t)e, "SM copy") : TND_OK;
}
static tnd_status cu_memset(tnd_backend *b, void *d, int v, size_t n, tnd_stream *s) {
    FLUSH_FIRST(b, s);
    cudaError_t e = cudaMemsetAsync(d, v, n, s->s);
    return e == cudaSuccess ? TND_OK : cu_err(e, "cudaMemsetAsync");
}

/* ---- ops ------------------------------------------------------------------------ */

static tnd_status ensure_scratch(cu_ctx *c, tnd_stream *s, size_t need) {
    if (s->scratch_size >= need) return TND_OK;
    set_device(c);
    cudaStreamSynchronize(s->s); /* queued ops may still use the old scratch */
    cu_free_raw(c, s->scratch);
    s->scratch = NULL;
    s->scratch_size = 0;
    size_t n = need + need / 4; /* some headroom so growing shapes don't reallocate each time */
    tnd_status st = cu_alloc_raw(c, n, &s->scratch, "op scratch");
    if (st) {
        st = cu_alloc_raw(c, need, &s->scratch, "op scratch");
        if (st) return st;
        n = need;
    }
    s->scratch_size = n;
    return TND_OK;
}

static tnd_status ensure_blas(cu_ctx *c, tnd_stream *s) {
    if (s->blas) return TND_OK;
    set_device(c);
    tnd_status st = cu_alloc_raw(c, CU_BLAS_WORKSPACE, &s->blas_ws, "cuBLAS workspace");
    if (st) return st;
    cublasHandle_t h;
    /* A handle allocates device memory of its own (~64 MiB measured on the
     * H200 with CUDA 13), outside cudaMalloc: the driver's view before and
     * after is charged to the budget, so the budget holds for everything. */
    size_t f0 = 0, f1 = 0, tot = 0;
    cudaMemGetInfo(&f0, &tot);
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        cu_free_raw(c, s->blas_ws);
        s->blas_ws = NULL;
        return tnd_fail(TND_ERR_BACKEND, "cuda: cublasCreate failed");
    }
    /* our own workspace, so cuBLAS allocates nothing outside the budget */
    if (cublasSetStream(h, s->s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, s->blas_ws, CU_BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        cu_free_raw(c, s->blas_ws);
        s->blas_ws = NULL;
        return tnd_fail(TND_ERR_BACKEND, "cuda: setting the cuBLAS stream/workspace failed");
    }
    cudaMemGetInfo(&f1, &tot);
    uint64_t own = f0 > f1 ? (uint64_t)(f0 - f1) : 0;
    pthread_mutex_lock(&c->mu);
    if (c->used + own > c->budget) {
        uint64_t used = c->used, budget = c->budget;
        pthread_mutex_unlock(&c->mu);
        cublasDestroy(h);
        cu_free_raw(c, s->blas_ws);
        s->blas_ws = NULL;
        return tnd_fail(TND_ERR_NOMEM,
                        "cuda: the cuBLAS handle's own %.1f MiB refused: the VRAM budget is %.1f MiB and %.1f MiB are "
                        "in use",
                        own / 1048576.0, budget / 1048576.0, used / 1048576.0);
    }
    c->used += own;
    if (c->used > c->peak) c->peak = c->used;
    pthread_mutex_unlock(&c->mu);
    s->blas_own = own;
    s->blas = h;
    return TND_OK;
}

static bool is_f32(const tnd_tensor *t) { return t->type == TND_TYPE_F32; }
static int64_t ne(const tnd_tensor *t, int i) { return t->ne[i] > 0 ? t->ne[i] : 1; }
static int64_t rows_of(const tnd_tensor *t) { return ne(t, 1) * ne(t, 2) * ne(t, 3); }

#define ARG_FAIL(...) return tnd_fail(TND_ERR_ARG, __VA_ARGS__)

/* Whether MATMUL_PAIR is offered to the executor (env TND_CUDA_PAIR=0: no,
 * for comparing against two launches; on by default since 75610e8). */
static bool pair_on(void) { return tnd_config_get()->cuda_pair; }

static tnd_status op_check(const tnd_op *op) {
    const tnd_tensor *a = &op->in[0], *o = &op->out[0];
    const char *nm = tnd_op_name(op->kind);
    if (!a->data || !o->data) ARG_FAIL("cuda %s: missing input or output data", nm);
    switch (op->kind) {
    case TND_OP_MATMUL:
    case TND_OP_MATMUL_ID: {
        const tnd_tensor *x = &op->in[1];
        if (!tnd_cu_type_supported(a->type))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda %s: weight type %s is not supported", nm, tnd_type_name(a->type));
        if (!is_f32(x) || !is_f32(o) || !x->data) ARG_FAIL("cuda %s: x and y must be f32", nm);
        if (tnd_cu_row_size(a->type, a->ne[0]) == 0)
            ARG_FAIL("cuda %s: n_in %lld is not a multiple of %s's block", nm, (long long)a->ne[0], tnd_type_name(a->type));
        if ((uintptr_t)a->data & 15) ARG_FAIL("cuda %s: weights must be 16-byte aligned", nm);
        if (x->ne[0] != a->ne[0]) ARG_FAIL("cuda %s: x has %lld columns, W %lld", nm, (long long)x->ne[0], (long long)a->ne[0]);
        if (op->kind == TND_OP_MATMUL) {
            if (o->ne[0] != ne(a, 1) || rows_of(o) != rows_of(x)) ARG_FAIL("cuda matmul: y shape mismatch");
        } else {
            const tnd_tensor *ids = &op->in[2];
            if (ids->type != TND_TYPE_I32 || !ids->data) ARG_FAIL("cuda matmul_id: ids must be i32");
            int64_t n_used = ne(ids, 0), n_tok = rows_of(ids);
            /* x: {n_in, n_x, n_tok}, n_x = 1 (shared) or n_used (per slot) */
            if (rows_of(x) != n_tok && rows_of(x) != n_tok * n_used)
                ARG_FAIL("cuda matmul_id: x has %lld rows, want n_tok (%lld) or n_tok*n_used", (long long)rows_of(x), (long long)n_tok);
            if (o->ne[0] != ne(a, 1) || ne(o, 1) != n_used || rows_of(o) != n_used * n_tok)
                ARG_FAIL("cuda matmul_id: y must be {n_out, n_used, n_tok}");
        }
        return TND_OK;
    }
    case TND_OP_GET_ROWS:
        if (!tnd_cu_type_supported(a->type))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda get_rows: type %s is not supported", tnd_type_name(a->type));
        if (op->in[1].type != TND_TYPE_I32 || !op->in[1].data || !is_f32(o)) ARG_FAIL("cuda get_rows: ids i32, out f32");
        if (o->ne[0] != a->ne[0] || rows_of(o) != tnd_tensor_nelem(&op->in[1])) ARG_FAIL("cuda get_rows: out shape");
        if (tnd_cu_row_size(a->type, a->ne[0]) == 0 || ((uintptr_t)a->data & 15)) ARG_FAIL("cuda get_rows: table layout");
        return TND_OK;
    case TND_OP_RMS_NORM:
        if (!is_f32(a) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("cuda rms_norm: f32 in/out of one size");
        if (op->in[1].data && (!is_f32(&op->in[1]) || tnd_tensor_nelem(&op->in[1]) != a->ne[0]))
            ARG_FAIL("cuda rms_norm: weight must be f32 of ne[0] values");
        if (op->in[2].data && (!is_f32(&op->in[2]) || !is_f32(&op->out[1]) || !op->out[1].data ||
                               tnd_tensor_nelem(&op->in[2]) != tnd_tensor_nelem(a) ||
                               tnd_tensor_nelem(&op->out[1]) != tnd_tensor_nelem(a)))
            ARG_FAIL("cuda rms_norm: a residual in[2] and the sum out[1] must be f32 like in[0]");
        if (rows_of(a) > 0x7fffffff) ARG_FAIL("cuda rms_norm: too many rows");
        return TND_OK;
    case TND_OP_ROPE:
        if (!is_f32(a) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("cuda rope: f32 in/out of one size");
        if (op->in[1].type != TND_TYPE_I32 || !op->in[1].data || tnd_tensor_nelem(&op->in[1]) != ne(a, 2) * ne(a, 3))
            ARG_FAIL("cuda rope: pos must be i32 with one entry per token");
        if (op->p.rope.n_rot < 2 || op->p.rope.n_rot > a->ne[0] || (op->p.rope.n_rot & 1)) ARG_FAIL("cuda rope: bad n_rot");
        if (op->p.rope.mode != TND_ROPE_NORMAL && op->p.rope.mode != TND_ROPE_NEOX) ARG_FAIL("cuda rope: bad mode");
        if (op->in[2].data && (!is_f32(&op->in[2]) || tnd_tensor_nelem(&op->in[2]) != a->ne[0] ||
                               rows_of(a) > 0x7fffffff))
            ARG_FAIL("cuda rope: the norm weight must be f32 of head_dim values");
        return TND_OK;
    case TND_OP_ROPE_KV: { /* as its four ops, in place, K and V rows as wide as k's heads */
        tnd_op part[4];
        tnd_op_rope_kv_split(op, part);
        for (int i = 0; i < 4; i++) {
            tnd_status st = op_check(&part[i]);
            if (st) return st;
        }
        const tnd_tensor *k = &op->in[3];
        if (op->out[0].data != a->data || op->out[1].data != k->data || k->ne[0] != a->ne[0] ||
            ne(k, 2) * ne(k, 3) != ne(a, 2) * ne(a, 3) || op->out[2].ne[0] != k->ne[0] * ne(k, 1) ||
            op->out[3].ne[0] != op->out[2].ne[0] || tnd_tensor_nelem(&op->in[5]) != tnd_tensor_nelem(k) ||
            !op->in[2].data != !op->in[4].data)
            ARG_FAIL("cuda rope_kv: q and k rotated in place, K/V rows of n_head_kv * head_dim");
        return TND_OK;
    }
    case TND_OP_MOE_SUM_NORM:
    case TND_OP_MOE_ROUTE_PAIR: { /* as their two ops */
        tnd_op part[2];
        if (op->kind == TND_OP_MOE_SUM_NORM) tnd_op_sum_norm_split(op, part);
        else tnd_op_route_pair_split(op, part);
        for (int i = 0; i < 2; i++) {
            tnd_status st = op_check(&part[i]);
            if (st) return st;
        }
        if (op->kind == TND_OP_MOE_SUM_NORM &&
            (!tnd_cu_moe_sum_norm_supported(a->ne[0], (int)ne(&op->in[2], 1)) || rows_of(&op->in[3]) != rows_of(a)))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda moe_sum_norm: rows of %lld, %lld experts, %lld tokens",
                            (long long)a->ne[0], (long long)ne(&op->in[2], 1), (long long)rows_of(a));
        return TND_OK;
    }
    case TND_OP_ATTN: {
        const tnd_tensor *k = &op->in[1], *v = &op->in[2];
        int hd = op->p.attn.head_dim, nh = op->p.attn.n_head, nkv = op->p.attn.n_head_kv;
        if (!is_f32(a) || !is_f32(o) || k->type != TND_TYPE_F16 || v->type != TND_TYPE_F16 || !k->data || !v->data)
            ARG_FAIL("cuda attn: q/out f32, K/V f16");
        if (hd < 1 || hd > 256 || nh < 1 || nkv < 1 || nh % nkv || nh / nkv > 16)
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda attn: head_dim %d, %d heads, %d kv heads not supported", hd, nh, nkv);
        if (a->ne[0] != hd || a->ne[1] != nh || tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("cuda attn: q shape");
        if (k->ne[0] != (int64_t)nkv * hd || v->ne[0] != k->ne[0]) ARG_FAIL("cuda attn: cache row must be n_head_kv*head_dim");
        return tnd_op_check_positions(op, "cuda");
    }
    case TND_OP_SOFTMAX:
    case TND_OP_SCALE:
        if (!is_f32(a) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("cuda %s: f32 in/out of one size", nm);
        return TND_OK;
    case TND_OP_ADD:
        if (!is_f32(a) || !is_f32(&op->in[1]) || !is_f32(o) || !op->in[1].data || tnd_tensor_nelem(a) != tnd_tensor_nelem(o) ||
            (tnd_tensor_nelem(&op->in[1]) != tnd_tensor_nelem(o) && tnd_tensor_nelem(&op->in[1]) != a->ne[0]))
            ARG_FAIL("cuda add: f32; in[1] like in[0] or one row of ne[0]");
        return TND_OK;
    case TND_OP_MOE_SUM: {
        const tnd_tensor *w = &op->in[1];
        if (!is_f32(a) || !is_f32(w) || !is_f32(o) || !w->data) ARG_FAIL("cuda moe_sum: f32 tensors");
        if (w->ne[0] != ne(a, 1) || rows_of(w) != ne(a, 2) * ne(a, 3) || o->ne[0] != a->ne[0] ||
            tnd_tensor_nelem(o) != a->ne[0] * rows_of(w))
            ARG_FAIL("cuda moe_sum: y {n, n_used, n_tok}, w {n_used, n_tok}, out {n, n_tok}");
        return TND_OK;
    }
    case TND_OP_SILU_MUL:
    case TND_OP_GELU_MUL:
        if (!is_f32(a) || !is_f32(&op->in[1]) || !is_f32(o) || !op->in[1].data ||
            tnd_tensor_nelem(a) != tnd_tensor_nelem(o) || tnd_tensor_nelem(&op->in[1]) != tnd_tensor_nelem(o))
            ARG_FAIL("cuda %s: three f32 tensors of one size", nm);
        return TND_OK;
    case TND_OP_CPY:
        if ((a->type != TND_TYPE_F32 && a->type != TND_TYPE_F16) || (o->type != TND_TYPE_F32 && o->type != TND_TYPE_F16))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda cpy: %s -> %s", tnd_type_name(a->type), tnd_type_name(o->type));
        if (op->in[1].data) return tnd_op_check_positions(op, "cuda"); /* rows by position */
        if (tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("cuda cpy: element counts differ");
        return TND_OK;
    case TND_OP_MOE_ROUTE: {
        const tnd_tensor *ids = &op->out[1];
        int nu = op->p.route.n_used;
        if (!is_f32(a) || !is_f32(o) || ids->type != TND_TYPE_I32 || !ids->data) ARG_FAIL("cuda moe_route: types");
        if (a->ne[0] > 512 || nu < 1 || nu > 32 || nu > a->ne[0])
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda moe_route: %lld experts, %d used", (long long)a->ne[0], nu);
        if (o->ne[0] != nu || ids->ne[0] != nu || rows_of(o) != rows_of(a) || rows_of(ids) != rows_of(a))
            ARG_FAIL("cuda moe_route: outputs must be {n_used, n_tok}");
        return TND_OK;
    }
    case TND_OP_MATMUL_PAIR: {
        /* offered for what runs as one launch once re-laid: two Q4_K
         * matrices, one or two tokens, the even share's modes (a W left as
         * uploaded, or a launch that refuses, runs as two MATMULs). The
         * weights' alignment is not asked here: the executor asks with the
         * host copies' addresses, and cu_op_run falls back where it lacks. */
        const tnd_tensor *x = &op->in[1], *w2 = &op->in[2], *o2 = &op->out[1];
        if (!pair_on()) return tnd_fail(TND_ERR_UNSUPPORTED, "cuda matmul_pair: off (TND_CUDA_PAIR=0)");
        /* or two f32 matrices of one shape for one token: a MoE layer's
         * router and the next layer's (tnd_cu_matvec_pair) */
        const bool f32 = a->type == TND_TYPE_F32 && w2->type == TND_TYPE_F32;
        const int mode = tnd_cu_matvec_q4kt_mode();
        if (!f32 && mode != TND_CU_Q4KT_AUTO && mode != TND_CU_Q4KT_I8B)
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda matmul_pair: the decode kernel is forced (TND_CUDA_TILE_MV)");
        if (!f32 && (a->type != TND_TYPE_Q4_K || w2->type != TND_TYPE_Q4_K))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda matmul_pair: %s and %s weights (Q4_K or F32 only)",
                            tnd_type_name(a->type), tnd_type_name(w2->type));
        if (!w2->data || !o2->data || !x->data || !is_f32(x) || !is_f32(o) || !is_f32(o2))
            ARG_FAIL("cuda matmul_pair: W2, f32 x, y1 and y2 are needed");
        if (ne(a, 2) * ne(a, 3) != 1 || ne(w2, 2) * ne(w2, 3) != 1 || w2->ne[0] != a->ne[0] || x->ne[0] != a->ne[0])
            ARG_FAIL("cuda matmul_pair: W1 {n_in, n_out1}, W2 {n_in, n_out2}, x {n_in, n_tok}");
        if (o->ne[0] != ne(a, 1) || o2->ne[0] != ne(w2, 1) || rows_of(o) != rows_of(x) || rows_of(o2) != rows_of(x))
            ARG_FAIL("cuda matmul_pair: y shape mismatch");
        if (f32 && (rows_of(x) != 1 || ne(a, 1) != ne(w2, 1)))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda matmul_pair: f32 pairs of one shape, one token");
        if (!f32 && (rows_of(x) > INT_MAX ||
                     !tnd_cu_matvec_q4kt_pair_supported(a->ne[0], ne(a, 1), ne(w2, 1), (int)rows_of(x))))
            return tnd_fail(TND_ERR_UNSUPPORTED, "cuda matmul_pair: %lld x (%lld + %lld) for %lld tokens",
                            (long long)a->ne[0], (long long)ne(a, 1), (long long)ne(w2, 1), (long long)rows_of(x));
        return TND_OK;
    }
    default:
        return tnd_fail(TND_ERR_UNSUPPORTED, "cuda: op %s not implemented", nm);
    }
}

/* ---- re-laid weights (weight_prepare) ---------------------------------------- */

/* Index of the re-laid range that overlaps [lo, hi), or -1 (mu held). The
 * ranges are disjoint and sorted: only the last one starting below hi can
 * overlap. */
static long tiled_find(const cu_ctx *c, uintptr_t lo, uintptr_t hi) {
    size_t a = 0, z = c->n_tiled; /* first range with base >= hi */
    while (a < z) {
        size_t m = (a + z) / 2;
        if (c->tiled[m].base < hi) a = m + 1;
        else z = m;
    }
    if (a == 0) return -1;
    const struct cu_tiled *t = &c->tiled[a - 1];
    return t->base + t->size > lo ? (long)(a - 1) : -1;
}

/* Drops the ranges inside [lo, hi) (mu held). */
static void tiled_forget(cu_ctx *c, uintptr_t lo, uintptr_t hi) {
    size_t k = 0;
    for (size_t i = 0; i < c->n_tiled; i++)
        if (c->tiled[i].base < lo || c->tiled[i].base >= hi) c->tiled[k++] = c->tiled[i];
    c->n_tiled = k;
}

/* Whether a tensor's bytes [data, data + nbytes) touch a re-laid range. */
static void tensor_span(const tnd_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    size_t n = tnd_tensor_nbytes(t);
    *lo = (uintptr_t)t->data;
    *hi = *lo + (n ? n : 1);
}

/* The ops' view of re-laid weights: a MATMUL whose W (a MATMUL_PAIR whose
 * W1 or W2) is exactly a re-laid tensor reads it through the tiled kernels
 * (bit k of *w_tiled: in[k] is one); any other op, or a matmul over part of
 * one, touching a re-laid range is refused. */
static tnd_status tiled_check(cu_ctx *c, const tnd_op *op, int *w_tiled) {
    *w_tiled = 0;
    pthread_mutex_lock(&c->mu);
    if (c->n_tiled == 0) {
        pthread_mutex_unlock(&c->mu);
        return TND_OK;
    }
    const char *nm = tnd_op_name(op->kind);
    for (int k = 0; k < TND_OP_MAX_IN + TND_OP_MAX_OUT; k++) {
        const tnd_tensor *t = k < TND_OP_MAX_IN ? &op->in[k] : &op->out[k - TND_OP_MAX_IN];
        if (!t->data) continue;
        uintptr_t lo, hi;
        tensor_span(t, &lo, &hi);
        long i = tiled_find(c, lo, hi);
        if (i < 0) continue;
        const struct cu_tiled r = c->tiled[i];
        const bool weight = (op->kind == TND_OP_MATMUL && k == 0) || (op->kind == TND_OP_MATMUL_PAIR && (k == 0 || k == 2));
        if (weight && lo == r.base && t->type == r.type && t->ne[0] == r.n_in && ne(t, 1) == r.n_out &&
            ne(t, 2) == 1 && ne(t, 3) == 1) {
            *w_tiled |= 1 << k;
            continue;
        }
        pthread_mutex_unlock(&c->mu);
        return tnd_fail(TND_ERR_UNSUPPORTED,
                        "cuda %s: %s %d (%p, %zu bytes) lies in a %s weight re-laid in place at upload "
                        "(%lld x %lld at %p); only a matmul over that whole tensor can read it (TND_CUDA_REPACK=0 "
                        "keeps weights as uploaded)",
                        nm, k < TND_OP_MAX_IN ? "input" : "output", k < TND_OP_MAX_IN ? k : k - TND_OP_MAX_IN,
                        t->data, (size_t)(hi - lo), tnd_type_name((tnd_type)r.type), (long long)r.n_out,
                        (long long)r.n_in, (void *)r.base);
    }
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static bool repack_enabled(void) { return tnd_config_get()->cuda_repack; }

static tnd_status cu_weight_prepare(tnd_backend *b, const tnd_tensor *w, tnd_stream *s) {
    cu_ctx *c = ctx_of(b);
    FLUSH_FIRST(b, s);
    const bool q6 = w && w->type == TND_TYPE_Q6_K;
    if (!w || !w->data || !repack_enabled() || (w->type != TND_TYPE_Q4_K && !q6) || ne(w, 2) != 1 || ne(w, 3) != 1)
        return TND_OK;
    const int64_t n_in = w->ne[0], n_out = ne(w, 1);
    set_device(c);
    if (((uintptr_t)w->data & 15) || !(q6 ? tnd_cu_q6kt_supported(n_in, n_out) : tnd_cu_q4kt_supported(n_in, n_out)))
        return TND_OK; /* stays as uploaded */
    const uintptr_t lo = (uintptr_t)w->data;
    const size_t size = tnd_cu_row_size(w->type, n_in) * (size_t)n_out;
    pthread_mutex_lock(&c->mu);
    long i = tiled_find(c, lo, lo + size);
    if (i >= 0) {
        const struct cu_tiled r = c->tiled[i];
        pthread_mutex_unlock(&c->mu);
        if (r.base == lo && r.size == size && r.n_in == n_in) return TND_OK; /* already re-laid */
        return tnd_fail(TND_ERR_ARG, "cuda weight_prepare: %p (%zu bytes) overlaps a re-laid weight at %p", w->data,
                        size, (void *)r.base);
    }
    if (c->n_tiled == c->cap_tiled) {
        size_t cap = c->cap_tiled ? 2 * c->cap_tiled : 64;
        void *p = realloc(c->tiled, cap * sizeof *c->tiled);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
        }
        c->tiled = (struct cu_tiled *)p;
        c->cap_tiled = cap;
    }
    /* queued before the range is recorded, under the lock: an op that sees
     * the range is queued after the repack on s's order */
    int e = q6 ? tnd_cu_q6kt_repack(w->data, n_in, n_out, s->s) : tnd_cu_q4kt_repack(w->data, n_in, n_out, s->s);
    if (e) {
        pthread_mutex_unlock(&c->mu);
        if (e == cudaErrorNotSupported) return TND_OK; /* refused before launching: stays as uploaded */
        return cu_err((cudaError_t)e, q6 ? "re-laying a Q6_K weight" : "re-laying a Q4_K weight");
    }
    size_t at = c->n_tiled;
    while (at > 0 && c->tiled[at - 1].base > lo) {
        c->tiled[at] = c->tiled[at - 1];
        at--;
    }
    c->tiled[at] = {lo, size, n_in, n_out, (int)w->type};
    c->n_tiled++;
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status cu_op_supported(tnd_backend *b, const tnd_op *op) {
    set_device(ctx_of(b)); /* op_check reads the device's limits (shared memory) */
    tnd_status st = op_check(op);
    int tiled;
    return st ? st : tiled_check(ctx_of(b), op, &tiled);
}

/* Validates op; *w_tiled: bit k, in[k] is a re-laid weight. */
static tnd_status op_validate(tnd_backend *b, const tnd_op *op, int *w_tiled) {
    cu_ctx *c = ctx_of(b);
    *w_tiled = 0;
    set_device(c); /* before op_check, which reads the device's limits */
    tnd_status st = op_check(op);
    return st ? st : tiled_check(c, op, w_tiled);
}

static tnd_status op_launch(tnd_backend *b, const tnd_op *op, tnd_stream *s, int w_tiled);

/* Validates and launches op on s now. */
static tnd_status op_exec(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    int w_tiled;
    tnd_status st = op_validate(b, op, &w_tiled);
    return st ? st : op_launch(b, op, s, w_tiled);
}

/* Launches a validated op on s. Inside a capture it must not wait for the
 * host or allocate: graph_capturable ops have their scratch reserved when
 * collected, so ensure_scratch finds it there. */
static tnd_status op_launch(tnd_backend *b, const tnd_op *op, tnd_stream *s, int w_tiled) {
    cu_ctx *c = ctx_of(b);
    tnd_status st;
    const tnd_tensor *a = &op->in[0], *o = &op->out[0];
    cudaStream_t cs = s->s;
    int e = 0;
    switch (op->kind) {
    case TND_OP_MATMUL: {
        int64_t n_in = a->ne[0], n_out = ne(a, 1), n_tok = rows_of(&op->in[1]);
        const float *x = (const float *)op->in[1].data;
        if (n_tok <= CU_MATVEC_MAX_TOK) {
            /* a re-laid W: only its layout's tiled kernel reads it, whatever TND_CUDA_MV says */
            e = !w_tiled ? tnd_cu_matvec(a->type, a->data, n_in, n_out, x, (int)n_tok, (float *)o->data, cs)
                : a->type == TND_TYPE_Q6_K
                    ? tnd_cu_matvec_q6kt(a->data, n_in, n_out, x, (int)n_tok, (float *)o->data, 0, 0, 0, cs)
                    : tnd_cu_matvec_q4kt(a->data, n_in, n_out, x, (int)n_tok, (float *)o->data, 0, 0, 0, -1, cs);
        } else {
            size_t need = tnd_cu_matmul_scratch(n_in, n_out, n_tok, 0);
            if ((st = ensure_scratch(c, s, need)) || (st = ensure_blas(c, s))) return st;
            e = !w_tiled ? tnd_cu_matmul(s->blas, a->type, a->data, n_in, n_out, x, n_tok, (float *)o->data,
                                         s->scratch, s->scratch_size, 0, cs)
                : a->type == TND_TYPE_Q6_K ? tnd_cu_matmul_q6kt(s->blas, a->data, n_in, n_out, x, n_tok, (float *)o->data,
                                                                s->scratch, s->scratch_size, 0, cs)
                                           : tnd_cu_matmul_q4kt(s->blas, a->data, n_in, n_out, x, n_tok, (float *)o->data,
                                                                s->scratch, s->scratch_size, 0, cs);
        }
        break;
    }
    case TND_OP_MATMUL_PAIR: {
        const tnd_tensor *w2 = &op->in[2], *o2 = &op->out[1];
        if (w_tiled == 5) {
            e = tnd_cu_matvec_q4kt_pair(a->data, w2->data, a->ne[0], ne(a, 1), ne(w2, 1), (const float *)op->in[1].data,
                                        (int)rows_of(&op->in[1]), (float *)o->data, (float *)o2->data, 0, 0, 0, -1, cs);
            if (e != cudaErrorNotSupported) break;
            cudaGetLastError();
        } else if (a->type == TND_TYPE_F32 && w2->type == TND_TYPE_F32 && rows_of(&op->in[1]) == 1 &&
                   ne(a, 1) == ne(w2, 1)) {
            e = tnd_cu_matvec_pair(a->type, a->data, w2->data, a->ne[0], ne(a, 1), (const float *)op->in[1].data,
                                   (float *)o->data, (float *)o2->data, cs);
            if (e != cudaErrorNotSupported) break;
            cudaGetLastError();
        }
        /* a W left as uploaded (TND_CUDA_REPACK=0, or not aligned for the
         * repack), or a pair the kernel refuses: the two matvecs */
        tnd_op one;
        memset(&one, 0, sizeof one);
        one.kind = TND_OP_MATMUL;
        one.in[0] = *a, one.in[1] = op->in[1], one.out[0] = *o;
        if ((st = op_exec(b, &one, s))) return st;
        one.in[0] = *w2, one.out[0] = *o2;
        return op_exec(b, &one, s);
    }
    case TND_OP_MATMUL_ID: {
        int64_t n_in = a->ne[0], n_out = ne(a, 1), n_exp = ne(a, 2), n_tok = rows_of(&op->in[2]);
        int n_used = (int)ne(&op->in[2], 0);
        bool per_slot = n_used > 1 && rows_of(&op->in[1]) == n_tok * n_used;
        const float *x = (const float *)op->in[1].data;
        const int32_t *ids_dev = (const int32_t *)op->in[2].data;
        /* skipping ids (split layers, backend.h): the decode kernels give NaN
         * rows for ids they do not know, so they compute into a temporary
         * after their own scratch and only the kept rows are copied to y;
         * the grouped path writes only the kept rows itself */
        size_t pairs = (size_t)n_tok * (size_t)n_used;
        bool grouped = n_tok > CU_MATVEC_ID_MAX_TOK;
        size_t tmp = op->p.mmid.skip && !grouped ? (pairs * (size_t)n_out * 4 + 255) & ~(size_t)255 : 0;
        float *y = (float *)o->data;
        if (!grouped) {
            if (tmp && (st = ensure_scratch(c, s, tmp))) return st;
            if (tmp) y = (float *)s->scratch;
            e = tnd_cu_matvec_id(a->type, a->data, n_in, n_out, n_exp, x, per_slot, n_tok, ids_dev, n_used, y, cs);
        } else {
            /* grouping needs the routing on the host: the executor hands it
             * over when it has it (split and promoted layers), else it is
             * read back here, which waits for the queued work */
            const int32_t *ids = op->p.mmid.ids_host;
            int32_t *own = NULL;
            if (!ids) {
                if (!(own = (int32_t *)malloc(pairs * sizeof(int32_t))))
                    return tnd_fail(TND_ERR_NOMEM, "cuda matmul_id: out of host memory");
                cudaError_t ce = cudaMemcpyAsync(own, ids_dev, pairs * 4, cudaMemcpyDeviceToHost, cs);
                b->cnt.host_syncs++;
                if (ce == cudaSuccess) ce = cudaStreamSynchronize(cs);
                if (ce != cudaSuccess) {
                    free(own);
                    return cu_err(ce, "matmul_id: reading the routing");
                }
                ids = own;
            }
            const int64_t run = tnd_mmid_run_experts(n_in, n_out, n_exp, (int64_t)pairs);
            size_t base = tnd_cu_matmul_id_scratch(n_in, n_out, n_exp, n_tok, n_used, run);
            int32_t *sh = NULL, *sd = NULL;
            int si = 0;
            if ((st = ensure_scratch(c, s, base)) || (st = ensure_blas(c, s)) ||
                (st = stage_take(s, tnd_cu_matmul_id_stage_words(n_exp, n_tok, n_used), &sh, &sd, &si))) {
                free(own);
                return st;
            }
            e = tnd_cu_matmul_id(s->blas, a->type, a->data, n_in, n_out, n_exp, x, per_slot, n_tok, ids, n_used,
                                 op->p.mmid.skip, y, s->scratch, base, run, sh, sd, cs);
            if (!e) e = (int)cudaEventRecord(s->stage_ev[si], cs);
            free(own);
        }
        if (!e && tmp) e = tnd_cu_moe_keep_rows(y, ids_dev, (int64_t)pairs, n_out, (float *)o->data, cs);
        break;
    }
    case TND_OP_GET_ROWS:
        e = tnd_cu_get_rows(a->type, a->data, a->ne[0], rows_of(a), (const int32_t *)op->in[1].data,
                            tnd_tensor_nelem(&op->in[1]), (float *)o->data, cs);
        break;
    case TND_OP_RMS_NORM:
        if (op->in[2].data) /* the fused residual add */
            e = tnd_cu_rms_norm_add((const float *)a->data, (const float *)op->in[2].data,
                                    (const float *)op->in[1].data, (float *)o->data, (float *)op->out[1].data,
                                    a->ne[0], rows_of(a), op->p.norm.eps, cs);
        else
            e = tnd_cu_rms_norm((const float *)a->data, (const float *)op->in[1].data, (float *)o->data, a->ne[0],
                                rows_of(a), op->p.norm.eps, cs);
        break;
    case TND_OP_ROPE:
        if (op->in[2].data) /* the fused per-head norm */
            e = tnd_cu_rope_norm((const float *)a->data, (float *)o->data, (const int32_t *)op->in[1].data,
                                 (const float *)op->in[2].data, op->p.rope.eps, ne(a, 2) * ne(a, 3), (int)ne(a, 1),
                                 (int)a->ne[0], op->p.rope.n_rot, op->p.rope.mode, op->p.rope.freq_base,
                                 op->p.rope.freq_scale == 0 ? 1.0f : op->p.rope.freq_scale, cs);
        else
            e = tnd_cu_rope((const float *)a->data, (float *)o->data, (const int32_t *)op->in[1].data,
                            ne(a, 2) * ne(a, 3), (int)ne(a, 1), (int)a->ne[0], op->p.rope.n_rot, op->p.rope.mode,
                            op->p.rope.freq_base, op->p.rope.freq_scale == 0 ? 1.0f : op->p.rope.freq_scale, cs);
        break;
    case TND_OP_ROPE_KV: {
        const tnd_tensor *k = &op->in[3];
        e = tnd_cu_rope_kv((float *)a->data, (float *)k->data, (const float *)op->in[5].data,
                           (const int32_t *)op->in[1].data, (const float *)op->in[2].data,
                           (const float *)op->in[4].data, op->p.rope.eps, (uint16_t *)op->out[2].data,
                           (uint16_t *)op->out[3].data, rows_of(&op->out[2]), ne(a, 2) * ne(a, 3), (int)ne(a, 1),
                           (int)ne(k, 1), (int)a->ne[0], op->p.rope.n_rot, op->p.rope.mode, op->p.rope.freq_base,
                           op->p.rope.freq_scale == 0 ? 1.0f : op->p.rope.freq_scale, cs);
        break;
    }
    case TND_OP_ATTN: {
        int64_t n_tok = ne(a, 2) * ne(a, 3);
        const int32_t *pos = (const int32_t *)op->in[3].data;
        const int64_t slot_rows = pos ? op->p.attn.slot_rows : 0;
        size_t need = tnd_cu_attn_scratch(n_tok, op->p.attn.n_head, op->p.attn.head_dim,
                                          pos ? op->p.attn.kv_cap : op->p.attn.pos0 + n_tok);
        if ((st = ensure_scratch(c, s, need))) return st;
        e = tnd_cu_attn((const float *)a->data, (const uint16_t *)op->in[1].data, (const uint16_t *)op->in[2].data,
                        (float *)o->data, n_tok, op->p.attn.n_head, op->p.attn.n_head_kv, op->p.attn.head_dim,
                        pos ? 0 : op->p.attn.pos0, pos, op->p.attn.kv_cap, slot_rows,
                        slot_rows > 0 ? rows_of(&op->in[1]) / slot_rows : 0, op->p.attn.scale, op->p.attn.softcap,
                        op->p.attn.window, s->scratch, s->scratch_size, cs);
        break;
    }
    case TND_OP_SOFTMAX:
        e = tnd_cu_softmax((const float *)a->data, (float *)o->data, a->ne[0], rows_of(a),
                           op->p.scale.s == 0 ? 1.0f : op->p.scale.s, cs);
        break;
    case TND_OP_SILU_MUL:
        e = tnd_cu_silu_mul((const float *)a->data, (const float *)op->in[1].data, (float *)o->data, tnd_tensor_nelem(o), cs);
        break;
    case TND_OP_GELU_MUL:
        e = tnd_cu_gelu_mul((const float *)a->data, (const float *)op->in[1].data, (float *)o->data, tnd_tensor_nelem(o), cs);
        break;
    case TND_OP_ADD:
        e = tnd_cu_add_bcast((const float *)a->data, (const float *)op->in[1].data, (float *)o->data, tnd_tensor_nelem(o),
                             tnd_tensor_nelem(&op->in[1]), cs);
        break;
    case TND_OP_MOE_SUM:
        e = tnd_cu_moe_sum((const float *)a->data, (const float *)op->in[1].data, (float *)o->data, a->ne[0],
                           (int)ne(a, 1), rows_of(&op->in[1]), cs);
        break;
    case TND_OP_SCALE:
        e = tnd_cu_scale((const float *)a->data, op->p.scale.s, (float *)o->data, tnd_tensor_nelem(o), cs);
        break;
    case TND_OP_CPY: {
        int64_t n = tnd_tensor_nelem(o);
        if (op->in[1].data) /* rows by position */
            e = tnd_cu_f32_to_f16_at((const float *)a->data, (uint16_t *)o->data, (const int32_t *)op->in[1].data,
                                     o->ne[0], tnd_tensor_nelem(a), rows_of(o), cs);
        else if (a->type == o->type) e = (int)cudaMemcpyAsync(o->data, a->data, (size_t)n * (a->type == TND_TYPE_F32 ? 4 : 2), cudaMemcpyDeviceToDevice, cs);
        else if (a->type == TND_TYPE_F32) e = tnd_cu_f32_to_f16((const float *)a->data, (uint16_t *)o->data, n, cs);
        else e = tnd_cu_f16_to_f32((const uint16_t *)a->data, (float *)o->data, n, cs);
        break;
    }
    case TND_OP_MOE_ROUTE:
        e = tnd_cu_moe_route((const float *)a->data, rows_of(a), (int)a->ne[0], op->p.route.n_used, op->p.route.mode,
                             op->p.route.norm, (float *)o->data, (int32_t *)op->out[1].data, cs);
        break;
    case TND_OP_MOE_ROUTE_PAIR:
        e = tnd_cu_moe_route_pair((const float *)a->data, (const float *)op->in[1].data, rows_of(a), (int)a->ne[0],
                                  op->p.route.n_used, op->p.route.mode, op->p.route.norm, (float *)o->data,
                                  (int32_t *)op->out[1].data, (float *)op->out[2].data, (int32_t *)op->out[3].data, cs);
        break;
    case TND_OP_MOE_SUM_NORM:
        e = tnd_cu_moe_sum_norm((const float *)a->data, (const float *)op->in[2].data, (const float *)op->in[3].data,
                                (const float *)op->in[1].data, (float *)o->data, (float *)op->out[1].data,
                                (float *)op->out[2].data, a->ne[0], (int)ne(&op->in[2], 1), rows_of(a),
                                op->p.norm.eps, cs);
        break;
    default:
        return tnd_fail(TND_ERR_UNSUPPORTED, "cuda: op %s not implemented", tnd_op_name(op->kind));
    }
    if (e >= 1000) return tnd_fail(TND_ERR_BACKEND, "cuda %s: cuBLAS status %d", tnd_op_name(op->kind), e - 1000);
    if (e) {
        cudaGetLastError();
        return tnd_fail(TND_ERR_BACKEND, "cuda %s: %s (%d)", tnd_op_name(op->kind), cudaGetErrorString((cudaError_t)e), e);
    }
    return TND_OK;
}

/* ---- graphs (graph_defer; graph.h) ------------------------------------------------- */

static tnd_status cu_reserve(tnd_backend *b, const tnd_op *op, tnd_stream *s);

/* Whether op can be collected for a graph: its launch waits for nothing on
 * the host and allocates nothing once its scratch is reserved. Prefill-sized
 * matmuls (cuBLAS, the grouped expert matmul's host-side grouping) are not. */
static bool graph_capturable(const tnd_op *op) {
    switch (op->kind) {
    case TND_OP_MATMUL: return rows_of(&op->in[1]) <= CU_MATVEC_MAX_TOK;
    case TND_OP_MATMUL_ID: return rows_of(&op->in[2]) <= CU_MATVEC_MAX_TOK;
    default: return true;
    }
}

static tnd_status cu_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    int w_tiled;
    tnd_status st = op_validate(b, op, &w_tiled);
    if (st) return st;
    if (s->defer) {
        if (graph_capturable(op)) {
            /* its scratch now: inside the capture it is only looked up */
            if ((st = cu_reserve(b, op, s))) return st;
            cu_gitem it;
            memset(&it, 0, sizeof it);
            it.kind = CU_GI_OP;
            it.w_tiled = w_tiled;
            /* field by field, so padding never tells two equal ops apart */
            it.op.kind = op->kind;
            for (int i = 0; i < TND_OP_MAX_IN + TND_OP_MAX_OUT; i++) {
                const tnd_tensor *t = i < TND_OP_MAX_IN ? &op->in[i] : &op->out[i - TND_OP_MAX_IN];
                tnd_tensor *u = i < TND_OP_MAX_IN ? &it.op.in[i] : &it.op.out[i - TND_OP_MAX_IN];
                u->data = t->data;
                u->type = t->type;
                memcpy(u->ne, t->ne, sizeof u->ne);
            }
            it.op.p = op->p;
            return collect(b, s, &it);
        }
        if ((st = flush(b, s))) return st;
    }
    b->cnt.launches++;
    return op_launch(b, op, s, w_tiled);
}

/* What a collected run's launches depend on beyond its items: the stream's
 * scratch and the knobs that choose kernels. */
struct graph_extra {
    void *scratch;
    size_t scratch_size;
    tnd_config cfg;
};

struct issue_arg {
    tnd_backend *b;
    tnd_stream *s;
    int n;
};

/* cu_gissue_fn: s's first n items, launched or captured in order. */
static int issue_items(void *p, bool capturing) {
    struct issue_arg *a = (struct issue_arg *)p;
    tnd_stream *s = a->s;
    for (int i = 0; i < a->n; i++) {
        const cu_gitem *it = &s->items[i];
        int e = 0;
        switch (it->kind) {
        case CU_GI_OP: {
            tnd_status st = op_launch(a->b, &it->op, s, it->w_tiled);
            if (st) return 1000 + (int)st;
            break;
        }
        case CU_GI_COPY: e = tnd_cu_copy_sm(it->dst, it->src, it->n, s->s); break;
        case CU_GI_RECORD:
            /* an external record: the host and other streams see it when the graph passes it */
            e = (int)(capturing ? cudaEventRecordWithFlags(it->ev, s->s, cudaEventRecordExternal)
                                : cudaEventRecord(it->ev, s->s));
            break;
        case CU_GI_WAIT:
            e = (int)cudaStreamWaitEvent(s->s, it->ev, capturing ? cudaEventWaitExternal : 0);
            break;
        }
        if (e) return e;
        if (!capturing && (it->kind == CU_GI_OP || it->kind == CU_GI_COPY)) a->b->cnt.launches++;
    }
    return 0;
}

static tnd_status flush(tnd_backend *b, tnd_stream *s) {
    if (!s->n_items) return TND_OK;
    cu_ctx *c = ctx_of(b);
    const int n = s->n_items;
    struct issue_arg arg = {b, s, n};
    set_device(c);
    int r = 1;
    char why[200] = "";
    /* a run of a few items gains nothing from a graph (a hybrid step's
     * short GPU segments): launched as they are */
    if (!s->graphs_off && n >= CU_GRAPH_MIN_ITEMS) {
        if (!s->gc && !(s->gc = cu_gcache_new())) snprintf(why, sizeof why, "out of host memory");
        struct graph_extra ex;
        memset(&ex, 0, sizeof ex);
        ex.scratch = s->scratch;
        ex.scratch_size = s->scratch_size;
        memcpy(&ex.cfg, tnd_config_get(), sizeof ex.cfg);
        if (s->gc) r = cu_graph_run(s->gc, s->s, s->items, n, &ex, sizeof ex, issue_items, &arg, &b->cnt, why, sizeof why);
        if (r) {
            /* nothing ran: the same work as plain launches, from now on */
            s->graphs_off = true;
            tnd_clear_error();
            if (!c->graph_warned) {
                c->graph_warned = true;
                TND_WARN("cuda: CUDA graphs are off for this stream, launching op by op (%s)", why);
            }
        }
    }
    tnd_status st = TND_OK;
    if (r && s->graphs_off) { /* launches go out as they come from now on */
        s->defer = false;
        for (int i = 0; i < 8; i++)
            if (c->deferring[i] == s) c->deferring[i] = NULL;
    }
    if (r) {
        int e = issue_items(&arg, false);
        if (e >= 1000) st = (tnd_status)(e - 1000);
        else if (e) st = cu_err((cudaError_t)e, "launching collected work");
    }
    s->n_items = 0;
    /* the records are launched: events no longer wait on this stream */
    for (int i = 0; i < n; i++)
        if (s->items[i].kind == CU_GI_RECORD && s->items[i].tev->pend == s) s->items[i].tev->pend = NULL;
    return st;
}

tnd_status cu_flush_all(tnd_backend *b) {
    cu_ctx *c = ctx_of(b);
    tnd_status st = TND_OK;
    for (int i = 0; i < 8; i++) {
        tnd_status s1 = c->deferring[i] ? flush(b, c->deferring[i]) : TND_OK;
        if (!st) st = s1;
    }
    return st;
}

static tnd_status cu_graph_defer(tnd_backend *b, tnd_stream *s, bool on) {
    cu_ctx *c = ctx_of(b);
    if (!on) {
        tnd_status st = flush(b, s);
        s->defer = false;
        for (int i = 0; i < 8; i++)
            if (c->deferring[i] == s) c->deferring[i] = NULL;
        return st;
    }
    if (s->defer || s->graphs_off) return TND_OK; /* a failed capture: plain launches, as if off */
    for (int i = 0; i < 8; i++)
        if (!c->deferring[i]) {
            c->deferring[i] = s;
            s->defer = true;
            return TND_OK;
        }
    return TND_OK; /* more collecting streams than places: this one launches as it goes */
}

static tnd_status cu_graph_flush(tnd_backend *b, tnd_stream *s) { return s->defer ? flush(b, s) : TND_OK; }

/* ---- ping ---------------------------------------------------------------------------- */

__global__ void k_ping(void) {}

/* A kernel that does nothing, and the host's wait for it: launched on an
 * idle stream it measures how soon the GPU takes our work (another
 * process's kernels time-share it). Spinning on the stream's state, not a
 * blocking sync, keeps the driver's wake-up out of the figure. */
static tnd_status cu_ping(tnd_backend *b, tnd_stream *s, double *secs) {
    tnd_status st = s->defer ? flush(b, s) : TND_OK;
    if (st) return st;
    set_device(ctx_of(b));
    double t0 = tnd_time_s();
    k_ping<<<1, 1, 0, s->s>>>();
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cu_err(e, "launching the ping kernel");
    while ((e = cudaStreamQuery(s->s)) == cudaErrorNotReady) {
    }
    *secs = tnd_time_s() - t0;
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError(); /* no trace for a later launch check */
    return e == cudaSuccess ? TND_OK : cu_err(e, "the ping kernel failed");
}

/* ---- lifetime --------------------------------------------------------------------- */

static void cu_free(tnd_backend *b) {
    cu_ctx *c = ctx_of(b);
    set_device(c);
    cudaDeviceSynchronize();
    for (size_t i = 0; i < c->n_allocs; i++) cudaFree(c->allocs[i].ptr);
    cu_host_free_all(c);
    free(c->allocs);
    free(c->tiled);
    pthread_mutex_destroy(&c->mu);
    free(c);
    free(b);
}

static tnd_status cu_reserve(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    cu_ctx *c = ctx_of(b);
    const tnd_tensor *a = &op->in[0];
    size_t need = 0;
    bool blas = false;
    if (op->kind == TND_OP_MATMUL && rows_of(&op->in[1]) > CU_MATVEC_MAX_TOK) {
        need = tnd_cu_matmul_scratch(a->ne[0], ne(a, 1), rows_of(&op->in[1]), 0);
        blas = true;
    } else if (op->kind == TND_OP_MATMUL_ID) {
        int64_t n_tok = rows_of(&op->in[2]), n_used = ne(&op->in[2], 0);
        if (n_tok > CU_MATVEC_ID_MAX_TOK) {
            need = tnd_cu_matmul_id_scratch(a->ne[0], ne(a, 1), ne(a, 2), n_tok, (int)n_used,
                                            tnd_mmid_run_experts(a->ne[0], ne(a, 1), ne(a, 2), n_tok * n_used));
            blas = true;
        }
        /* the temporary of a skipping matvec matmul_id (cu_op_run) */
        if (op->p.mmid.skip && n_tok <= CU_MATVEC_ID_MAX_TOK)
            need += ((size_t)n_tok * (size_t)n_used * (size_t)ne(a, 1) * 4 + 255) & ~(size_t)255;
    } else if (op->kind == TND_OP_ATTN) {
        int64_t n_tok = ne(a, 2) * ne(a, 3);
        need = tnd_cu_attn_scratch(n_tok, op->p.attn.n_head, op->p.attn.head_dim,
                                   op->in[3].data ? op->p.attn.kv_cap : op->p.attn.pos0 + n_tok);
    }
    set_device(c);
    tnd_status st = need ? ensure_scratch(c, s, need) : TND_OK;
    if (!st && blas) st = ensure_blas(c, s);
    return st;
}

static const tnd_backend_iface cu_iface = {
    "cuda",
    cu_free,
    cu_buf_alloc,
    cu_buf_free,
    cu_mem_info,
    cu_host_alloc,
    cu_host_free,
    cu_host_register,
    cu_host_unregister,
    cu_host_registered,
    cu_stream_new,
    cu_stream_free,
    cu_stream_sync,
    cu_event_new,
    cu_event_free,
    cu_event_record,
    cu_stream_wait,
    cu_event_sync,
    cu_event_elapsed,
    cu_copy_h2d,
    cu_copy_d2h,
    cu_copy_d2d,
    cu_copy_mapped,
    cu_memset,
    cu_op_supported,
    cu_op_run,
    cu_reserve,
    cu_weight_prepare,
    cu_graph_defer,
    cu_graph_flush,
    cu_event_done,
    cu_ping,
};

extern "C" void *tnd_cuda_stream_handle(tnd_stream *s) { return s ? (void *)s->s : NULL; }

extern "C" int tnd_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" tnd_status tnd_backend_cuda_new(const tnd_cuda_params *p, tnd_backend **out) {
    int dev = p ? p->device : 0;
    int n = tnd_cuda_device_count();
    if (n <= 0) return tnd_fail(TND_ERR_BACKEND, "cuda: no CUDA device is available");
    if (dev < 0 || dev >= n) return tnd_fail(TND_ERR_ARG, "cuda: device %d does not exist (%d found)", dev, n);
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(0); /* creates the context now, so its memory predates the budget */
    if (e != cudaSuccess) return cu_err(e, "opening the device");
    cudaSetDeviceFlags(cudaDeviceMapHost); /* harmless if the context exists: mapping is on by default with UVA */
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess) return cu_err(e, "cudaMemGetInfo");
    uint64_t budget = p ? p->vram_budget : 0;
    if (budget == 0) budget = fr > CU_DEFAULT_RESERVE ? fr - CU_DEFAULT_RESERVE : 0;
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    tnd_backend *b = (tnd_backend *)calloc(1, sizeof *b);
    if (!c || !b) {
        free(c);
        free(b);
        return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
    }
    c->device = dev;
    c->budget = budget;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        memcpy(c->name, prop.name, sizeof c->name - 1);
    } else {
        cudaGetLastError();
    }
    pthread_mutex_init(&c->mu, NULL);
    b->iface = &cu_iface;
    b->ctx = c;
    *out = b;
    return TND_OK;
}
