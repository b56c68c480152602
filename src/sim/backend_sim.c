/* SimGPU: backend.h on CPU threads with CUDA's stream/event/copy semantics
 * and an optional virtual timeline (sim/sim.h says what is simulated).
 *
 * Locking: one backend mutex `mu` guards every queue, event, region, clock
 * and counter; `cv_done` is broadcast whenever any stream finishes an item
 * (stream_sync, event_sync, buf_free and workers waiting on events all wait
 * on it); each stream's `cv_work` wakes its worker. Work itself (memcpy,
 * ops) runs outside `mu`; ops additionally hold `compute_mu`, because the
 * internal CPU backend's pool and MATMUL_ID scratch serve one op at a time.
 * So a compute stream's op and a transfer stream's copy do overlap, as on a
 * GPU, but two ops never do.
 *
 * Events: record bumps the event's epoch and queues a marker; stream_wait
 * captures the epoch recorded so far (none: nothing to wait for, as in CUDA)
 * and queues a wait for it. Queued items hold a reference on their event, so
 * an event may be freed while work that mentions it is still queued.
 * An event's passed point is the highest epoch passed: exact while an event
 * is re-recorded on one stream (records then pass in order); re-recording it
 * on another stream before the first record has passed lets a waiter on the
 * older record go once the newer one passes first.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/dequant.h"
#include "cpu/pool.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "util.h"

#define SIM_ALIGN 256

typedef enum { IT_OP, IT_COPY, IT_MEMSET, IT_RECORD, IT_WAIT } item_kind;

typedef struct item {
    struct item *next;
    item_kind kind;
    tnd_op op;            /* IT_OP */
    void *dst;            /* IT_COPY, IT_MEMSET */
    const void *src;      /* IT_COPY */
    size_t n;             /* IT_COPY, IT_MEMSET */
    int v;                /* IT_MEMSET */
    struct tnd_event *ev; /* IT_RECORD, IT_WAIT (holds a reference) */
    uint64_t epoch;       /* IT_RECORD: the epoch it completes; IT_WAIT: the one it waits for */
} item;

typedef struct sim_ctx sim_ctx;

struct tnd_event {
    struct tnd_event *prev, *next; /* the backend's list, to free leftovers */
    int refs;                      /* the handle + queued items */
    uint64_t issued;               /* records queued so far */
    uint64_t done;                 /* highest epoch whose point has been passed */
    double vclock;                 /* virtual clock at the latest record (set when queued) */
    double wall;                   /* wall time when the latest passed point was passed */
};

struct tnd_stream {
    struct tnd_stream *prev, *next;
    sim_ctx *c;
    pthread_t tid;
    pthread_cond_t cv_work;
    item *head, *tail;
    uint64_t n_pushed, n_done;
    bool stop;
    double clock;        /* virtual time the queue reaches when drained */
    tnd_status err;      /* first asynchronous failure not yet reported */
    char errmsg[512];
    uint64_t rng;        /* jitter */
    int delay_us;        /* tnd_sim_set_stream_delay */
    int index;
};

typedef struct region {
    uintptr_t lo;
    size_t size; /* requested bytes */
    bool host;   /* host_alloc (mapped pinned) rather than device memory */
    int refs;    /* host_register: the caller's memory, registered this many times (0: not registered) */
} region;

struct sim_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv_done;
    uint64_t budget, used, peak;
    region *regs; /* sorted by lo, non-overlapping */
    size_t n_regs, cap_regs;
    tnd_stream *streams;
    int n_streams_made;
    tnd_event *events;
    pthread_mutex_t compute_mu;
    tnd_pool *pool;
    tnd_backend *cpu;
    bool has_hw;
    tnd_hw hw;
    double h2d_free, d2h_free; /* virtual time each copy engine is free again */
    int jitter_us;
    uint64_t jitter_seed;
    double copy_slow; /* host<->device copies take this many times the profile's time (0: 1) */
    double gpu_slow;  /* a ping takes this many times the profile's switch latency (0: 1) */
};

static sim_ctx *C(tnd_backend *b) { return (sim_ctx *)b->ctx; }

/* ---- regions ---------------------------------------------------------------- */

/* Index of the last region with lo <= p, or -1. Under mu. */
static ptrdiff_t region_at_or_before(const sim_ctx *c, uintptr_t p) {
    ptrdiff_t lo = 0, hi = (ptrdiff_t)c->n_regs - 1, r = -1;
    while (lo <= hi) {
        ptrdiff_t m = lo + (hi - lo) / 2;
        if (c->regs[m].lo <= p) r = m, lo = m + 1;
        else hi = m - 1;
    }
    return r;
}

/* The region holding [p, p + n) whole, or NULL. Under mu. */
static const region *region_holding(const sim_ctx *c, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    ptrdiff_t i = region_at_or_before(c, a);
    if (i < 0) return NULL;
    const region *r = &c->regs[i];
    if (a - r->lo > r->size || n > r->size - (a - r->lo)) return NULL;
    return r;
}

/* True if [p, p + n) overlaps device (not host_alloc) memory. Under mu. */
static bool overlaps_device(const sim_ctx *c, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, e = a + (n ? n : 1);
    ptrdiff_t i = region_at_or_before(c, e - 1);
    for (; i >= 0; i--) {
        const region *r = &c->regs[i];
        if (r->lo + (r->size ? r->size : 1) <= a) break;
        if (!r->host) return true;
    }
    return false;
}

static tnd_status region_add(sim_ctx *c, void *p, size_t size, bool host) {
    if (c->n_regs == c->cap_regs) {
        size_t cap = c->cap_regs ? 2 * c->cap_regs : 64;
        region *q = realloc(c->regs, cap * sizeof *q);
        if (!q) return tnd_fail(TND_ERR_NOMEM, "sim: out of host memory");
        c->regs = q;
        c->cap_regs = cap;
    }
    ptrdiff_t i = region_at_or_before(c, (uintptr_t)p) + 1;
    memmove(c->regs + i + 1, c->regs + i, (c->n_regs - (size_t)i) * sizeof *c->regs);
    c->regs[i] = (region){(uintptr_t)p, size, host, 0};
    c->n_regs++;
    return TND_OK;
}

