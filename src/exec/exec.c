/* Running a round's op list across the CPU and the GPU (docs/ARCHITECTURE.md:
 * Execution, Hybrid execution).
 *
 * Nodes run in order. A node that reads a weight slice runs where the slice
 * is placed (or on the GPU if the slice is promoted this round); attention
 * and the KV store run where the layer's KV cache is; other weightless ops
 * stay where the previous node ran, so they never cause a switch. Before a
 * node runs, every activation it reads is made current on its side; CPU ops
 * run synchronously on this thread, GPU ops are queued on the compute
 * stream, and this thread waits for the GPU only when a CPU op needs a GPU
 * result (or before overwriting a host buffer the GPU is still copying).
 * Promoted slices are copied on the transfer stream into a byte ring on the GPU,
 * each copy starting as soon as the readers of the bytes it overwrites are done.
 *
 * A MoE layer split expert by expert (tnd_placement.split) arrives as a
 * NONE node, which maps the routing ids to each side's (done here, on the
 * host: the CPU's experts need the ids there anyway), then the expert ops
 * twice: reading A_RIG (the GPU's resident experts, compact indices: always
 * on the GPU) and reading A_RIC (the CPU's experts: on the CPU, or on the
 * GPU from a slot when the layer is promoted this round). The GPU part is
 * queued first, so the CPU part runs while the GPU works. Its down
 * projection writes its rows of A_EY straight into the mapped host buffer
 * (the CPU part writes the other rows), so no rows have to be gathered;
 * the CPU waits for that write only before it reads the buffer. In a
 * decode-sized round the sum then runs beside the attention (GPU), so the
 * host queues it and goes on without that wait. When the CPU part is
 * promoted, both parts write the GPU's A_EY instead. The GPU's experts may
 * include some copied a layer ahead into slots (prefetch.c).
 *
 * Two MATMUL nodes over the same x of a decode step that both run on the
 * GPU (gate and up, q and k) are handed to it as one MATMUL_PAIR where the
 * backend takes that (fuse_pair): one launch instead of two. Likewise a
 * decode step's q and k RoPE and K/V stores, as one ROPE_KV
 * (fuse_rope_kv): one launch instead of four. An MoE FFN's gate and up
 * expert matmuls and their SILU_MUL run as one MOE_GLU where their side
 * takes that (fuse_glu; the CPU: one pool region instead of three). On the
 * GPU an MoE layer's expert sum and the residual add + norm after it, and
 * its routing and the next layer's predicted one, run as one launch each
 * (fuse_two: MOE_SUM_NORM, MOE_ROUTE_PAIR). */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpu/pool.h"
#include "exec/exec.h"
#include "moe/moe.h"
#include "sched/perf.h"
#include "sched/transfer.h"
#include "util.h"

/* ---- TND_TRACE -------------------------------------------------------------
 * Cells: (decode|prefill) x side x (op kind | activation copies | waits for
 * a promoted weight's copy) x part (plain, promoted, a split layer's GPU
 * part, its CPU part). TND_TRACE=1 synchronizes after every node, which
 * removes all overlap: the table shows what each piece costs alone, to
 * compare with the perf DB. TND_TRACE=2 never synchronizes: each cell is
 * the host thread's own time (a CPU op's run, a GPU op's queuing, waits for
 * GPU results inside the activation copies), so the cells add up to the
 * round as it really ran. */
/* TR_RWAIT, TR_PFISSUE: parts of other cells (which hold them too): the
 * read-back of a split layer's routing (its NONE node), the prefetch's
 * copies queued (its NONE node, or its CPU experts' first op: layer_errand) */
enum { TR_ACT = TND_OP_COUNT, TR_WCOPY, TR_DRAIN, TR_RWAIT, TR_PFISSUE, TR_OPS };
enum { TR_PLAIN, TR_PROM, TR_SPLIT_GPU, TR_SPLIT_CPU, TR_PARTS };
struct tnd_trace_cell {
    double s;
    int64_t n;
};

static void trace_add(tnd_ctx *c, int side, int op, int part, double s) {
    struct tnd_trace_cell *t = &c->trace[((c->trace_prefill * 2 + side) * TR_OPS + op) * TR_PARTS + part];
    t->s += s;
    t->n++;
}

/* Waits for side s's queued work (TND_TRACE=1 only). */
static tnd_status trace_sync(tnd_ctx *c, int s) {
    return s == TND_SIDE_GPU && c->trace_mode == 1 ? tnd_backend_stream_sync(c->side[1].be, c->side[1].st)
                                                   : TND_OK;
}

void tnd_exec_trace_print(const tnd_ctx *c, FILE *f) {
    if (!c->trace) return;
    static const char *const parts[TR_PARTS] = {"", " promoted", " split:gpu", " split:cpu"};
    fprintf(f, "trace (%s): phase side op part: calls, total ms, us per call\n",
            c->trace_mode == 1 ? "every node synchronized" : "host time, nothing synchronized");
    for (int i = 0; i < 2 * 2 * TR_OPS * TR_PARTS; i++) {
        const struct tnd_trace_cell *t = &c->trace[i];
        if (!t->n) continue;
        int part = i % TR_PARTS, op = i / TR_PARTS % TR_OPS, side = i / TR_PARTS / TR_OPS % 2, ph = i / TR_PARTS / TR_OPS / 2;
        const char *name = op == TR_ACT     ? "activation copies"
                           : op == TR_WCOPY ? "wait for weight copy"
                           : op == TR_DRAIN ? "end of round"
                           : op == TR_RWAIT ? "routing read-back"
                           : op == TR_PFISSUE ? "experts a layer ahead"
                                            : tnd_op_name((tnd_op_kind)op);
        fprintf(f, "  %-7s %-3s %-20s%-10s %8lld %10.2f %10.1f\n", ph ? "prefill" : "decode", side ? "gpu" : "cpu",
                name, parts[part], (long long)t->n, 1e3 * t->s, 1e6 * t->s / (double)t->n);
    }
    const double *ps = c->pf_sum;
    if (ps[4] > 0) /* prefetch.c's balance, per layer it bounded */
        fprintf(f,
                "  experts a layer ahead: %.2f candidates, balance %.2f, %.2f copied (%.1f us each); a layer "
                "%.1f us besides its %.1f us per CPU expert\n",
                ps[0] / ps[4], ps[1] / ps[4], ps[2] / ps[4], 1e6 * ps[3] / ps[4], 1e6 * c->pf_t_over,
                1e6 * c->pf_t_exp);
}

static const tnd_region *find_region(const tnd_ctx *c, const void *p) {
    const char *q = p;
    int lo = 0, hi = c->n_reg - 1, hit = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c->reg[mid].base <= q) hit = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (hit < 0 || q >= c->reg[hit].base + c->reg[hit].size) return NULL;
    return &c->reg[hit];
}

static bool promoted(const tnd_ctx *c, int sid) {
    return c->lay.n_slots > 0 && sid >= 0 && c->pl.promote[sid] && (!c->pl.promote_auto || c->round_prom[sid]);
}

/* An op over routed experts: MATMUL_ID, or MOE_GLU / MOE_FFN (their in[0..2] are a MATMUL_ID's). */
static bool expert_op(const tnd_op *op) {
    return op->kind == TND_OP_MATMUL_ID || op->kind == TND_OP_MOE_GLU || op->kind == TND_OP_MOE_FFN;
}

/* The GPU-resident part of a split layer's expert op (it reads A_RIG). */
static bool resident_part(const tnd_ctx *c, const tnd_node *nd) {
    return expert_op(&nd->op) && c->side[0].act[A_RIG] && nd->op.in[2].data == c->side[0].act[A_RIG];
}

/* The slice of a MOE_GLU's up weight (in[3]) or a MOE_FFN's down weight
 * (in[4]): its node's sid is the gate's. */
static int fused_sid(const tnd_ctx *c, const tnd_node *nd, int in) {
    const tnd_region *r = find_region(c, nd->op.in[in].data);
    return r && r->kind == R_WEIGHT ? r->idx : -1;
}

/* Node nd reads a weight slice promoted this round. */
static bool node_promoted(const tnd_ctx *c, const tnd_node *nd) {
    return nd->sid >= 0 && !tnd_slice_small(c->m->slices[nd->sid]) && !resident_part(c, nd) && promoted(c, nd->sid);
}

/* The CPU waits for the GPU's writes into host buffer b (split layers' A_EY). */
static tnd_status wait_mapped(tnd_ctx *c, int b) {
    if (!c->mapped_pending[b]) return TND_OK;
    tnd_backend *g = c->side[1].be;
    c->mapped_pending[b] = false;
    const double t0 = tnd_time_s();
    tnd_status st = tnd_backend_event_sync(g, c->mapped_ev);
    c->pf_wait_s += tnd_time_s() - t0; /* prefetch.c: the host's wait for a split layer's GPU part */
    return st;
}

