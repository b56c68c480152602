/* A plan as text, JSON, an SVG picture and a placement file (tandem plan,
 * run --dry-run). */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "sched/plan_svg.h"
#include "util.h"

/* Tensor roles, the columns of the table and the picture. */
static const char *const roles[] = {"attn_q", "attn_k", "attn_v", "kv", "attn_output", "ffn_gate_inp",
                                    "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
#define N_ROLES ((int)(sizeof roles / sizeof *roles))

static const tnd_weight *role_weight(const tnd_layer *L, int r) {
    const tnd_weight *w[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                             &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
    return w[r];
}

static const char *side_name(const tnd_plan *pl, int sid) {
    if (!pl->gpu) return "cpu";
    if (pl->pl.promote[sid] && pl->lay.n_slots) return pl->pl.promote_auto ? "auto" : "promote";
    return pl->pl.where[sid] ? "gpu" : "cpu";
}

/* Layer l's experts on the GPU: how many, and their share of the routings
 * (the perf DB's hot-expert table; the count's share without one). */
static int gpu_experts(const tnd_plan *pl, const tnd_perf *pf, int l, double *share) {
    const tnd_model *m = pl->m;
    int E = pl->pl.n_expert, g = pl->gpu ? tnd_placement_gpu_experts(m, &pl->pl, l) : 0;
    *share = E ? (double)g / E : 0;
    if (!E || !pf || !pf->pop || pf->n_expert != E || g == 0 || g == E) return g;
    double on = 0, all = 0;
    for (int e = 0; e < E; e++) {
        double x = pf->pop[(size_t)l * E + e];
        all += x;
        if (pl->pl.split[l] ? pl->pl.exp[(size_t)l * E + e] == TND_SIDE_GPU : g == E) on += x;
    }
    if (all > 0) *share = on / all;
    return g;
}

/* The predicted round times tandem plan shows: a decode step at half the
 * context, prefill chunks of 512 and 2048 tokens (or the chunk size). */
static void predictions(const tnd_plan *pl, double *dec, double *pp, double *pp2) {
    *dec = tnd_plan_predict(pl, NULL, 1, pl->n_ctx / 2);
    *pp = tnd_plan_predict(pl, NULL, TND_MIN(512, pl->n_batch), 0);
    *pp2 = tnd_plan_predict(pl, NULL, TND_MIN(2048, pl->n_batch), 0);
}

void tnd_plan_print_json(const tnd_plan *pl, const char *model, FILE *f) {
    const tnd_model *m = pl->m;
    const tnd_placement *p = &pl->pl;
    const tnd_perf *pf = tnd_plan_perf(pl);
    double t_dec, t_pp, t_pp2;
    predictions(pl, &t_dec, &t_pp, &t_pp2);
    const tnd_layout *l = &pl->lay;
    const tnd_hparams *hp = &m->hp;
    uint64_t kv_layer = 2ull * (uint64_t)pl->n_seq_max * pl->n_ctx * (uint64_t)pl->kv_dim * sizeof(uint16_t);
    fprintf(f, "{\"model\": ");
    tnd_json_str(f, model, strlen(model));
    fprintf(f, ", \"placement\": ");
    tnd_json_str(f, p->desc, strlen(p->desc));
    fprintf(f, ", \"device\": \"%s\", \"n_ctx\": %d, \"n_batch\": %d, \"n_seq_max\": %d", pl->gpu_name,
           pl->n_ctx, pl->n_batch, pl->n_seq_max);
    fprintf(f, ", \"budget_bytes\": %llu, \"gpu_bytes\": %llu", (unsigned long long)pl->budget_asked,
           (unsigned long long)(pl->gpu ? l->gpu_total : 0));
    fprintf(f, ", \"gpu\": {\"weights\": %llu, \"norms\": %llu, \"kv_cache\": %llu, \"activations\": %llu, "
           "\"slots\": %llu, \"n_slots\": %d, \"scratch\": %llu}",
           (unsigned long long)l->w_gpu, (unsigned long long)l->small_gpu, (unsigned long long)l->kv_gpu,
           (unsigned long long)l->act_gpu, (unsigned long long)l->slots_gpu, l->n_slots,
           (unsigned long long)l->scratch_gpu);
    fprintf(f, ", \"host\": {\"pinned\": %llu, \"weights_in_place\": %s, \"kv_cache\": %llu}",
            (unsigned long long)l->pinned_host, l->in_place ? "true" : "false", (unsigned long long)l->kv_cpu);
    if (pf) {
        fprintf(f, ", \"predicted\": {\"source\": ");
        tnd_json_str(f, pf->source, strlen(pf->source));
        fprintf(f, ", \"decode_ms\": %.4f, \"prefill%d_ms\": %.4f, \"prefill%d_ms\": %.4f}", 1e3 * t_dec,
                TND_MIN(512, pl->n_batch), 1e3 * t_pp, TND_MIN(2048, pl->n_batch), 1e3 * t_pp2);
    }
    fprintf(f, ", \"slices\": [");
    for (int i = 0; i < m->n_slices; i++) {
        const tnd_weight *w = m->slices[i];
        int sl;
        if (pl->gpu && tnd_slice_split(m, p, i, &sl)) {
            /* one entry per expert: "blk.3.ffn_up_exps[17]" */
            size_t nl = w->t->name.len;
            if (nl > 7 && !memcmp(w->t->name.ptr + nl - 7, ".weight", 7)) nl -= 7;
            for (int e = 0; e < p->n_expert; e++) {
                char nm[300];
                snprintf(nm, sizeof nm, "%.*s[%d]", (int)nl, w->t->name.ptr, e);
                fprintf(f, "%s{\"name\": ", i || e ? ", " : "");
                tnd_json_str(f, nm, strlen(nm));
                bool on = p->exp[(size_t)sl * p->n_expert + e] == TND_SIDE_GPU;
                fprintf(f, ", \"bytes\": %llu, \"backend\": \"%s\"}",
                       (unsigned long long)(w->t->nbytes / (uint64_t)w->n_expert), on ? "gpu" : side_name(pl, i));
            }
            continue;
        }
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        tnd_json_str(f, w->t->name.ptr, w->t->name.len);
        fprintf(f, ", \"bytes\": %llu, \"backend\": \"%s\"", (unsigned long long)w->t->nbytes,
               tnd_slice_small(w) && pl->gpu ? "both" : side_name(pl, i));
        if (pf && !tnd_slice_small(w))
            fprintf(f, ", \"t_cpu_ms\": %.4f, \"t_gpu_ms\": %.4f", 1e3 * tnd_perf_slice_time(pf, i, 0, 1),
                   1e3 * tnd_perf_slice_time(pf, i, 1, 1));
        fprintf(f, "}");
    }
    fprintf(f, "], \"experts\": [");
    for (int il = 0, k = 0; p->n_expert && il < hp->n_layer; il++) {
        double share;
        int g = gpu_experts(pl, pf, il, &share);
        if (!m->layers[il].gate_exps.t) continue;
        fprintf(f, "%s{\"layer\": %d, \"n_expert\": %d, \"gpu\": %d, \"gpu_routing_share\": %.4f}", k++ ? ", " : "",
               il, p->n_expert, g, share);
    }
    fprintf(f, "], \"kv\": [");
    for (int il = 0; il < hp->n_layer; il++)
        fprintf(f, "%s{\"layer\": %d, \"bytes\": %llu, \"backend\": \"%s\"}", il ? ", " : "", il,
               (unsigned long long)kv_layer, pl->gpu && p->kv[il] ? "gpu" : "cpu");
    fprintf(f, "]}\n");
}

void tnd_plan_print(const tnd_plan *pl, FILE *f) {
    const tnd_model *m = pl->m;
    const tnd_placement *p = &pl->pl;
    const tnd_perf *pf = tnd_plan_perf(pl);
    double t_dec, t_pp, t_pp2;
    predictions(pl, &t_dec, &t_pp, &t_pp2);
    const tnd_layout *l = &pl->lay;
    const tnd_hparams *hp = &m->hp;
    fprintf(f, "model: %s\nplacement: %s\n\n", m->desc, p->desc);
    fprintf(f, "layer");
    for (int r = 0; r < N_ROLES; r++) {
        bool any = false;
        for (int il = 0; il < hp->n_layer && !any; il++) any = r == 3 || (role_weight(&m->layers[il], r)->t != NULL);
        if (any) fprintf(f, " %s", roles[r]);
    }
    if (p->n_expert) fprintf(f, " gpu_experts");
    fprintf(f, "   (G gpu, C cpu, P promoted every round, A promoted when it pays; lower case: split expert by "
           "expert, the letter for the CPU's experts; gpu_experts: how many are on the GPU and their share of "
           "the routings)\n");
    for (int il = 0; il < hp->n_layer; il++) {
        fprintf(f, "%5d", il);
        for (int r = 0; r < N_ROLES; r++) {
            const tnd_weight *w = role_weight(&m->layers[il], r);
            bool any = false;
            for (int j = 0; j < hp->n_layer && !any; j++) any = r == 3 || (role_weight(&m->layers[j], r)->t != NULL);
            if (!any) continue;
            char ch = r == 3 ? (pl->gpu && p->kv[il] ? 'G' : 'C')
                      : !w->t ? '-'
                              : (side_name(pl, w->id)[0] - 32);
            /* split: lower case, the side of the CPU's experts (the GPU's are resident) */
            if (w && w->t && pl->gpu && tnd_slice_split(m, p, w->id, NULL)) ch = (char)(ch + 32);
            fprintf(f, " %*c", (int)strlen(roles[r]), ch);
        }
        double share;
        int g = gpu_experts(pl, pf, il, &share);
        if (p->n_expert && m->layers[il].gate_exps.t) fprintf(f, " %4d/%d %3.0f%%", g, p->n_expert, 100 * share);
        fprintf(f, "\n");
    }
    fprintf(f, "output: %s   token_embd: %s\n\n", m->output.id >= 0 ? side_name(pl, m->output.id) : "-",
           side_name(pl, m->tok_embd.id));
    tnd_layout_print(l, f);
    if (pf) {
        int b1 = TND_MIN(512, pl->n_batch), b2 = TND_MIN(2048, pl->n_batch);
        fprintf(f, "\npredicted (%s):\n  decode at half the context %.2f ms/token (%.1f tok/s)\n  prefill chunk of %d: %.1f ms (%.0f tok/s)\n",
               pf->source, 1e3 * t_dec, 1 / t_dec, b1, 1e3 * t_pp, b1 / t_pp);
        if (b2 != b1) fprintf(f, "  prefill chunk of %d: %.1f ms (%.0f tok/s)\n", b2, 1e3 * t_pp2, b2 / t_pp2);
    }
}

tnd_status tnd_plan_write_svg(const tnd_plan *pl, const char *path) {
    const tnd_model *m = pl->m;
    const tnd_placement *p = &pl->pl;
    const tnd_perf *pf = tnd_plan_perf(pl);
    const tnd_hparams *hp = &m->hp;
    int rows = hp->n_layer + 1;
    float *cells = malloc(sizeof(float) * (size_t)rows * N_ROLES);
    const char **labels = malloc(sizeof(char *) * (size_t)rows);
    char *lab = malloc((size_t)rows * 16);
    if (!cells || !labels || !lab) {
        free(cells), free(labels), free(lab);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    for (int il = 0; il < hp->n_layer; il++) {
        snprintf(lab + il * 16, 16, "blk.%d", il);
        labels[il] = lab + il * 16;
        for (int r = 0; r < N_ROLES; r++) {
            const tnd_weight *w = role_weight(&m->layers[il], r);
            cells[il * N_ROLES + r] = r == 3 ? (float)(pl->gpu && p->kv[il]) : !w->t ? -1.0f
                                               : (float)(pl->gpu && p->where[w->id]);
            double share;
            /* a split expert tensor: the share of the routings its GPU experts take */
            if (w && w->t && pl->gpu && tnd_slice_split(m, p, w->id, NULL)) {
                gpu_experts(pl, pf, il, &share);
                cells[il * N_ROLES + r] = (float)share;
            }
        }
    }
    labels[hp->n_layer] = "output";
    for (int r = 0; r < N_ROLES; r++) cells[hp->n_layer * N_ROLES + r] = -1;
    cells[hp->n_layer * N_ROLES + 8] = m->output.id >= 0 && pl->gpu ? (float)p->where[m->output.id] : 0;
    char title[320];
    snprintf(title, sizeof title, "%s: %s", m->desc, p->desc);
    tnd_status st = tnd_plan_svg(path, title, rows, labels, N_ROLES, roles, cells);
    free(cells);
    free(labels);
    free(lab);
    return st;
}

tnd_status tnd_plan_write_placement(const tnd_plan *pl, FILE *f) { return tnd_placement_write(pl->m, &pl->pl, f); }

tnd_status tnd_plan_text(const tnd_plan *pl, char **text) {
    *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (!f) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    fprintf(f, "model: %s\nplacement: %s\n", pl->m->desc, pl->pl.desc);
    tnd_layout_print(&pl->lay, f);
    fclose(f);
    return TND_OK;
}

tnd_status tnd_ctx_plan_text(tnd_model *m, const tnd_ctx_params *p, char **text) {
    *text = NULL;
    tnd_plan *pl = NULL;
    tnd_status st = tnd_plan_build(m, p, &pl);
    if (!st) st = tnd_plan_text(pl, text);
    tnd_plan_free(pl);
    return st;
}
