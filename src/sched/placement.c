/* Placements (docs/ARCHITECTURE.md, "Hybrid execution"): which side runs the ops reading each weight
 * slice, where each layer's attention and KV cache live, which CPU slices
 * are promoted to the GPU every round. Policies here are the simple ones —
 * all on one side, whole layers (llama.cpp's -ngl, tandem's baseline), a
 * file for experiments, random for tests; the cost-based static placement
 * is sched/static.c. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/placement.h"
#include "util.h"

bool tnd_slice_small(const tnd_weight *w) { return w->t && w->t->n_dims == 1; }

int tnd_slice_layer(const tnd_weight *w) {
    const char *s = w->t->name.ptr;
    size_t n = w->t->name.len;
    if (n < 6 || strncmp(s, "blk.", 4)) return -1;
    int v = 0;
    size_t i = 4;
    for (; i < n && s[i] >= '0' && s[i] <= '9' && v < 1000000; i++) v = v * 10 + (s[i] - '0');
    return i > 4 && i < n && s[i] == '.' ? v : -1;
}

/* The expert tensors of layer l (gate, up, down), or NULL for a dense layer. */
static bool layer_exps(const tnd_model *m, int l, const tnd_weight *e[3]) {
    const tnd_layer *L = &m->layers[l];
    e[0] = &L->gate_exps, e[1] = &L->up_exps, e[2] = &L->down_exps;
    return m->hp.n_expert > 1 && e[0]->id >= 0 && e[1]->id >= 0 && e[2]->id >= 0;
}

bool tnd_slice_split(const tnd_model *m, const tnd_placement *p, int sid, int *layer) {
    const tnd_weight *w = m->slices[sid];
    if (!p->split || w->n_expert <= 1) return false;
    int l = tnd_slice_layer(w);
    if (l < 0 || l >= p->n_layer || !p->split[l]) return false;
    if (layer) *layer = l;
    return true;
}

int tnd_placement_gpu_experts(const tnd_model *m, const tnd_placement *p, int l) {
    const tnd_weight *e[3];
    if (!layer_exps(m, l, e)) return 0;
    if (!p->split || !p->split[l]) return p->where[e[0]->id] == TND_SIDE_GPU ? p->n_expert : 0;
    int n = 0;
    for (int i = 0; i < p->n_expert; i++) n += p->exp[(size_t)l * p->n_expert + i] == TND_SIDE_GPU;
    return n;
}

uint64_t tnd_slice_gpu_bytes(const tnd_model *m, const tnd_placement *p, int sid) {
    const tnd_weight *w = m->slices[sid];
    int l;
    if (tnd_slice_split(m, p, sid, &l))
        return w->t->nbytes / (uint64_t)w->n_expert * (uint64_t)tnd_placement_gpu_experts(m, p, l);
    return p->where[sid] == TND_SIDE_GPU ? w->t->nbytes : 0;
}

void tnd_placement_normalize(const tnd_model *m, tnd_placement *p) {
    const tnd_weight *e[3];
    for (int l = 0; p->split && l < p->n_layer; l++) {
        if (!p->split[l]) {
            if (p->exp) memset(p->exp + (size_t)l * p->n_expert, 0, (size_t)p->n_expert);
            continue;
        }
        if (!layer_exps(m, l, e)) {
            p->split[l] = 0;
            continue;
        }
        int g = tnd_placement_gpu_experts(m, p, l);
        bool prom = p->promote[e[0]->id] || p->promote[e[1]->id] || p->promote[e[2]->id];
        if (g == 0 || g == p->n_expert) {
            p->split[l] = 0;
            memset(p->exp + (size_t)l * p->n_expert, 0, (size_t)p->n_expert);
        }
        for (int j = 0; j < 3; j++) {
            p->where[e[j]->id] = g == p->n_expert ? TND_SIDE_GPU : TND_SIDE_CPU;
            /* all on the GPU: nothing to promote; split: one flag for the three */
            p->promote[e[j]->id] = g < p->n_expert && prom;
        }
    }
}