/* promote=auto: the promotions of this round by Algorithm 2 (sched/
 * transfer.h) over the perf DB's times; without a DB, rounds of 32 tokens
 * or more promote every candidate. The choice depends on the round's size
 * and, through attention, its depth: it is kept while the size is the same
 * and the depth within the same 256 positions. */
static tnd_status choose_round_promotions(tnd_ctx *c, int nt) {
    const tnd_model *m = c->m;
    const int depth = c->depth / 256;
    if (c->prom_key_nt == nt && c->prom_key_depth == depth) return TND_OK;
    if (c->perf) {
        const tnd_adapt *a = &c->ad[nt > 1];
        const tnd_xfer_scale sc = {a->plan_cpu, a->plan_pcie};
        double t0 = tnd_time_s();
        tnd_status st = tnd_xfer_choose(m, c->perf, c->adapt ? &sc : NULL, &c->pl, c->lay.n_slots, nt, c->depth,
                                        c->round_prom, NULL);
        if (st) return st;
        if (c->verbose && a->n_replans) {
            int k = 0;
            for (int i = 0; i < m->n_slices; i++) k += c->round_prom[i];
            fprintf(stderr, "[%s promotions for CPU x%.2f, PCIe x%.2f: %d slices, chosen in %.2f ms]\n",
                    nt > 1 ? "prefill" : "decode", sc.cpu, sc.pcie, k, 1e3 * (tnd_time_s() - t0));
        }
    } else {
        for (int i = 0; i < m->n_slices; i++) c->round_prom[i] = c->pl.promote[i] && nt >= 32;
    }
    c->prom_key_nt = nt;
    c->prom_key_depth = depth;
    return TND_OK;
}

static bool is_expert_copy(const tnd_ctx *c, int j) { return c->m->slices[c->g.nodes[c->prom[j]].sid]->n_expert > 1; }

static tnd_status make_current(tnd_ctx *c, int b, size_t off, size_t n, int s);
/* Activation bytes up to which make_current copies a whole buffer for a part. */
#define SMALL_ACT (256u << 10)

/* A promoted split layer's CPU experts copied ahead go packed into their
 * slot (cpu_idx): the slot takes only their bytes, so the ring holds more
 * layers ahead (a whole-tensor slot of the 30B-A3B at 40%: one layer and a
 * quarter; packed: nearly two). */
static bool packed_ahead(const tnd_ctx *c, const tnd_node *nd) {
    return c->experts_ahead && c->cpu_idx && nd->layer >= 0 && c->pl.split && c->pl.split[nd->layer] &&
           c->m->slices[nd->sid]->n_expert > 1;
}

/* Bytes of the ring the j-th promoted slice of the round takes. */
static uint64_t ring_len(const tnd_ctx *c, int j) {
    const tnd_node *nd = &c->g.nodes[c->prom[j]];
    const tnd_weight *w = c->m->slices[nd->sid];
    uint64_t n = w->t->nbytes;
    if (packed_ahead(c, nd)) n = n / (uint64_t)w->n_expert * (uint64_t)c->n_cpu_idx[nd->layer];
    return (n + 255) & ~(uint64_t)255;
}

/* Numbers each split layer's CPU experts (cpu_idx) for a round that
 * copies them ahead. */
static tnd_status number_cpu_experts(tnd_ctx *c) {
    const int L = c->m->hp.n_layer, E = c->pl.n_expert;
    if (!c->cpu_idx && (!(c->cpu_idx = tnd_calloc((size_t)L * E, sizeof *c->cpu_idx)) ||
                        !(c->n_cpu_idx = tnd_calloc((size_t)L, sizeof *c->n_cpu_idx)))) {
        free(c->cpu_idx);
        c->cpu_idx = NULL;
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        int k = 0;
        for (int e = 0; e < E; e++) {
            const size_t i = (size_t)l * E + e;
            c->cpu_idx[i] = c->pl.split[l] && c->exp_gpu[i] < 0 ? k++ : -1;
        }
        c->n_cpu_idx[l] = k;
    }
    return TND_OK;
}

/* Places the round's promoted slices in the ring one after another,
 * wrapping to the start where one does not fit before the end. */
static void ring_place(tnd_ctx *c) {
    uint64_t at = 0;
    for (int j = 0; j < c->n_prom; j++) {
        uint64_t n = ring_len(c, j);
        if (at + n > c->ring_bytes) at = 0;
        c->prom_off[j] = at;
        c->prom_len[j] = n;
        at += n;
    }
}

/* Promotion i's bytes in the ring overlap promotion j's. */
static bool ring_overlap(const tnd_ctx *c, int i, int j) {
    return c->prom_off[i] < c->prom_off[j] + c->prom_len[j] && c->prom_off[j] < c->prom_off[i] + c->prom_len[i];
}

/* Copy j may be queued once seen promoted nodes are queued: every node
 * whose bytes it overwrites among the last TND_RING_EV is (older ones are
 * covered by waiting for node j - TND_RING_EV, in stream order). */
static bool ring_ready(const tnd_ctx *c, int j, int seen) {
    if (j >= seen + TND_RING_EV) return false;
    for (int i = TND_MAX(j - TND_RING_EV + 1, 0); i < j; i++)
        if (i >= seen && ring_overlap(c, i, j)) return false;
    return true;
}

/* Queues the copy of the j-th promoted slice of the round into its place
 * in the ring. An expert tensor is copied only once routing has chosen
 * (docs/ARCHITECTURE.md, Execution): the experts its ids name, each to its
 * own offset in a place the size of the whole tensor, so the kernels index
 * it as they would the full tensor; in a round that copies experts ahead,
 * all of them (a split layer's: those with no compact GPU index). */
static tnd_status queue_weight_copy(tnd_ctx *c, int j) {
    tnd_backend *g = c->side[1].be;
    const tnd_node *nd = &c->g.nodes[c->prom[j]];
    int sid = nd->sid;
    const tnd_weight *w = c->m->slices[sid];
    const char *src = c->w[0][sid];
    char *dst = (char *)c->ring + c->prom_off[j];
    size_t n = w->t->nbytes;
    /* the readers of these bytes: node j - TND_RING_EV (all before it are
     * done then) and the overlapping ones after it */
    tnd_status st = TND_OK;
    if (j >= TND_RING_EV) st = tnd_backend_stream_wait(g, c->xfer, c->slot_free[j % TND_RING_EV]);
    for (int i = TND_MAX(j - TND_RING_EV + 1, 0); !st && i < j; i++)
        if (ring_overlap(c, i, j)) st = tnd_backend_stream_wait(g, c->xfer, c->slot_free[i % TND_RING_EV]);
    /* the recorder times the copy itself, from after its waits */
    if (!st) st = tnd_backend_event_record(g, c->copy_start[j % TND_RING_EV], c->xfer);
    if (st) return st;
    if (w->n_expert > 1 && c->experts_ahead) {
        /* ahead of routing: every expert of the tensor, or a split layer's CPU experts packed */
        const int E = w->n_expert;
        const bool packed = packed_ahead(c, nd);
        for (int e = 0; e < E; e++) c->chosen[e] = !packed || c->cpu_idx[(size_t)nd->layer * E + e] >= 0;
        if ((st = tnd_copy_experts(g, dst, src, n, E, c->chosen, 1, packed, c->xfer, &n))) return st;
    } else if (w->n_expert > 1) {
        /* the routing ids, on the host (waits for the GPU if it routed) */
        const tnd_region *r = find_region(c, nd->op.in[2].data);
        if (!r || r->kind != R_ACT) return tnd_fail(TND_ERR_INTERNAL, "expert ids outside the activations");
        size_t off = (size_t)((const char *)nd->op.in[2].data - r->base), nb = tnd_tensor_nbytes(&nd->op.in[2]);
        if ((st = make_current(c, r->idx, off, nb, TND_SIDE_CPU))) return st;
        const int32_t *ids = (const int32_t *)((const char *)c->side[0].act[r->idx] + off);
        uint8_t *chosen = c->chosen;
        memset(chosen, 0, (size_t)w->n_expert);
        for (size_t i = 0; i < nb / sizeof(int32_t); i++)
            if (ids[i] >= 0 && ids[i] < w->n_expert) chosen[ids[i]] = 1;
        if ((st = tnd_copy_experts(g, dst, src, n, w->n_expert, chosen, 1, false, c->xfer, &n))) return st;
    } else if ((st = tnd_backend_copy_h2d(g, dst, src, n, c->xfer))) {
        return st;
    }
    if ((st = tnd_backend_event_record(g, c->slot_ready[j % TND_RING_EV], c->xfer))) return st;
    c->copy_pred[j % TND_RING_EV] = c->perf ? c->perf->lat + (double)n / c->perf->b_pcie : 0;
    /* PreSched's alpha: the link's queue, promotions included (prefetch.c) */
    c->pf_link_free = TND_MAX(c->pf_link_free, tnd_time_s()) + c->copy_pred[j % TND_RING_EV];
    if ((st = tnd_xfer_sync_ablated(c))) return st;
    c->copy_bytes[j % TND_RING_EV] = n;
    c->n_w_copies++;
    c->w_copy_bytes += n;
    return TND_OK;
}

