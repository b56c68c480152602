/* The --trace timeline (tnd_ctx_params.trace): every round a context runs,
 * written as Chrome/Perfetto trace events (JSON, "traceEvents"), streamed
 * to the file round by round so a long run holds no more than one round.
 *
 * Tracks, process 1 (measured): the host thread (CPU ops; a GPU op's
 * queuing), the GPU compute stream (GPU ops), the SM copies on it (the
 * activation copies and waits queued before a GPU op), the copy engine (a
 * promoted weight's copy: it ended before the op that reads it started; its
 * length is the perf DB's PCIe bandwidth, the start is estimated), and
 * syncs (the host's waits for GPU results, the end of a round). Process 2
 * holds the plan's predicted round times (tnd_perf_predict).
 *
 * GPU times come from events recorded on the compute stream around each GPU
 * node (three per node, from a pool reused every round), placed on the host
 * clock from an event recorded when the round starts. Without event timing
 * the GPU track shows the host's queue times. SimGPU with a --hw profile
 * reports its virtual clock, so there the GPU track is the timing model's. */
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sched/perf.h"
#include "util.h"

enum { PID_RUN = 1, PID_PLAN = 2 };
enum { TID_HOST = 1, TID_GPU, TID_SM, TID_CE, TID_SYNC, TID_ROUND };

typedef struct tl_node {
    const char *name;
    int layer, side, sid;
    bool prom;
    double h0, h1, h2; /* host: node start, op start, op end */
    int ev;            /* first of its three events (GPU nodes), -1 */
    uint64_t acts;     /* activation copies this node made current */
    uint64_t copied;   /* bytes its promoted weight's copy moved (the chosen experts of an expert tensor) */
} tl_node;

struct tnd_tl {
    FILE *f;
    bool any;          /* an event written (commas) */
    bool gpu_timing;   /* events give GPU times */
    double t0;         /* host seconds of ts 0 */
    tl_node *nodes;
    int n, cap;
    tnd_event **ev;    /* the pool */
    int n_ev, used_ev;
    const tnd_perf *perf; /* the predictions' DB, or NULL: the live plan's (tnd_tl_set_perf) */
    tnd_event *round_ev;
    tl_node *cur;      /* the node being run, NULL when it went unrecorded */
    double round_h;
    int round;
    uint64_t acts0;
};

static double us(const struct tnd_tl *t, double s) { return 1e6 * (s - t->t0); }

static void put(struct tnd_tl *t, const char *name, const char *prefix, int pid, int tid, double ts, double dur,
                const char *args) {
    if (dur < 0) dur = 0;
    fprintf(t->f, "%s{\"name\":\"%s%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{%s}}",
            t->any ? ",\n" : "", prefix ? prefix : "", name, ts, dur, pid, tid, args ? args : "");
    t->any = true;
}

static void meta(struct tnd_tl *t, const char *what, int pid, int tid, const char *name) {
    fprintf(t->f, "%s{\"name\":\"%s\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
            t->any ? ",\n" : "", what, pid, tid, name);
    t->any = true;
}

tnd_status tnd_tl_open(tnd_ctx *c, const char *path, const tnd_perf *perf) {
    struct tnd_tl *t = tnd_calloc(1, sizeof *t);
    if (!t) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (!(t->f = fopen(path, "w"))) {
        free(t);
        return tnd_fail(TND_ERR_IO, "--trace %s: cannot write the file", path);
    }
    t->t0 = tnd_time_s();
    t->perf = perf;
    fputs("{\"traceEvents\":[\n", t->f);
    meta(t, "process_name", PID_RUN, 0, "tandem (measured)");
    meta(t, "thread_name", PID_RUN, TID_HOST, "host thread: CPU ops, GPU ops queued");
    meta(t, "thread_name", PID_RUN, TID_GPU, "GPU compute stream: ops");
    meta(t, "thread_name", PID_RUN, TID_SM, "GPU compute stream: SM copies and waits");
    meta(t, "thread_name", PID_RUN, TID_CE, "GPU copy engine: promoted weights (start estimated)");
    meta(t, "thread_name", PID_RUN, TID_SYNC, "syncs: host waits for the GPU");
    meta(t, "thread_name", PID_RUN, TID_ROUND, "rounds");
    meta(t, "process_name", PID_PLAN, 0, "plan (predicted)");
    meta(t, "thread_name", PID_PLAN, TID_ROUND, "rounds, timeline model");
    t->gpu_timing = c->gpu && c->side[1].be->iface->event_elapsed;
    if (t->gpu_timing && tnd_backend_event_new(c->side[1].be, &t->round_ev)) {
        tnd_clear_error();
        t->gpu_timing = false;
    }
    c->tl = t;
    return TND_OK;
}

