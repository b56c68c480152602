/* tandem bench: prefill and decode throughput in the manner of llama-bench
 * (pp512 = one 512-token prompt from an empty cache, tg128 = 128 single-token
 * decode steps), mean ± standard deviation over repetitions; with --batch,
 * many sequences at once in the manner of llama-batched-bench. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "runtime/runtime.h"
#include "tandem.h"
#include "tnd_git_commit.h" /* TND_GIT_COMMIT, written by the build */
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem bench [options]\n\n"
               "  -m, --model FILE   GGUF model (default: the default model)\n"
               "  -p, --n-prompt N   prompt tokens for the prefill test (default 512; 0 = skip)\n"
               "  -n, --n-gen N      tokens for the decode test (default 128; 0 = skip)\n"
               "  -d, --depth D      tokens already in the cache before the decode test (default 0)\n"
               "  -b, --batch-size N prefill chunk size (default: the prompt length, else 512 for -d;\n"
               "                     with --batch: B x the prompt length, at most 2048)\n"
               "      --batch B1,B2,..  sequences generated at once, each size measured in turn: B\n"
               "                     sequences with a prompt of -p tokens each, then -n decode\n"
               "                     rounds of one token per sequence; reports the generated\n"
               "                     tokens per second counting prefill and decode time, the\n"
               "                     prefill and decode rates, and each sequence's decode latency\n"
               "  -t, --threads N    CPU threads (default: physical cores)\n"
               "  -r, --repetitions N (default 3)\n"
               "  -o, --output md|json (default md)\n"
               "      --device cpu|cuda|sim  (default cpu)\n"
               "      --vram-budget X    bytes (6G) or percent of the weights (50%%)\n"
               "      --placement P[,promote=Q]  a placement to measure (repeatable: each is\n"
               "                         measured in turn, side by side): static, layer, gpu, cpu,\n"
               "                         random:SEED or a file; Q: none, all, auto, random:SEED\n"
               "      --hw PROFILE       SimGPU timing profile (with --device sim)\n"
               "      --trace FILE       write the rounds as a Chrome/Perfetto trace (JSON); with\n"
               "                         several placements or batch sizes, FILE-1.json,\n"
               "                         FILE-2.json, ...\n"
               "      --no-limits        skip measuring the bandwidths behind the physical limit\n"
               "  -v, --verbose      per placement, the decode test's host syncs, GPU launches\n"
               "                     and CUDA graph launches per token (stderr)\n"
               "      --no-adapt         promotions from the profile alone, not corrected by\n"
               "                         the speeds measured while running; the placement kept\n"
               "                         when another process shares the GPU\n"
               "      --cpu-exact        CPU matmuls with f32 activations (exact; default: Q8\n"
               "                         activations and integer dots, as TND_CPU_INT8=0 turns off)\n"
               "      --tokens text|random  what the tests read (default text: a fixed English\n"
               "                         passage, repeated; random: fixed pseudo-random ids, as\n"
               "                         llama-bench). MoE speed depends on the routing it causes.\n"
               "      --ablate LIST      MoE: after each placement, the same without one mechanism\n"
               "                         at a time (comma list, or all): hot (the hot-expert\n"
               "                         table), prefetch (experts copied a layer ahead), fixed2\n"
               "                         (always two copied a layer ahead, not the balance or\n"
               "                         PreSched), sync (weight copies synchronous)\n"
               "      --presched         MoE: LayerScope's PreSched loads CPU-side experts on demand\n"
               "                         where its cost model finds it pays and sets how many are\n"
               "                         copied a layer ahead, or two layers ahead when its queue\n"
               "                         holds none of the next layer's (default: the balance, no\n"
               "                         on-demand loads)\n"
               "      --predictor N      MoE: train the next-layer expert predictor on the routing\n"
               "                         of N pseudo-random tokens (CPU) and report its top-k hit\n"
               "                         rate on the first N/2 test tokens against the baselines\n"
               "                         (default 1024; 0: skip)\n"
               "\n"
               "With a GPU, the bandwidths of the physical limit are measured first (CPU read,\n"
               "pinned PCIe, HBM, and CPU + PCIe at once) and each result is reported against\n"
               "that limit: decode TPOT >= S_cpu/B_both + S_gpu/B_hbm, prefill >= the\n"
               "non-resident bytes copied once per chunk at the pinned PCIe rate\n"
               "(docs/ARCHITECTURE.md, The physical limit).\n");
}

typedef struct {
    const char *name; /* "pp512" */
    int n_tok;
    double mean, sd;  /* tokens per second */
    double samples[64];
    int n;
    double busy[3]; /* share of the timed runs' wall time the CPU, the GPU (model) and PCIe were busy; -1: unknown */
} result;

/* The busy shares between two snapshots of the context's statistics. */
static void busy_between(const tnd_ctx_stats *a, const tnd_ctx_stats *b, bool gpu, result *r) {
    double wall = b->wall_s - a->wall_s;
    r->busy[0] = wall > 0 ? (b->busy_cpu_s - a->busy_cpu_s) / wall : -1;
    r->busy[1] = wall > 0 && gpu && b->busy_gpu_s > 0 ? (b->busy_gpu_s - a->busy_gpu_s) / wall : -1;
    r->busy[2] = wall > 0 && gpu ? (b->busy_pcie_s - a->busy_pcie_s) / wall : -1;
}

static void stats(result *r) {
    double s = 0, ss = 0;
    for (int i = 0; i < r->n; i++) s += r->samples[i];
    r->mean = r->n ? s / r->n : 0;
    for (int i = 0; i < r->n; i++) ss += (r->samples[i] - r->mean) * (r->samples[i] - r->mean);
    r->sd = r->n > 1 ? sqrt(ss / (r->n - 1)) : 0;
}


#define MAX_CONFIGS 8