/* The j-th promoted node reads the same routing ids as the seen-th (the
 * gate, up and down projections of one layer). */
static bool same_routing(const tnd_ctx *c, int j, int seen) {
    const tnd_node *a = &c->g.nodes[c->prom[j]], *b = &c->g.nodes[c->prom[seen]];
    return a->layer == b->layer && a->op.in[2].data == b->op.in[2].data;
}

/* Keeps copies queued ahead of the next promoted node to run (seen) as far
 * as the ring has room (ring_ready); stops at an expert tensor, whose copy
 * waits until its node is reached (reached: node seen is about to run, its
 * routing done) — and then the layer's other expert tensors of the same
 * routing follow at once, so the link does not idle while the first one
 * computes — unless the round copies experts ahead (experts_ahead). */
static tnd_status prefetch(tnd_ctx *c, int seen, bool reached) {
    tnd_status st = TND_OK;
    while (!st && c->prom_next < c->n_prom && ring_ready(c, c->prom_next, seen) &&
           (!is_expert_copy(c, c->prom_next) || c->experts_ahead || (reached && same_routing(c, c->prom_next, seen))))
        st = queue_weight_copy(c, c->prom_next++);
    return st;
}

/* Makes bytes [off, off+n) of activation b current on side s. */
static tnd_status make_current(tnd_ctx *c, int b, size_t off, size_t n, int s) {
    if (c->valid[b] & (1u << s)) return TND_OK;
    if (!c->valid[b]) return tnd_fail(TND_ERR_INTERNAL, "activation %d is read before it is written", b);
    /* A part of a small buffer: all that its last writer wrote, at once. A
     * batched round reads a buffer sequence by sequence (attention's rows),
     * and a copy (and, to the CPU, a wait) per part multiplied the hand-offs
     * by the sequences; the whole is as valid on the writer's side as the
     * part. Large buffers (a prefill chunk's rows, of which the output
     * reads the last) still copy only the part. */
    if ((off || n < c->wlen[b]) && off + n <= c->wlen[b] && c->wlen[b] <= SMALL_ACT) {
        off = 0;
        n = c->wlen[b];
    }
    tnd_backend *g = c->side[1].be;
    /* a pageable buffer (pinning failed) goes through the copy engine */
    const bool mapped = c->act_dev[b] != NULL;
    char *host = (char *)(mapped ? c->act_dev[b] : c->side[0].act[b]) + off, *dev = (char *)c->side[1].act[b] + off;
    tnd_status st;
    if (s == TND_SIDE_GPU) {
        if ((st = mapped ? tnd_backend_copy_mapped(g, dev, host, n, c->side[1].st)
                         : tnd_backend_copy_h2d(g, dev, host, n, c->side[1].st)) ||
            (st = tnd_backend_event_record(g, c->host_read[b], c->side[1].st)))
            return st;
        c->host_read_pending[b] = true;
    } else {
        if ((st = mapped ? tnd_backend_copy_mapped(g, host, dev, n, c->side[1].st)
                         : tnd_backend_copy_d2h(g, host, dev, n, c->side[1].st)) ||
            (st = tnd_backend_event_record(g, c->sync_ev, c->side[1].st)))
            return st;
        const double t0 = tnd_time_s();
        st = tnd_backend_event_sync(g, c->sync_ev);
        c->pf_wait_s += tnd_time_s() - t0; /* prefetch.c: a layer's time waiting for the GPU */
        if (st) return st;
    }
    c->n_act_copies++;
    c->act_copy_bytes += n;
    if (off == 0 && n >= c->wlen[b]) c->valid[b] |= (uint8_t)(1u << s);
    return TND_OK;
}

/* Rewrites tensor t's canonical data pointer into side s's memory (slot:
 * the round's promotion whose ring place holds a weight, or -1), making an activation current
 * on side s first when the op reads it. */
static tnd_status rebase(tnd_ctx *c, tnd_tensor *t, int s, bool read, int slot) {
    if (!t->data) return TND_OK;
    const tnd_region *r = find_region(c, t->data);
    if (!r) return tnd_fail(TND_ERR_INTERNAL, "op tensor outside every known buffer");
    size_t off = (size_t)((const char *)t->data - r->base), n = tnd_tensor_nbytes(t);
    if (off + n > r->size) return tnd_fail(TND_ERR_INTERNAL, "op tensor runs past its buffer");
    switch (r->kind) {
    case R_ACT:
        if (c->gpu && read) {
            tnd_status st = make_current(c, r->idx, off, n, s);
            if (!st && s == TND_SIDE_CPU) st = wait_mapped(c, r->idx);
            if (st) return st;
        }
        if (s == TND_SIDE_GPU) t->data = (char *)c->side[1].act[r->idx] + off;
        return TND_OK;
    case R_KV: {
        size_t per = c->kv_canon_bytes / 2 / (size_t)c->m->hp.n_layer;
        int l = (int)(off / per);
        if (c->gpu && c->pl.kv[l] != s) return tnd_fail(TND_ERR_INTERNAL, "layer %d's KV cache is not on side %d", l, s);
        t->data = (char *)c->kv_addr[2 * l + r->idx] + off % per;
        return TND_OK;
    }
    default: {
        const char *base = slot >= 0 ? (const char *)c->ring + c->prom_off[slot] : c->w[s][r->idx];
        if (!base) {
            const gguf_str *nm = &c->m->slices[r->idx]->t->name;
            return tnd_fail(TND_ERR_INTERNAL, "weight '%.*s' is not on the %s", (int)nm->len, nm->ptr,
                            s ? "GPU" : "CPU");
        }
        t->data = (char *)base + off;
        return TND_OK;
    }
    }
}

int tnd_exec_node_side(const tnd_ctx *c, const tnd_node *nd, int cur, bool any_promotion, bool *prom) {
    bool big = nd->sid >= 0 && !tnd_slice_small(c->m->slices[nd->sid]);
    bool res = c->gpu && big && resident_part(c, nd);
    bool p = c->gpu && big && !res &&
             (any_promotion ? c->lay.n_slots > 0 && c->pl.promote[nd->sid] : promoted(c, nd->sid));
    if (prom) *prom = p;
    if (!c->gpu) return TND_SIDE_CPU;
    if (res) return TND_SIDE_GPU;
    if (big) return p ? TND_SIDE_GPU : c->pl.where[nd->sid];
    if (nd->pin == TND_PIN_KV) return c->pl.kv[nd->layer];
    return cur;
}

/* Host pointer of activation tensor t (canonical) made current on the CPU
 * (read) or safe for the CPU to overwrite (!read); *idx: its buffer. */
static tnd_status host_act(tnd_ctx *c, const tnd_tensor *t, bool read, int *idx, void **out) {
    const tnd_region *r = find_region(c, t->data);
    if (!r || r->kind != R_ACT) return tnd_fail(TND_ERR_INTERNAL, "expert ids outside the activations");
    size_t off = (size_t)((const char *)t->data - r->base), nb = tnd_tensor_nbytes(t);
    tnd_status st = TND_OK;
    if (c->gpu && read) st = make_current(c, r->idx, off, nb, TND_SIDE_CPU);
    if (!st && c->gpu) st = wait_mapped(c, r->idx);
    if (!st && c->gpu && !read && c->host_read_pending[r->idx]) {
        tnd_backend *g = c->side[1].be;
        st = tnd_backend_event_sync(g, c->host_read[r->idx]);
        c->host_read_pending[r->idx] = false;
    }
    *idx = r->idx;
    *out = (char *)c->side[0].act[r->idx] + off;
    return st;
}

/* Queues the copy of activation tensor t to the host when the GPU holds
 * its buffer's latest contents (*queued), without waiting: the caller's
 * next wait on the compute stream covers it. The buffer counts as current
 * on the host from now. */