/* Removes the region starting exactly at p of the given kind (registered
 * host memory or not); false if none. */
static bool region_remove(sim_ctx *c, void *p, bool host, bool registered, size_t *size) {
    ptrdiff_t i = region_at_or_before(c, (uintptr_t)p);
    if (i < 0 || c->regs[i].lo != (uintptr_t)p || c->regs[i].host != host || (c->regs[i].refs > 0) != registered)
        return false;
    *size = c->regs[i].size;
    memmove(c->regs + i, c->regs + i + 1, (c->n_regs - (size_t)i - 1) * sizeof *c->regs);
    c->n_regs--;
    return true;
}

/* ---- queues -------------------------------------------------------------------- */

static void event_unref(sim_ctx *c, tnd_event *e) {
    if (--e->refs > 0) return;
    if (e->prev) e->prev->next = e->next;
    else c->events = e->next;
    if (e->next) e->next->prev = e->prev;
    free(e);
}

static item *item_new(item_kind k) {
    item *it = calloc(1, sizeof *it);
    if (!it) tnd_fail(TND_ERR_NOMEM, "sim: out of host memory");
    else it->kind = k;
    return it;
}

/* Appends it to s's queue. Under mu. */
static void push(tnd_stream *s, item *it) {
    it->next = NULL;
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    s->n_pushed++;
    pthread_cond_signal(&s->cv_work);
}

/* Waits until s has finished everything queued so far. Under mu. */
static void drain(sim_ctx *c, tnd_stream *s) {
    uint64_t target = s->n_pushed;
    while (s->n_done < target) pthread_cond_wait(&c->cv_done, &c->mu);
}

/* Every stream's queued work, as a device-wide sync (cudaFree does one). Under mu. */
static void drain_all(sim_ctx *c) {
    for (tnd_stream *s = c->streams; s; s = s->next) drain(c, s);
}

static uint64_t xorshift(uint64_t *st) {
    uint64_t x = *st ? *st : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *st = x;
}

static void busy_wait(double seconds) {
    double end = tnd_time_s() + seconds;
    while (tnd_time_s() < end) {
    }
}

#define SIM_COPY_LOCKED 65536 /* bytes */