typedef struct config {
    char placement[512];
    const char *promote;
    unsigned ablate;                /* TND_ABLATE_*: the mechanism this row runs without (0: none) */
    result res[2];
    int nres;
    double gpu_mib, lim_tg, lim_pp; /* limits in tokens/s (0: unknown) */
    double pred_tg, pred_pp;        /* the timeline model's tokens/s (0: no perf DB) */
    char desc[96];                  /* the placement as built */
    double route_gpu, route_pred;   /* decode: split layers' routings to GPU experts, measured and predicted (-1: none) */
    uint64_t moves;                 /* experts the live hot-expert table swapped onto the GPU */
    double route_pf;                /* decode: ... of them served by experts copied a layer ahead (-1: none) */
    double pf_copies;               /* experts copied ahead per split layer and decode step */
    double od_copies;               /* experts loaded on demand (PreSched) per split layer and decode step */
    double pf2_copies;              /* of pf_copies, those copied two layers ahead (PreSched's Q4) */
    tnd_backend_counters dec;       /* the GPU backend's counters over the decode test's steps */
    long dec_tok;                   /* ... and the steps */
    double grp_gpu[3], grp_pred[3]; /* the same per layer group (input, middle, output; moe.h) */
} config;

static bool g_verbose; /* -v */

/* --ablate's names, one flag each, and how a row says it */
static const struct {
    const char *name;
    unsigned flag;
    const char *label;
} k_ablations[] = {
    {"hot", TND_ABLATE_HOT, "no hot-expert table"},
    {"prefetch", TND_ABLATE_PREFETCH, "no prefetch"},
    {"fixed2", TND_ABLATE_FIXED2, "fixed 2-expert prefetch"},
    {"sync", TND_ABLATE_SYNC, "synchronous copies"},
};
#define N_ABLATIONS ((int)(sizeof k_ablations / sizeof *k_ablations))

/* --ablate's comma list (or "all") into flags, in the order given. */
static bool parse_ablations(const char *v, unsigned *out, int *n) {
    *n = 0;
    if (!v || !*v) return false;
    if (!strcmp(v, "all")) {
        for (int i = 0; i < N_ABLATIONS; i++) out[(*n)++] = k_ablations[i].flag;
        return true;
    }
    for (const char *p = v; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        int i = 0;
        while (i < N_ABLATIONS && (strlen(k_ablations[i].name) != len || strncmp(p, k_ablations[i].name, len))) i++;
        if (i == N_ABLATIONS) return false;
        for (int j = 0; j < *n; j++)
            if (out[j] == k_ablations[i].flag) return false; /* named twice */
        out[(*n)++] = k_ablations[i].flag;
        p += len + (e != NULL);
        if (e && !*p) return false; /* a trailing comma */
    }
    return *n > 0;
}

/* A row's placement as printed: the placement, and what it runs without
 * (buf: at least LABEL_MAX bytes). */
#define LABEL_MAX 560
static const char *cfg_label(const config *k, char *buf) {
    const char *pl = k->placement[0] ? k->placement : "default";
    const char *ab = NULL;
    for (int i = 0; i < N_ABLATIONS; i++)
        if (k->ablate == k_ablations[i].flag) ab = k_ablations[i].label;
    snprintf(buf, LABEL_MAX, "%.511s%s%.30s", pl, ab ? ", " : "", ab ? ab : "");
    return buf;
}

#define CNT_DIFF(d, a, b, f) ((d)->f += (b)->f - (a)->f)
/* d += b - a, field by field */
static void counters_add(tnd_backend_counters *d, const tnd_backend_counters *a, const tnd_backend_counters *b) {
    CNT_DIFF(d, a, b, host_syncs), CNT_DIFF(d, a, b, ops), CNT_DIFF(d, a, b, launches);
    CNT_DIFF(d, a, b, graph_launches), CNT_DIFF(d, a, b, graph_replays), CNT_DIFF(d, a, b, graph_updates);
    CNT_DIFF(d, a, b, graph_inst), CNT_DIFF(d, a, b, graph_ops);
}

/* -v: what the host did per decode step (stderr, beside the table) */
static void print_counters(const char *what, const char *per, const tnd_backend_counters *d, long steps) {
    if (steps <= 0) return;
    const double n = (double)steps;
    fprintf(stderr,
            "bench: %s: per %s: %.1f host syncs, %.1f GPU ops, %.1f launches, %.2f graph launches "
            "(%.2f replayed, %.2f updated, %.2f instantiated) holding %.1f ops\n",
            what, per, d->host_syncs / n, d->ops / n, d->launches / n, d->graph_launches / n, d->graph_replays / n,
            d->graph_updates / n, d->graph_inst / n, d->graph_ops / n);
}

