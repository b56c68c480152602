/* Placements (DESIGN.md §3): which side runs the ops reading each weight
 * slice, where each layer's attention and KV cache live, which CPU slices
 * are promoted to the GPU every round. Policies here are the simple ones —
 * all on one side, whole layers (llama.cpp's -ngl, tandem's baseline), a
 * file for experiments, random for tests; the cost-based static placement
 * lives in sched/. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "util.h"

bool tnd_slice_small(const tnd_weight *w) { return w->t && w->t->n_dims == 1; }

/* Layer of a slice from its GGUF name ("blk.N."), or -1. */
int tnd_slice_layer(const tnd_weight *w) {
    const char *s = w->t->name.ptr;
    size_t n = w->t->name.len;
    if (n < 6 || strncmp(s, "blk.", 4)) return -1;
    int v = 0;
    size_t i = 4;
    for (; i < n && s[i] >= '0' && s[i] <= '9' && v < 1000000; i++) v = v * 10 + (s[i] - '0');
    return i > 4 && i < n && s[i] == '.' ? v : -1;
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
 * names, or "blk.N.kv" for a layer's attention and KV cache. */
static tnd_status place_file(const tnd_model *m, const char *path, tnd_placement *p) {
    FILE *f = fopen(path, "r");
    if (!f) return tnd_fail(TND_ERR_IO, "cannot open placement file '%s' (placements: cpu, gpu, layer, random:SEED, or a file)", path);
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
    p->where = tnd_calloc((size_t)m->n_slices + 1, 1);
    p->promote = tnd_calloc((size_t)m->n_slices + 1, 1);
    p->kv = tnd_calloc((size_t)m->hp.n_layer + 1, 1);
    if (!p->where || !p->promote || !p->kv) {
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
        snprintf(p->desc, sizeof p->desc, "%s", spec);
    } else {
        st = place_file(m, spec, p);
    }
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
    if (st) tnd_placement_free(p);
    return st;
}

void tnd_placement_free(tnd_placement *p) {
    free(p->where);
    free(p->kv);
    free(p->promote);
    p->where = p->kv = p->promote = NULL;
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
    return ferror(f) ? tnd_fail(TND_ERR_IO, "writing the placement failed") : TND_OK;
}
