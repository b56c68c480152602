/* The perf DB of a model on this machine: looked up in the cache, else
 * measured and cached. The measuring is here, above the context, because
 * its last steps run real contexts: sched/perf.c times single ops, and the
 * calibration runs below (a CPU run counting expert routings, real CPU and
 * hybrid decode steps) set the model against whole steps
 * (docs/ARCHITECTURE.md, "Placement and prediction"). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "runtime/internal.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Expert popularity (the hot-expert table, docs/ARCHITECTURE.md): a short CPU-only
 * run over a fixed text counts how often routing picks each expert. */
#define CALIB_TOKENS 256
static tnd_status calibrate_experts(const tnd_model *m, tnd_perf *pf) {
    const tnd_hparams *hp = &m->hp;
    static const char text[] =
        "The history of science is the study of the development of science and scientific knowledge, including both "
        "the natural and social sciences. Science is a body of empirical, theoretical, and practical knowledge about "
        "the natural world, produced by scientists who emphasize the observation, explanation, and prediction of "
        "real-world phenomena. def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    pivot = xs[0]\n"
        "    return quicksort([x for x in xs[1:] if x < pivot]) + [pivot] + quicksort([x for x in xs[1:] if x >= pivot])\n"
        "Paris, Berlin, Madrid, Rome and Lisbon are capitals; 17 * 23 = 391; water boils at 100 degrees Celsius.";
    int32_t toks[CALIB_TOKENS];
    int want = TND_MIN(CALIB_TOKENS, hp->n_ctx_train);
    int32_t *ids = NULL;
    size_t n = 0, have = 0;
    if (m->tok && !tnd_tokenize(m->tok, text, sizeof text - 1, true, false, &ids, &n)) {
        while (have < (size_t)want && n) { /* repeat the text to the length wanted */
            size_t k = TND_MIN(n, (size_t)want - have);
            memcpy(toks + have, ids, k * sizeof *ids);
            have += k;
        }
    }
    free(ids);
    tnd_clear_error();
    uint64_t s = 7;
    for (; have < (size_t)want; have++) { /* no tokenizer: pseudo-random ids */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[have] = (int32_t)((s >> 33) % (uint64_t)hp->n_vocab);
    }
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = want;
    cp.n_batch = 64;
    cp.cpu_exact = pf->cpu_exact;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new((tnd_model *)m, &cp, &c);
    if (st) return st;
    size_t cells = (size_t)hp->n_layer * hp->n_expert;
    /* the executor counts the routings of every MOE_ROUTE node while set */
    c->expert_hits = tnd_calloc(cells, sizeof(int64_t));
    if (!c->expert_hits) st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (!st) st = tnd_ctx_eval(c, toks, want, NULL);
    if (!st) st = tnd_perf_set_popularity(m, pf, c->expert_hits, want);
    free(c->expert_hits);
    c->expert_hits = NULL;
    tnd_ctx_free(c);
    return st;
}

#define CAL_PROMPT 8
#define CAL_STEPS 5
/* Median seconds of CAL_STEPS decode steps of a fresh context c (after an
 * 8-token prompt and one unmeasured step, which touches the step's buffers),
 * and at *pos the position of the median's step. */
static tnd_status time_steps(tnd_ctx *c, const tnd_model *m, double *median, int *pos) {
    int32_t toks[CAL_PROMPT + CAL_STEPS + 1];
    for (int i = 0; i < CAL_PROMPT + CAL_STEPS + 1; i++) /* any fixed ids */
        toks[i] = (int32_t)((7919u * (unsigned)(i + 1)) % (unsigned)m->hp.n_vocab);
    double t[CAL_STEPS];
    tnd_status st = tnd_ctx_eval(c, toks, CAL_PROMPT, NULL);
    if (!st) st = tnd_ctx_eval(c, toks + CAL_PROMPT, 1, NULL);
    for (int i = 0; !st && i < CAL_STEPS; i++) {
        double t0 = tnd_time_s();
        st = tnd_ctx_eval(c, toks + CAL_PROMPT + 1 + i, 1, NULL);
        t[i] = tnd_time_s() - t0;
    }
    if (st) return st;
    qsort(t, CAL_STEPS, sizeof(double), cmp_double);
    *median = t[CAL_STEPS / 2];
    *pos = CAL_PROMPT + 1 + CAL_STEPS / 2; /* attention barely moves over five positions */
    return TND_OK;
}