static int run_config(tnd_model *m, const tnd_ctx_params *base, config *k, const int32_t *toks, long n_prompt,
                      long n_gen, long depth, long reps, const tnd_limits *L, const tnd_perf *pf, const char *name_pp,
                      const char *name_tg) {
    tnd_ctx_params cp = *base;
    if (k->placement[0]) cp.placement = k->placement;
    cp.promote = k->promote;
    cp.moe_ablate = k->ablate;
    tnd_ctx *c;
    k->route_gpu = k->route_pred = k->route_pf = -1;
    k->pf_copies = 0;
    k->od_copies = 0;
    k->pf2_copies = 0;
    for (int g = 0; g < 3; g++) k->grp_gpu[g] = k->grp_pred[g] = -1;
    if (tnd_ctx_new(m, &cp, &c)) return 1;
    const tnd_plan *pl = tnd_ctx_plan(c);
    const tnd_placement *p = tnd_plan_placement(pl);
    const int n_batch = tnd_plan_n_batch(pl);
    k->gpu_mib = tnd_plan_layout(pl)->gpu_total / 1048576.0;
    snprintf(k->desc, sizeof k->desc, "%s", p->desc);
    if (!k->promote) { /* the default, as the plan took it */
        bool any = false;
        for (int i = 0; i < m->n_slices; i++) any |= p->promote[i] != 0;
        k->promote = !any || !tnd_plan_layout(pl)->n_slots ? "none" : p->promote_auto ? "auto" : "set";
    }
    if (pf && tnd_plan_gpu(pl)) {
        /* the rounds the tests run: one prefill chunk from an empty cache,
         * decode steps from depth to depth + n_gen */
        double tp = 0;
        for (long done = 0; done < n_prompt; done += n_batch)
            tp += tnd_plan_predict(pl, pf, (int)TND_MIN(n_batch, n_prompt - done), (int)done);
        k->pred_pp = tp > 0 ? n_prompt / tp : 0;
        double tg = 0;
        for (long i = 0; i < n_gen; i += 16) tg += 16 * tnd_plan_predict(pl, pf, 1, (int)(depth + i));
        k->pred_tg = tg > 0 ? ((n_gen + 15) / 16 * 16) / tg : 0;
    }
    uint64_t s_cpu, s_gpu, s_pcie;
    tnd_ctx_token_bytes(c, &s_cpu, &s_gpu, &s_pcie);
    if (L && L->hbm > 0) {
        double both = L->both_cpu + L->both_pcie;
        /* bytes not resident must be read by the CPU or cross PCIe, both at once at best */
        double t = (double)(s_cpu + s_pcie) / (both * 1e9) + (double)s_gpu / (L->hbm * 1e9);
        k->lim_tg = t > 0 ? 1.0 / t : 0;
        /* prefill: every chunk copies the non-resident weights once (all of
         * an expert tensor's non-resident experts: a chunk touches nearly every expert) */
        uint64_t full = 0;
        for (int i = 0; i < m->n_slices; i++)
            if (!tnd_slice_small(m->slices[i]) && m->slices[i] != &m->tok_embd && p->where[i] != TND_SIDE_GPU)
                full += m->slices[i]->t->nbytes - tnd_slice_gpu_bytes(m, p, i);
        double chunks = ceil((double)n_prompt / n_batch);
        double tp = chunks * (double)full / (L->pcie * 1e9);
        k->lim_pp = tp > 0 ? (double)n_prompt / tp : 0;
    }
    int rc = 1;
    /* warm-up: page faults, and the first launch of each kernel a chunk
     * uses (CUDA loads modules lazily), stay out of the timings */
    if (tnd_ctx_eval(c, toks, 1, NULL)) goto out;
    if (n_prompt > 1 || depth > 1) {
        tnd_ctx_truncate(c, 0);
        if (tnd_ctx_eval(c, toks, (int)TND_MIN(TND_MAX(n_prompt, depth), n_batch), NULL)) goto out;
    }
    if (n_prompt) {
        result *r = &k->res[k->nres++];
        r->name = name_pp;
        r->n_tok = (int)n_prompt;
        tnd_ctx_stats s0, s1;
        tnd_ctx_get_stats(c, &s0);
        for (long i = 0; i < reps; i++) {
            tnd_ctx_truncate(c, 0);
            double t0 = tnd_time_s();
            if (tnd_ctx_eval(c, toks, (int)n_prompt, NULL)) goto out;
            r->samples[r->n++] = (double)n_prompt / (tnd_time_s() - t0);
        }
        tnd_ctx_get_stats(c, &s1);
        busy_between(&s0, &s1, tnd_plan_gpu(pl), r);
        stats(r);
    }
    if (n_gen) {
        result *r = &k->res[k->nres++];
        r->name = name_tg;
        r->n_tok = (int)n_gen;
        double busy[3] = {0, 0, 0}, wall = 0;
        bool known[3] = {true, true, true};
        for (long i = 0; i < reps; i++) {
            tnd_ctx_truncate(c, 0);
            if (depth && tnd_ctx_eval(c, toks, (int)depth, NULL)) goto out;
            tnd_ctx_stats s0, s1;
            tnd_ctx_get_stats(c, &s0);
            double t0 = tnd_time_s();
            for (long j = 0; j < n_gen; j++)
                if (tnd_ctx_eval(c, toks + depth + j, 1, NULL)) goto out;
            r->samples[r->n++] = (double)n_gen / (tnd_time_s() - t0);
            tnd_ctx_get_stats(c, &s1);
            busy_between(&s0, &s1, tnd_plan_gpu(pl), r); /* the decode steps only, not the depth's prefill */
            counters_add(&k->dec, &s0.gpu, &s1.gpu);
            k->dec_tok += n_gen;
            double w = s1.wall_s - s0.wall_s;
            for (int q = 0; q < 3; q++) {
                known[q] &= r->busy[q] >= 0;
                busy[q] += r->busy[q] * w;
            }
            wall += w;
        }
        for (int q = 0; q < 3; q++) r->busy[q] = known[q] && wall > 0 ? busy[q] / wall : -1;
        stats(r);
    }
    rc = 0;
    char lab[LABEL_MAX];
    if (g_verbose) print_counters(cfg_label(k, lab), "decode token", &k->dec, k->dec_tok);
    /* how much of the split layers' decode routing the GPU's experts took,
     * against the hot-expert table the placement was made from */
    tnd_ctx_stats cs;
    tnd_ctx_get_stats(c, &cs);
    k->moves = cs.n_expert_moves;
    if (cs.n_route_dec >= 16 * (uint64_t)m->hp.n_expert_used) { /* 16 decode steps at least: a share, not noise */
        k->route_gpu = (double)cs.n_route_dec_gpu / (double)cs.n_route_dec;
        k->route_pf = (double)cs.n_route_dec_pf / (double)cs.n_route_dec;
        k->pf_copies = (double)cs.n_pf_copies * m->hp.n_expert_used / (double)cs.n_route_dec;
        k->od_copies = (double)cs.n_od_copies * m->hp.n_expert_used / (double)cs.n_route_dec;
        k->pf2_copies = (double)cs.n_pf2_copies * m->hp.n_expert_used / (double)cs.n_route_dec;
        double sum = 0;
        int n = 0;
        for (int l = 0; pf && l < m->hp.n_layer; l++)
            if (p->split && p->split[l]) sum += tnd_perf_gpu_share(m, pf, p, l), n++;
        if (n) k->route_pred = sum / n;
        for (int g = 0; g < 3; g++) { /* issue 29: where the table holds and where it does not */
            if (cs.n_route_dec_g[g] < 16 * (uint64_t)m->hp.n_expert_used) continue;
            k->grp_gpu[g] = (double)cs.n_route_dec_gpu_g[g] / (double)cs.n_route_dec_g[g];
            double sg = 0;
            int ng = 0;
            for (int l = 0; pf && l < m->hp.n_layer; l++)
                if (p->split && p->split[l] && tnd_moe_group(l, m->hp.n_layer) == g) sg += tnd_perf_gpu_share(m, pf, p, l), ng++;
            if (ng) k->grp_pred[g] = sg / ng;
        }
    }
out:
    tnd_ctx_free(c);
    return rc;
}