static tnd_status queue_to_host(tnd_ctx *c, const tnd_tensor *t, bool *queued) {
    const tnd_region *r = find_region(c, t->data);
    if (!r || r->kind != R_ACT) return tnd_fail(TND_ERR_INTERNAL, "predicted ids outside the activations");
    const int b = r->idx;
    *queued = false;
    if (c->valid[b] & (1u << TND_SIDE_CPU)) return TND_OK;
    if (!c->valid[b]) return tnd_fail(TND_ERR_INTERNAL, "activation %d is read before it is written", b);
    tnd_backend *g = c->side[1].be;
    const size_t n = c->wlen[b];
    tnd_status st = c->act_dev[b] ? tnd_backend_copy_mapped(g, c->act_dev[b], c->side[1].act[b], n, c->side[1].st)
                                  : tnd_backend_copy_d2h(g, c->side[0].act[b], c->side[1].act[b], n, c->side[1].st);
    if (st) return st;
    c->n_act_copies++;
    c->act_copy_bytes += n;
    c->valid[b] |= 1u << TND_SIDE_CPU;
    *queued = true;
    return TND_OK;
}

/* A split layer's host work that must not delay its CPU experts' start,
 * run at once or as their pool's errand (cpu/pool.h): the launch of the
 * GPU's half collected so far (pfq_flush), then the copies tnd_pf_issue
 * chooses for the layer remap_ids named (pfq_pending, c->pfq_*). The
 * first failure waits in pfq_st for pf_settle. */
static void layer_errand(void *arg) {
    tnd_ctx *c = arg;
    tnd_status st;
    if (c->pfq_flush) {
        c->pfq_flush = false;
        if ((st = tnd_backend_graph_flush(c->side[1].be, c->side[1].st)) && !c->pfq_st) c->pfq_st = st;
    }
    if (!c->pfq_pending) return;
    const double t1 = c->trace ? tnd_time_s() : 0;
    c->pfq_pending = false;
    if ((st = tnd_pf_issue(c, c->pfq_l, c->pfq_pred, c->pfq_n, c->presched ? c->pf_cap : -1, false)) && !c->pfq_st)
        c->pfq_st = st;
    if (c->pfq_pred2 && c->pf_cap2 > 0 && !c->pfq_st) { /* PreSched's Q4: two layers ahead */
        const uint64_t n0 = c->n_pf_copies;
        if ((st = tnd_pf_issue(c, c->pfq_l + 1, c->pfq_pred2, c->pfq_n2, c->pf_cap2, true))) c->pfq_st = st;
        c->n_pf2_copies += c->n_pf_copies - n0;
    }
    if (c->trace) trace_add(c, TND_SIDE_CPU, TR_PFISSUE, TR_PLAIN, tnd_time_s() - t1);
}

/* The errand has run (a layer's routing needs its copies queued, a round's
 * end its copies drained): its status, once. */
static tnd_status pf_settle(tnd_ctx *c) {
    if (c->pfq_pending || c->pfq_flush) tnd_pool_errand_flush(c->m->pool);
    if (c->pfq_pending || c->pfq_flush) layer_errand(c); /* not the pool's errand (run at once, or replaced) */
    tnd_status st = c->pfq_st;
    c->pfq_st = TND_OK;
    return st;
}

/* The NONE node of a split layer: routing ids (in[0]) to the ids of the
 * CPU's experts (out[0], -1 for the GPU's) and the compact indices of the
 * GPU's (out[1], -1 for the CPU's), on the host. */
static tnd_status remap_ids(tnd_ctx *c, const tnd_node *nd) {
    int E = c->pl.n_expert, l = nd->layer, bi, bc, bg;
    if (!c->exp_gpu || l < 0 || !c->pl.split[l]) return tnd_fail(TND_ERR_INTERNAL, "layer %d is not split", l);
    const int32_t *ids;
    int32_t *ric, *rig;
    tnd_status st = pf_settle(c); /* the copies into this layer's slots are queued */
    if (st) return st;
    /* The next layer's predicted ids and, when the CPU's experts run there,
     * their input (A_H) come back with the routing's, behind one wait. The
     * input read later by the CPU part would be copied behind the GPU's
     * experts, queued first, and wait for them: the halves would not overlap. */
    bool queued = false, q;
    const double t0 = c->trace ? tnd_time_s() : 0;
    for (int i = 1; i <= 2 && c->gpu; i++) { /* the predictions: the next layer's, the one after's */
        /* (not where the copies they would choose are not made: below) */
        if (!nd->op.in[i].data || promoted(c, c->m->layers[l + i].gate_exps.id) ||
            (i == 2 && promoted(c, c->m->layers[l + 1].gate_exps.id)))
            continue;
        if ((st = queue_to_host(c, &nd->op.in[i], &q))) return st;
        queued |= q;
    }
    if (c->gpu && !promoted(c, c->m->layers[l].gate_exps.id)) {
        const tnd_tensor h = {.data = c->side[0].act[A_H], .type = TND_TYPE_F32, .ne = {1, 1, 1, 1}};
        if ((st = queue_to_host(c, &h, &q))) return st;
        queued |= q;
    }
    if (queued && (c->valid[A_RI] & (1u << TND_SIDE_CPU)) &&
        ((st = tnd_backend_event_record(c->side[1].be, c->sync_ev, c->side[1].st)) ||
         (st = tnd_backend_event_sync(c->side[1].be, c->sync_ev))))
        return st;
    if ((st = host_act(c, &nd->op.in[0], true, &bi, (void **)&ids)) ||
        (st = host_act(c, &nd->op.out[0], false, &bc, (void **)&ric)) ||
        (st = host_act(c, &nd->op.out[1], false, &bg, (void **)&rig)))
        return st;
    const int32_t *gi = c->exp_gpu + (size_t)l * E;
    /* the CPU experts run from a packed slot (copied ahead): their places there */
    const int32_t *ci = c->experts_ahead && c->cpu_idx && promoted(c, c->m->layers[l].gate_exps.id)
                            ? c->cpu_idx + (size_t)l * E
                            : NULL;
    int64_t n = tnd_tensor_nelem(&nd->op.in[0]);
    int n_cpu = 0, n_pf = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t e = ids[i];
        if (e < 0 || e >= E) return tnd_fail(TND_ERR_INTERNAL, "routing chose expert %d of %d", e, E);
        int32_t g = gi[e];
        if (g < 0 && c->pf_max && (g = tnd_pf_lookup(c, l, e)) >= 0) n_pf++; /* copied here a layer ahead */
        ric[i] = g >= 0 ? -1 : ci ? ci[e] : e;
        rig[i] = g;
        n_cpu += g < 0;
    }
    if (c->trace) trace_add(c, TND_SIDE_CPU, TR_RWAIT, TR_PLAIN, tnd_time_s() - t0);
    if (c->pf_max) {
        /* the next layer's predicted experts start their way to the GPU now
         * (not when the round copies its CPU experts whole: promoted); with
         * CPU experts to run, as their pool's errand: queuing takes ~4 us a
         * copy, three an expert, which would delay their start */
        const bool ahead = nd->op.in[1].data && !promoted(c, c->m->layers[l + 1].gate_exps.id);
        /* and PreSched's Q4 two layers ahead (model/forward.c) */
        const bool ahead2 = ahead && nd->op.in[2].data && !promoted(c, c->m->layers[l + 2].gate_exps.id);
        const int32_t *pred = NULL, *pred2 = NULL;
        if (ahead && (st = host_act(c, &nd->op.in[1], true, &bi, (void **)&pred))) return st;
        if (ahead2 && (st = host_act(c, &nd->op.in[2], true, &bi, (void **)&pred2))) return st;
        const int64_t n_pred = pred ? tnd_tensor_nelem(&nd->op.in[1]) : 0,
                      n_pred2 = pred2 ? tnd_tensor_nelem(&nd->op.in[2]) : 0;
        /* PreSched: some of this layer's CPU experts may load on demand */
        c->pf_cap = -1;
        c->pf_cap2 = 0;
        if (!ci && (st = tnd_pf_presched(c, l, ids, n, ric, rig, &n_cpu, pred, n_pred, pred2, n_pred2))) return st;
        if ((st = tnd_pf_layer_begin(c, l, n_cpu))) return st;
        if (ahead) {
            c->pfq_pred = pred;
            c->pfq_l = l + 1;
            c->pfq_n = n_pred;
            c->pfq_pred2 = pred2;
            c->pfq_n2 = n_pred2;
            c->pfq_pending = true;
            /* (without asynchronous copies, before them: the host's wait for
             * the copies then keeps the CPU experts waiting too) */
            if (n_cpu > 0 && !(c->ablate & TND_ABLATE_SYNC)) tnd_pool_errand(c->m->pool, layer_errand, c);
            else layer_errand(c);
            if (!c->pfq_pending && c->pfq_st) return pf_settle(c);
        }
    }
    if (c->hot_cnt) { /* the live hot-expert table's counts (runtime/hot.c) */
        /* hits: every routing the GPU served, the slots' too (counting only
         * the placement's experts swapped more and ran slower: DECISIONS) */
        for (int64_t i = 0; i < n; i++) {
            c->hot_cnt[(size_t)l * E + ids[i]]++;
            c->hot_win_gpu += rig[i] >= 0;
        }
        c->hot_win_route += (uint64_t)n;
        c->hot_tok[l] += n / TND_MAX(c->m->hp.n_expert_used, 1);
    }
    if (n == c->m->hp.n_expert_used) { /* one token: a decode step */
        const int g = tnd_moe_group(l, c->m->hp.n_layer); /* and per layer group (bench) */
        c->n_route_dec += (uint64_t)n;
        c->n_route_dec_g[g] += (uint64_t)n;
        c->n_route_dec_pf += (uint64_t)n_pf;
        for (int64_t i = 0; i < n; i++) {
            c->n_route_dec_gpu += rig[i] >= 0;
            c->n_route_dec_gpu_g[g] += rig[i] >= 0;
        }
    }
    for (int k = 0; k < 2; k++) {
        int b = k ? bg : bc;
        c->valid[b] = 1u << TND_SIDE_CPU;
        c->wlen[b] = (size_t)n * sizeof(int32_t);
    }
    return TND_OK;
}