static void *worker_main(void *arg) {
    tnd_stream *s = arg;
    sim_ctx *c = s->c;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv_work, &c->mu);
        item *it = s->head;
        if (!it) break; /* stopping and drained */
        s->head = it->next;
        if (!s->head) s->tail = NULL;
        int delay_us = s->delay_us + (c->jitter_us > 0 ? (int)(xorshift(&s->rng) % (uint64_t)(c->jitter_us + 1)) : 0);
        pthread_mutex_unlock(&c->mu);

        if (delay_us) busy_wait(delay_us * 1e-6);
        tnd_status st = TND_OK;
        char msg[sizeof s->errmsg];
        msg[0] = 0;
        switch (it->kind) {
        case IT_OP:
            pthread_mutex_lock(&c->compute_mu);
            st = c->cpu->iface->op_run(c->cpu, &it->op, NULL);
            if (st) snprintf(msg, sizeof msg, "%s", tnd_last_error());
            pthread_mutex_unlock(&c->compute_mu);
            break;
        case IT_COPY:
            /* small copies (positions, slot rows, ids) under mu: the timing
             * model reads ATTN's positions in device memory when the op is
             * queued, under mu (TSan saw that read race this memmove) */
            if (it->n <= SIM_COPY_LOCKED) pthread_mutex_lock(&c->mu);
            memmove(it->dst, it->src, it->n);
            if (it->n <= SIM_COPY_LOCKED) pthread_mutex_unlock(&c->mu);
            break;
        case IT_MEMSET: memset(it->dst, it->v, it->n); break;
        case IT_RECORD:
        case IT_WAIT: break;
        }

        pthread_mutex_lock(&c->mu);
        if (it->kind == IT_WAIT) {
            while (it->ev->done < it->epoch) pthread_cond_wait(&c->cv_done, &c->mu);
        } else if (it->kind == IT_RECORD) {
            if (it->epoch > it->ev->done) it->ev->done = it->epoch;
            it->ev->wall = tnd_time_s();
        }
        if (st && !s->err) {
            s->err = st;
            memcpy(s->errmsg, msg, sizeof msg);
        }
        if (it->ev) event_unref(c, it->ev);
        free(it);
        s->n_done++;
        pthread_cond_broadcast(&c->cv_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- device and host memory ------------------------------------------------------ */

/* Test hook (tnd_sim_set_taken): device bytes another process holds,
 * shared by every SimGPU as the device is. */
static _Atomic uint64_t sim_taken;

void tnd_sim_set_taken(uint64_t bytes) { sim_taken = bytes; }

/* The simulated device's memory: the profile's, else the budget (0: unlimited). */
static uint64_t dev_total(const sim_ctx *c) { return c->has_hw ? c->hw.vram : c->budget; }

static tnd_status sim_buf_alloc(tnd_backend *b, size_t size, void **out) {
    sim_ctx *c = C(b);
    /* backend.h: readable to the next 16 bytes; alignment 256 like cudaMalloc */
    size_t alloc = (size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1);
    if (alloc < size) return tnd_fail(TND_ERR_NOMEM, "sim: allocating %zu bytes: size overflows", size);
    if (alloc == 0) alloc = SIM_ALIGN;
    pthread_mutex_lock(&c->mu);
    if (c->budget && (size > c->budget || c->used > c->budget - size)) {
        uint64_t used = c->used, budget = c->budget;
        pthread_mutex_unlock(&c->mu);
        return tnd_fail(TND_ERR_NOMEM,
                        "sim: allocating %zu bytes (%.1f MiB) refused: the budget is %llu bytes (%.1f MiB) and %llu "
                        "(%.1f MiB) are in use",
                        size, size / 1048576.0, (unsigned long long)budget, budget / 1048576.0,
                        (unsigned long long)used, used / 1048576.0);
    }
    /* the device itself is full (another process's memory): as cudaMalloc's out of memory */
    uint64_t total = dev_total(c), taken = sim_taken;
    if (total && taken && (taken > total || c->used + size > total - taken)) {
        uint64_t used = c->used;
        pthread_mutex_unlock(&c->mu);
        return tnd_fail(TND_ERR_NOMEM,
                        "sim: allocating %.1f MiB failed: out of device memory (%.1f MiB in use here, %.1f MiB "
                        "taken by another process, %.1f MiB in all)",
                        size / 1048576.0, used / 1048576.0, taken / 1048576.0, total / 1048576.0);
    }
    c->used += size; /* reserved; the allocation itself happens outside the lock */
    pthread_mutex_unlock(&c->mu);
    void *p = aligned_alloc(SIM_ALIGN, alloc);
    pthread_mutex_lock(&c->mu);
    tnd_status st = p ? region_add(c, p, size, false)
                      : tnd_fail(TND_ERR_NOMEM, "sim: allocating %zu bytes failed: out of host memory", size);
    if (st) {
        c->used -= size;
        pthread_mutex_unlock(&c->mu);
        free(p);
        return st;
    }
    if (c->used > c->peak) c->peak = c->used;
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return TND_OK;
}

static void sim_buf_free(tnd_backend *b, void *ptr) {
    if (!ptr) return;
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    drain_all(c); /* as cudaFree: queued work may still use it */
    size_t size = 0;
    bool ok = region_remove(c, ptr, false, false, &size);
    if (ok) c->used -= size;
    pthread_mutex_unlock(&c->mu);
    if (ok) free(ptr);
    else TND_WARN("sim: buf_free of a pointer this backend did not allocate (%p)", ptr);
}

static void sim_mem_info(tnd_backend *b, tnd_mem_info *out) {
    sim_ctx *c = C(b);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    out->budget = c->budget;
    out->used = c->used;
    out->peak = c->peak;
    pthread_mutex_unlock(&c->mu);
    out->dev_total = dev_total(c);
    uint64_t held = out->used + sim_taken;
    out->dev_free = out->dev_total > held ? out->dev_total - held : 0;
}

static tnd_status sim_host_alloc(tnd_backend *b, size_t size, void **host, void **dev) {
    sim_ctx *c = C(b);
    size_t alloc = (size + 4095) & ~(size_t)4095;
    if (alloc < size) return tnd_fail(TND_ERR_NOMEM, "sim: pinning %zu bytes: size overflows", size);
    if (alloc == 0) alloc = 4096;
    void *p = aligned_alloc(4096, alloc);
    if (!p) return tnd_fail(TND_ERR_NOMEM, "sim: pinning %zu bytes failed: out of host memory", size);
    pthread_mutex_lock(&c->mu);
    tnd_status st = region_add(c, p, size, true);
    pthread_mutex_unlock(&c->mu);
    if (st) {
        free(p);
        return st;
    }
    *host = p;
    *dev = p;
    return TND_OK;
}

static void sim_host_free(tnd_backend *b, void *host) {
    if (!host) return;
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    drain_all(c); /* as cudaFreeHost */
    size_t size = 0;
    bool ok = region_remove(c, host, true, false, &size);
    pthread_mutex_unlock(&c->mu);
    if (ok) free(host);
    else TND_WARN("sim: host_free of a pointer this backend did not allocate (%p)", host);
}

/* The caller's memory as pinned host memory: a host region the backend
 * does not free, counted per registration. */
static tnd_status sim_host_register(tnd_backend *b, void *p, size_t size) {
    sim_ctx *c = C(b);
    if (!p || !size) return tnd_fail(TND_ERR_ARG, "sim: registering %zu bytes at %p", size, p);
    pthread_mutex_lock(&c->mu);
    ptrdiff_t i = region_at_or_before(c, (uintptr_t)p);
    tnd_status st = TND_OK;
    if (i >= 0 && c->regs[i].lo == (uintptr_t)p && c->regs[i].size == size && c->regs[i].refs > 0) c->regs[i].refs++;
    else if ((i = region_at_or_before(c, (uintptr_t)p + size - 1)) >= 0 &&
             c->regs[i].lo + (c->regs[i].size ? c->regs[i].size : 1) > (uintptr_t)p)
        st = tnd_fail(TND_ERR_ARG, "sim: registering %p (%zu bytes): it overlaps memory the backend holds", p, size);
    else if (!(st = region_add(c, p, size, true)))
        c->regs[region_at_or_before(c, (uintptr_t)p)].refs = 1;
    pthread_mutex_unlock(&c->mu);
    return st;
}

static bool sim_host_registered(tnd_backend *b, const void *p, size_t size) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    const ptrdiff_t i = region_at_or_before(c, (uintptr_t)p);
    const bool found = i >= 0 && c->regs[i].lo == (uintptr_t)p && c->regs[i].size == size && c->regs[i].refs > 0;
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void sim_host_unregister(tnd_backend *b, void *p) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    drain_all(c); /* copies may still read it */
    ptrdiff_t i = region_at_or_before(c, (uintptr_t)p);
    size_t size;
    if (i < 0 || c->regs[i].lo != (uintptr_t)p || c->regs[i].refs <= 0)
        TND_WARN("sim: host_unregister of memory this backend did not register (%p)", p);
    else if (c->regs[i].refs > 1)
        c->regs[i].refs--;
    else
        region_remove(c, p, true, true, &size);
    pthread_mutex_unlock(&c->mu);
}

/* ---- streams and events ------------------------------------------------------------- */

static uint64_t stream_seed(uint64_t seed, int index) {
    return (seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(index + 1))) | 1;
}

static tnd_status sim_stream_new(tnd_backend *b, tnd_stream **out) {
    sim_ctx *c = C(b);
    tnd_stream *s = calloc(1, sizeof *s);
    if (!s) return tnd_fail(TND_ERR_NOMEM, "sim: out of host memory");
    s->c = c;
    pthread_cond_init(&s->cv_work, NULL);
    pthread_mutex_lock(&c->mu);
    s->index = c->n_streams_made++;
    s->rng = stream_seed(c->jitter_seed, s->index);
    s->next = c->streams;
    if (c->streams) c->streams->prev = s;
    c->streams = s;
    if (pthread_create(&s->tid, NULL, worker_main, s) != 0) {
        c->streams = s->next;
        if (s->next) s->next->prev = NULL;
        pthread_mutex_unlock(&c->mu);
        pthread_cond_destroy(&s->cv_work);
        free(s);
        return tnd_fail(TND_ERR_BACKEND, "sim: cannot start a stream thread");
    }
    pthread_mutex_unlock(&c->mu);
    *out = s;
    return TND_OK;
}