static tnd_ctx_params cal_params(const tnd_perf *pf) {
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = CAL_PROMPT + CAL_STEPS + 1;
    cp.n_batch = CAL_PROMPT;
    cp.cpu_exact = pf->cpu_exact; /* the steps time the mode the DB is for */
    return cp;
}

/* Decode-step calibration. The slice timings run each op alone, with the
 * caches flushed; a real CPU decode step (ops back to back, a pool barrier
 * after each, every layer's own weights and cache rows) took 1.2-1.3x the
 * sum of those times on the device (TND_TRACE=2 against the DB, commit
 * d7f37d7; 1.05-1.12 once decode attention was timed cold too), and a
 * placement's decode predictions were as much too fast. So a few
 * real CPU-only decode steps are timed, against the model's prediction for
 * the same steps, and every CPU decode time is scaled by the ratio. */
static tnd_status calibrate_decode(const tnd_model *m, tnd_perf *pf) {
    tnd_ctx_params cp = cal_params(pf);
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new((tnd_model *)m, &cp, &c);
    if (st) return st;
    double t = 0, pred = 0;
    int pos = 0;
    if (!(st = time_steps(c, m, &t, &pos))) pred = tnd_perf_predict(m, pf, &c->pl, 0, 1, pos);
    tnd_ctx_free(c);
    if (st) return st;
    const double f = pred > 0 ? t / pred : 1;
    bool disturbed;
    /* Below the usual range the ops timed alone were slowed (a profile on
     * the H200 measured 0.30: every CPU expert then looked 3x too slow and
     * decode streamed them all, at 37 instead of 64-72 tok/s), and the
     * steps' time stands; above it, the steps may have been, and the
     * factor is clamped. */
    const double use = tnd_perf_decode_factor(f, &disturbed);
    if (disturbed) {
        char why[200];
        snprintf(why, sizeof why, "real CPU decode steps took %.2fx the sum of their ops timed alone (0.9-2.0 is "
                 "usual; %.2fx used)", f, use);
        tnd_perf_disturbed(pf, why);
    }
    tnd_perf_scale_cpu_decode(pf, use);
    return TND_OK;
}

/* Hybrid decode calibration. In a step that moves between the sides each
 * layer, the host pays more per move than the profile's switch latency
 * shows: GPU ops queue slower in place (5.9 against 3.8 us), a split
 * layer's CPU part copies its activations three times, the CPU ops after a
 * GPU stretch run 10% slower than in a CPU-only step (synth qwen3-30b-a3b,
 * TND_TRACE=2, commit 9f2cea8). So real steps are
 * timed under a static placement of a quarter of the weights (within half
 * the GPU's budget) and the per-switch host cost the model adds is fitted
 * to them (tnd_perf_fit_switch). Skipped, with a line in pf->note, when
 * under 256 MiB of the budget is left, no such placement fits or it
 * switches sides too little to tell; a fit at the cap marks the DB
 * disturbed. */