/* The routing recorder (moe/record.c): a MOE_ROUTE node's router input
 * (A_H, the FFN's normed input: its router matmul read it just before) and
 * its top-k ids, brought to the host when the GPU wrote them. */
static tnd_status record_route(tnd_ctx *c, const tnd_node *nd) {
    const tnd_tensor *ids = &nd->op.out[1];
    const tnd_region *ri = find_region(c, ids->data), *rh = find_region(c, c->side[0].act[A_H]);
    if (!ri || ri->kind != R_ACT || !rh || rh->kind != R_ACT)
        return tnd_fail(TND_ERR_INTERNAL, "routing outside the activations");
    const int64_t nt = ids->ne[1];
    const size_t off = (size_t)((const char *)ids->data - ri->base), nb = tnd_tensor_nbytes(ids);
    const size_t hb = sizeof(float) * (size_t)c->m->hp.n_embd * (size_t)nt;
    tnd_status st;
    if (c->gpu && ((st = make_current(c, ri->idx, off, nb, TND_SIDE_CPU)) || (st = wait_mapped(c, ri->idx)) ||
                   (st = make_current(c, rh->idx, 0, hb, TND_SIDE_CPU)) || (st = wait_mapped(c, rh->idx))))
        return st;
    tnd_route_rec_add(c->route_rec, nd->layer, (const float *)c->side[0].act[rh->idx],
                      (const int32_t *)((const char *)c->side[0].act[ri->idx] + off), nt);
    return TND_OK;
}

static tnd_status run_node(tnd_ctx *c, const tnd_node *nd, int *prom_seen) {
    double tr = c->trace ? tnd_time_s() : 0;
    /* the GPU's collected work starts before the host turns to CPU work;
     * a split layer's CPU experts start first and launch it in their
     * pool's errand, beside the next layer's copies (a graph launch is
     * ~5-10 us of host time, the GPU's half is the shorter one) */
    tnd_status fs = TND_OK;
    const bool expert_errand = c->pfq_pending && expert_op(&nd->op) && nd->op.in[2].data == c->side[0].act[A_RIC];
    if (c->graphs_on &&
        (nd->op.kind == TND_OP_NONE || tnd_exec_node_side(c, nd, c->cur, false, NULL) == TND_SIDE_CPU)) {
        if (expert_errand) c->pfq_flush = true;
        else fs = tnd_backend_graph_flush(c->side[1].be, c->side[1].st);
    }
    if (fs) return fs;
    if (nd->op.kind == TND_OP_NONE && nd->op.out[0].data) {
        if (c->tl) tnd_tl_node_begin(c, nd, TND_SIDE_CPU, false), tnd_tl_op_begin(c, TND_SIDE_CPU, 0);
        tnd_status st = remap_ids(c, nd);
        if (c->tl) tnd_tl_op_end(c, TND_SIDE_CPU);
        if (c->trace) trace_add(c, TND_SIDE_CPU, TND_OP_NONE, TR_PLAIN, tnd_time_s() - tr);
        return st;
    }
    bool prom;
    int s = tnd_exec_node_side(c, nd, c->cur, false, &prom);
    if (s != c->cur) c->n_switch++;
    c->cur = s;
    if (c->tl) tnd_tl_node_begin(c, nd, s, prom);
    tnd_op op = nd->op;
    tnd_status st;
    int slot = prom ? *prom_seen : -1, ev = prom ? slot % TND_RING_EV : 0;
    for (int i = 0; i < TND_OP_MAX_IN; i++)
        if ((st = rebase(c, &op.in[i], s, true, i == 0 ? slot : -1))) return st;
    bool res = c->gpu && resident_part(c, nd), mapped_out = false;
    /* routing ids the host holds already: a grouping GPU backend needs no read-back */
    if (s == TND_SIDE_GPU && expert_op(&op)) {
        const tnd_region *r = find_region(c, nd->op.in[2].data);
        if (r && r->kind == R_ACT && (c->valid[r->idx] & (1u << TND_SIDE_CPU)))
            op.p.mmid.ids_host =
                (const int32_t *)((const char *)c->side[0].act[r->idx] + ((const char *)nd->op.in[2].data - r->base));
    }
    /* the GPU holds only its experts of a split tensor, compacted; a
     * packed slot only the CPU's */
    if (res) op.in[0].ne[2] = c->n_compact[nd->layer];
    else if (prom && packed_ahead(c, nd)) op.in[0].ne[2] = c->n_cpu_idx[nd->layer];
    if (op.kind == TND_OP_MOE_GLU || op.kind == TND_OP_MOE_FFN) /* the up (and down) weight, held as the gate's */
        op.in[3].ne[2] = op.in[0].ne[2];
    if (op.kind == TND_OP_MOE_FFN) op.in[4].ne[2] = op.in[0].ne[2];
    /* the CPU part of a split layer writes rows the GPU part leaves alone */
    bool disjoint = c->gpu && !res && expert_op(&nd->op) && nd->op.in[2].data == c->side[0].act[A_RIC];
    for (int i = 0; i < TND_OP_MAX_OUT; i++) {
        tnd_tensor *o = &op.out[i];
        if (!o->data) continue;
        const tnd_region *r = find_region(c, o->data);
        /* a CPU write must not race a queued GPU copy out of the same buffer */
        if (r && r->kind == R_ACT && s == TND_SIDE_CPU && c->host_read_pending[r->idx]) {
            tnd_backend *g = c->side[1].be;
            if ((st = tnd_backend_event_sync(g, c->host_read[r->idx]))) return st;
            c->host_read_pending[r->idx] = false;
        }
        /* nor a GPU write into the host buffer, unless their rows are disjoint */
        if (r && r->kind == R_ACT && s == TND_SIDE_CPU && !disjoint && (st = wait_mapped(c, r->idx))) return st;
        if ((st = rebase(c, o, s, false, -1))) return st;
        /* the GPU part's expert outputs go where the CPU part's go */
        if (res && r && r->kind == R_ACT && r->idx == A_EY && !promoted(c, nd->sid) && c->act_dev[A_EY]) {
            o->data = (char *)c->act_dev[A_EY] + ((const char *)nd->op.out[i].data - r->base);
            mapped_out = true;
        }
    }
    tnd_side *sd = &c->side[s];
    int part = res ? TR_SPLIT_GPU : disjoint ? TR_SPLIT_CPU : prom ? TR_PROM : TR_PLAIN;
    if (c->trace) {
        if (c->gpu && (st = trace_sync(c, TND_SIDE_GPU))) return st;
        trace_add(c, s, TR_ACT, part, tnd_time_s() - tr);
    }
    /* an expert tensor's copy is queued now that routing has run */
    if (prom && c->prom_next == *prom_seen && (st = prefetch(c, *prom_seen, true))) return st;
    if (prom && (st = tnd_backend_stream_wait(sd->be, sd->st, c->slot_ready[ev]))) return st;
    if (c->trace_mode == 1 && prom) {
        tr = tnd_time_s();
        if ((st = tnd_backend_event_sync(sd->be, c->slot_ready[ev]))) return st;
        trace_add(c, s, TR_WCOPY, part, tnd_time_s() - tr);
    }
    /* the recorder: a CPU weight op's time against the perf DB's */
    const bool rec = c->adapt && c->adapt_cpu && c->perf && s == TND_SIDE_CPU && nd->sid >= 0 &&
                     !tnd_slice_small(c->m->slices[nd->sid]) && !tnd_slice_split(c->m, &c->pl, nd->sid, NULL);
    const int nt_op = nd->sid >= 0 && nd->sid == c->m->output.id ? 1 : c->round_nt;
    const int up_sid = op.kind == TND_OP_MOE_GLU || op.kind == TND_OP_MOE_FFN ? fused_sid(c, nd, 3) : -1;
    const int down_sid = op.kind == TND_OP_MOE_FFN ? fused_sid(c, nd, 4) : -1;
    double t_op = s == TND_SIDE_CPU ? tnd_time_s() : 0;
    if (c->trace) tr = tnd_time_s();
    if (c->tl) tnd_tl_op_begin(c, s, prom ? c->copy_bytes[ev] : 0);
    if ((st = tnd_backend_op_run(sd->be, &op, sd->st))) return tnd_fail_wrap(st, "%s: ", tnd_op_name(op.kind));
    if (c->pfq_flush) tnd_pool_errand_flush(c->m->pool); /* the op ran without the pool: launch the GPU's half now */
    if (c->tl) tnd_tl_op_end(c, s);
    if (s == TND_SIDE_CPU) {
        double dt = tnd_time_s() - t_op;
        c->busy_cpu += dt;
        if (disjoint) c->pf_cpu_s += dt; /* a split layer's CPU experts (prefetch.c's balance) */
        if (rec) { /* a MOE_GLU: its gate's and up's slices (SILU_MUL, weightless, goes unpredicted); a MOE_FFN
                    * its down's too */
            c->r_cpu_meas += dt;
            c->r_cpu_pred += tnd_perf_slice_time(c->perf, nd->sid, TND_SIDE_CPU, nt_op);
            if (up_sid >= 0) c->r_cpu_pred += tnd_perf_slice_time(c->perf, up_sid, TND_SIDE_CPU, nt_op);
            if (down_sid >= 0) c->r_cpu_pred += tnd_perf_slice_time(c->perf, down_sid, TND_SIDE_CPU, nt_op);
        }
    } else if (c->perf) { /* the GPU's busy time, by the perf DB (its ops run asynchronously) */
        const double other = tnd_perf_other_time(c->perf, TND_SIDE_GPU, c->round_nt) / OTHER_OPS;
        if (nd->sid >= 0 && !tnd_slice_small(c->m->slices[nd->sid]) && !res) {
            c->busy_gpu += tnd_perf_gpu_time(c->m, c->perf, nd->sid, nt_op);
            if (up_sid >= 0) /* and its up's slice and SILU_MUL (a MOE_FFN: and its down's) */
                c->busy_gpu += tnd_perf_gpu_time(c->m, c->perf, up_sid, nt_op) + other;
            if (down_sid >= 0) c->busy_gpu += tnd_perf_gpu_time(c->m, c->perf, down_sid, nt_op);
        } else if (op.kind == TND_OP_ATTN) {
            c->busy_gpu += tnd_perf_attn_time(c->perf, TND_SIDE_GPU, c->round_nt, c->n_past);
        } else { /* a ROPE_KV stands for four of the recipe's other ops, a (resident) MOE_GLU three */
            c->busy_gpu += other * (op.kind == TND_OP_ROPE_KV ? 4 : op.kind == TND_OP_MOE_GLU ? 3
                                    : op.kind == TND_OP_MOE_FFN ? 4
                                    : op.kind == TND_OP_MOE_SUM_NORM || op.kind == TND_OP_MOE_ROUTE_PAIR ? 2 : 1);
        }
    }
    if (c->trace) {
        if ((st = trace_sync(c, s))) return st;
        trace_add(c, s, op.kind, part, tnd_time_s() - tr);
    }
    for (int i = 0; i < TND_OP_MAX_OUT; i++) {
        const tnd_tensor *o = &nd->op.out[i];
        if (!o->data) continue;
        const tnd_region *r = find_region(c, o->data);
        if (r && r->kind == R_ACT) {
            c->valid[r->idx] = (uint8_t)(1u << (mapped_out ? TND_SIDE_CPU : s));
            c->wlen[r->idx] = (size_t)((const char *)o->data - r->base) + tnd_tensor_nbytes(o);
            if (mapped_out) {
                if ((st = tnd_backend_event_record(sd->be, c->mapped_ev, sd->st))) return st;
                c->mapped_pending[r->idx] = true;
            } else if (res && r->idx == A_EY && !promoted(c, nd->sid)) {
                /* pageable A_EY: the GPU part's rows reach the host before the
                 * CPU part writes its own (no overlap, but right) */
                if ((st = make_current(c, A_EY, 0, c->wlen[A_EY], TND_SIDE_CPU))) return st;
            }
        }
    }
    /* the next layer's predicted routing (model/forward.c) is not this layer's */
    const bool route = (nd->op.kind == TND_OP_MOE_ROUTE || nd->op.kind == TND_OP_MOE_ROUTE_PAIR) && nd->layer >= 0 &&
                       nd->op.out[1].data == c->side[0].act[A_RI];
    if (c->expert_hits && route) { /* calibration: count routings */
        const tnd_tensor *ids = &nd->op.out[1];
        const tnd_region *r = find_region(c, ids->data);
        size_t off = (size_t)((const char *)ids->data - r->base), nb = tnd_tensor_nbytes(ids);
        if (c->gpu && (st = make_current(c, r->idx, off, nb, TND_SIDE_CPU))) return st;
        const int32_t *v = (const int32_t *)((const char *)c->side[0].act[r->idx] + off);
        int E = c->m->hp.n_expert;
        for (size_t i = 0; i < nb / sizeof(int32_t); i++)
            if (v[i] >= 0 && v[i] < E) c->expert_hits[(size_t)nd->layer * E + v[i]]++;
    }
    if (c->route_rec && route && (st = record_route(c, nd))) return st;
    if (prom) {
        if ((st = tnd_backend_event_record(sd->be, c->slot_free[ev], sd->st))) return st;
        (*prom_seen)++;
        if ((st = prefetch(c, *prom_seen, false))) return st;
    }
    return TND_OK;
}