static void sim_stream_free(tnd_backend *b, tnd_stream *s) {
    if (!s) return;
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    drain(c, s);
    s->stop = true;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&c->mu);
    pthread_join(s->tid, NULL);
    pthread_mutex_lock(&c->mu);
    if (s->prev) s->prev->next = s->next;
    else c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&s->cv_work);
    free(s);
}

static tnd_status sim_stream_sync(tnd_backend *b, tnd_stream *s) {
    sim_ctx *c = C(b);
    char msg[sizeof s->errmsg];
    pthread_mutex_lock(&c->mu);
    drain(c, s);
    tnd_status err = s->err;
    if (err) {
        memcpy(msg, s->errmsg, sizeof msg);
        s->err = TND_OK; /* reported once */
    }
    pthread_mutex_unlock(&c->mu);
    if (err) return tnd_fail(TND_ERR_BACKEND, "sim: queued work failed: %s", msg);
    return TND_OK;
}

static tnd_status sim_event_new(tnd_backend *b, tnd_event **out) {
    sim_ctx *c = C(b);
    tnd_event *e = calloc(1, sizeof *e);
    if (!e) return tnd_fail(TND_ERR_NOMEM, "sim: out of host memory");
    e->refs = 1;
    pthread_mutex_lock(&c->mu);
    e->next = c->events;
    if (c->events) c->events->prev = e;
    c->events = e;
    pthread_mutex_unlock(&c->mu);
    *out = e;
    return TND_OK;
}

static void sim_event_free(tnd_backend *b, tnd_event *e) {
    if (!e) return;
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    event_unref(c, e);
    pthread_mutex_unlock(&c->mu);
}