static bool parse_seed(const char *s, uint64_t *seed) {
    char *end;
    if (!*s) return false;
    *seed = strtoull(s, &end, 10);
    return *end == 0;
}

/* Whole layers on the GPU from the last one backwards while they fit; the
 * output head only once every layer did (as llama.cpp offloads it). */
static void place_layers(const tnd_model *m, uint64_t budget, uint64_t kv_layer, tnd_placement *p) {
    int L = m->hp.n_layer;
    uint64_t *lb = tnd_calloc((size_t)L, sizeof *lb);
    if (!lb) return;
    for (int i = 0; i < m->n_slices; i++) {
        int l = tnd_slice_layer(m->slices[i]);
        if (l >= 0 && l < L && !tnd_slice_small(m->slices[i])) lb[l] += m->slices[i]->t->nbytes;
    }
    uint64_t used = 0;
    int first = L;
    while (first > 0 && used + lb[first - 1] + kv_layer <= budget) used += lb[--first] + kv_layer;
    for (int l = first; l < L; l++) p->kv[l] = TND_SIDE_GPU;
    for (int i = 0; i < m->n_slices; i++) {
        int l = tnd_slice_layer(m->slices[i]);
        if (l >= first && l < L) p->where[i] = TND_SIDE_GPU;
    }
    const tnd_weight *out = &m->output;
    if (first == 0 && out->id >= 0 && !m->hp_tied && used + out->t->nbytes <= budget) {
        p->where[out->id] = TND_SIDE_GPU;
    }
    snprintf(p->desc, sizeof p->desc, "layer: %d of %d layers on the GPU", L - first, L);
    free(lb);
}

static int side_of(const char *s) {
    if (!strcmp(s, "cpu")) return TND_SIDE_CPU;
    if (!strcmp(s, "gpu")) return TND_SIDE_GPU;
    if (!strcmp(s, "promote")) return 2;
    return -1;
}

/* "PATTERN cpu|gpu|promote" lines; PATTERN is an fnmatch pattern over tensor
 * names, "blk.N.kv" for a layer's attention and KV cache, or "blk.N.exp.E"
 * for expert E of MoE layer N (its gate, up and down; cpu or gpu only).
 * Naming one expert splits the layer expert by expert (its other experts
 * start where its ffn_gate_exps tensor was); naming an expert tensor of a
 * split layer makes the layer whole tensors again. Later lines win. */