/* Nodes a and b (next in the list) as one MATMUL_PAIR (out) where that
 * saves a GPU launch: two MATMULs over the same x of one or two tokens (a
 * decode step's gate and up, q and k), both run from the GPU's own copy
 * of their weights (a promoted weight has a slot of its own), and the GPU
 * backend takes the pair (asked once per slice and token count). */
static bool fuse_pair(tnd_ctx *c, const tnd_node *a, const tnd_node *b, tnd_node *out) {
    const tnd_tensor *x = &a->op.in[1];
    const int64_t nt = x->ne[1] * TND_MAX(x->ne[2], 1) * TND_MAX(x->ne[3], 1);
    if (!c->gpu || a->op.kind != TND_OP_MATMUL || b->op.kind != TND_OP_MATMUL || a->sid < 0 || b->sid < 0 ||
        nt < 1 || nt > 2 || x->data != b->op.in[1].data || x->type != b->op.in[1].type ||
        memcmp(x->ne, b->op.in[1].ne, sizeof x->ne) != 0)
        return false;
    /* one launch reads x and writes both y at once: a must not write what b reads */
    const tnd_tensor *ya = &a->op.out[0], *yb = &b->op.out[0];
    if (tnd_tensors_overlap(ya, x) || tnd_tensors_overlap(ya, yb) || tnd_tensors_overlap(yb, x)) return false;
    bool pa, pb;
    if (tnd_exec_node_side(c, a, c->cur, false, &pa) != TND_SIDE_GPU || pa ||
        tnd_exec_node_side(c, b, TND_SIDE_GPU, false, &pb) != TND_SIDE_GPU || pb)
        return false;
    *out = *a;
    out->op.kind = TND_OP_MATMUL_PAIR;
    out->op.in[2] = b->op.in[0];
    out->op.out[1] = b->op.out[0];
    if (!c->pair_ok) {
        if (!(c->pair_ok = malloc(2 * (size_t)c->m->n_slices))) return false; /* no pairs, no harm */
        memset(c->pair_ok, -1, 2 * (size_t)c->m->n_slices);
    }
    int8_t *ok = &c->pair_ok[2 * a->sid + nt - 1];
    if (*ok < 0) {
        tnd_backend *g = c->side[1].be;
        *ok = g->iface->op_supported && tnd_backend_op_supported(g, &out->op) == TND_OK;
        if (!*ok) tnd_clear_error(); /* a refusal is an answer here, not an error */
    }
    return *ok == 1;
}

/* Nodes i..i+3 as one ROPE_KV (out) where that saves the GPU three
 * launches: a decode-sized round's ROPE q, ROPE k and K/V stores by
 * position (backend.h), the ropes on the GPU, the layer's KV cache there
 * too, and the GPU backend takes the op (asked once: the shapes are a
 * model's, the same in every layer and round). TND_FUSE=0 keeps the four
 * launches, as it keeps the recipe's own fused ops. */