static tnd_status sim_event_record(tnd_backend *b, tnd_event *e, tnd_stream *s) {
    sim_ctx *c = C(b);
    item *it = item_new(IT_RECORD);
    if (!it) return TND_ERR_NOMEM;
    pthread_mutex_lock(&c->mu);
    it->ev = e;
    it->epoch = ++e->issued;
    e->refs++;
    e->vclock = s->clock;
    push(s, it);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status sim_stream_wait(tnd_backend *b, tnd_stream *s, tnd_event *e) {
    sim_ctx *c = C(b);
    item *it = item_new(IT_WAIT);
    if (!it) return TND_ERR_NOMEM;
    pthread_mutex_lock(&c->mu);
    if (e->issued == 0) { /* never recorded: nothing to wait for (CUDA) */
        pthread_mutex_unlock(&c->mu);
        free(it);
        return TND_OK;
    }
    if (e->vclock > s->clock) s->clock = e->vclock;
    it->ev = e;
    it->epoch = e->issued;
    e->refs++;
    push(s, it);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status sim_event_sync(tnd_backend *b, tnd_event *e) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    uint64_t target = e->issued;
    while (e->done < target) pthread_cond_wait(&c->cv_done, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status sim_event_done(tnd_backend *b, tnd_event *e, bool *done) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    *done = e->done >= e->issued;
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

/* The timing model's answer, not the wall clock's: a switch's latency
 * (what the profile's hardware model charges one), times the slowdown a
 * test set; without a model, the wall time of the stream's drain. */
static tnd_status sim_ping(tnd_backend *b, tnd_stream *s, double *secs) {
    sim_ctx *c = C(b);
    double t0 = tnd_time_s();
    tnd_status st = sim_stream_sync(b, s);
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    double slow = c->gpu_slow > 0 ? c->gpu_slow : 1;
    *secs = c->has_hw ? slow * (c->hw.pcie_lat + c->hw.launch) : tnd_time_s() - t0;
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status sim_event_elapsed(tnd_backend *b, tnd_event *start, tnd_event *end, float *ms) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    bool recorded = start->issued && end->issued;
    bool complete = start->done >= start->issued && end->done >= end->issued;
    double d = c->has_hw ? end->vclock - start->vclock : end->wall - start->wall;
    pthread_mutex_unlock(&c->mu);
    if (!recorded) return tnd_fail(TND_ERR_ARG, "sim: event_elapsed of an event never recorded");
    if (!complete) return tnd_fail(TND_ERR_BACKEND, "sim: event_elapsed of an event not completed yet");
    *ms = (float)(d * 1e3);
    return TND_OK;
}

/* ---- copies -------------------------------------------------------------------------- */

typedef enum { CP_H2D, CP_D2H, CP_D2D, CP_MAPPED } copy_kind;

static const char *copy_name(copy_kind k) {
    switch (k) {
    case CP_H2D: return "copy_h2d";
    case CP_D2H: return "copy_d2h";
    case CP_D2D: return "copy_d2d";
    default: return "copy_mapped";
    }
}

static double hbm_time(const sim_ctx *c, double bytes) { return bytes / c->hw.hbm_bw + c->hw.launch; }

static tnd_status sim_copy(sim_ctx *c, copy_kind k, void *dst, const void *src, size_t n, tnd_stream *s) {
    if (n == 0) return TND_OK;
    if (!dst || !src) return tnd_fail(TND_ERR_ARG, "sim %s: NULL pointer", copy_name(k));
    item *it = item_new(IT_COPY);
    if (!it) return TND_ERR_NOMEM;
    it->dst = dst;
    it->src = src;
    it->n = n;
    pthread_mutex_lock(&c->mu);
    const char *bad = NULL;
    const region *rd = region_holding(c, dst, n), *rs = region_holding(c, src, n);
    if (k == CP_H2D) {
        if (!rd) bad = "the destination is not inside device memory";
        else if (overlaps_device(c, src, n)) bad = "the source is device memory, not host memory";
    } else if (k == CP_D2H) {
        if (!rs) bad = "the source is not inside device memory";
        else if (overlaps_device(c, dst, n)) bad = "the destination is device memory, not host memory";
    } else {
        if (!rd) bad = "the destination is not inside device or mapped memory";
        else if (!rs) bad = "the source is not inside device or mapped memory";
    }
    if (bad) {
        pthread_mutex_unlock(&c->mu);
        free(it);
        return tnd_fail(TND_ERR_ARG, "sim %s of %zu bytes (%p -> %p): %s", copy_name(k), n, src, dst, bad);
    }
    if (c->has_hw) {
        if (k == CP_H2D || k == CP_D2H) {
            const region *host = k == CP_H2D ? rs : rd;
            double *engine = k == CP_H2D ? &c->h2d_free : &c->d2h_free;
            double start = s->clock > *engine ? s->clock : *engine;
            double slow = c->copy_slow > 0 ? c->copy_slow : 1;
            s->clock = *engine = start + slow * tnd_hw_copy_time(&c->hw, n, host && host->host);
        } else if (k == CP_D2D) {
            s->clock += hbm_time(c, 2.0 * (double)n);
        } else {
            s->clock += (double)n / c->hw.pcie_bw + c->hw.launch;
        }
    }
    push(s, it);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static tnd_status sim_copy_h2d(tnd_backend *b, void *d, const void *h, size_t n, tnd_stream *s) {
    return sim_copy(C(b), CP_H2D, d, h, n, s);
}
static tnd_status sim_copy_d2h(tnd_backend *b, void *h, const void *d, size_t n, tnd_stream *s) {
    return sim_copy(C(b), CP_D2H, h, d, n, s);
}
static tnd_status sim_copy_d2d(tnd_backend *b, void *d, const void *src, size_t n, tnd_stream *s) {
    return sim_copy(C(b), CP_D2D, d, src, n, s);
}
static tnd_status sim_copy_mapped(tnd_backend *b, void *d, const void *src, size_t n, tnd_stream *s) {
    return sim_copy(C(b), CP_MAPPED, d, src, n, s);
}

static tnd_status sim_memset(tnd_backend *b, void *dst, int v, size_t n, tnd_stream *s) {
    sim_ctx *c = C(b);
    if (n == 0) return TND_OK;
    item *it = item_new(IT_MEMSET);
    if (!it) return TND_ERR_NOMEM;
    it->dst = dst;
    it->v = v;
    it->n = n;
    pthread_mutex_lock(&c->mu);
    if (!region_holding(c, dst, n)) {
        pthread_mutex_unlock(&c->mu);
        free(it);
        return tnd_fail(TND_ERR_ARG, "sim memset of %zu bytes at %p: not inside device memory", n, dst);
    }
    if (c->has_hw) s->clock += hbm_time(c, (double)n);
    push(s, it);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

/* ---- ops ------------------------------------------------------------------------------- */

static bool is_f32(const tnd_tensor *t) { return t->type == TND_TYPE_F32; }
static int64_t ne(const tnd_tensor *t, int i) { return t->ne[i] > 0 ? t->ne[i] : 1; }
static int64_t rows_of(const tnd_tensor *t) { return ne(t, 1) * ne(t, 2) * ne(t, 3); }

/* A weight type the CPU kernels compute with, at row length n. */
static bool weight_ok(tnd_type t, int64_t n) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    return tr && tr->supported && tr->to_float && tnd_cpu_dequant_fn(t) && n > 0 && tnd_row_size(t, n) != 0;
}

#define ARG_FAIL(...) return tnd_fail(TND_ERR_ARG, __VA_ARGS__)

/* Kinds, types and shapes: what the CPU backend's code needs to be handed
 * (it validates nothing itself). Same rules as the CUDA backend's, less its
 * kernel limits (head_dim, experts). */
static tnd_status sim_op_supported(tnd_backend *b, const tnd_op *op) {
    (void)b;
    const tnd_tensor *a = &op->in[0], *o = &op->out[0];
    const char *nm = tnd_op_name(op->kind);
    for (int i = 0; i < TND_MAX_DIMS; i++)
        for (int j = 0; j < TND_OP_MAX_IN + TND_OP_MAX_OUT; j++) {
            const tnd_tensor *t = j < TND_OP_MAX_IN ? &op->in[j] : &op->out[j - TND_OP_MAX_IN];
            if (t->ne[i] < 0) ARG_FAIL("sim %s: negative dimension", nm);
        }
    switch (op->kind) {
    case TND_OP_NONE:
        return TND_OK;
    case TND_OP_MATMUL:
    case TND_OP_MATMUL_ID: {
        const tnd_tensor *x = &op->in[1];
        if (!weight_ok(a->type, a->ne[0]))
            return tnd_fail(TND_ERR_UNSUPPORTED, "sim %s: weight type %s with n_in %lld is not supported", nm,
                            tnd_type_name(a->type), (long long)a->ne[0]);
        if (!is_f32(x) || !is_f32(o)) ARG_FAIL("sim %s: x and y must be f32", nm);
        if (x->ne[0] != a->ne[0]) ARG_FAIL("sim %s: x has %lld columns, W %lld", nm, (long long)x->ne[0], (long long)a->ne[0]);
        if (op->kind == TND_OP_MATMUL) {
            if (o->ne[0] != ne(a, 1) || rows_of(o) != rows_of(x) || ne(a, 2) * ne(a, 3) != 1)
                ARG_FAIL("sim matmul: W {n_in, n_out}, x {n_in, n_tok}, y {n_out, n_tok}");
        } else {
            const tnd_tensor *ids = &op->in[2];
            if (ids->type != TND_TYPE_I32) ARG_FAIL("sim matmul_id: ids must be i32");
            int64_t n_used = ne(ids, 0), n_tok = ne(ids, 1);
            if (ne(ids, 2) * ne(ids, 3) != 1 || ne(a, 3) != 1) ARG_FAIL("sim matmul_id: ids {n_used, n_tok}, W 3-d");
            if ((ne(x, 1) != 1 && ne(x, 1) != n_used) || ne(x, 2) != n_tok || ne(x, 3) != 1)
                ARG_FAIL("sim matmul_id: x must be {n_in, 1 or n_used, n_tok}");
            if (o->ne[0] != ne(a, 1) || ne(o, 1) != n_used || ne(o, 2) != n_tok || ne(o, 3) != 1)
                ARG_FAIL("sim matmul_id: y must be {n_out, n_used, n_tok}");
        }
        return TND_OK;
    }
    case TND_OP_GET_ROWS:
        if (!weight_ok(a->type, a->ne[0]))
            return tnd_fail(TND_ERR_UNSUPPORTED, "sim get_rows: type %s is not supported", tnd_type_name(a->type));
        if (op->in[1].type != TND_TYPE_I32 || !is_f32(o)) ARG_FAIL("sim get_rows: ids i32, out f32");
        if (o->ne[0] != a->ne[0] || rows_of(o) != tnd_tensor_nelem(&op->in[1])) ARG_FAIL("sim get_rows: out shape");
        return TND_OK;
    case TND_OP_RMS_NORM:
        if (!is_f32(a) || !is_f32(o) || a->ne[0] < 1 || tnd_tensor_nelem(a) != tnd_tensor_nelem(o))
            ARG_FAIL("sim rms_norm: f32 in/out of one size");
        if (op->in[1].data && (!is_f32(&op->in[1]) || tnd_tensor_nelem(&op->in[1]) != a->ne[0]))
            ARG_FAIL("sim rms_norm: weight must be f32 of ne[0] values");
        if (op->in[2].data && (!is_f32(&op->in[2]) || !is_f32(&op->out[1]) || !op->out[1].data ||
                               tnd_tensor_nelem(&op->in[2]) != tnd_tensor_nelem(a) ||
                               tnd_tensor_nelem(&op->out[1]) != tnd_tensor_nelem(a)))
            ARG_FAIL("sim rms_norm: a residual in[2] and the sum out[1] must be f32 like in[0]");
        return TND_OK;
    case TND_OP_ROPE:
        if (!is_f32(a) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o) || ne(a, 3) != 1)
            ARG_FAIL("sim rope: f32 in/out {head_dim, n_head, n_tok} of one size");
        if (op->in[1].type != TND_TYPE_I32 || tnd_tensor_nelem(&op->in[1]) != ne(a, 2))
            ARG_FAIL("sim rope: pos must be i32 with one entry per token");
        if (op->p.rope.n_rot < 2 || op->p.rope.n_rot > a->ne[0] || (op->p.rope.n_rot & 1)) ARG_FAIL("sim rope: bad n_rot");
        if (op->p.rope.mode != TND_ROPE_NORMAL && op->p.rope.mode != TND_ROPE_NEOX) ARG_FAIL("sim rope: bad mode");
        if (op->in[2].data && (!is_f32(&op->in[2]) || tnd_tensor_nelem(&op->in[2]) != a->ne[0]))
            ARG_FAIL("sim rope: the norm weight must be f32 of head_dim values");
        return TND_OK;
    case TND_OP_ATTN: {
        const tnd_tensor *k = &op->in[1], *v = &op->in[2];
        int hd = op->p.attn.head_dim, nh = op->p.attn.n_head, nkv = op->p.attn.n_head_kv;
        if (!is_f32(a) || !is_f32(o) || k->type != TND_TYPE_F16 || v->type != TND_TYPE_F16)
            ARG_FAIL("sim attn: q/out f32, K/V f16");
        if (hd < 1 || nh < 1 || nkv < 1 || nh % nkv) ARG_FAIL("sim attn: head_dim %d, %d heads, %d kv heads", hd, nh, nkv);
        if (a->ne[0] != hd || a->ne[1] != nh || ne(a, 3) != 1 || tnd_tensor_nelem(a) != tnd_tensor_nelem(o))
            ARG_FAIL("sim attn: q must be {head_dim, n_head, n_tok}, out like q");
        if (k->ne[0] != (int64_t)nkv * hd || v->ne[0] != k->ne[0]) ARG_FAIL("sim attn: cache row must be n_head_kv*head_dim");
        return tnd_op_check_positions(op, "sim");
    }
    case TND_OP_SOFTMAX:
    case TND_OP_SCALE:
        if (!is_f32(a) || !is_f32(o) || a->ne[0] < 1 || tnd_tensor_nelem(a) != tnd_tensor_nelem(o))
            ARG_FAIL("sim %s: f32 in/out of one size", nm);
        return TND_OK;
    case TND_OP_ADD:
        if (!is_f32(a) || !is_f32(&op->in[1]) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o) ||
            (tnd_tensor_nelem(&op->in[1]) != tnd_tensor_nelem(o) && tnd_tensor_nelem(&op->in[1]) != a->ne[0]))
            ARG_FAIL("sim add: f32; in[1] like in[0] or one row of ne[0]");
        return TND_OK;
    case TND_OP_SILU_MUL:
    case TND_OP_GELU_MUL:
        if (!is_f32(a) || !is_f32(&op->in[1]) || !is_f32(o) || tnd_tensor_nelem(a) != tnd_tensor_nelem(o) ||
            tnd_tensor_nelem(&op->in[1]) != tnd_tensor_nelem(o))
            ARG_FAIL("sim %s: three f32 tensors of one size", nm);
        return TND_OK;
    case TND_OP_CPY:
        if ((a->type != TND_TYPE_F32 && a->type != TND_TYPE_F16) || (o->type != TND_TYPE_F32 && o->type != TND_TYPE_F16))
            return tnd_fail(TND_ERR_UNSUPPORTED, "sim cpy: %s -> %s", tnd_type_name(a->type), tnd_type_name(o->type));
        if (op->in[1].data) return tnd_op_check_positions(op, "sim"); /* rows by position */
        if (tnd_tensor_nelem(a) != tnd_tensor_nelem(o)) ARG_FAIL("sim cpy: element counts differ");
        return TND_OK;
    case TND_OP_MOE_ROUTE: {
        const tnd_tensor *ids = &op->out[1];
        int nu = op->p.route.n_used;
        if (!is_f32(a) || !is_f32(o) || ids->type != TND_TYPE_I32) ARG_FAIL("sim moe_route: types");
        if (op->p.route.mode != TND_ROUTE_SOFTMAX_TOPK && op->p.route.mode != TND_ROUTE_TOPK_SOFTMAX)
            ARG_FAIL("sim moe_route: bad mode");
        if (nu < 1 || nu > a->ne[0]) ARG_FAIL("sim moe_route: %d used of %lld experts", nu, (long long)a->ne[0]);
        if (o->ne[0] != nu || ids->ne[0] != nu || rows_of(o) != rows_of(a) || rows_of(ids) != rows_of(a))
            ARG_FAIL("sim moe_route: outputs must be {n_used, n_tok}");
        return TND_OK;
    }
    case TND_OP_MOE_SUM: {
        const tnd_tensor *w = &op->in[1];
        if (!is_f32(a) || !is_f32(w) || !is_f32(o)) ARG_FAIL("sim moe_sum: f32 tensors");
        if (ne(a, 3) != 1 || w->ne[0] != ne(a, 1) || rows_of(w) != ne(a, 2) || o->ne[0] != a->ne[0] ||
            tnd_tensor_nelem(o) != a->ne[0] * ne(a, 2))
            ARG_FAIL("sim moe_sum: y {n, n_used, n_tok}, w {n_used, n_tok}, out {n, n_tok}");
        return TND_OK;
    }
    case TND_OP_ROPE_KV: { /* as its four ops (backend.h), which the CPU backend runs */
        tnd_op part[4];
        tnd_op_rope_kv_split(op, part);
        for (int i = 0; i < 4; i++) {
            tnd_status st = sim_op_supported(b, &part[i]);
            if (st) return st;
        }
        if (part[1].in[0].ne[0] * part[1].in[0].ne[1] != part[3].out[0].ne[0])
            ARG_FAIL("sim rope_kv: k's heads and the cache rows differ in width");
        return TND_OK;
    }
    case TND_OP_MOE_SUM_NORM:
    case TND_OP_MOE_ROUTE_PAIR: { /* as their two ops (backend.h), which the CPU backend runs */
        tnd_op part[2];
        if (op->kind == TND_OP_MOE_SUM_NORM) tnd_op_sum_norm_split(op, part);
        else tnd_op_route_pair_split(op, part);
        for (int i = 0; i < 2; i++) {
            tnd_status st = sim_op_supported(b, &part[i]);
            if (st) return st;
        }
        return TND_OK;
    }
    case TND_OP_MOE_GLU: { /* as its three ops (backend.h), which the CPU backend runs as one */
        tnd_op part[3];
        tnd_op_moe_glu_split(op, part);
        for (int i = 0; i < 3; i++) {
            tnd_status st = sim_op_supported(b, &part[i]);
            if (st) return st;
        }
        if (memcmp(a->ne, op->in[3].ne, sizeof a->ne) != 0 || memcmp(o->ne, op->out[1].ne, sizeof o->ne) != 0)
            ARG_FAIL("sim moe_glu: the gate and up weights, and their outputs, must have one shape");
        return TND_OK;
    }
    case TND_OP_MATMUL_PAIR: /* optional (backend.h): the executor keeps the two MATMULs */
    case TND_OP_MOE_FFN:     /* ... and MOE_GLU and its down (the simulated GPU's experts run unfused) */
    case TND_OP_COUNT:
        break;
    }
    return tnd_fail(TND_ERR_UNSUPPORTED, "sim: op %s is not supported", nm);
}

/* Which tensors an op reads or writes (the rest must be absent): slot
 * j < TND_OP_MAX_IN is in[j], the others out[j - TND_OP_MAX_IN]. */
#define OUT(k) (TND_OP_MAX_IN + (k))
static bool slot_used(const tnd_op *op, int slot) {
    switch (op->kind) {
    case TND_OP_MATMUL_ID: return slot <= 2 || slot == OUT(0);
    case TND_OP_ATTN: return slot <= 3 || slot == OUT(0); /* in[3] optional: positions */
    case TND_OP_MOE_ROUTE: return slot == 0 || slot == OUT(0) || slot == OUT(1);
    case TND_OP_RMS_NORM: /* in[1] optional; in[2], out[1]: a fused add */
        return slot <= 2 || slot == OUT(0) || slot == OUT(1);
    case TND_OP_ROPE: return slot <= 2 || slot == OUT(0); /* in[2] optional: a fused norm */
    case TND_OP_ROPE_KV: return true;                     /* in[2], in[4] optional: the fused norms */
    case TND_OP_MOE_GLU: return slot <= 3 || slot == OUT(0) || slot == OUT(1);
    case TND_OP_MOE_SUM_NORM: return slot <= 3 || (slot >= OUT(0) && slot <= OUT(2)); /* in[1] optional */
    case TND_OP_MOE_ROUTE_PAIR: return slot <= 1 || slot >= OUT(0);
    case TND_OP_SOFTMAX:
    case TND_OP_SCALE: return slot == 0 || slot == OUT(0);
    case TND_OP_CPY: return slot <= 1 || slot == OUT(0); /* in[1] optional: positions */
    default: return slot <= 1 || slot == OUT(0);
    }
}

static tnd_status sim_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    sim_ctx *c = C(b);
    tnd_status st = sim_op_supported(b, op);
    if (st) return st;
    if (op->kind == TND_OP_NONE) return TND_OK;
    const char *nm = tnd_op_name(op->kind);
    item *it = item_new(IT_OP);
    if (!it) return TND_ERR_NOMEM;
    it->op = *op;
    pthread_mutex_lock(&c->mu);
    /* Every tensor must be device-addressable whole: a host pointer (an
     * mmapped weight, a malloc'd activation) would fault on a GPU. */
    for (int j = 0; j < TND_OP_MAX_IN + TND_OP_MAX_OUT; j++) {
        const tnd_tensor *t = j < TND_OP_MAX_IN ? &op->in[j] : &op->out[j - TND_OP_MAX_IN];
        const char *io = j < TND_OP_MAX_IN ? "in" : "out";
        int k = j < TND_OP_MAX_IN ? j : j - TND_OP_MAX_IN;
        if (!slot_used(op, j)) continue;
        if (!t->data) {
            /* optional: RMS_NORM's weight and fused add, ROPE's fused norm, positions */
            if ((op->kind == TND_OP_RMS_NORM && j != 0 && j != OUT(0)) || (op->kind == TND_OP_ROPE && j == 2) ||
                (op->kind == TND_OP_MOE_SUM_NORM && j == 1) ||
                (op->kind == TND_OP_ROPE_KV && (j == 2 || j == 4)) || (op->kind == TND_OP_ATTN && j == 3) ||
                (op->kind == TND_OP_CPY && j == 1))
                continue;
            st = tnd_fail(TND_ERR_ARG, "sim %s: %s[%d] has no data", nm, io, k);
            break;
        }
        size_t nb = tnd_tensor_nbytes(t);
        if (!region_holding(c, t->data, nb)) {
            st = tnd_fail(TND_ERR_ARG, "sim %s: %s[%d] (%p, %zu bytes) is not inside device or mapped memory", nm, io,
                          k, t->data, nb);
            break;
        }
    }
    if (st) {
        pthread_mutex_unlock(&c->mu);
        free(it);
        return st;
    }
    if (c->has_hw) {
        /* the ids are not computed yet when the op is queued: assume all distinct */
        tnd_op tm = *op;
        if (tm.kind == TND_OP_MATMUL_ID || tm.kind == TND_OP_MOE_GLU) tm.in[2].data = NULL;
        s->clock += tnd_hw_op_time_gpu(&c->hw, &tm);
    }
    push(s, it);
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

static void sim_free(tnd_backend *b) {
    if (!b) return;
    sim_ctx *c = C(b);
    while (c->streams) sim_stream_free(b, c->streams);
    for (size_t i = 0; i < c->n_regs; i++)
        if (!c->regs[i].refs) free((void *)c->regs[i].lo); /* registered memory is the caller's */
    free(c->regs);
    while (c->events) {
        tnd_event *e = c->events;
        c->events = e->next;
        free(e);
    }
    tnd_backend_free(c->cpu);
    tnd_pool_free(c->pool);
    pthread_mutex_destroy(&c->compute_mu);
    pthread_cond_destroy(&c->cv_done);
    pthread_mutex_destroy(&c->mu);
    free(c);
    free(b);
}

static const tnd_backend_iface sim_iface = {
    .name = "sim",
    .free = sim_free,
    .buf_alloc = sim_buf_alloc,
    .buf_free = sim_buf_free,
    .mem_info = sim_mem_info,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .host_register = sim_host_register,
    .host_unregister = sim_host_unregister,
    .host_registered = sim_host_registered,
    .stream_new = sim_stream_new,
    .stream_free = sim_stream_free,
    .stream_sync = sim_stream_sync,
    .event_new = sim_event_new,
    .event_free = sim_event_free,
    .event_record = sim_event_record,
    .stream_wait = sim_stream_wait,
    .event_sync = sim_event_sync,
    .event_elapsed = sim_event_elapsed,
    .event_done = sim_event_done,
    .ping = sim_ping,
    .copy_h2d = sim_copy_h2d,
    .copy_d2h = sim_copy_d2h,
    .copy_d2d = sim_copy_d2d,
    .copy_mapped = sim_copy_mapped,
    .memset = sim_memset,
    .op_supported = sim_op_supported,
    .op_run = sim_op_run,
};

tnd_status tnd_backend_sim_new(const tnd_sim_params *p, tnd_backend **out) {
    tnd_sim_params def = {0};
    if (!p) p = &def;
    if (p->hw && (p->hw->hbm_bw <= 0 || p->hw->pcie_bw <= 0 || p->hw->pcie_pageable_bw <= 0))
        return tnd_fail(TND_ERR_ARG, "sim: hardware profile '%s' has a zero bandwidth", p->hw->name);
    sim_ctx *c = calloc(1, sizeof *c);
    tnd_backend *b = calloc(1, sizeof *b);
    if (!c || !b) {
        free(c);
        free(b);
        return tnd_fail(TND_ERR_NOMEM, "sim: out of host memory");
    }
    if (p->n_threads > 1) {
        c->pool = tnd_pool_new(p->n_threads);
        if (!c->pool) {
            free(c);
            free(b);
            return tnd_fail_wrap(TND_ERR_BACKEND, "sim: creating a pool of %d threads: ", p->n_threads);
        }
    }
    tnd_status st = tnd_backend_cpu_new(c->pool, 0, &c->cpu);
    if (!st) tnd_backend_cpu_set_int8(c->cpu, !p->cpu_exact);
    if (st) {
        tnd_pool_free(c->pool);
        free(c);
        free(b);
        return st;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->compute_mu, NULL);
    pthread_cond_init(&c->cv_done, NULL);
    c->budget = p->budget;
    if (p->hw) {
        c->has_hw = true;
        c->hw = *p->hw;
    }
    b->iface = &sim_iface;
    b->ctx = c;
    *out = b;
    return TND_OK;
}

double tnd_sim_stream_clock(tnd_backend *b, tnd_stream *s) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    double t = s->clock;
    pthread_mutex_unlock(&c->mu);
    return t;
}

void tnd_sim_set_stream_delay(tnd_backend *b, tnd_stream *s, int us) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    s->delay_us = us > 0 ? us : 0;
    pthread_mutex_unlock(&c->mu);
}

void tnd_sim_set_jitter(tnd_backend *b, int us, uint64_t seed) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    c->jitter_us = us > 0 ? us : 0;
    c->jitter_seed = seed;
    for (tnd_stream *s = c->streams; s; s = s->next) s->rng = stream_seed(seed, s->index);
    pthread_mutex_unlock(&c->mu);
}

void tnd_sim_set_gpu_slowdown(tnd_backend *b, double factor) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    c->gpu_slow = factor > 0 ? factor : 1;
    pthread_mutex_unlock(&c->mu);
}

void tnd_sim_set_copy_slowdown(tnd_backend *b, double factor) {
    sim_ctx *c = C(b);
    pthread_mutex_lock(&c->mu);
    c->copy_slow = factor > 0 ? factor : 1;
    pthread_mutex_unlock(&c->mu);
}
