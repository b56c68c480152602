/* The graph cache of a stream (graph.h). A slot holds one instantiated
 * graph and the key it was captured from. A run whose key equals a slot's
 * is replayed without capturing; otherwise it is captured, and a slot of
 * the same shape (the same items, kinds and op kinds in the same order) is
 * updated in place, which is cheap when only kernel parameters changed (a
 * decode step's attention length, a promoted weight's ring place); a run
 * of a new shape is instantiated in the least recently used slot. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/graph.h"

/* A hybrid decode round has two or three runs a layer (attention and
 * routing, the GPU's experts, the routing's read-back), each the same from
 * one step to the next once positions are read from memory (backend.h):
 * room for every run of a 64-layer model, so each is replayed. */
#define CU_GSLOTS 512

struct cu_gslot {
    cudaGraphExec_t exec; /* NULL: empty */
    uint64_t shape;       /* shape_hash of the key */
    uint64_t hash;        /* key_hash of the key and extra */
    cu_gitem *key;
    int n, cap;
    void *extra;
    size_t extra_len;
    unsigned long long used; /* last use (LRU) */
};

struct cu_gcache {
    struct cu_gslot s[CU_GSLOTS];
    unsigned long long tick;
};

cu_gcache *cu_gcache_new(void) { return (cu_gcache *)calloc(1, sizeof(cu_gcache)); }

void cu_gcache_free(cu_gcache *gc) {
    if (!gc) return;
    for (int i = 0; i < CU_GSLOTS; i++) {
        if (gc->s[i].exec) cudaGraphExecDestroy(gc->s[i].exec);
        free(gc->s[i].key);
        free(gc->s[i].extra);
    }
    free(gc);
}

/* A hash of the items' kinds and op kinds: what an update cannot change. */
static uint64_t shape_hash(const cu_gitem *it, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(it[i].kind * 64 + (it[i].kind == CU_GI_OP ? it[i].op.kind : 0))) * 1099511628211ull;
    return h;
}

/* A hash of the whole key (items, then extra), words at a time: the
 * replay lookup compares it before the bytes. */
static uint64_t key_hash(const cu_gitem *it, int n, const void *extra, size_t extra_len) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p[2] = {(const unsigned char *)it, (const unsigned char *)extra};
    const size_t len[2] = {sizeof *it * (size_t)n, extra_len};
    for (int k = 0; k < 2; k++) {
        size_t i = 0;
        for (; i + 8 <= len[k]; i += 8) {
            uint64_t w;
            memcpy(&w, p[k] + i, 8);
            h = (h ^ w) * 1099511628211ull;
            h ^= h >> 29;
        }
        for (; i < len[k]; i++) h = (h ^ p[k][i]) * 1099511628211ull;
    }
    return h;
}

static bool same_shape(const struct cu_gslot *s, const cu_gitem *it, int n, uint64_t shape) {
    if (!s->exec || s->n != n || s->shape != shape) return false;
    for (int i = 0; i < n; i++)
        if (s->key[i].kind != it[i].kind || (it[i].kind == CU_GI_OP && s->key[i].op.kind != it[i].op.kind))
            return false;
    return true;
}

/* Items of the slot's key that differ from it (n_max + 1 when the shape differs). */
static int differing(const struct cu_gslot *s, const cu_gitem *it, int n, uint64_t shape, int n_max) {
    if (!same_shape(s, it, n, shape)) return n_max + 1;
    int d = 0;
    for (int i = 0; i < n; i++) d += memcmp(&s->key[i], &it[i], sizeof *it) != 0;
    return d;
}

static bool store_key(struct cu_gslot *s, const cu_gitem *it, int n, uint64_t shape, uint64_t hash, const void *extra,
                      size_t extra_len) {
    if (n > s->cap) {
        cu_gitem *k = (cu_gitem *)realloc(s->key, sizeof *k * (size_t)n);
        if (!k) return false;
        s->key = k;
        s->cap = n;
    }
    if (extra_len != s->extra_len || !s->extra) {
        void *e = realloc(s->extra, extra_len ? extra_len : 1);
        if (!e) return false;
        s->extra = e;
        s->extra_len = extra_len;
    }
    memcpy(s->key, it, sizeof *it * (size_t)n);
    memcpy(s->extra, extra, extra_len);
    s->n = n;
    s->shape = shape;
    s->hash = hash;
    return true;
}