static bool fuse_rope_kv(tnd_ctx *c, int i, tnd_node *out) {
    if (!c->gpu || i + 3 >= c->g.n || c->rope_kv_ok < 0 || c->g.nodes[i].op.kind != TND_OP_ROPE ||
        !tnd_config_get()->fuse)
        return false;
    const tnd_node *n = &c->g.nodes[i];
    if (n[0].layer < 0 || n[3].layer != n[0].layer || n[2].pin != TND_PIN_KV || n[3].pin != TND_PIN_KV ||
        c->pl.kv[n[0].layer] != TND_SIDE_GPU || tnd_exec_node_side(c, &n[0], c->cur, false, NULL) != TND_SIDE_GPU)
        return false;
    /* the ops are copied only now: every node of every round passes the checks above */
    tnd_op part[4];
    for (int j = 0; j < 4; j++) part[j] = n[j].op;
    if (!tnd_op_rope_kv_fuse(part, &out->op)) return false;
    out->sid = -1, out->layer = n[0].layer, out->pin = TND_PIN_KV;
    if (!c->rope_kv_ok) {
        c->rope_kv_ok = tnd_backend_op_supported(c->side[1].be, &out->op) == TND_OK ? 1 : -1;
        if (c->rope_kv_ok < 0) tnd_clear_error(); /* a refusal is an answer here, not an error */
    }
    return c->rope_kv_ok > 0;
}

/* Nodes i and i+1 as one MOE_SUM_NORM or MOE_ROUTE_PAIR (out) where that
 * saves the GPU a launch on a decode step's critical path: an MoE layer's
 * expert sum and the residual add + norm after it, or its routing and the
 * next layer's predicted one (model/forward.c); both nodes of one layer on
 * the GPU, and the GPU backend takes the op (asked once a kind: the shapes
 * are a model's). TND_FUSE=0 keeps the two launches. */
static bool fuse_two(tnd_ctx *c, int i, tnd_node *out) {
    if (!c->gpu || i + 1 >= c->g.n || !tnd_config_get()->fuse) return false;
    const tnd_node *n = &c->g.nodes[i];
    const tnd_op_kind k0 = n[0].op.kind, k1 = n[1].op.kind;
    const bool sum = k0 == TND_OP_MOE_SUM && k1 == TND_OP_RMS_NORM;
    if (!sum && !(k0 == TND_OP_MOE_ROUTE && k1 == TND_OP_MOE_ROUTE)) return false;
    int8_t *ok = &c->two_ok[sum ? 0 : 1];
    if (*ok < 0 || n[0].layer != n[1].layer || n[0].sid >= 0 || n[1].sid >= 0 ||
        tnd_exec_node_side(c, &n[0], c->cur, false, NULL) != TND_SIDE_GPU ||
        tnd_exec_node_side(c, &n[1], TND_SIDE_GPU, false, NULL) != TND_SIDE_GPU)
        return false;
    const tnd_op part[2] = {n[0].op, n[1].op};
    if (!(sum ? tnd_op_sum_norm_fuse(part, &out->op) : tnd_op_route_pair_fuse(part, &out->op))) return false;
    out->sid = -1, out->layer = n[0].layer, out->pin = n[0].pin;
    if (!*ok) {
        *ok = tnd_backend_op_supported(c->side[1].be, &out->op) == TND_OK ? 1 : -1;
        if (*ok < 0) tnd_clear_error(); /* a refusal is an answer here, not an error */
    }
    return *ok > 0;
}

/* Nodes i..i+2 as one MOE_GLU (out) where their side takes it: an MoE
 * FFN's gate and up MATMUL_IDs and their SILU_MUL (backend.h), the three
 * on one side (the SILU_MUL follows the up's), neither matmul promoted (a
 * promoted slice is read from its own ring place, which the op has no room
 * to name), and that side's backend takes the op (asked once a side: the
 * shapes are a model's). Everything run_node does for an expert op holds
 * for the fused one: it names the gate's slice, in[2] the same ids, and it
 * writes both outputs. TND_FUSE=0: the three ops. */
static bool fuse_glu(tnd_ctx *c, int i, tnd_node *out) {
    if (i + 2 >= c->g.n || c->g.nodes[i].op.kind != TND_OP_MATMUL_ID || !tnd_config_get()->fuse) return false;
    const tnd_node *n = &c->g.nodes[i];
    if (n[1].op.kind != TND_OP_MATMUL_ID || n[2].op.kind != TND_OP_SILU_MUL || n[0].layer < 0 ||
        n[1].layer != n[0].layer || n[2].layer != n[0].layer || n[0].sid < 0 || n[1].sid < 0 ||
        n[2].pin != TND_PIN_FOLLOW)
        return false;
    bool p0, p1;
    const int s = tnd_exec_node_side(c, &n[0], c->cur, false, &p0);
    if (p0 || tnd_exec_node_side(c, &n[1], s, false, &p1) != s || p1 ||
        resident_part(c, &n[0]) != resident_part(c, &n[1]))
        return false;
    int8_t *ok = &c->glu_ok[s];
    if (*ok < 0) return false;
    tnd_op part[3];
    for (int j = 0; j < 3; j++) part[j] = n[j].op;
    if (!tnd_op_moe_glu_fuse(part, &out->op)) return false;
    out->sid = n[0].sid, out->layer = n[0].layer, out->pin = n[0].pin;
    if (!*ok) {
        *ok = tnd_backend_op_supported(c->side[s].be, &out->op) == TND_OK ? 1 : -1;
        if (*ok < 0) tnd_clear_error(); /* a refusal is an answer here, not an error */
    }
    return *ok > 0;
}

/* The MOE_GLU that fuse_glu made of nodes i.. (out) and the down
 * MATMUL_ID after them as one MOE_FFN (out), where the down reads their G
 * with their ids on the same side, not promoted, and that side's backend
 * takes the op (asked once a side). The CPU then runs the down's grains in
 * the GLU's region: each waits only for its own expert's G rows, where the
 * two regions waited for all. */
static bool fuse_ffn(tnd_ctx *c, int i, tnd_node *out) {
    if (i + 3 >= c->g.n) return false;
    const tnd_node *d = &c->g.nodes[i + 3];
    bool p;
    const int s = tnd_exec_node_side(c, &c->g.nodes[i], c->cur, false, NULL);
    if (d->op.kind != TND_OP_MATMUL_ID || d->layer != out->layer || d->sid < 0 || d->pin != TND_PIN_FOLLOW ||
        tnd_exec_node_side(c, d, s, false, &p) != s || p || resident_part(c, d) != resident_part(c, &c->g.nodes[i]))
        return false;
    int8_t *ok = &c->ffn_ok[s];
    if (*ok < 0) return false;
    const tnd_op part[2] = {out->op, d->op};
    tnd_op f;
    if (!tnd_op_moe_ffn_fuse(part, &f)) return false;
    if (!*ok) {
        *ok = tnd_backend_op_supported(c->side[s].be, &f) == TND_OK ? 1 : -1;
        if (*ok < 0) tnd_clear_error();
    }
    if (*ok < 0) return false;
    out->op = f;
    return true;
}

/* Whether every op of the round runs on the GPU (the host's own bookkeeping,
 * NONE nodes, aside): the plan holds the whole model there. */
static bool round_gpu_only(const tnd_ctx *c) {
    for (int i = 0; i < c->g.n; i++) {
        const tnd_node *nd = &c->g.nodes[i];
        if (nd->op.kind != TND_OP_NONE && tnd_exec_node_side(c, nd, TND_SIDE_GPU, false, NULL) != TND_SIDE_GPU)
            return false;
    }
    return true;
}

/* The round's last (up to TND_RING_EV) weight copies as measured (events)
 * and predicted, and their bytes; 0s when the backend cannot time events. */
static void measure_copies(tnd_ctx *c, double *meas, double *pred, double *bytes) {
    *meas = *pred = *bytes = 0;
    tnd_backend *g = c->side[1].be;
    for (int j = TND_MAX(c->n_prom - TND_RING_EV, 0); j < c->n_prom && j < c->prom_next; j++) {
        float ms;
        if (tnd_backend_event_elapsed(g, c->copy_start[j % TND_RING_EV], c->slot_ready[j % TND_RING_EV], &ms)) {
            tnd_clear_error(); /* no event timing: the link goes unmeasured */
            *meas = *pred = *bytes = 0;
            return;
        }
        *meas += ms * 1e-3;
        *pred += c->copy_pred[j % TND_RING_EV];
        *bytes += (double)c->copy_bytes[j % TND_RING_EV];
    }
}