/* The tokens the tests run: text, where the model has a tokenizer (m not NULL), since an
 * MoE model's routing (and so its speed under a hot-expert placement)
 * depends on what it reads; the profile calibrates on other text
 * (sched/perf.c), so the placement is not judged on its own data. Without a
 * tokenizer, fixed pseudo-random ids. Either way the same work every run. */
static void fill_tokens(const tnd_model *m, int32_t *toks, long n, int nv) {
    static const char text[] =
        "Rivers shape the land they cross. Over thousands of years a river cuts valleys, carries sand and stones "
        "downstream and builds deltas where it meets the sea. Farmers settled on the fertile plains beside rivers, "
        "and the first cities grew there. int main(void) { for (int i = 0; i < 10; i++) printf(\"%d\\n\", i * i); "
        "return 0; } The committee met on Tuesday to review the budget for the new library, which opens in March "
        "with 40,000 books, a reading room and free classes for children and adults.";
    int32_t *ids = NULL;
    size_t k = 0;
    long have = 0;
    if (m && m->tok && !tnd_tokenize(m->tok, text, sizeof text - 1, true, false, &ids, &k) && k > 0)
        for (; have < n; have++) toks[have] = (int32_t)((uint32_t)ids[(size_t)have % k] % (uint32_t)nv);
    free(ids);
    tnd_clear_error();
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (; have < n; have++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[have] = (int32_t)(x % (uint64_t)nv);
    }
}

#define MAX_BATCHES 16

/* One batch size's measurements, each a sample per repetition. */
typedef struct bres {
    int batch;
    result all, pp, tg, lat; /* generated tok/s over prefill + decode; prefill tok/s; decode tok/s; ms per token per sequence */
} bres;

/* B new sequences of c (ids), each fed its n_prompt tokens: toks shifted
 * by the sequence's index, so that the prompts differ. */
static tnd_status feed_prompts(tnd_ctx *c, int *ids, int B, const int32_t *toks, long n_toks, long n_prompt) {
    tnd_status st = TND_OK;
    for (int i = 0; !st && i < B; i++) {
        int32_t p[64];
        st = tnd_seq_new(c, &ids[i]);
        for (long done = 0; !st && done < n_prompt; done += 64) {
            int k = (int)TND_MIN(64, n_prompt - done);
            for (int j = 0; j < k; j++) p[j] = toks[(done + j + i) % n_toks];
            st = tnd_seq_feed(c, ids[i], p, k);
        }
    }
    return st;
}

/* --batch: for each size B, B sequences in one context (n_seq_max = B):
 * their prompts (toks shifted by the sequence's index, so they differ) fed
 * and prefilled in rounds of n_batch tokens, then n_gen rounds of a token
 * each, the next tokens of their texts (as llama-bench, fixed tokens, not
 * sampled). Timed from the first feed to the last round. */
static int run_batched(tnd_model *m, const tnd_ctx_params *base, const int32_t *toks, long n_toks, long n_prompt,
                       long n_gen, long reps, long batch_size, bres *out) {
    const int B = out->batch;
    tnd_ctx_params cp = *base;
    cp.n_seq_max = B;
    cp.n_ctx = (int)TND_MAX(n_prompt + n_gen, 16);
    cp.n_batch = (int)(batch_size ? batch_size : TND_MIN(TND_MAX((long)B * n_prompt, B), 2048));
    tnd_ctx *c;
    if (tnd_ctx_new(m, &cp, &c)) return 1;
    int rc = 1, ids[TND_SEQ_MAX];
    tnd_backend_counters dec;
    memset(&dec, 0, sizeof dec);
    long n_rounds = 0;
    /* warm-up, as the prefill test's: the first round of the prompts, then
     * a round with a token more for each of the B sequences (a decode
     * round once the prompts are in: attention over the slots, its graph),
     * so that page faults, the pool's first runs and CUDA's lazy loading
     * stay out of the timings */
    if (feed_prompts(c, ids, B, toks, n_toks, n_prompt) || tnd_ctx_step(c)) goto out;
    if (n_gen > 0) {
        for (int i = 0; i < B; i++)
            if (tnd_seq_feed(c, ids[i], toks, 1)) goto out;
        if (tnd_ctx_step(c)) goto out;
    }
    for (int i = 0; i < B; i++)
        if (tnd_seq_free(c, ids[i])) goto out;
    for (long r = 0; r < reps; r++) {
        double t0 = tnd_time_s();
        if (feed_prompts(c, ids, B, toks, n_toks, n_prompt)) goto out;
        for (bool more = n_prompt > 0; more;) {
            if (tnd_ctx_step(c)) goto out;
            more = false;
            for (int i = 0; i < B; i++) more |= tnd_seq_n_queued(c, ids[i]) > 0;
        }
        double t1 = tnd_time_s();
        tnd_ctx_stats s0, s1;
        tnd_ctx_get_stats(c, &s0);
        for (long g = 0; g < n_gen; g++) {
            for (int i = 0; i < B; i++) {
                int32_t t = toks[(n_prompt + g + i) % n_toks];
                if (tnd_seq_feed(c, ids[i], &t, 1)) goto out;
            }
            if (tnd_ctx_step(c)) goto out;
        }
        double t2 = tnd_time_s();
        tnd_ctx_get_stats(c, &s1);
        counters_add(&dec, &s0.gpu, &s1.gpu);
        n_rounds += n_gen;
        for (int i = 0; i < B; i++)
            if (tnd_seq_free(c, ids[i])) goto out;
        out->all.samples[out->all.n++] = (double)B * n_gen / (t2 - t0);
        if (n_prompt) out->pp.samples[out->pp.n++] = (double)B * n_prompt / (t1 - t0);
        if (n_gen) {
            out->tg.samples[out->tg.n++] = (double)B * n_gen / (t2 - t1);
            out->lat.samples[out->lat.n++] = 1e3 * (t2 - t1) / n_gen;
        }
    }
    stats(&out->all), stats(&out->pp), stats(&out->tg), stats(&out->lat);
    if (g_verbose) {
        char what[32];
        snprintf(what, sizeof what, "batch %d", B);
        print_counters(what, "decode round", &dec, n_rounds);
    }
    rc = 0;
out:
    tnd_ctx_free(c);
    return rc;
}

