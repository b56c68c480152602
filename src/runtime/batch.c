/* Sequences of a context and the batched round (docs/ARCHITECTURE.md:
 * Sequences). A context has n_seq_max slots; sequence s owns rows
 * [s * n_ctx, (s + 1) * n_ctx) of every layer's KV cache, wherever the plan
 * keeps that layer's. Tokens fed to a sequence wait in its queue; a step
 * takes up to n_batch of them from all the queues into one round (the
 * recipe's tnd_recipe_emit_batch), so each weight is read once for all the
 * sequences, and each token's attention reads its own slot (its row there
 * goes to A_ROW). Sequence 0 is also tnd_ctx_eval's: its n_past is the
 * context's. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "util.h"

tnd_status tnd_seq_alloc(tnd_ctx *c) {
    c->seq = tnd_calloc((size_t)c->n_seq_max, sizeof *c->seq);
    c->seq_logits = malloc(sizeof(float) * (size_t)c->m->hp.n_vocab * (size_t)c->n_seq_max);
    if (!c->seq || !c->seq_logits) return tnd_fail(TND_ERR_NOMEM, "out of memory for %d sequences", c->n_seq_max);
    return TND_OK;
}

void tnd_seq_release(tnd_ctx *c) {
    for (int s = 0; c->seq && s < c->n_seq_max; s++) free(c->seq[s].q);
    free(c->seq);
    free(c->seq_logits);
    c->seq = NULL;
    c->seq_logits = NULL;
}

static int *past_of(tnd_ctx *c, int s) { return s ? &c->seq[s].n_past : &c->n_past; }

static bool seq_ok(const tnd_ctx *c, int s) { return c && c->seq && s >= 0 && s < c->n_seq_max && c->seq[s].live; }

static tnd_status no_seq(const tnd_ctx *c, int s) {
    if (s < 0 || s >= c->n_seq_max)
        return tnd_fail(TND_ERR_ARG, "sequence %d does not exist (ids 0 .. %d)", s, c->n_seq_max - 1);
    return tnd_fail(TND_ERR_ARG, "sequence %d does not exist (freed, or never made with tnd_seq_new)", s);
}

int tnd_ctx_n_seq_max(const tnd_ctx *c) { return c->n_seq_max; }

tnd_status tnd_seq_new(tnd_ctx *c, int *seq) {
    for (int s = 0; s < c->n_seq_max; s++) {
        if (c->seq[s].live) continue;
        c->seq[s].live = true;
        c->seq[s].nq = 0;
        c->seq[s].has_logits = false;
        *past_of(c, s) = 0;
        *seq = s;
        return TND_OK;
    }
    return tnd_fail(TND_ERR_LIMIT, "all %d sequence slots are in use (free one, or make the context with a larger "
                    "n_seq_max)", c->n_seq_max);
}

tnd_status tnd_seq_free(tnd_ctx *c, int seq) {
    if (!seq_ok(c, seq)) return no_seq(c, seq);
    tnd_seq *q = &c->seq[seq];
    q->live = false;
    q->nq = 0;
    q->has_logits = false;
    *past_of(c, seq) = 0;
    return TND_OK;
}

tnd_status tnd_seq_truncate(tnd_ctx *c, int seq, int n) {
    if (!seq_ok(c, seq)) return no_seq(c, seq);
    const int past = *past_of(c, seq);
    if (n < 0 || n > past) return tnd_fail(TND_ERR_ARG, "cannot truncate sequence %d from %d tokens to %d", seq, past, n);
    /* rows past n are written again by what is fed next; none is read before */
    *past_of(c, seq) = n;
    c->seq[seq].nq = 0; /* tokens fed but not evaluated follow the rows dropped */
    c->seq[seq].has_logits = false;
    return TND_OK;
}

int tnd_seq_n_past(const tnd_ctx *c, int seq) { return seq_ok(c, seq) ? *past_of((tnd_ctx *)c, seq) : -1; }

int tnd_seq_n_queued(const tnd_ctx *c, int seq) { return seq_ok(c, seq) ? c->seq[seq].nq : -1; }

const float *tnd_seq_logits(const tnd_ctx *c, int seq) {
    if (!seq_ok(c, seq) || !c->seq[seq].has_logits) return NULL;
    return c->seq_logits + (size_t)seq * (size_t)c->m->hp.n_vocab;
}

