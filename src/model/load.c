/* Loading a model: hyperparameters from GGUF metadata, every tensor bound to
 * its role and its shape checked, tokenizer built. Weights stay mmapped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "model/model.h"
#include "util.h"

tnd_model_params tnd_model_default_params(void) {
    tnd_model_params p = {.n_threads = 0, .verbose = false, .check_weights = false};
    return p;
}

/* Reads "<arch>.<key>" as an int; required keys fail with a message. */
static bool hp_int(const tnd_gguf *g, const char *arch, const char *key, bool required, int *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    tnd_clear_error();
    if (!gguf_get_i64(g, full, &v)) {
        if (*tnd_last_error()) return false;  /* present, wrong type */
        if (!required) return true;
        tnd_fail(TND_ERR_FORMAT, "%s: missing hyperparameter '%s'", gguf_path(g), full);
        return false;
    }
    if (v < 0 || v > (1 << 30)) {
        tnd_fail(TND_ERR_FORMAT, "%s: hyperparameter '%s' = %lld is out of range", gguf_path(g), full, (long long)v);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool hp_float(const tnd_gguf *g, const char *arch, const char *key, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    tnd_clear_error();
    float v;
    if (!gguf_get_f32(g, full, &v)) return !*tnd_last_error();
    if (!isfinite(v)) {
        tnd_fail(TND_ERR_FORMAT, "%s: hyperparameter '%s' is not finite", gguf_path(g), full);
        return false;
    }
    *out = v;
    return true;
}

static tnd_status read_hparams(tnd_model *m) {
    const tnd_gguf *g = m->gguf;
    const char *a = m->arch->name;
    tnd_hparams *hp = &m->hp;
    memset(hp, 0, sizeof *hp);
    if (!hp_int(g, a, "block_count", true, &hp->n_layer) ||
        !hp_int(g, a, "embedding_length", true, &hp->n_embd) ||
        !hp_int(g, a, "attention.head_count", true, &hp->n_head))
        return TND_ERR_FORMAT;
    hp->n_ctx_train = 4096;
    hp->n_head_kv = hp->n_head;
    if (!hp_int(g, a, "context_length", false, &hp->n_ctx_train) ||
        !hp_int(g, a, "attention.head_count_kv", false, &hp->n_head_kv) ||
        !hp_int(g, a, "feed_forward_length", !m->arch->moe, &hp->n_ff))
        return TND_ERR_FORMAT;
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv != 0)
        return tnd_fail(TND_ERR_FORMAT, "%s: inconsistent hyperparameters (layers %d, embd %d, heads %d/%d)",
                        gguf_path(g), hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    int vlen = 0;
    if (!hp_int(g, a, "attention.key_length", false, &hp->head_dim) ||
        !hp_int(g, a, "attention.value_length", false, &vlen))
        return TND_ERR_FORMAT;
    if (vlen && vlen != hp->head_dim)
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: key_length %d != value_length %d is not supported",
                        gguf_path(g), hp->head_dim, vlen);
    if (hp->head_dim <= 0 || hp->head_dim % 2)
        return tnd_fail(TND_ERR_FORMAT, "%s: bad head dimension %d", gguf_path(g), hp->head_dim);
    hp->n_rot = hp->head_dim;
    if (!hp_int(g, a, "rope.dimension_count", false, &hp->n_rot)) return TND_ERR_FORMAT;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return tnd_fail(TND_ERR_FORMAT, "%s: bad rope dimension %d", gguf_path(g), hp->n_rot);
    hp->eps = 1e-6f;
    hp->rope_base = 10000.0f;
    hp->rope_scale = 1.0f;
    if (!hp_float(g, a, "attention.layer_norm_rms_epsilon", &hp->eps) ||
        !hp_float(g, a, "rope.freq_base", &hp->rope_base))
        return TND_ERR_FORMAT;
    /* eps <= 0 divides by zero on an all-zero row, and freq_base <= 0 makes
     * every rotation angle NaN: either gives NaN logits, not an error */
    if (!(hp->eps > 0) || hp->eps > 1)
        return tnd_fail(TND_ERR_FORMAT, "%s: hyperparameter '%s.attention.layer_norm_rms_epsilon' = %g; it must be "
                        "above 0 and at most 1 (typically 1e-5 or 1e-6)", gguf_path(g), a, hp->eps);
    if (!(hp->rope_base > 0))
        return tnd_fail(TND_ERR_FORMAT, "%s: hyperparameter '%s.rope.freq_base' = %g; it must be above 0 "
                        "(typically 10000 or more)", gguf_path(g), a, hp->rope_base);
    if (hp->n_ctx_train <= 0)
        return tnd_fail(TND_ERR_FORMAT, "%s: hyperparameter '%s.context_length' = %d; a model needs a context "
                        "length above 0", gguf_path(g), a, hp->n_ctx_train);
    float factor = 0;
    if (!hp_float(g, a, "rope.scaling.factor", &factor)) return TND_ERR_FORMAT;
    {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        char *t = gguf_get_cstr(g, key);
        if (t && !strcmp(t, "linear") && !(factor > 0)) {
            tnd_status st = tnd_fail(TND_ERR_FORMAT, "%s: linear rope scaling with factor %g; it must be above 0",
                                     gguf_path(g), factor);
            free(t);
            return st;
        }
        if (t && !strcmp(t, "linear")) hp->rope_scale = 1.0f / factor;
        else if (t && strcmp(t, "none") && strcmp(t, "linear")) {
            TND_WARN("%s: rope scaling '%s' is not supported; ignoring it (long contexts may degrade)",
                     gguf_path(g), t);
        }
        free(t);
    }
    if (m->arch->moe) {
        if (!hp_int(g, a, "expert_count", true, &hp->n_expert) ||
            !hp_int(g, a, "expert_used_count", true, &hp->n_expert_used) ||
            !hp_int(g, a, "expert_feed_forward_length", true, &hp->n_ff_exp))
            return TND_ERR_FORMAT;
        if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
            return tnd_fail(TND_ERR_FORMAT, "%s: bad expert counts (%d used of %d)", gguf_path(g),
                            hp->n_expert_used, hp->n_expert);
        hp->expert_norm = true; /* qwen3moe normalizes the top-k weights */
        char key[128];
        snprintf(key, sizeof key, "%s.expert_weights_norm", a);
        bool b;
        if (gguf_get_bool(g, key, &b)) hp->expert_norm = b;
    }
    if (m->arch->swa) {
        hp->swa_period = 6;
        hp->rope_base_local = 10000.0f;
        if (!hp_int(g, a, "attention.sliding_window", false, &hp->swa_window)) return TND_ERR_FORMAT;
    }
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return TND_OK;
}

/* Binds a tensor to a role. ne must match {n_in, n_out, n_expert} (trailing
 * 1s omitted for 1-D weights: n_out = 0 means a vector of n_in). */
static tnd_status bind(tnd_model *m, tnd_weight *w, const char *name, int64_t n_in, int64_t n_out,
                       int64_t n_expert, bool required) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    w->id = -1;
    if (!t) {
        if (!required) return TND_OK;
        return tnd_fail(TND_ERR_FORMAT, "%s: missing tensor '%s' (architecture %s)", gguf_path(m->gguf),
                        name, m->arch->name);
    }
    int64_t want[3] = {n_in, n_out ? n_out : 1, n_expert ? n_expert : 1};
    bool ok = t->n_dims <= 3 || t->ne[3] == 1;
    for (int d = 0; d < 3; d++) ok = ok && t->ne[d] == want[d];
    if (!ok)
        return tnd_fail(TND_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                        gguf_path(m->gguf), name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)want[0], (long long)want[1], (long long)want[2]);
    const tnd_type_traits *tr = tnd_type_traits_get(t->type);
    if (!tr || !tr->supported)
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which tandem cannot compute with yet",
                        gguf_path(m->gguf), name, tnd_type_name(t->type));
    if (!n_out && t->type != TND_TYPE_F32)
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: vector '%s' has type %s; only F32 norms/biases are supported",
                        gguf_path(m->gguf), name, tnd_type_name(t->type));
    w->t = t;
    w->type = t->type;
    w->data = t->data;
    w->n_in = n_in;
    w->n_out = n_out ? n_out : 1;
    w->n_expert = n_expert ? n_expert : 1;
    m->weight_bytes += t->nbytes;
    if (m->n_slices % 64 == 0) {
        tnd_weight **s = realloc(m->slices, sizeof *s * (size_t)(m->n_slices + 64));
        if (!s) return tnd_fail(TND_ERR_NOMEM, "out of memory");
        m->slices = s;
    }
    w->id = m->n_slices;
    m->slices[m->n_slices++] = w;
    return TND_OK;
}