void tnd_tl_set_perf(tnd_ctx *c, const tnd_perf *perf) {
    if (c->tl) c->tl->perf = perf;
}

tnd_status tnd_tl_close(tnd_ctx *c) {
    struct tnd_tl *t = c->tl;
    if (!t) return TND_OK;
    c->tl = NULL;
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", t->f);
    bool bad = ferror(t->f) != 0;
    bad |= fclose(t->f) != 0;
    tnd_backend *g = c->gpu ? c->side[1].be : NULL;
    for (int i = 0; g && i < t->n_ev; i++) tnd_backend_event_free(g, t->ev[i]);
    if (g && t->round_ev) tnd_backend_event_free(g, t->round_ev);
    free(t->ev);
    free(t->nodes);
    free(t);
    return bad ? tnd_fail(TND_ERR_IO, "--trace: writing the file failed") : TND_OK;
}

void tnd_tl_round_begin(tnd_ctx *c) {
    struct tnd_tl *t = c->tl;
    t->n = t->used_ev = 0;
    t->cur = NULL;
    t->round_h = tnd_time_s();
    t->acts0 = c->n_act_copies;
    if (t->gpu_timing && tnd_backend_event_record(c->side[1].be, t->round_ev, c->side[1].st)) {
        tnd_clear_error();
        t->gpu_timing = false;
    }
}

/* Records the next of the pool's events on the compute stream; -1 when
 * the pool cannot grow (GPU timing then stops, the host's times remain). */
static int record(tnd_ctx *c) {
    struct tnd_tl *t = c->tl;
    tnd_backend *g = c->side[1].be;
    if (!t->gpu_timing) return -1;
    if (t->used_ev == t->n_ev) {
        tnd_event **e = realloc(t->ev, sizeof *e * (size_t)(t->n_ev + 1));
        if (!e) goto off;
        t->ev = e;
        if (tnd_backend_event_new(g, &t->ev[t->n_ev])) goto off;
        t->n_ev++;
    }
    if (tnd_backend_event_record(g, t->ev[t->used_ev], c->side[1].st)) goto off;
    return t->used_ev++;
off:
    tnd_clear_error();
    t->gpu_timing = false;
    return -1;
}

void tnd_tl_node_begin(tnd_ctx *c, const tnd_node *nd, int s, bool prom) {
    struct tnd_tl *t = c->tl;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 512;
        tl_node *p = realloc(t->nodes, sizeof *p * (size_t)cap);
        t->cur = NULL;
        if (!p) return; /* out of memory: this node goes unrecorded */
        t->nodes = p;
        t->cap = cap;
    }
    tl_node *x = t->cur = &t->nodes[t->n++];
    *x = (tl_node){.name = tnd_op_name(nd->op.kind), .layer = nd->layer, .side = s, .sid = nd->sid, .prom = prom,
                   .ev = -1, .acts = c->n_act_copies};
    x->h0 = x->h1 = x->h2 = tnd_time_s();
    if (s == TND_SIDE_GPU) x->ev = record(c);
}

void tnd_tl_op_begin(tnd_ctx *c, int s, uint64_t copied) {
    tl_node *x = c->tl->cur;
    if (!x) return;
    x->h1 = tnd_time_s();
    x->copied = copied;
    x->acts = c->n_act_copies - x->acts;
    if (s == TND_SIDE_GPU && x->ev >= 0 && record(c) < 0) x->ev = -1;
}

void tnd_tl_op_end(tnd_ctx *c, int s) {
    tl_node *x = c->tl->cur;
    if (!x) return;
    c->tl->cur = NULL;
    x->h2 = tnd_time_s();
    if (s == TND_SIDE_GPU && x->ev >= 0 && record(c) < 0) x->ev = -1;
}