static tnd_status place_file(const tnd_model *m, const char *path, tnd_placement *p) {
    if (access(path, F_OK) != 0)
        return tnd_fail(TND_ERR_IO, "cannot open placement file '%s' (placements: cpu, gpu, layer, random:SEED, or a file)", path);
    FILE *f;
    tnd_status ost = tnd_open_regular(path, "placement file", 16u << 20, &f); /* far more than any model needs */
    if (ost) return ost;
    char line[1024], name[256];
    int ln = 0;
    tnd_status st = TND_OK;
    while (!st && fgets(line, sizeof line, f)) {
        ln++;
        char *h = strchr(line, '#');
        if (h) *h = 0;
        char pat[512], side[32], extra[8];
        int k = sscanf(line, "%511s %31s %7s", pat, side, extra);
        if (k <= 0) continue;
        int s = k == 2 ? side_of(side) : -1;
        if (s < 0) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: expected 'PATTERN cpu|gpu|promote'", path, ln);
            break;
        }
        int hits = 0;
        for (int i = 0; i < m->n_slices; i++) {
            const gguf_str *nm = &m->slices[i]->t->name;
            snprintf(name, sizeof name, "%.*s", (int)nm->len, nm->ptr);
            if (fnmatch(pat, name, 0)) continue;
            hits++;
            p->where[i] = s == 2 ? TND_SIDE_CPU : (uint8_t)s;
            p->promote[i] = s == 2;
            int l;
            if (tnd_slice_split(m, p, i, &l)) p->split[l] = 0;
        }
        const tnd_weight *e[3];
        for (int l = 0; p->exp && l < m->hp.n_layer; l++) {
            if (!layer_exps(m, l, e)) continue;
            for (int x = 0; x < p->n_expert; x++) {
                snprintf(name, sizeof name, "blk.%d.exp.%d", l, x);
                if (fnmatch(pat, name, 0)) continue;
                if (s == 2) {
                    st = tnd_fail(TND_ERR_ARG, "%s:%d: an expert is placed on the cpu or the gpu, not promoted", path, ln);
                    break;
                }
                hits++;
                if (!p->split[l]) {
                    p->split[l] = 1;
                    memset(p->exp + (size_t)l * p->n_expert, p->where[e[0]->id], (size_t)p->n_expert);
                }
                p->exp[(size_t)l * p->n_expert + x] = (uint8_t)s;
            }
        }
        for (int l = 0; l < m->hp.n_layer; l++) {
            snprintf(name, sizeof name, "blk.%d.kv", l);
            if (fnmatch(pat, name, 0)) continue;
            if (s == 2) continue; /* "blk.* promote" means the weights; a KV cache has one home */
            hits++;
            p->kv[l] = (uint8_t)s;
        }
        if (!st && !hits) st = tnd_fail(TND_ERR_ARG, "%s:%d: '%s' matches no tensor of the model", path, ln, pat);
    }
    fclose(f);
    if (!st) snprintf(p->desc, sizeof p->desc, "file %s", path);
    return st;
}

