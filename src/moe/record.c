/* Routing records (moe.h): what the executor's MOE_ROUTE hook appends, and
 * the routing file the trainer reads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "moe/moe.h"
#include "util.h"

#define REC_MAGIC "TNDROUTE"
#define REC_VERSION 1u
/* sanity bounds a file's header must meet before anything is allocated */
#define MAX_LAYER 4096
#define MAX_EMBD 65536
#define MAX_EXPERT 4096

tnd_status tnd_route_rec_new_dims(int n_layer, int n_embd, int n_expert, int k, int64_t cap, tnd_route_rec **out) {
    if (n_layer < 1 || n_layer > MAX_LAYER || n_embd < 1 || n_embd > MAX_EMBD || n_expert < 2 ||
        n_expert > MAX_EXPERT || k < 1 || k > n_expert || cap < 0)
        return tnd_fail(TND_ERR_ARG, "routing record: bad dimensions (%d layers, %d wide, %d experts, top-%d)",
                        n_layer, n_embd, n_expert, k);
    uint64_t nh, ni;
    if (!tnd_mul_ok((uint64_t)n_layer * (uint64_t)n_embd, (uint64_t)cap, &nh) || !tnd_mul_ok(nh, 4, &nh) ||
        !tnd_mul_ok((uint64_t)n_layer * (uint64_t)k, (uint64_t)cap, &ni) || !tnd_mul_ok(ni, 4, &ni) ||
        nh > SIZE_MAX / 2)
        return tnd_fail(TND_ERR_NOMEM, "routing record: %lld tokens do not fit in memory", (long long)cap);
    tnd_route_rec *r = tnd_calloc(1, sizeof *r);
    if (!r) return TND_ERR_NOMEM;
    r->n_layer = n_layer, r->n_embd = n_embd, r->n_expert = n_expert, r->k = k, r->cap = cap;
    r->n_at = tnd_calloc((size_t)n_layer, sizeof(int64_t));
    r->h = tnd_malloc(nh ? nh : 1);
    r->ids = tnd_malloc(ni ? ni : 1);
    if (!r->n_at || !r->h || !r->ids) {
        tnd_route_rec_free(r);
        return tnd_fail(TND_ERR_NOMEM, "routing record: out of memory for %lld tokens", (long long)cap);
    }
    *out = r;
    return TND_OK;
}

tnd_status tnd_route_rec_new(const tnd_model *m, int64_t cap, tnd_route_rec **out) {
    if (!m->arch->moe || m->hp.n_expert < 2) return tnd_fail(TND_ERR_ARG, "routing record: %s is not an MoE model", m->desc);
    return tnd_route_rec_new_dims(m->hp.n_layer, (int)m->hp.n_embd, m->hp.n_expert, m->hp.n_expert_used, cap, out);
}

void tnd_route_rec_free(tnd_route_rec *r) {
    if (!r) return;
    free(r->n_at);
    free(r->h);
    free(r->ids);
    free(r);
}

int64_t tnd_route_rec_n_tok(const tnd_route_rec *r) {
    int64_t n = r->cap;
    for (int l = 0; l < r->n_layer; l++) n = TND_MIN(n, r->n_at[l]);
    return n;
}

void tnd_route_rec_add(tnd_route_rec *r, int l, const float *h, const int32_t *ids, int64_t nt) {
    if (l < 0 || l >= r->n_layer) return;
    int64_t at = r->n_at[l], n = TND_MIN(nt, r->cap - at);
    if (n <= 0) return;
    memcpy((float *)tnd_route_rec_h(r, l, at), h, sizeof(float) * (size_t)n * (size_t)r->n_embd);
    memcpy((int32_t *)tnd_route_rec_ids(r, l, at), ids, sizeof(int32_t) * (size_t)n * (size_t)r->k);
    r->n_at[l] = at + n;
}

tnd_status tnd_route_record_tokens(tnd_model *m, const int32_t *toks, int n, bool cpu_exact, tnd_route_rec *r) {
    if (n <= 0) return TND_OK;
    /* sequences of at most 512 tokens (the paper's), each from an empty cache */
    const int seg = TND_MIN(TND_MIN(n, TND_ROUTE_SEQ), TND_MAX(1, m->hp.n_ctx_train));
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.device = TND_DEVICE_CPU;
    cp.n_ctx = seg;
    cp.n_batch = 64;
    cp.cpu_exact = cpu_exact;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &cp, &c);
    if (st) return tnd_fail_wrap(st, "recording routing: ");
    tnd_ctx_set_route_rec(c, r);
    for (int at = 0; !st && at < n; at += seg) {
        st = tnd_ctx_eval(c, toks + at, TND_MIN(seg, n - at), NULL);
        if (!st) st = tnd_ctx_truncate(c, 0);
    }
    tnd_ctx_free(c);
    return st ? tnd_fail_wrap(st, "recording routing: ") : TND_OK;
}

/* ---- the routing file ------------------------------------------------------- */

typedef struct rec_header {
    char magic[8];
    uint32_t version, n_layer, n_embd, n_expert, k, reserved;
    uint64_t n_tok;
} rec_header;