/* The --trace file of the k-th of n contexts (placements, batch sizes):
 * FILE for one, else FILE-K.json beside the others (K from 1). */
static const char *trace_name(const char *trace, int k, int n, char *buf, size_t len) {
    if (!trace || n <= 1) return trace;
    const char *dot = strrchr(trace, '.'), *slash = strrchr(trace, '/');
    int stem = dot && (!slash || dot > slash) ? (int)(dot - trace) : (int)strlen(trace);
    snprintf(buf, len, "%.*s-%d%s", stem, trace, k + 1, trace + stem);
    return buf;
}

/* Parses "1,4,16" into b[] (each 1..TND_SEQ_MAX); false when malformed. */
static bool parse_batches(const char *v, int *b, int *n) {
    *n = 0;
    while (v && *v) {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v || x < 1 || x > TND_SEQ_MAX || *n >= MAX_BATCHES || (*end && *end != ',')) return false;
        b[(*n)++] = (int)x;
        v = *end ? end + 1 : end;
    }
    return *n > 0;
}

static const char *device_name(tnd_device d) { return d == TND_DEVICE_CUDA ? "cuda" : d == TND_DEVICE_SIM ? "sim" : "cpu"; }

/* -o json: the object's opening fields, what every result was measured on */
static void json_head(const char *model, const char *cpu, int n_threads, bool exact, tnd_device device,
                      uint64_t budget, bool presched) {
    printf("{\"model\": ");
    tnd_json_str(stdout, model, strlen(model));
    printf(", \"cpu\": ");
    tnd_json_str(stdout, cpu, strlen(cpu));
    printf(", \"threads\": %d, \"isa\": \"%s\", \"cpu_act\": \"%s\", \"build\": ", n_threads, tnd_cpu_isa(),
           exact ? "f32" : "q8");
    tnd_json_str(stdout, TND_GIT_COMMIT, strlen(TND_GIT_COMMIT));
    printf(", \"device\": \"%s\", \"vram_budget\": %llu, \"presched\": %s", device_name(device),
           (unsigned long long)budget, presched ? "true" : "false");
}

/* The next-layer expert predictor (moe/, LLaPor): trained on the routing
 * of n_pred pseudo-random tokens, evaluated on the first n_pred/2 of the
 * tokens the tests read, held out from training; both recorded on the CPU.
 * Training is held to about 2e10 flops (fewer epochs on wide models), the
 * PCA to 32 / 64 components fit on 256 tokens. */
static bool bench_predictor(tnd_model *m, const int32_t *toks, long n_toks, long n_pred, bool cpu_exact,
                            tnd_pred_eval *e) {
    const int n_train = (int)TND_MIN(n_pred, (long)m->hp.n_ctx_train);
    const int n_test = (int)TND_MIN(TND_MIN(n_pred / 2, n_toks), (long)m->hp.n_ctx_train);
    int32_t *tr = malloc(sizeof(int32_t) * (size_t)TND_MAX(n_train, 1));
    tnd_route_rec *r = NULL;
    tnd_predictor *P = NULL;
    bool ok = false;
    if (!tr || n_train < 16 || n_test < 1) goto out;
    uint64_t x = 0x2545F4914F6CDD1Dull; /* other ids than fill_tokens' */
    for (int i = 0; i < n_train; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tr[i] = (int32_t)(x % (uint64_t)tnd_model_n_vocab(m));
    }
    tnd_pred_params pp = tnd_pred_default_params();
    /* cheap on wide models: bench reports, `profile --train-predictor` trains
     * the real thing (on Qwen3-30B-A3B's shape this is ~1 epoch and seconds,
     * where the defaults take minutes) */
    pp.flop_budget = 2e10;
    pp.pca_rows = 256;
    pp.pca_io = 32;
    pp.pca_mid = 64;
    ok = !tnd_route_rec_new(m, n_train + n_test, &r) && !tnd_route_record_tokens(m, tr, n_train, cpu_exact, r) &&
         !tnd_route_record_tokens(m, toks, n_test, cpu_exact, r) && !tnd_predictor_train(r, n_train, &pp, &P) &&
         !tnd_predictor_eval(P, r, n_train, n_train + n_test, m, e);
    if (!ok) fprintf(stderr, "tandem: warning: no predictor figures: %s\n", tnd_last_error());
out:
    tnd_predictor_free(P);
    tnd_route_rec_free(r);
    free(tr);
    return ok;
}

/* cmd_bench's return once it holds the model: the model, the perf DB and
 * the tokens (either may be NULL) freed. */