/* Host seconds at which GPU event k passed (the round's start event at round_h). */
static bool gpu_time(tnd_ctx *c, int k, double *out) {
    struct tnd_tl *t = c->tl;
    float ms;
    if (k < 0 || !t->gpu_timing || tnd_backend_event_elapsed(c->side[1].be, t->round_ev, t->ev[k], &ms)) {
        tnd_clear_error();
        return false;
    }
    *out = t->round_h + 1e-3 * (double)ms;
    return true;
}

void tnd_tl_span(tnd_ctx *c, const char *name, double t0, double t1, const char *args) {
    if (c->tl) put(c->tl, name, NULL, PID_RUN, TID_ROUND, us(c->tl, t0), 1e6 * (t1 - t0), args);
}

void tnd_tl_round_end(tnd_ctx *c, int nt, int pos0) {
    struct tnd_tl *t = c->tl;
    const double end = tnd_time_s();
    char args[256];
    double ce_free = 0; /* the copy engine's estimated end of the previous copy */
    for (int i = 0; i < t->n; i++) {
        const tl_node *x = &t->nodes[i];
        snprintf(args, sizeof args, "\"round\":%d,\"layer\":%d,\"slice\":%d%s", t->round, x->layer, x->sid,
                 x->prom ? ",\"promoted\":true" : "");
        if (x->side == TND_SIDE_CPU) {
            put(t, x->name, NULL, PID_RUN, TID_HOST, us(t, x->h1), 1e6 * (x->h2 - x->h1), args);
            /* what the host did before the op: copies from the GPU and waits for its results */
            if (x->acts || x->h1 - x->h0 > 2e-6)
                put(t, "wait / copy to host", NULL, PID_RUN, TID_SYNC, us(t, x->h0), 1e6 * (x->h1 - x->h0), args);
            continue;
        }
        put(t, x->name, "queue ", PID_RUN, TID_HOST, us(t, x->h0), 1e6 * (x->h2 - x->h0), args);
        double g0, g1, g2;
        if (x->ev >= 0 && gpu_time(c, x->ev, &g0) && gpu_time(c, x->ev + 1, &g1) && gpu_time(c, x->ev + 2, &g2)) {
            put(t, x->name, NULL, PID_RUN, TID_GPU, us(t, g1), 1e6 * (g2 - g1), args);
            if (x->acts || x->prom)
                put(t, x->prom ? "activation copies, weight wait" : "activation copies", NULL, PID_RUN, TID_SM,
                    us(t, g0), 1e6 * (g1 - g0), args);
            if (x->prom && x->sid >= 0) {
                double d = t->perf && t->perf->b_pcie > 0 ? (double)x->copied / t->perf->b_pcie : 0;
                double st = g1 - d > ce_free ? g1 - d : ce_free;
                if (st > g1) st = g1;
                char a2[320];
                snprintf(a2, sizeof a2, "%s,\"bytes\":%llu,\"start\":\"estimated\"", args,
                         (unsigned long long)x->copied);
                put(t, "weight copy", NULL, PID_RUN, TID_CE, us(t, st), 1e6 * (g1 - st), a2);
                ce_free = g1;
            }
        } else {
            /* no GPU timing: the host's queue times stand in */
            char a2[320];
            snprintf(a2, sizeof a2, "%s,\"timing\":\"host queue\"", args);
            put(t, x->name, NULL, PID_RUN, TID_GPU, us(t, x->h1), 1e6 * (x->h2 - x->h1), a2);
        }
    }
    double tail = t->n ? t->nodes[t->n - 1].h2 : t->round_h;
    snprintf(args, sizeof args, "\"round\":%d,\"tokens\":%d,\"pos0\":%d", t->round, nt, pos0);
    put(t, "end of round: logits, drain", NULL, PID_RUN, TID_SYNC, us(t, tail), 1e6 * (end - tail), args);
    char name[64];
    snprintf(name, sizeof name, "%s %d (%d tokens)", c->round_decode ? "decode" : "prefill", t->round, nt);
    put(t, name, NULL, PID_RUN, TID_ROUND, us(t, t->round_h), 1e6 * (end - t->round_h), args);
    if (t->perf) {
        double pred = tnd_perf_predict(c->m, t->perf, &c->pl, c->lay.n_slots, nt, pos0);
        put(t, name, NULL, PID_PLAN, TID_ROUND, us(t, t->round_h), 1e6 * pred, args);
    }
    t->round++;
}
