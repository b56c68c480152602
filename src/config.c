/* The environment's knobs, read once into one struct (config.h). Each knob
 * is a row of KNOBS: its name, what it accepts (integers in a range, or a
 * list of words) and whether it changes kernel timings (then it enters the
 * perf DB's cache key). docs/TUNING.md describes them. */
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#if defined(__has_include)
#if __has_include("tnd_git_commit.h")
#include "tnd_git_commit.h" /* TND_GIT_COMMIT, written by the build (cmake/git_commit.cmake) */
#endif
#endif
#ifndef TND_GIT_COMMIT
#define TND_GIT_COMMIT "unknown"
#endif
#ifndef TND_BUILD_CC
#define TND_BUILD_CC "cc"
#endif
#ifndef TND_BUILD_TYPE
#define TND_BUILD_TYPE "unknown"
#endif
#ifndef TND_BUILD_CUDA
#define TND_BUILD_CUDA "no-cuda"
#endif
#ifndef TND_BUILD_VERSION
#define TND_BUILD_VERSION "0"
#endif

enum {
    K_LOG,
    K_CPU_INT8,
    K_TRACE,
    K_PIN_PIECES,
    K_CPU_ISA,
    K_CPU_AMX,
    K_CPU_PF_DIST,
    K_POOL_SPIN,
    K_CUDA_MV,
    K_CUDA_ATTN,
    K_CUDA_REPACK,
    K_CUDA_PAIR,
    K_CUDA_TILE_MV,
    K_CUDA_TILE_DEPTH,
    K_CUDA_TILE_PF,
    K_CUDA_TILE_I8_NS,
    K_CUDA_PDL,
    K_CUDA_GRAPHS,
    K_EXPERT_PREFETCH,
    K_FUSE,
    K_N
};

#define MAX_WORDS 5
typedef struct {
    const char *name;
    bool in_key;             /* changes kernel timings: part of the perf DB key */
    int lo, hi, step;        /* integers: lo..hi, multiples of step (lo < hi; beside the words, if any) */
    int n_words;             /* one of these words ... */
    const char *words[MAX_WORDS];
    int values[MAX_WORDS];   /* ... meaning these values */
    const char *accepts;     /* for the error message */
} knob;