static int bench_end(tnd_model *m, tnd_perf *pf, int32_t *toks, int rc) {
    free(toks);
    if (pf) {
        tnd_perf_free(pf);
        free(pf);
    }
    tnd_model_free(m);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *fmt = "md", *budget = NULL, *hw = NULL, *trace = NULL;
    tnd_device device = TND_DEVICE_CPU;
    long n_prompt = 512, n_gen = 128, depth = 0, threads = 0, reps = 3, batch = 0, n_pred = 1024;
    bool text_tokens = true;
    static config cfg[MAX_CONFIGS];
    int n_cfg = 0, n_abl = 0;
    unsigned abl[N_ABLATIONS];
    bool want_limits = true, cpu_exact = false, no_adapt = false, presched = false;
    static bres br[MAX_BATCHES];
    int batches[MAX_BATCHES], n_batches = 0;
    for (int i = 1; i < argc; i += 2) { /* every option but the flags takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-limits")) {
            want_limits = false;
            i--;
            continue;
        } else if (!strcmp(a, "--cpu-exact")) {
            cpu_exact = true;
            i--;
            continue;
        } else if (!strcmp(a, "--no-adapt")) {
            no_adapt = true;
            i--;
            continue;
        } else if (!strcmp(a, "--presched")) {
            presched = true;
            i--;
            continue;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            g_verbose = true;
            i--;
            continue;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (model = v) != NULL;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) ok = tools_parse_int(v, 0, 1 << 20, &n_prompt);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) ok = tools_parse_int(v, 0, 1 << 20, &n_gen);
        else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) ok = tools_parse_int(v, 0, 1 << 20, &depth);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) ok = tools_parse_int(v, 1, 1 << 16, &batch);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = tools_parse_int(v, 1, 1024, &threads);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) ok = tools_parse_int(v, 1, 64, &reps);
        else if (!strcmp(a, "--batch")) ok = parse_batches(v, batches, &n_batches);
        else if (!strcmp(a, "--predictor")) ok = tools_parse_int(v, 0, 1 << 16, &n_pred);
        else if (!strcmp(a, "--ablate")) ok = parse_ablations(v, abl, &n_abl);
        else if (!strcmp(a, "--tokens")) ok = v && ((text_tokens = !strcmp(v, "text")) || !strcmp(v, "random"));
        else if (!strcmp(a, "--device")) {
            ok = v && (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strcmp(v, "sim"));
            if (ok) device = !strcmp(v, "cuda") ? TND_DEVICE_CUDA : !strcmp(v, "sim") ? TND_DEVICE_SIM : TND_DEVICE_CPU;
        } else if (!strcmp(a, "--vram-budget")) {
            if ((ok = (budget = v) != NULL) && !tools_check_budget(v)) return 2;
        }
        else if (!strcmp(a, "--hw")) ok = (hw = v) != NULL;
        else if (!strcmp(a, "--trace")) ok = (trace = v) != NULL && *v;
        else if (!strcmp(a, "--placement") || !strcmp(a, "--policy")) {
            ok = v && n_cfg < MAX_CONFIGS && strlen(v) < sizeof cfg[0].placement;
            if (ok) {
                config *k = &cfg[n_cfg++];
                snprintf(k->placement, sizeof k->placement, "%s", v);
                char *comma = strstr(k->placement, ",promote=");
                if (comma) {
                    *comma = 0;
                    k->promote = v + (comma - k->placement) + 9;
                }
            }
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) ok = v && (!strcmp(v, "md") || !strcmp(v, "json")) && (fmt = v);
        else return tools_bad_option("bench", a, true, usage);
        if (!ok) return tools_bad_option("bench", a, false, usage);
    }
    if (!n_cfg) n_cfg = 1; /* the default placement */
    if (n_abl && n_batches) {
        fprintf(stderr, "tandem: error: --batch takes no --ablate\n");
        return 2;
    }
    if (n_abl) { /* each placement, then the same without each mechanism */
        if (n_cfg * (1 + n_abl) > MAX_CONFIGS) {
            fprintf(stderr, "tandem: error: %d placements, each in full and without %d mechanisms, are more than the "
                    "%d configurations bench runs\n", n_cfg, n_abl, MAX_CONFIGS);
            return 2;
        }
        for (int k = n_cfg - 1; k >= 0; k--) /* from the last, so none is overwritten before it is read */
            for (int a = n_abl; a >= 0; a--) {
                cfg[k * (1 + n_abl) + a] = cfg[k];
                cfg[k * (1 + n_abl) + a].ablate = a ? abl[a - 1] : 0;
            }
        n_cfg *= 1 + n_abl;
    }
    if (n_batches && (n_cfg > 1 || depth)) {
        fprintf(stderr, "tandem: error: --batch takes one placement and no --depth\n");
        return 2;
    }
    if (n_batches && !n_gen) {
        fprintf(stderr, "tandem: error: --batch needs tokens to generate (-n)\n");
        return 2;
    }
    if (device == TND_DEVICE_CUDA && tnd_cuda_device_count() <= 0) { /* before any output or loading */
#ifdef TND_HAVE_CUDA
        const char *why = "no CUDA device found";
#else
        const char *why = "this tandem was built without CUDA";
#endif
        fprintf(stderr, "tandem: error: --device cuda: %s (--device sim simulates a GPU)\n", why);
        return 1;
    }
    tnd_model *m;
    if (!tools_load_model(&model, threads, &m)) return 1;
    if (n_abl && !m->arch->moe) {
        fprintf(stderr, "tandem: error: --ablate: %s has no experts (its mechanisms are MoE ones)\n", model);
        tnd_model_free(m);
        return 2;
    }
    int n_threads = threads ? (int)threads : tnd_physical_cores();
    tnd_ctx_params cp = tnd_ctx_default_params();
    long need = TND_MAX(n_prompt, depth + n_gen);
    cp.n_ctx = (int)TND_MAX(need, 16);
    /* the prompt in one chunk; without a prompt test, the depth is filled in
     * chunks of 512 (one token at a time would take minutes on a big model) */
    cp.n_batch = (int)(batch ? batch : n_prompt ? n_prompt : TND_MIN(TND_MAX(depth, 1), 512));
    cp.device = device;
    cp.hw = hw;
    cp.cpu_exact |= cpu_exact;
    cp.no_adapt = no_adapt;
    cp.moe_presched = presched;
    cp.predict = trace != NULL; /* the trace's second track: the plan's predicted rounds */
    if (budget && tnd_parse_budget(budget, m, &cp.vram_budget)) {
        tools_print_error("--vram-budget");
        tnd_model_free(m);
        return 2;
    }
    tnd_limits L;
    bool have_limits = device == TND_DEVICE_CUDA && want_limits && !tnd_measure_limits(n_threads, &L);
    if (device == TND_DEVICE_CUDA && want_limits && !have_limits) tnd_clear_error();
    /* the perf DB (cached, or measured now) for the timeline model's predictions */
    tnd_perf *pf = NULL;
    if (device != TND_DEVICE_CPU) {
        tnd_ctx_params pp = cp;
        pp.placement = "static";
        tnd_plan *pl;
        if (tnd_plan_build(m, &pp, &pl)) {
            fprintf(stderr, "tandem: warning: no predictions: %s\n", tnd_last_error());
        } else { /* keep the perf DB, not the plan */
            pf = tnd_plan_take_perf(pl);
            tnd_plan_free(pl);
        }
    }
    int nv = tnd_model_n_vocab(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)TND_MAX(need, 1));
    if (!toks) {
        fprintf(stderr, "tandem: error: out of memory\n");
        return bench_end(m, pf, NULL, 1);
    }
    fill_tokens(text_tokens ? m : NULL, toks, TND_MAX(need, 1), nv); /* at least one: the warm-up reads toks[0] */
    if (n_batches) {
        if (cfg[0].placement[0]) cp.placement = cfg[0].placement;
        cp.promote = cfg[0].promote;
        char name[64];
        snprintf(name, sizeof name, "pp%ld+tg%ld", n_prompt, n_gen);
        int rc = 0;
        char trace_k[4096];
        for (int k = 0; k < n_batches && !rc; k++) {
            br[k].batch = batches[k];
            cp.trace = trace_name(trace, k, n_batches, trace_k, sizeof trace_k);
            if ((rc = run_batched(m, &cp, toks, TND_MAX(need, 1), n_prompt, n_gen, reps, batch, &br[k])))
                fprintf(stderr, "tandem: error: bench --batch %d: %s\n", batches[k], tnd_last_error());
        }
        const char *cpu = tnd_cpu_model_name();
        if (rc) {
        } else if (!strcmp(fmt, "json")) {
            json_head(model, cpu, n_threads, cp.cpu_exact, device, cp.vram_budget, presched);
            printf(", \"results\": [");
            for (int k = 0; k < n_batches; k++) {
                const bres *b = &br[k];
                printf("%s{\"test\": ", k ? ", " : "");
                tnd_json_str(stdout, name, strlen(name));
                printf(", \"batch\": %d, \"n_prompt\": %ld, \"n_gen\": %ld, \"reps\": %d, \"tok_per_s\": %.3f, "
                       "\"stddev\": %.3f, \"pp_tok_per_s\": %.3f, \"tg_tok_per_s\": %.3f, \"decode_ms_per_token\": %.3f}",
                       b->batch, n_prompt, n_gen, b->all.n, b->all.mean, b->all.sd, b->pp.mean, b->tg.mean, b->lat.mean);
            }
            printf("]}\n");
        } else {
            printf("model: %s\ncpu: %s | threads: %d | isa: %s | activations: %s | device: %s%s | build: %s\n",
                   tnd_model_desc(m), cpu, n_threads, tnd_cpu_isa(), cp.cpu_exact ? "f32" : "q8", device_name(device),
                   presched ? " | experts: PreSched" : "", TND_GIT_COMMIT);
            printf("\n| batch | test | t/s (generated, prefill + decode) | prefill t/s | decode t/s | "
                   "decode ms/token per sequence |\n|---:|---|---:|---:|---:|---:|\n");
            for (int k = 0; k < n_batches; k++) {
                const bres *b = &br[k];
                printf("| %d | %s | %.2f ± %.2f | %.2f | %.2f | %.2f |\n", b->batch, name, b->all.mean, b->all.sd,
                       b->pp.mean, b->tg.mean, b->lat.mean);
            }
        }
        return bench_end(m, pf, toks, rc);
    }
    char name_pp[32], name_tg[48];
    snprintf(name_pp, sizeof name_pp, "pp%ld", n_prompt);
    if (depth) snprintf(name_tg, sizeof name_tg, "tg%ld @ d%ld", n_gen, depth);
    else snprintf(name_tg, sizeof name_tg, "tg%ld", n_gen);
    int rc = 0, n_ok = 0;
    char trace_k[4096];
    for (int k = 0; k < n_cfg; k++) {
        cp.trace = trace_name(trace, k, n_cfg, trace_k, sizeof trace_k);
        if (run_config(m, &cp, &cfg[k], toks, n_prompt, n_gen, depth, reps, have_limits ? &L : NULL, pf, name_pp,
                       name_tg)) {
            char lab[LABEL_MAX];
            fprintf(stderr, "tandem: error: bench (placement %s): %s\n", cfg_label(&cfg[k], lab),
                    tnd_last_error());
            cfg[k].nres = 0; /* no rows for a placement that failed */
            if (!cfg[k].desc[0]) snprintf(cfg[k].desc, sizeof cfg[k].desc, "failed");
            rc = 1;
        } else {
            n_ok++;
        }
    }
    if (!n_ok) fmt = NULL; /* nothing measured: no empty table */
    tnd_pred_eval pe;
    const bool have_pred = fmt && m->arch->moe && m->hp.n_layer >= 2 && n_pred > 0 &&
                           bench_predictor(m, toks, TND_MAX(need, 1), n_pred, cp.cpu_exact, &pe);
    const char *cpu = tnd_cpu_model_name();
    const char *desc = tnd_model_desc(m);
    if (!fmt) {
    } else if (!strcmp(fmt, "json")) {
        json_head(model, cpu, n_threads, cp.cpu_exact, device, cp.vram_budget, presched);
        if (have_limits)
            printf(", \"bw_gbps\": {\"cpu\": %.1f, \"pcie\": %.1f, \"hbm\": %.1f, \"both_cpu\": %.1f, \"both_pcie\": %.1f}",
                   L.cpu, L.pcie, L.hbm, L.both_cpu, L.both_pcie);
        printf(", \"results\": [");
        int first = 1;
        for (int k = 0; k < n_cfg; k++)
            for (int i = 0; i < cfg[k].nres; i++) {
                const result *r = &cfg[k].res[i];
                double lim = i == 0 && n_prompt ? cfg[k].lim_pp : cfg[k].lim_tg;
                double pred = i == 0 && n_prompt ? cfg[k].pred_pp : cfg[k].pred_tg;
                const char *pl = cfg[k].placement[0] ? cfg[k].placement : "default";
                const char *pr = cfg[k].promote ? cfg[k].promote : "-";
                printf("%s{\"placement\": ", first ? "" : ", ");
                tnd_json_str(stdout, pl, strlen(pl));
                printf(", \"promote\": ");
                tnd_json_str(stdout, pr, strlen(pr));
                printf(", \"ablate\": ");
                const char *ab = NULL;
                for (int a = 0; a < N_ABLATIONS; a++)
                    if (cfg[k].ablate == k_ablations[a].flag) ab = k_ablations[a].name;
                if (ab) tnd_json_str(stdout, ab, strlen(ab));
                else printf("null");
                printf(", \"built\": ");
                tnd_json_str(stdout, cfg[k].desc, strlen(cfg[k].desc));
                printf(", \"gpu_mib\": %.1f, \"test\": ", cfg[k].gpu_mib);
                tnd_json_str(stdout, r->name, strlen(r->name));
                printf(", \"n_tokens\": %d, \"reps\": %d, \"tok_per_s\": %.3f, \"stddev\": %.3f, "
                       "\"limit_tok_per_s\": %.3f, \"predicted_tok_per_s\": %.3f, \"busy\": {",
                       r->n_tok, r->n, r->mean, r->sd, lim, pred);
                static const char *const res_names[3] = {"cpu", "gpu_model", "pcie"};
                for (int q = 0; q < 3; q++) {
                    printf("%s\"%s\": ", q ? ", " : "", res_names[q]);
                    if (r->busy[q] >= 0) printf("%.3f", r->busy[q]);
                    else printf("null");
                }
                printf("}}");
                first = 0;
            }
        printf("]");
        bool any_share = false;
        for (int k = 0; k < n_cfg; k++) any_share |= cfg[k].route_gpu >= 0;
        if (any_share) { /* per placement: the decode routings GPU experts took, measured and as the table predicted */
            printf(", \"gpu_hit_share\": [");
            for (int k = 0; k < n_cfg; k++) {
                const double meas[4] = {cfg[k].route_gpu, cfg[k].grp_gpu[0], cfg[k].grp_gpu[1], cfg[k].grp_gpu[2]};
                const double pred[4] = {cfg[k].route_pred, cfg[k].grp_pred[0], cfg[k].grp_pred[1], cfg[k].grp_pred[2]};
                printf("%s{", k ? ", " : "");
                for (int g = 0; g < 4; g++) {
                    printf("%s\"%s\": {\"measured\": ", g ? ", " : "", g ? tnd_moe_group_name(g - 1) : "all");
                    if (meas[g] >= 0) printf("%.4f", meas[g]);
                    else printf("null");
                    printf(", \"predicted\": ");
                    if (pred[g] >= 0) printf("%.4f", pred[g]);
                    else printf("null");
                    printf("}");
                }
                printf("}");
            }
            /* per placement: the share of those routings served by experts copied a layer ahead */
            printf("], \"prefetched_share\": [");
            for (int k = 0; k < n_cfg; k++) {
                printf("%s", k ? ", " : "");
                if (cfg[k].route_pf >= 0) printf("%.4f", cfg[k].route_pf);
                else printf("null");
            }
            printf("]");
        }
        if (have_pred) {
            printf(", \"predictor\": ");
            tnd_pred_eval_json(&pe, stdout);
        }
        printf("}\n");
    } else {
        printf("model: %s\ncpu: %s | threads: %d | isa: %s | activations: %s | device: %s%s | build: %s\n", desc, cpu,
               n_threads, tnd_cpu_isa(), cp.cpu_exact ? "f32" : "q8", device_name(device),
               presched ? " | experts: PreSched" : "", TND_GIT_COMMIT);
        if (cp.vram_budget) printf("vram budget: %.1f MiB\n", cp.vram_budget / 1048576.0);
        if (have_limits)
            printf("bandwidth (GB/s): CPU read %.1f | pinned PCIe %.1f | HBM %.1f | at once: CPU %.1f + PCIe %.1f\n",
                   L.cpu, L.pcie, L.hbm, L.both_cpu, L.both_pcie);
        for (int k = 0; k < n_cfg; k++) printf("placement %d: %s\n", k + 1, cfg[k].desc);
        printf("\n| placement | promote | GPU MiB | test | t/s | limit t/s | of limit | predicted t/s | measured/predicted "
               "| busy: CPU | GPU (model) | PCIe |\n"
               "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int k = 0; k < n_cfg; k++)
            for (int i = 0; i < cfg[k].nres; i++) {
                const result *r = &cfg[k].res[i];
                double lim = i == 0 && n_prompt ? cfg[k].lim_pp : cfg[k].lim_tg;
                char lab[LABEL_MAX];
                printf("| %s | %s | %.0f | %s | %.2f ± %.2f |", cfg_label(&cfg[k], lab),
                       cfg[k].promote ? cfg[k].promote : "-", cfg[k].gpu_mib, r->name, r->mean, r->sd);
                if (lim > 0) printf(" %.1f | %.0f%% |", lim, 100.0 * r->mean / lim);
                else printf(" - | - |");
                double pred = i == 0 && n_prompt ? cfg[k].pred_pp : cfg[k].pred_tg;
                if (pred > 0) printf(" %.1f | %.2f |", pred, r->mean / pred);
                else printf(" - | - |");
                for (int q = 0; q < 3; q++) {
                    if (r->busy[q] >= 0) printf(" %.0f%% |", 100 * r->busy[q]);
                    else printf(" - |");
                }
                printf("\n");
            }
        for (int k = 0; k < n_cfg; k++)
            if (cfg[k].route_gpu >= 0) {
                printf("\nplacement %d: GPU experts took %.0f%% of the split layers' decode routings", k + 1,
                       100 * cfg[k].route_gpu);
                if (cfg[k].route_pred >= 0) printf(" (hot-expert table: %.0f%%)", 100 * cfg[k].route_pred);
                printf("; per layer group, measured (table):");
                for (int g = 0; g < 3; g++) {
                    printf(" %s ", tnd_moe_group_name(g));
                    if (cfg[k].grp_gpu[g] >= 0) printf("%.0f%%", 100 * cfg[k].grp_gpu[g]);
                    else printf("-");
                    if (cfg[k].grp_pred[g] >= 0) printf(" (%.0f%%)", 100 * cfg[k].grp_pred[g]);
                }
                if (cfg[k].moves) printf("; the live table swapped %llu experts onto the GPU",
                                         (unsigned long long)cfg[k].moves);
                if (cfg[k].route_pf > 0) {
                    printf("; experts copied a layer ahead served %.0f%% (%.1f copied a layer and step", 100 * cfg[k].route_pf,
                           cfg[k].pf_copies);
                    if (cfg[k].pf2_copies > 0) printf(", %.2f of them two layers ahead", cfg[k].pf2_copies);
                    printf(")");
                }
                if (cfg[k].od_copies > 0) printf("; %.1f loaded on demand a layer and step", cfg[k].od_copies);
                printf("\n");
            }
        if (have_pred) {
            printf("\nnext-layer expert predictor:\n\n");
            tnd_pred_eval_print(&pe, stdout);
        }
    }
    return bench_end(m, pf, toks, rc);
}