tnd_status tnd_placement_make(const tnd_model *m, const char *spec, const char *promote, uint64_t weight_budget,
                              uint64_t kv_layer, tnd_placement *p) {
    memset(p, 0, sizeof *p);
    p->n_slices = m->n_slices;
    p->n_layer = m->hp.n_layer;
    p->n_expert = m->hp.n_expert > 1 ? m->hp.n_expert : 0;
    p->where = tnd_calloc((size_t)m->n_slices + 1, 1);
    p->promote = tnd_calloc((size_t)m->n_slices + 1, 1);
    p->kv = tnd_calloc((size_t)m->hp.n_layer + 1, 1);
    p->split = tnd_calloc((size_t)m->hp.n_layer + 1, 1);
    if (p->n_expert) p->exp = tnd_calloc((size_t)m->hp.n_layer * p->n_expert, 1);
    if (!p->where || !p->promote || !p->kv || !p->split || (p->n_expert && !p->exp)) {
        tnd_placement_free(p);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    if (!spec) spec = "cpu";
    uint64_t seed = 0;
    tnd_status st = TND_OK;
    if (!strcmp(spec, "cpu")) {
        snprintf(p->desc, sizeof p->desc, "cpu");
    } else if (!strcmp(spec, "gpu")) {
        memset(p->where, TND_SIDE_GPU, (size_t)m->n_slices);
        memset(p->kv, TND_SIDE_GPU, (size_t)m->hp.n_layer);
        snprintf(p->desc, sizeof p->desc, "gpu");
    } else if (!strcmp(spec, "layer")) {
        place_layers(m, weight_budget, kv_layer, p);
    } else if (!strncmp(spec, "random:", 7)) {
        if (!parse_seed(spec + 7, &seed)) st = tnd_fail(TND_ERR_ARG, "bad placement '%s': random:SEED needs a number", spec);
        for (int i = 0; !st && i < m->n_slices; i++) p->where[i] = tnd_splitmix64(&seed) & 1;
        for (int l = 0; !st && l < m->hp.n_layer; l++) p->kv[l] = tnd_splitmix64(&seed) & 1;
        /* MoE: three layers in four split expert by expert, each expert on a random side */
        for (int l = 0; !st && p->exp && l < m->hp.n_layer; l++) {
            if (tnd_splitmix64(&seed) % 4 == 0) continue;
            p->split[l] = 1;
            for (int e = 0; e < p->n_expert; e++) p->exp[(size_t)l * p->n_expert + e] = tnd_splitmix64(&seed) & 1;
        }
        snprintf(p->desc, sizeof p->desc, "%s", spec);
    } else {
        st = place_file(m, spec, p);
    }
    if (!st) tnd_placement_normalize(m, p); /* split layers' tensors are CPU ones: promotion candidates */
    if (!st && promote && strcmp(promote, "none")) {
        /* auto: every CPU slice is a candidate; each round picks (exec.c) */
        bool all = !strcmp(promote, "all") || !strcmp(promote, "auto");
        p->promote_auto = !strcmp(promote, "auto");
        if (!all && (strncmp(promote, "random:", 7) || !parse_seed(promote + 7, &seed)))
            st = tnd_fail(TND_ERR_ARG, "bad promotion set '%s' (none, all, auto, random:SEED)", promote);
        for (int i = 0; !st && i < m->n_slices; i++) {
            bool r = all || (tnd_splitmix64(&seed) & 1);
            /* the embedding is read a few rows at a time and the output head
             * sees one token a round: never worth a copy */
            const tnd_weight *w = m->slices[i];
            if (p->where[i] == TND_SIDE_CPU && !tnd_slice_small(w) && w != &m->tok_embd && i != m->output.id)
                p->promote[i] = r;
        }
    }
    if (!st) tnd_placement_normalize(m, p);
    if (st) tnd_placement_free(p);
    return st;
}

tnd_status tnd_placement_copy(const tnd_model *m, const tnd_placement *src, tnd_placement *dst) {
    tnd_status st = tnd_placement_make(m, "cpu", NULL, 0, 0, dst);
    if (st) return st;
    memcpy(dst->where, src->where, (size_t)m->n_slices);
    memcpy(dst->promote, src->promote, (size_t)m->n_slices);
    memcpy(dst->kv, src->kv, (size_t)m->hp.n_layer);
    memcpy(dst->split, src->split, (size_t)m->hp.n_layer);
    if (dst->exp && src->exp) memcpy(dst->exp, src->exp, (size_t)m->hp.n_layer * dst->n_expert);
    dst->promote_auto = src->promote_auto;
    memcpy(dst->desc, src->desc, sizeof dst->desc);
    return TND_OK;
}

void tnd_placement_free(tnd_placement *p) {
    free(p->where);
    free(p->kv);
    free(p->promote);
    free(p->split);
    free(p->exp);
    p->where = p->kv = p->promote = p->split = p->exp = NULL;
}

tnd_status tnd_placement_write(const tnd_model *m, const tnd_placement *p, FILE *f) {
    fprintf(f, "# tandem placement (%s): PATTERN cpu|gpu|promote\n", p->desc);
    for (int i = 0; i < m->n_slices; i++) {
        if (tnd_slice_small(m->slices[i])) continue;
        const gguf_str *nm = &m->slices[i]->t->name;
        /* auto candidates are CPU slices: "promote" would copy them every round */
        fprintf(f, "%.*s %s\n", (int)nm->len, nm->ptr,
                p->promote[i] && !p->promote_auto ? "promote" : p->where[i] ? "gpu" : "cpu");
    }
    for (int l = 0; l < m->hp.n_layer; l++) fprintf(f, "blk.%d.kv %s\n", l, p->kv[l] ? "gpu" : "cpu");
    /* split layers: one line per expert (after the tensor lines, which would unsplit them) */
    for (int l = 0; p->split && l < m->hp.n_layer; l++)
        for (int e = 0; p->split[l] && e < p->n_expert; e++)
            fprintf(f, "blk.%d.exp.%d %s\n", l, e, p->exp[(size_t)l * p->n_expert + e] ? "gpu" : "cpu");
    return ferror(f) ? tnd_fail(TND_ERR_IO, "writing the placement failed") : TND_OK;
}