static const knob KNOBS[K_N] = {
    [K_LOG] = {"TND_LOG", false, 0, 3, 1, 0, {0}, {0}, "0 (errors) .. 3 (debug)"},
    [K_CPU_INT8] = {"TND_CPU_INT8", false, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
    [K_TRACE] = {"TND_TRACE", true, 0, 0, 0, 3, {"0", "1", "2"}, {0, 1, 2}, "0, 1 or 2"},
    [K_PIN_PIECES] = {"TND_CUDA_PIN_PIECES", false, 0, 4096, 1, 0, {0}, {0}, "0 .. 4096 (MiB; 0: off)"},
    [K_CPU_ISA] = {"TND_CPU_ISA", true, 0, 0, 0, 4, {"auto", "scalar", "avx2", "avx512"}, {TND_CFG_ISA_AUTO, 0, 1, 2},
                   "auto, scalar, avx2 or avx512"},
    [K_CPU_AMX] = {"TND_CPU_AMX", true, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
    [K_CPU_PF_DIST] = {"TND_CPU_PF_DIST", true, 64, 16384, 64, 0, {0}, {0}, "64 .. 16384, a multiple of 64"},
    [K_POOL_SPIN] = {"TND_POOL_SPIN", true, 0, INT_MAX, 1, 0, {0}, {0}, "an integer >= 0"},
    [K_CUDA_MV] = {"TND_CUDA_MV", true, 0, 0, 0, 4, {"auto", "old", "f16mma", "i8mma"},
                   {TND_CFG_MV_AUTO, TND_CFG_MV_OLD, TND_CFG_MV_F16MMA, TND_CFG_MV_I8MMA},
                   "auto, old, f16mma or i8mma"},
    [K_CUDA_ATTN] = {"TND_CUDA_ATTN", true, 0, 0, 0, 2, {"auto", "old"}, {0, 1}, "auto or old"},
    [K_CUDA_REPACK] = {"TND_CUDA_REPACK", true, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
    [K_CUDA_PAIR] = {"TND_CUDA_PAIR", true, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
    [K_CUDA_TILE_MV] = {"TND_CUDA_TILE_MV", true, 0, 0, 0, 4, {"auto", "f16", "i8", "i8b"},
                        {TND_CFG_TILE_AUTO, TND_CFG_TILE_F16, TND_CFG_TILE_I8, TND_CFG_TILE_I8B},
                        "auto, f16, i8 or i8b"},
    [K_CUDA_TILE_DEPTH] = {"TND_CUDA_TILE_DEPTH", true, 1, 4, 1, 0, {0}, {0}, "1 .. 4"},
    [K_CUDA_TILE_PF] = {"TND_CUDA_TILE_PF", true, 0, 2, 1, 0, {0}, {0}, "0, 1 or 2"},
    [K_CUDA_TILE_I8_NS] = {"TND_CUDA_TILE_I8_NS", true, 0, 0, 0, 5, {"0", "2", "4", "6", "8"}, {0, 2, 4, 6, 8},
                           "0, 2, 4, 6 or 8"},
    [K_CUDA_PDL] = {"TND_CUDA_PDL", true, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
    [K_CUDA_GRAPHS] = {"TND_CUDA_GRAPHS", true, 0, 0, 0, 3, {"auto", "0", "1"},
                        {TND_CFG_GRAPHS_AUTO, TND_CFG_GRAPHS_OFF, TND_CFG_GRAPHS_ON}, "auto, 0 or 1"},
    [K_EXPERT_PREFETCH] = {"TND_EXPERT_PREFETCH", true, 0, 64, 1, 1, {"auto"}, {-1}, "auto or 0 .. 64"},
    [K_FUSE] = {"TND_FUSE", true, 0, 0, 0, 2, {"0", "1"}, {0, 1}, "0 or 1"},
};

static const tnd_config DEFAULTS = {
    .log_level = 1, /* TND_LOG_WARN */
    .cpu_int8 = true,
    .trace = 0,
    .cuda_pin_pieces = 0,
    .cpu_isa = TND_CFG_ISA_AUTO,
    .cpu_amx = true,
    .cpu_pf_dist = 3072, /* docs/DECISIONS.md, "The CPU decode prefetch distance: 3072" */
    .pool_spin = 200000,
    .cuda_mv = TND_CFG_MV_AUTO,
    .cuda_attn_old = false,
    .cuda_repack = true,
    .cuda_pair = true,
    .cuda_tile_mv = TND_CFG_TILE_AUTO,
    .cuda_tile_depth = 0,
    .cuda_tile_pf = -1,
    .cuda_tile_i8_ns = -1,
    .cuda_pdl = -1,
    .cuda_graphs = TND_CFG_GRAPHS_AUTO,
    .expert_prefetch = -1,
    .fuse = true,
};

static tnd_config g_cfg;
static char g_bad[K_N][200]; /* per knob: why its value was refused, "" when it was not */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The field of knob k, as an int (the bools too). */
static int get(const tnd_config *c, int k) {
    switch (k) {
    case K_LOG: return c->log_level;
    case K_CPU_INT8: return c->cpu_int8;
    case K_TRACE: return c->trace;
    case K_PIN_PIECES: return c->cuda_pin_pieces;
    case K_CPU_ISA: return c->cpu_isa;
    case K_CPU_AMX: return c->cpu_amx;
    case K_CPU_PF_DIST: return c->cpu_pf_dist;
    case K_POOL_SPIN: return c->pool_spin;
    case K_CUDA_MV: return c->cuda_mv;
    case K_CUDA_ATTN: return c->cuda_attn_old;
    case K_CUDA_REPACK: return c->cuda_repack;
    case K_CUDA_PAIR: return c->cuda_pair;
    case K_CUDA_GRAPHS: return c->cuda_graphs;
    case K_EXPERT_PREFETCH: return c->expert_prefetch;
    case K_CUDA_TILE_MV: return c->cuda_tile_mv;
    case K_CUDA_TILE_DEPTH: return c->cuda_tile_depth;
    case K_CUDA_TILE_PF: return c->cuda_tile_pf;
    case K_CUDA_TILE_I8_NS: return c->cuda_tile_i8_ns;
    case K_CUDA_PDL: return c->cuda_pdl;
    case K_FUSE: return c->fuse;
    }
    return 0;
}

static void put(tnd_config *c, int k, int v) {
    switch (k) {
    case K_LOG: c->log_level = v; break;
    case K_CPU_INT8: c->cpu_int8 = v != 0; break;
    case K_TRACE: c->trace = v; break;
    case K_PIN_PIECES: c->cuda_pin_pieces = v; break;
    case K_CPU_ISA: c->cpu_isa = v; break;
    case K_CPU_AMX: c->cpu_amx = v != 0; break;
    case K_CPU_PF_DIST: c->cpu_pf_dist = v; break;
    case K_POOL_SPIN: c->pool_spin = v; break;
    case K_CUDA_MV: c->cuda_mv = v; break;
    case K_CUDA_ATTN: c->cuda_attn_old = v != 0; break;
    case K_CUDA_REPACK: c->cuda_repack = v != 0; break;
    case K_CUDA_PAIR: c->cuda_pair = v != 0; break;
    case K_CUDA_GRAPHS: c->cuda_graphs = v; break;
    case K_EXPERT_PREFETCH: c->expert_prefetch = v; break;
    case K_CUDA_TILE_MV: c->cuda_tile_mv = v; break;
    case K_CUDA_TILE_DEPTH: c->cuda_tile_depth = v; break;
    case K_CUDA_TILE_PF: c->cuda_tile_pf = v; break;
    case K_CUDA_TILE_I8_NS: c->cuda_tile_i8_ns = v; break;
    case K_CUDA_PDL: c->cuda_pdl = v; break;
    case K_FUSE: c->fuse = v != 0; break;
    }
}

/* Parses s for knob k into *v; false when refused. */
static bool parse(int k, const char *s, int *v) {
    const knob *kn = &KNOBS[k];
    if (kn->n_words) {
        for (int i = 0; i < kn->n_words; i++)
            if (!strcmp(s, kn->words[i])) {
                *v = kn->values[i];
                return true;
            }
        if (kn->lo >= kn->hi) return false; /* words only */
    }
    char *end = NULL;
    const long x = strtol(s, &end, 10);
    if (end == s || *end || x < kn->lo || x > kn->hi || x % kn->step) return false;
    *v = (int)x;
    return true;
}

/* Sets knob k from s (NULL or empty: the default); false when refused
 * (the field keeps its value, the default when loading; msg says why). */
static bool apply(tnd_config *c, int k, const char *s, char *msg, size_t cap) {
    int v = get(&DEFAULTS, k);
    msg[0] = 0;
    if (s && *s && !parse(k, s, &v)) {
        snprintf(msg, cap, "environment variable %s=%.40s is not valid (accepted: %s)", KNOBS[k].name, s,
                 KNOBS[k].accepts);
        return false;
    }
    put(c, k, v);
    return true;
}

static void load(void) {
    g_cfg = DEFAULTS;
    for (int k = 0; k < K_N; k++) apply(&g_cfg, k, getenv(KNOBS[k].name), g_bad[k], sizeof g_bad[k]);
}

const tnd_config *tnd_config_get(void) {
    pthread_once(&g_once, load);
    return &g_cfg;
}

tnd_status tnd_config_check(void) {
    pthread_once(&g_once, load);
    for (int k = 0; k < K_N; k++)
        if (g_bad[k][0]) return tnd_fail(TND_ERR_ARG, "%s", g_bad[k]);
    return TND_OK;
}

tnd_status tnd_config_set(const char *name, const char *value) {
    pthread_once(&g_once, load);
    for (int k = 0; k < K_N; k++)
        if (name && !strcmp(name, KNOBS[k].name)) {
            char msg[sizeof g_bad[k]];
            if (!apply(&g_cfg, k, value, msg, sizeof msg)) return tnd_fail(TND_ERR_ARG, "%s", msg);
            g_bad[k][0] = 0; /* a value set anew replaces a refused one */
            return TND_OK;
        }
    return tnd_fail(TND_ERR_ARG, "%s is not a tandem setting (docs/TUNING.md lists them)", name ? name : "(null)");
}

const char *tnd_config_key(char *buf, size_t cap) {
    const tnd_config *c = tnd_config_get();
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (int k = 0; k < K_N; k++) {
        const int v = get(c, k);
        if (!KNOBS[k].in_key || v == get(&DEFAULTS, k)) continue;
        const char *word = NULL;
        for (int i = 0; i < KNOBS[k].n_words; i++)
            if (KNOBS[k].values[i] == v) word = KNOBS[k].words[i];
        char one[96];
        if (word) snprintf(one, sizeof one, "%s%s=%s", n ? " " : "", KNOBS[k].name, word);
        else snprintf(one, sizeof one, "%s%s=%d", n ? " " : "", KNOBS[k].name, v);
        if (n + strlen(one) < cap) {
            memcpy(buf + n, one, strlen(one) + 1);
            n += strlen(one);
        }
    }
    if (!n) snprintf(buf, cap, "default");
    return buf;
}

const char *tnd_build_id(void) {
    /* the commit when built from a checkout, else the version */
    static const char *id = "tandem " TND_BUILD_VERSION " " TND_GIT_COMMIT " " TND_BUILD_CC " " TND_BUILD_TYPE
                            " " TND_BUILD_CUDA;
    return id;
}