static tnd_status bind_layer(tnd_model *m, int il) {
    const tnd_hparams *hp = &m->hp;
    tnd_layer *L = &m->layers[il];
    const tnd_arch *A = m->arch;
    int64_t E = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    char n[128];
    tnd_status st;
#define B(field, role, in, out, ne, req)                                   \
    snprintf(n, sizeof n, "blk.%d.%s", il, role);                          \
    if ((st = bind(m, &L->field, n, in, out, ne, req)) != TND_OK) return st;
    B(attn_norm, "attn_norm.weight", E, 0, 0, true);
    B(wq, "attn_q.weight", E, q, 0, true);
    B(wk, "attn_k.weight", E, kv, 0, true);
    B(wv, "attn_v.weight", E, kv, 0, true);
    B(wo, "attn_output.weight", q, E, 0, true);
    B(bq, "attn_q.bias", q, 0, 0, A->qkv_bias);
    B(bk, "attn_k.bias", kv, 0, 0, A->qkv_bias);
    B(bv, "attn_v.bias", kv, 0, 0, A->qkv_bias);
    B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, 0, A->qk_norm);
    B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, 0, A->qk_norm);
    B(attn_post_norm, "post_attention_norm.weight", E, 0, 0, A->post_norms);
    B(ffn_norm, "ffn_norm.weight", E, 0, 0, true);
    B(ffn_post_norm, "post_ffw_norm.weight", E, 0, 0, A->post_norms);
    if (A->moe) {
        B(router, "ffn_gate_inp.weight", E, hp->n_expert, 0, true);
        B(gate_exps, "ffn_gate_exps.weight", E, hp->n_ff_exp, hp->n_expert, true);
        B(up_exps, "ffn_up_exps.weight", E, hp->n_ff_exp, hp->n_expert, true);
        B(down_exps, "ffn_down_exps.weight", hp->n_ff_exp, E, hp->n_expert, true);
        if (L->router.type != TND_TYPE_F32 && L->router.type != TND_TYPE_F16 && L->router.type != TND_TYPE_BF16)
            TND_DEBUG("router of layer %d is quantized (%s)", il, tnd_type_name(L->router.type));
    } else {
        B(ffn_gate, "ffn_gate.weight", E, hp->n_ff, 0, true);
        B(ffn_up, "ffn_up.weight", E, hp->n_ff, 0, true);
        B(ffn_down, "ffn_down.weight", hp->n_ff, E, 0, true);
    }