tnd_status tnd_seq_feed(tnd_ctx *c, int seq, const int32_t *tokens, int n) {
    if (!seq_ok(c, seq)) return no_seq(c, seq);
    if (n <= 0 || !tokens) return tnd_fail(TND_ERR_ARG, "no tokens to feed to sequence %d", seq);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab)
            return tnd_fail(TND_ERR_ARG, "token id %d out of range [0, %d)", tokens[i], c->m->hp.n_vocab);
    tnd_seq *q = &c->seq[seq];
    int past = *past_of(c, seq);
    if ((int64_t)past + q->nq + n > c->n_ctx)
        return tnd_fail(TND_ERR_LIMIT, "sequence %d full: %d tokens in its cache + %d queued + %d new > context "
                        "length %d", seq, past, q->nq, n, c->n_ctx);
    if (q->nq + n > q->q_cap) {
        int cap = TND_MAX(q->nq + n, 2 * q->q_cap);
        int32_t *p = realloc(q->q, sizeof *p * (size_t)cap);
        if (!p) return tnd_fail(TND_ERR_NOMEM, "out of memory");
        q->q = p;
        q->q_cap = cap;
    }
    memcpy(q->q + q->nq, tokens, sizeof *tokens * (size_t)n);
    q->nq += n;
    q->has_logits = false;
    return TND_OK;
}

/* How many tokens of each queue this round takes (take[s]): one from each
 * waiting sequence first, offered from c->seq_rr on, so that no sequence
 * waits behind others' long prompts for more than a few rounds, then the
 * rest in turn while the round has room. */
static int plan_round(const tnd_ctx *c, int *take) {
    int room = c->n_batch, n = c->n_seq_max;
    memset(take, 0, sizeof *take * (size_t)n);
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n && room > 0; k++) {
            int s = (c->seq_rr + k) % n;
            const tnd_seq *q = &c->seq[s];
            if (!q->live || q->nq == take[s]) continue;
            int t = pass == 0 ? 1 : TND_MIN(q->nq - take[s], room);
            take[s] += t;
            room -= t;
        }
    return c->n_batch - room;
}

tnd_status tnd_ctx_step(tnd_ctx *c) {
    const int n = c->n_seq_max;
    int *take = tnd_calloc((size_t)n, sizeof *take);
    tnd_seg *sg = tnd_calloc((size_t)n, sizeof *sg);
    tnd_status st = TND_OK;
    if (!take || !sg) {
        st = tnd_fail(TND_ERR_NOMEM, "out of memory");
        goto done;
    }
    int nt = plan_round(c, take);
    if (!nt) goto done;
    /* the round's tokens in sequence order, with their positions */
    int32_t *ids = c->side[0].act[A_IDS], *pos = c->side[0].act[A_POS], *row = c->side[0].act[A_ROW];
    int n_seg = 0, off = 0, n_out = 0;
    c->depth = 0;
    for (int s = 0; s < n; s++) {
        if (!take[s]) continue;
        const tnd_seq *q = &c->seq[s];
        int p0 = *past_of(c, s);
        sg[n_seg] = (tnd_seg){.seq = s, .off = off, .n = take[s], .pos0 = p0, .logits = take[s] == q->nq};
        n_out += sg[n_seg].logits;
        memcpy(ids + off, q->q, sizeof *ids * (size_t)take[s]);
        for (int t = 0; t < take[s]; t++) pos[off + t] = p0 + t, row[off + t] = s * c->n_ctx + p0 + t;
        c->depth = TND_MAX(c->depth, p0);
        off += take[s];
        n_seg++;
    }
    tnd_recipe r;
    tnd_ctx_recipe(c, &r);
    if ((st = tnd_recipe_emit_batch(&r, sg, n_seg)) || (st = tnd_exec_round(c, nt, n_out, NULL))) goto done;
    /* the round ran: the sequences advance, and those it finished get logits */
    const size_t nv = (size_t)c->m->hp.n_vocab;
    for (int i = 0, lrow = 0; i < n_seg; i++) {
        tnd_seq *q = &c->seq[sg[i].seq];
        *past_of(c, sg[i].seq) += sg[i].n;
        q->nq -= sg[i].n;
        memmove(q->q, q->q + sg[i].n, sizeof *q->q * (size_t)q->nq);
        if (sg[i].logits) {
            memcpy(c->seq_logits + (size_t)sg[i].seq * nv, c->logits + (size_t)lrow++ * nv, sizeof(float) * nv);
            q->has_logits = true;
        }
    }
    c->seq_rr = (c->seq_rr + 1) % n;
    /* between rounds: may move experts, or the weights (fail only if the context cannot go on) */
    st = tnd_hot_after_round(c);
    if (!st) st = tnd_shared_after_round(c);
done:
    free(take);
    free(sg);
    return st;
}