#define CAL_MIN_ROOM ((uint64_t)256 << 20)
static void calibrate_hybrid(const tnd_model *m, tnd_backend *gpu, tnd_device dev, tnd_perf *pf) {
    tnd_mem_info mi = {0};
    tnd_backend_mem_info(gpu, &mi);
    /* the steps' context is a second backend: it gets what the first left of the budget */
    const uint64_t room = mi.budget ? (mi.budget > mi.used ? mi.budget - mi.used : 0) : mi.dev_free;
    if (room < CAL_MIN_ROOM) {
        tnd_perf_note(pf, "hybrid calibration: skipped (under 256 MiB of the GPU budget left for it)");
        return;
    }
    tnd_ctx_params cp = cal_params(pf);
    cp.device = dev;
    cp.vram_budget = mi.budget ? room : 0;
    const uint64_t kv_layer = 2ull * cp.n_ctx * (uint64_t)m->hp.n_head_kv * m->hp.head_dim * sizeof(uint16_t);
    tnd_placement pl;
    tnd_ctx *c = NULL;
    double t = 0;
    int pos = 0;
    bool any_gpu = false;
    tnd_status st = tnd_placement_make(m, "cpu", NULL, 0, 0, &pl);
    if (st) goto out;
    st = tnd_static_place(m, pf, TND_MIN(tnd_model_weight_bytes(m) / 4, room / 2), kv_layer, cp.n_ctx, cp.n_batch, 1,
                          false, &pl);
    for (int i = 0; !st && i < m->n_slices; i++) any_gpu |= tnd_slice_gpu_bytes(m, &pl, i) > 0;
    if (!st && any_gpu && !(st = tnd_ctx_new_placed((tnd_model *)m, &cp, &pl, &c)) && c->gpu &&
        !(st = time_steps(c, m, &t, &pos))) {
        if (!tnd_perf_fit_switch(m, pf, &c->pl, pos, t))
            tnd_perf_note(pf, "hybrid calibration: none (its placement moves between the sides too little to tell)");
        else if (pf->sw_host >= tnd_perf_sw_host_max(pf)) {
            char why[160];
            snprintf(why, sizeof why, "real hybrid decode steps took %.2f ms, more than the model allows for "
                     "(the per-switch host cost is clamped to %.1f us)", 1e3 * t, 1e6 * pf->sw_host);
            tnd_perf_disturbed(pf, why);
        }
    } else if (!st) {
        tnd_perf_note(pf, "hybrid calibration: skipped (its placement does not fit the GPU)");
    }
    tnd_placement_free(&pl);
out:
    if (c) tnd_ctx_free(c);
    if (st) {
        char line[sizeof pf->note / 2];
        snprintf(line, sizeof line, "hybrid calibration: skipped (%s)", tnd_last_error());
        tnd_perf_note(pf, line);
        tnd_clear_error();
    }
}

/* Builds the DB: the hot-expert table from a real CPU run (MoE models),
 * the op times (hw's cost model, or measured on cpu and gpu), then, when
 * measured, real CPU decode steps and, on a real GPU (hybrid), real
 * hybrid ones calibrate the model. */
static tnd_status perf_build(tnd_model *m, tnd_backend *cpu, tnd_backend *gpu, const tnd_hw *hw, tnd_device hybrid,
                             tnd_progress_fn progress, tnd_perf *pf) {
    tnd_status st = tnd_perf_init(m, pf);
    if (st) return st;
    pf->cpu_exact = cpu ? !tnd_backend_cpu_int8(cpu) : !tnd_cpu_int8_env();
    if (m->hp.n_expert > 1 && (st = calibrate_experts(m, pf))) {
        tnd_perf_free(pf);
        return tnd_fail_wrap(st, "calibrating expert popularity: ");
    }
    if (hw) {
        tnd_perf_from_hw(m, hw, pf);
        return TND_OK;
    }
    tnd_perf_run run;
    st = tnd_perf_measure_ops(m, cpu, gpu, progress, pf, &run);
    if (!st && (st = calibrate_decode(m, pf))) st = tnd_fail_wrap(st, "timing CPU decode steps: ");
    if (!st && run.gpu_timed && hybrid != TND_DEVICE_CPU) calibrate_hybrid(m, gpu, hybrid, pf);
    if (!st) tnd_perf_check_quiet(m, pf, &run);
    if (st) tnd_perf_free(pf);
    return st;
}

static void progress_bar(int done, int total, const char *what) {
    int w = 30, f = total ? w * done / total : w;
    fprintf(stderr, "\rprofiling [%.*s%*s] %d/%d %-24s", f, "##############################", w - f, "", done, total, what);
    if (done >= total) fputc('\n', stderr);
}

/* True the first time this process asks about `path` (the last 16 paths are
 * remembered): a bench or a server makes many contexts over one perf DB,
 * and one warning about it is enough. */
static bool first_warning(const char *path) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t seen[16]; /* FNV-1a hashes of the paths */
    static int n_seen;
    const uint64_t h = tnd_fnv1a(TND_FNV_SEED, path, strlen(path));
    bool first = true;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_seen && i < 16 && first; i++) first = seen[i] != h;
    if (first) seen[n_seen++ % 16] = h;
    pthread_mutex_unlock(&mu);
    return first;
}

/* The perf DB for this model and machine: from the cache, else measured (or
 * computed from the SimGPU profile) and cached. */