/* Algorithm 3 after a round of nt tokens that began at t0: the round's
 * measurements go to the recorder, and when the rule says so the next
 * round chooses its promotions again with the live factors. */
static tnd_status record_round(tnd_ctx *c, int nt, double t0, double copy_meas, double copy_pred) {
    double now = tnd_time_s();
    tnd_adapt *a = &c->ad[nt > 1];
    if (tnd_adapt_observe(a, now, now - t0, c->r_cpu_meas, c->r_cpu_pred, copy_meas, copy_pred)) {
        c->n_replans++;
        c->prom_key_nt = 0;
        if (c->verbose)
            fprintf(stderr, "[re-plan %llu (%s): measured CPU x%.2f, PCIe x%.2f of the profile]\n",
                    (unsigned long long)c->n_replans, nt > 1 ? "prefill" : "decode", a->cpu, a->pcie);
    }
    return TND_OK;
}

tnd_status tnd_exec_round(tnd_ctx *c, int nt, int n_logits, float *logits) {
    const size_t logit_bytes = sizeof(float) * (size_t)c->m->hp.n_vocab * (size_t)n_logits;
    const double t0 = tnd_time_s();
    const uint64_t w0 = c->w_copy_bytes, a0 = c->act_copy_bytes;
    c->round_nt = nt;
    c->round_decode = n_logits == nt;
    c->r_cpu_meas = c->r_cpu_pred = 0;
    memset(c->valid, 0, sizeof c->valid);
    memset(c->wlen, 0, sizeof c->wlen);
    /* the caller wrote ids, positions (and a batched round's KV rows) into the host buffers */
    c->valid[A_IDS] = c->valid[A_POS] = c->valid[A_ROW] = 1u << TND_SIDE_CPU;
    c->wlen[A_IDS] = c->wlen[A_POS] = c->wlen[A_ROW] = sizeof(int32_t) * (size_t)nt;
    c->cur = TND_SIDE_CPU;
    c->n_prom = c->prom_next = 0;
    c->experts_ahead = tnd_perf_experts_ahead(c->m, nt);
    c->pf_round++;
    c->pf_last = 0;
    c->pf_cpu_n = 0;
    c->pf_cpu_s = c->pf_wait_s = 0;
    c->pf_queued = false;
    c->pf_link_free = 0; /* the last round drained the transfer stream */
    c->ps_behind = -1;
    c->ps_cpu_e = c->ps_next_e = 0;
    c->ps_od_s = c->ps_od_next = 0;
    tnd_status st = TND_OK;
    if (c->trace_mode && !c->trace && !(c->trace = tnd_calloc(2 * 2 * TR_OPS * TR_PARTS, sizeof *c->trace)))
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    c->trace_prefill = nt > 1;
    if (c->tl) tnd_tl_round_begin(c);
    if (c->lay.n_slots && c->pl.promote_auto) {
        if (!c->round_prom && !(c->round_prom = tnd_calloc((size_t)c->m->n_slices + 1, 1)))
            return tnd_fail(TND_ERR_NOMEM, "out of memory");
        if ((st = choose_round_promotions(c, nt))) return st;
    }
    if (c->lay.n_slots) {
        if (c->prom_cap < c->g.n) {
            int *p = realloc(c->prom, sizeof *p * (size_t)c->g.n);
            if (p) c->prom = p;
            uint64_t *o = realloc(c->prom_off, sizeof *o * (size_t)c->g.n), *l = o ? realloc(c->prom_len, sizeof *l * (size_t)c->g.n) : NULL;
            if (o) c->prom_off = o;
            if (l) c->prom_len = l;
            if (!p || !o || !l) return tnd_fail(TND_ERR_NOMEM, "out of memory");
            c->prom_cap = c->g.n;
        }
        if (c->experts_ahead && c->exp_gpu && (st = number_cpu_experts(c))) return st;
        for (int i = 0; i < c->g.n; i++)
            if (node_promoted(c, &c->g.nodes[i])) c->prom[c->n_prom++] = i;
        ring_place(c);
        if (!c->chosen && !(c->chosen = tnd_calloc((size_t)TND_MAX(c->m->hp.n_expert, 1), 1)))
            return tnd_fail(TND_ERR_NOMEM, "out of memory");
        st = prefetch(c, 0, false);
    }
    /* TND_CUDA_GRAPHS=1: the GPU segments of a decode-sized round are
     * collected and launched as CUDA graphs (backend.h: graph_defer), each
     * replayed from step to step (positions are read from memory); auto
     * (the default): rounds with no CPU work, where a graph replaces a
     * whole step's launches (synth qwen3-8b on the H200: 185 -> 197 tok/s),
     * rounds of a model with split MoE layers, whose per-layer segments
     * are the same every step (30B-A3B at 30%: 57.0 -> 58.9 random, 68.6 ->
     * 71.7 text), and dense hybrid decode steps (14B at 50%: 23.7 -> 25.4).
     * Dense hybrid rounds of 2-8 tokens stay op by op: not measured
     * (docs/DECISIONS.md). TND_TRACE=1 and the --trace timeline time every
     * node alone, so they launch them one by one */
    const int graphs = tnd_config_get()->cuda_graphs;
    c->graphs_on = c->gpu && !st && nt <= TND_GRAPH_MAX_TOK && c->trace_mode != 1 && !c->tl &&
                   (graphs == TND_CFG_GRAPHS_ON ||
                    (graphs == TND_CFG_GRAPHS_AUTO && (nt == 1 || c->exp_gpu || round_gpu_only(c))));
    if (c->graphs_on) st = tnd_backend_graph_defer(c->side[1].be, c->side[1].st, true);
    int prom_seen = 0;
    for (int i = 0; !st && i < c->g.n; i++) {
        tnd_node pair;
        if (i + 1 < c->g.n && fuse_pair(c, &c->g.nodes[i], &c->g.nodes[i + 1], &pair))
            st = run_node(c, &pair, &prom_seen), i++, c->n_pairs++;
        else if (fuse_rope_kv(c, i, &pair))
            st = run_node(c, &pair, &prom_seen), i += 3, c->n_rope_kv++;
        else if (fuse_two(c, i, &pair))
            st = run_node(c, &pair, &prom_seen), i++, c->n_two++;
        else if (fuse_glu(c, i, &pair)) {
            const bool ffn = fuse_ffn(c, i, &pair);
            st = run_node(c, &pair, &prom_seen), i += ffn ? 3 : 2, c->n_glu++, c->n_ffn += ffn;
        }
        else
            st = run_node(c, &c->g.nodes[i], &prom_seen);
    }
    {
        tnd_status ps = pf_settle(c); /* queued before the drain, even after a failure */
        if (!st) st = ps;
    }
    double tr = c->trace ? tnd_time_s() : 0; /* the logits' copy and the drain: the round's tail */
    if (!st && n_logits && c->gpu) st = make_current(c, A_LOGITS, 0, logit_bytes, TND_SIDE_CPU);
    if (c->gpu) {
        /* always drain, so no queued work outlives a failed round */
        tnd_backend *g = c->side[1].be;
        tnd_status s0 = c->graphs_on ? tnd_backend_graph_defer(g, c->side[1].st, false) : TND_OK;
        c->graphs_on = false;
        /* the transfer stream has work only when the round queued copies */
        tnd_status s1 = tnd_backend_stream_sync(g, c->side[1].st),
                   s2 = c->prom_next || c->pf_queued ? tnd_xfer_drain(c) : TND_OK;
        if (!st) st = s0 ? s0 : s1 ? s1 : s2;
        memset(c->host_read_pending, 0, sizeof c->host_read_pending);
        memset(c->mapped_pending, 0, sizeof c->mapped_pending);
        if (c->trace) trace_add(c, TND_SIDE_GPU, TR_DRAIN, TR_PLAIN, tnd_time_s() - tr);
    }
    if (!st && n_logits) memcpy(logits ? logits : c->logits, c->side[0].act[A_LOGITS], logit_bytes);
    double cm = 0, cp = 0, cb = 0;
    if (!st && c->n_prom) measure_copies(c, &cm, &cp, &cb);
    /* busy times: the copies measured stand for all of the round's weight bytes */
    c->round_s = tnd_time_s() - t0;
    c->busy_wall += c->round_s;
    if (cb > 0) c->busy_pcie += cm * (double)(c->w_copy_bytes - w0) / cb;
    if (c->perf && c->perf->b_pcie > 0) c->busy_pcie += (double)(c->act_copy_bytes - a0) / c->perf->b_pcie;
    if (!st && c->adapt && c->perf && c->pl.promote_auto && c->lay.n_slots) st = record_round(c, nt, t0, cm, cp);
    if (c->tl) tnd_tl_round_end(c, nt, c->n_past);
    return st;
}