#undef B
    L->swa = A->swa && hp->swa_window > 0 && hp->swa_period > 0 && (il + 1) % hp->swa_period != 0;
    return TND_OK;
}

static tnd_status load_tensors(tnd_model *m) {
    const tnd_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return tnd_fail(TND_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'", gguf_path(m->gguf));
    m->hp.n_vocab = (int)te->ne[1];
    tnd_status st;
    if ((st = bind(m, &m->tok_embd, "token_embd.weight", hp->n_embd, te->ne[1], 0, true)) ||
        (st = bind(m, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 0, true)) ||
        (st = bind(m, &m->output, "output.weight", hp->n_embd, te->ne[1], 0, false)))
        return st;
    if (!m->output.t) {
        m->output = m->tok_embd; /* tied embeddings (SmolLM2, gemma): same slice */
        m->hp_tied = true;
    }
    m->layers = tnd_calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return TND_ERR_NOMEM;
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = bind_layer(m, il)) != TND_OK) return st;
    return TND_OK;
}

/* ---- weight validation ------------------------------------------------------
 * A damaged file (NaN or Inf in a norm, an embedding row, a block scale)
 * loads and runs "fine": every logit is NaN and the output is empty. So at
 * load every small tensor is scanned whole (norms, biases, routers: a few
 * MiB in all) and every big one is sampled: SAMPLE_ROWS rows spread over it,
 * a cost bounded by the row size whatever the model. --check-weights
 * (tnd_model_params.check_weights) scans every row of every tensor. */