tnd_status tnd_perf_get(tnd_model *m, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu, tnd_perf **out) {
    tnd_perf *pf = tnd_calloc(1, sizeof *pf);
    if (!pf) return TND_ERR_NOMEM;
    tnd_hw hw;
    bool use_hw = p->device == TND_DEVICE_SIM && p->hw;
    tnd_status st = use_hw ? tnd_hw_load(p->hw, &hw) : TND_OK;
    tnd_mem_info mi = {0};
    tnd_backend_mem_info(gpu, &mi);
    char key[640], knobs[320], path[4200];
    uint64_t hh = TND_FNV_SEED; /* the profile's numbers: an edited file is another machine */
    if (use_hw) {
        double v[] = {(double)hw.vram, hw.hbm_bw, hw.gpu_flops, hw.pcie_bw, hw.pcie_pageable_bw, hw.pcie_lat,
                      hw.launch, hw.cpu_bw, hw.cpu_flops, hw.cpu_op, hw.cpu_threads};
        hh = tnd_fnv1a(hh, v, sizeof v);
    }
    /* two GPU models of equal memory are different machines */
    hh = tnd_fnv1a(hh, mi.dev_name, strlen(mi.dev_name));
    /* the CPU's times depend on its activation mode: a profile taken in one
     * mode must not steer runs in the other; nor one taken under a tuning
     * knob (docs/TUNING.md) or by another build, whose kernels differ */
    /* a real GPU's memory tells models apart; SimGPU's is the budget (or
     * the profile's, hashed above), which changes no time */
    const uint64_t dev_total = p->device == TND_DEVICE_SIM ? 0 : mi.dev_total;
    snprintf(key, sizeof key, "%s-%s-%llu-%016llx-%s-%s-%s", tnd_backend_name(gpu), use_hw ? hw.name : "measured",
             (unsigned long long)dev_total, (unsigned long long)hh, tnd_backend_cpu_int8(cpu) ? "i8" : "f32",
             tnd_config_key(knobs, sizeof knobs), tnd_build_id());
    const bool cached = !st && tnd_perf_cache_path(m, key, path, sizeof path);
    bool loaded = cached && !p->reprofile && tnd_perf_load(m, path, pf) == TND_OK, again = false;
    if (loaded && strstr(pf->source, TND_PERF_GPU_SHARED) && !strstr(pf->source, TND_PERF_TWICE)) {
        /* A DB measured while another process used the GPU (a game, a
         * second model) places the weights for a shared GPU on every later
         * run, and the shared-GPU rule, which compares its pings with the
         * DB's switch latency, never finds the GPU idle. So the first run
         * that finds one measures once more; one found shared the second
         * time too is kept (TND_PERF_TWICE), not measured at every start. (A
         * busy CPU's DB is kept: its decode factor is clamped, and
         * Algorithm 3 follows the CPU's speed live.) */
        fprintf(stderr, "tandem: the perf DB %s was measured while another process used the GPU: measuring it "
                "again, once\n", path);
        tnd_perf_free(pf);
        memset(pf, 0, sizeof *pf);
        loaded = false;
        again = true;
    }
    if (loaded) {
        TND_INFO("perf DB: %s (%s)", path, pf->source);
        if (strstr(pf->source, TND_PERF_DISTURBED) && first_warning(path))
            TND_WARN("the perf DB %s was measured while the machine was busy: the placement and the predictions "
                     "may be off (tandem profile measures again)", path);
    } else if (!st) {
        tnd_clear_error();
        if (!use_hw && !again)
            fprintf(stderr, "tandem: profiling this model on this machine once (cached for later runs)\n");
        /* real hybrid steps calibrate only the real GPU */
        st = perf_build(m, cpu, gpu, use_hw ? &hw : NULL,
                            p->device == TND_DEVICE_CUDA ? TND_DEVICE_CUDA : TND_DEVICE_CPU,
                            use_hw ? NULL : progress_bar, pf);
        if (!st && again && strstr(pf->source, TND_PERF_GPU_SHARED)) tnd_perf_mark(pf, TND_PERF_TWICE);
        if (!st && cached && !pf->estimated && tnd_perf_save(pf, path)) {
            TND_WARN("could not cache the perf DB: %s", tnd_last_error());
            tnd_clear_error();
        }
    }
    if (st) {
        free(pf);
        return st;
    }
    *out = pf;
    return TND_OK;
}