tnd_status tnd_route_rec_save(const tnd_route_rec *r, const char *path) {
    int64_t n = tnd_route_rec_n_tok(r);
    rec_header hd = {.version = REC_VERSION, .n_layer = (uint32_t)r->n_layer, .n_embd = (uint32_t)r->n_embd,
                     .n_expert = (uint32_t)r->n_expert, .k = (uint32_t)r->k, .n_tok = (uint64_t)n};
    memcpy(hd.magic, REC_MAGIC, 8);
    FILE *f = fopen(path, "wb");
    if (!f) return tnd_fail(TND_ERR_IO, "%s: cannot create the routing file", path);
    bool ok = fwrite(&hd, sizeof hd, 1, f) == 1;
    for (int l = 0; ok && l < r->n_layer; l++)
        ok = !n || fwrite(tnd_route_rec_h(r, l, 0), sizeof(float) * (size_t)r->n_embd, (size_t)n, f) == (size_t)n;
    for (int l = 0; ok && l < r->n_layer; l++)
        ok = !n || fwrite(tnd_route_rec_ids(r, l, 0), sizeof(int32_t) * (size_t)r->k, (size_t)n, f) == (size_t)n;
    if (fclose(f) || !ok) return tnd_fail(TND_ERR_IO, "%s: writing the routing file failed", path);
    return TND_OK;
}

tnd_status tnd_route_rec_load(const char *path, tnd_route_rec **out) {
    FILE *f;
    tnd_status st = tnd_open_regular(path, "routing file", UINT64_MAX, &f);
    if (st) return st;
    rec_header hd;
    tnd_route_rec *r = NULL;
    if (fread(&hd, sizeof hd, 1, f) != 1) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: not a routing file (shorter than its %zu-byte header)", path, sizeof hd);
        goto done;
    }
    if (memcmp(hd.magic, REC_MAGIC, 8)) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: not a routing file (no %s magic)", path, REC_MAGIC);
        goto done;
    }
    if (hd.version != REC_VERSION) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: routing file version %u, this build reads %u", path, hd.version, REC_VERSION);
        goto done;
    }
    if (hd.n_layer < 1 || hd.n_layer > MAX_LAYER || hd.n_embd < 1 || hd.n_embd > MAX_EMBD || hd.n_expert < 2 ||
        hd.n_expert > MAX_EXPERT || hd.k < 1 || hd.k > hd.n_expert || hd.n_tok > (1ull << 40)) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: bad dimensions in the header (%u layers, %u wide, %u experts, top-%u, %llu tokens)",
                      path, hd.n_layer, hd.n_embd, hd.n_expert, hd.k, (unsigned long long)hd.n_tok);
        goto done;
    }
    /* the exact size, before allocating what the header claims */
    uint64_t per_tok = (uint64_t)hd.n_layer * ((uint64_t)hd.n_embd + hd.k) * 4, want;
    if (!tnd_mul_ok(per_tok, hd.n_tok, &want) || !tnd_add_ok(want, sizeof hd, &want) || fseek(f, 0, SEEK_END)) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: bad size", path);
        goto done;
    }
    long size = ftell(f);
    if (size < 0 || (uint64_t)size != want) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: %ld bytes, the header's dimensions need %llu (truncated or damaged)", path,
                      size, (unsigned long long)want);
        goto done;
    }
    if (fseek(f, (long)sizeof hd, SEEK_SET)) {
        st = tnd_fail(TND_ERR_IO, "%s: cannot seek", path);
        goto done;
    }
    if ((st = tnd_route_rec_new_dims((int)hd.n_layer, (int)hd.n_embd, (int)hd.n_expert, (int)hd.k, (int64_t)hd.n_tok, &r)))
        goto done;
    size_t n = (size_t)hd.n_tok;
    for (uint32_t l = 0; l < hd.n_layer && !st; l++)
        if (n && fread((float *)tnd_route_rec_h(r, (int)l, 0), sizeof(float) * hd.n_embd, n, f) != n)
            st = tnd_fail(TND_ERR_IO, "%s: read failed", path);
    for (uint32_t l = 0; l < hd.n_layer && !st; l++)
        if (n && fread((int32_t *)tnd_route_rec_ids(r, (int)l, 0), sizeof(int32_t) * hd.k, n, f) != n)
            st = tnd_fail(TND_ERR_IO, "%s: read failed", path);
    for (size_t i = 0; !st && i < (size_t)hd.n_layer * n * hd.n_embd; i++)
        if (!isfinite(r->h[i])) st = tnd_fail(TND_ERR_FORMAT, "%s: a router input is NaN or infinite", path);
    for (size_t i = 0; !st && i < (size_t)hd.n_layer * n * hd.k; i++)
        if (r->ids[i] < 0 || r->ids[i] >= (int32_t)hd.n_expert)
            st = tnd_fail(TND_ERR_FORMAT, "%s: expert id %d out of range (%u experts)", path, r->ids[i], hd.n_expert);
    for (uint32_t l = 0; !st && l < hd.n_layer; l++) r->n_at[l] = (int64_t)n;
done:
    fclose(f);
    if (st) {
        tnd_route_rec_free(r);
        return st;
    }
    *out = r;
    return TND_OK;
}