#define SAMPLE_ROWS 16
#define SMALL_BYTES (64u << 10) /* scanned whole at every load */

static int64_t weight_rows(const tnd_weight *w) { return w->n_out * w->n_expert; }

/* Dequantizes row r of w into buf (w->n_in floats); false if a value is NaN or Inf. */
static bool row_finite(const tnd_weight *w, int64_t r, float *buf) {
    const tnd_type_traits *tr = tnd_type_traits_get(w->type);
    size_t rs = tnd_row_size(w->type, w->n_in);
    tr->to_float((const uint8_t *)w->data + (size_t)r * rs, buf, w->n_in);
    for (int64_t i = 0; i < w->n_in; i++)
        if (!isfinite(buf[i])) return false;
    return true;
}

typedef struct {
    const tnd_weight *w;
    float *buf;          /* n_in floats per thread */
    int64_t n_in_max;
    int64_t *bad_th;     /* per thread: the first bad row it found, or -1 */
} scan_job;

static void scan_task(void *arg, int ith, int nth) {
    scan_job *j = arg;
    int64_t rows = weight_rows(j->w), r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    j->bad_th[ith] = -1;
    for (int64_t r = r0; r < r1; r++)
        if (!row_finite(j->w, r, j->buf + (size_t)ith * j->n_in_max)) {
            j->bad_th[ith] = r;
            return;
        }
}

static tnd_status bad_weight(const tnd_model *m, const tnd_weight *w, int64_t row, const char *how) {
    char where[64] = "";
    if (w->n_out > 1 || w->n_expert > 1) {
        if (w->n_expert > 1)
            snprintf(where, sizeof where, " (expert %lld, row %lld)", (long long)(row / w->n_out),
                     (long long)(row % w->n_out));
        else
            snprintf(where, sizeof where, " (row %lld)", (long long)row);
    }
    return tnd_fail(TND_ERR_FORMAT, "%s: tensor '%.*s' holds NaN or Inf values%s, found %s: the file is damaged",
                    gguf_path(m->gguf), (int)w->t->name.len, w->t->name.ptr, where, how);
}

static tnd_status check_weights(tnd_model *m, bool full) {
    int64_t n_in_max = 0;
    for (int i = 0; i < m->n_slices; i++) n_in_max = TND_MAX(n_in_max, m->slices[i]->n_in);
    int nth = full ? tnd_pool_size(m->pool) : 1;
    float *buf = tnd_malloc(sizeof(float) * (size_t)n_in_max * (size_t)nth);
    int64_t *bad_th = tnd_malloc(sizeof(int64_t) * (size_t)nth);
    if (!buf || !bad_th) {
        free(buf);
        free(bad_th);
        return TND_ERR_NOMEM;
    }
    tnd_status st = TND_OK;
    double t0 = tnd_time_s();
    uint64_t scanned = 0;
    for (int i = 0; i < m->n_slices && !st; i++) {
        const tnd_weight *w = m->slices[i];
        int64_t rows = weight_rows(w);
        bool router = false;
        for (int l = 0; l < m->hp.n_layer && !router; l++) router = w == &m->layers[l].router;
        if (full || router || w->t->nbytes <= SMALL_BYTES) {
            scan_job j = {.w = w, .buf = buf, .n_in_max = n_in_max, .bad_th = bad_th};
            tnd_pool_run(full ? m->pool : NULL, scan_task, &j);
            for (int t = 0; t < (full ? nth : 1) && !st; t++)
                if (bad_th[t] >= 0) st = bad_weight(m, w, bad_th[t], full ? "scanning every weight" : "at load");
            scanned += w->t->nbytes;
            continue;
        }
        /* evenly spread rows, the first and the last among them */
        int64_t k = TND_MIN(rows, SAMPLE_ROWS);
        for (int64_t s = 0; s < k && !st; s++) {
            int64_t r = k > 1 ? s * (rows - 1) / (k - 1) : 0;
            if (!row_finite(w, r, buf))
                st = bad_weight(m, w, r, "sampling rows at load (--check-weights scans every weight)");
            scanned += tnd_row_size(w->type, w->n_in);
        }
    }
    free(buf);
    free(bad_th);
    if (!st)
        TND_INFO("%s: %s %.1f MiB of weights for NaN and Inf in %.2f s: none", gguf_path(m->gguf),
                 full ? "scanned all" : "checked the small tensors and samples of the big ones,", scanned / 1048576.0,
                 tnd_time_s() - t0);
    return st;
}