static void drop(struct cu_gslot *s) {
    if (s->exec) cudaGraphExecDestroy(s->exec);
    s->exec = NULL;
    s->n = 0;
}

int cu_graph_run(cu_gcache *gc, cudaStream_t cs, const cu_gitem *it, int n, const void *extra, size_t extra_len,
                 cu_gissue_fn issue, void *arg, tnd_backend_counters *cnt, char *why, size_t why_len) {
    gc->tick++;
    int n_ops = 0;
    for (int i = 0; i < n; i++) n_ops += it[i].kind == CU_GI_OP;
    const uint64_t shape = shape_hash(it, n), hash = key_hash(it, n, extra, extra_len);
    /* the same work as a slot's graph: launch it as it is */
    for (int i = 0; i < CU_GSLOTS; i++) {
        struct cu_gslot *s = &gc->s[i];
        if (s->exec && s->hash == hash && s->n == n && s->extra_len == extra_len &&
            memcmp(s->key, it, sizeof *it * (size_t)n) == 0 && memcmp(s->extra, extra, extra_len) == 0) {
            cudaError_t e = cudaGraphLaunch(s->exec, cs);
            if (e != cudaSuccess) {
                cudaGetLastError();
                snprintf(why, why_len, "cudaGraphLaunch: %s", cudaGetErrorString(e));
                drop(s);
                return 1;
            }
            s->used = gc->tick;
            cnt->graph_launches++, cnt->graph_replays++, cnt->graph_ops += (uint64_t)n_ops;
            return 0;
        }
    }
    /* else the most similar graph of the same shape, to update */
    int best = -1, best_d = n + 1;
    for (int i = 0; i < CU_GSLOTS; i++) {
        int d = differing(&gc->s[i], it, n, shape, n);
        if (d < best_d) best = i, best_d = d;
    }
    /* another run of the same shape (two layers' pieces of a hybrid step)
     * gets a graph of its own while there is room, so that each is updated
     * from its own last run, where few items change, or replayed */
    if (best >= 0 && best_d * 4 > n)
        for (int i = 0; i < CU_GSLOTS; i++)
            if (!gc->s[i].exec) {
                best = -1;
                break;
            }
    /* capture: nothing runs until the graph is launched */
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, why_len, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return 1;
    }
    int ie = issue(arg, true);
    e = cudaStreamEndCapture(cs, &g);
    if (ie || e != cudaSuccess || !g) {
        cudaError_t last = cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        snprintf(why, why_len, "capturing %d items: %s", n,
                 e != cudaSuccess ? cudaGetErrorString(e)
                 : ie             ? (ie < 1000 ? cudaGetErrorString((cudaError_t)ie) : "an op failed")
                                  : cudaGetErrorString(last));
        return 1;
    }
    struct cu_gslot *s = NULL;
    if (best >= 0) { /* the same shape: update that graph in place */
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(gc->s[best].exec, g, &info) == cudaSuccess) {
            s = &gc->s[best];
            cnt->graph_updates++;
        } else {
            cudaGetLastError();
            drop(&gc->s[best]); /* its place is taken below */
        }
    }
    if (!s) {
        int lru = 0;
        for (int i = 0; i < CU_GSLOTS; i++) {
            if (!gc->s[i].exec) {
                lru = i;
                break;
            }
            if (gc->s[i].used < gc->s[lru].used) lru = i;
        }
        s = &gc->s[lru];
        drop(s);
        e = cudaGraphInstantiate(&s->exec, g, 0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            s->exec = NULL;
            cudaGraphDestroy(g);
            snprintf(why, why_len, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
            return 1;
        }
        cnt->graph_inst++;
    }
    cudaGraphDestroy(g); /* the instantiated graph does not need it */
    if (!store_key(s, it, n, shape, hash, extra, extra_len)) {
        drop(s); /* no key: it could be replayed for other work */
        snprintf(why, why_len, "out of host memory");
        return 1;
    }
    e = cudaGraphLaunch(s->exec, cs);
    if (e != cudaSuccess) {
        cudaGetLastError();
        drop(s);
        snprintf(why, why_len, "cudaGraphLaunch: %s", cudaGetErrorString(e));
        return 1;
    }
    s->used = gc->tick;
    cnt->graph_launches++, cnt->graph_ops += (uint64_t)n_ops;
    return 0;
}