static void describe(tnd_model *m) {
    char *name = gguf_get_cstr(m->gguf, "general.name");
    double params = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        params += (double)t->ne[0] * (double)t->ne[1] * (double)t->ne[2] * (double)t->ne[3];
    }
    snprintf(m->desc, sizeof m->desc, "%s (%s, %.0fM params, %.0f MiB, %d layers)", name ? name : "model",
             m->arch->name, params / 1e6, (double)m->weight_bytes / (1 << 20), m->hp.n_layer);
    free(name);
}

tnd_status tnd_model_load(const char *path, const tnd_model_params *p, tnd_model **out) {
    tnd_model_params dp = tnd_model_default_params();
    if (!p) p = &dp;
    /* a mistyped knob fails here, before anything runs with its default */
    tnd_status cst = tnd_config_check();
    if (cst) return cst;
    tnd_model *m = tnd_calloc(1, sizeof *m);
    if (!m) return TND_ERR_NOMEM;
    tnd_status st = tnd_gguf_open(path, &m->gguf);
    if (st) goto fail;
    char *arch = gguf_get_cstr(m->gguf, "general.architecture");
    if (!arch) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: no general.architecture key (is this a model file?)", path);
        goto fail;
    }
    m->arch = tnd_arch_find(arch);
    if (!m->arch) {
        st = tnd_fail(TND_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", path, arch,
                      tnd_arch_list());
        free(arch);
        goto fail;
    }
    free(arch);
    if ((st = read_hparams(m)) || (st = load_tensors(m))) goto fail;
    if ((st = tnd_tokenizer_new(m->gguf, &m->tok))) {
        tnd_fail_wrap(st, "%s: tokenizer: ", path);
        goto fail;
    }
    if (tnd_tokenizer_n_vocab(m->tok) != m->hp.n_vocab)
        TND_WARN("%s: tokenizer has %d tokens, embeddings %d rows", path, tnd_tokenizer_n_vocab(m->tok),
                 m->hp.n_vocab);
    m->chat_template = gguf_get_cstr(m->gguf, "tokenizer.chat_template");
    m->n_threads = p->n_threads > 0 ? p->n_threads : tnd_physical_cores();
    m->pool = tnd_pool_new(m->n_threads);
    if (!m->pool) {
        st = TND_ERR_NOMEM;
        goto fail;
    }
    if ((st = check_weights(m, p->check_weights))) goto fail;
    describe(m);
    if (p->verbose) {
        const tnd_hparams *hp = &m->hp;
        fprintf(stderr, "tandem: loaded %s: %s\n"
                        "  layers %d, embd %d, heads %d/%d (head dim %d), ffn %d, vocab %d, context %d, experts %d/%d\n"
                        "  rms eps %g, rope base %g (scale %g, %d dims), %d weight slices, %s embeddings\n",
                path, m->desc, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                m->arch->moe ? hp->n_ff_exp : hp->n_ff, hp->n_vocab, hp->n_ctx_train, hp->n_expert_used,
                hp->n_expert, hp->eps, hp->rope_base, hp->rope_scale, hp->n_rot, m->n_slices,
                m->hp_tied ? "tied" : "separate output");
    }
    *out = m;
    return TND_OK;
fail:
    tnd_model_free(m);
    return st;
}

void tnd_model_free(tnd_model *m) {
    if (!m) return;
    tnd_pool_free(m->pool);
    tnd_tokenizer_free(m->tok);
    free(m->chat_template);
    free(m->layers);
    free(m->slices);
    tnd_gguf_free(m->gguf);
    free(m);
}

const tnd_tokenizer *tnd_model_tokenizer(const tnd_model *m) { return m->tok; }
int32_t tnd_model_n_vocab(const tnd_model *m) { return m->hp.n_vocab; }
int32_t tnd_model_n_ctx_train(const tnd_model *m) { return m->hp.n_ctx_train; }
const char *tnd_model_chat_template(const tnd_model *m) { return m->chat_template; }
const char *tnd_model_desc(const tnd_model *m) { return m->desc; }
uint64_t tnd_model_weight_bytes(const tnd_model *m) { return m->weight_bytes; }

/* Budgets from 1 PiB up mean nothing real, and staying far below 2^64
 * keeps the double-to-integer conversion defined and the sums over it
 * (budget + reserve) from wrapping. */
#define BUDGET_MAX_BYTES (1ull << 50)

/* Strict on purpose: a value misread here silently changes where every
 * weight runs. A plain number is whole bytes, so "0.4" (a share? a size?)
 * is refused rather than guessed; a unit (K, M, G, T, optionally followed by
 * B or iB) may take a fraction; "N%" is a share of the weight bytes. */
tnd_status tnd_parse_budget(const char *s, const tnd_model *m, uint64_t *out) {
    static const char want[] = "want a size such as 6G, 4523M or 512MiB, or a share of the model's weights such as 50%";
    if (!s || !*s) return tnd_fail(TND_ERR_ARG, "empty budget: %s", want);
    const char *p = s;
    int dots = 0, digits = 0;
    for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) *p == '.' ? dots++ : digits++;
    if (!digits || dots > 1) return tnd_fail(TND_ERR_ARG, "bad budget '%s': %s", s, want);
    double v = strtod(s, NULL); /* only digits and one dot: no sign, exponent, hex, inf or nan */
    if (!strcmp(p, "%")) {
        if (!(v > 0) || v > 1000)
            return tnd_fail(TND_ERR_ARG, "bad budget '%s': a share of the weights must be above 0%% and at most 1000%%", s);
        if (!m) {
            *out = 0;
            return TND_OK;
        }
        double b = (double)m->weight_bytes * v / 100.0;
        if (b < 1) return tnd_fail(TND_ERR_ARG, "bad budget '%s': that share of the weights is 0 bytes", s);
        *out = (uint64_t)b;
        return TND_OK;
    }
    double mul = 1;
    switch (*p) {
    case 'k': case 'K': mul = 1024.0; p++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; p++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; p++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; p++; break;
    default: break;
    }
    if (!strcmp(p, "B") || (mul > 1 && (!strcmp(p, "iB") || !strcmp(p, "ib")))) p += strlen(p);
    if (*p) return tnd_fail(TND_ERR_ARG, "bad budget '%s': %s", s, want);
    if (mul == 1 && dots) {
        if (v < 1)
            return tnd_fail(TND_ERR_ARG,
                            "budget '%s' is ambiguous: a plain number is bytes; write %g%% for a share of the "
                            "model's weights or give a size with a unit (e.g. %gG)",
                            s, v * 100, v);
        return tnd_fail(TND_ERR_ARG, "bad budget '%s': a plain number is whole bytes; add a unit (%sG, %sM) or "
                        "write a share of the weights (50%%)", s, s, s);
    }
    double b = v * mul;
    if (b >= (double)BUDGET_MAX_BYTES)
        return tnd_fail(TND_ERR_ARG, "bad budget '%s': too large (budgets are below 1024T)", s);
    if (b < 1)
        return tnd_fail(TND_ERR_ARG,
                        "bad budget '%s': a budget of 0 bytes leaves the GPU nothing; leave --vram-budget out for "
                        "the default (the driver's free memory less 512 MiB) or run with --device cpu", s);
    *out = (uint64_t)b;
    return TND_OK;
}
