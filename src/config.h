/* The process's configuration from the environment: every TND_* knob,
 * read once (on first use, thread-safe) into one struct that the modules
 * read instead of calling getenv themselves. docs/TUNING.md lists the
 * knobs. A bad value keeps the field's default and is reported by
 * tnd_config_check, which the public entry points (tnd_model_load,
 * tnd_ctx_new) call, so it fails the run with one line naming the
 * variable and what it accepts. The cache directory (TANDEM_CACHE,
 * XDG_CACHE_HOME, HOME, sched/perf.c) and the CLI's TANDEM_MODEL are read
 * where they are used: they choose files, not behaviour. */
#ifndef TND_CONFIG_H
#define TND_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TND_CUDA_MV: the decode matvec family of untiled weights */
enum { TND_CFG_MV_AUTO = -1, TND_CFG_MV_OLD = 0, TND_CFG_MV_F16MMA = 1, TND_CFG_MV_I8MMA = 2 };
/* TND_CUDA_GRAPHS: auto = decode steps, rounds with nothing on the CPU, or of split MoE layers */
enum { TND_CFG_GRAPHS_OFF = 0, TND_CFG_GRAPHS_ON = 1, TND_CFG_GRAPHS_AUTO = 2 };
/* TND_CUDA_TILE_MV: the kernel of re-laid (tiled) Q4_K weights */
enum { TND_CFG_TILE_AUTO = 0, TND_CFG_TILE_F16 = 1, TND_CFG_TILE_I8 = 2, TND_CFG_TILE_I8B = 3 };
/* TND_CPU_ISA: -1 the best this CPU has, else the tnd_cpu_isa_id forced */
enum { TND_CFG_ISA_AUTO = -1 };

typedef struct tnd_config {
    /* user-facing */
    int log_level; /* TND_LOG: 0 errors .. 3 debug; default 1 (warnings) */
    bool cpu_int8; /* TND_CPU_INT8: Q8 activations on the CPU (0: --cpu-exact); default on */
    /* diagnostics */
    int trace;           /* TND_TRACE: 0 off, 1 every op synchronized and timed, 2 host time */
    int cuda_pin_pieces; /* TND_CUDA_PIN_PIECES: MiB (1..4096), 0 off: pin in pieces (tests) */
    /* CPU tuning */
    int cpu_isa;     /* TND_CPU_ISA: TND_CFG_ISA_AUTO or a tnd_cpu_isa_id */
    bool cpu_amx;    /* TND_CPU_AMX: the AMX-INT8 prefill kernels where present */
    int cpu_pf_dist; /* TND_CPU_PF_DIST: decode prefetch distance, bytes */
    int pool_spin;   /* TND_POOL_SPIN: spins of an idle pool worker before it sleeps */
    /* CUDA tuning */
    int cuda_mv;         /* TND_CUDA_MV: TND_CFG_MV_* */
    bool cuda_attn_old;  /* TND_CUDA_ATTN=old: the split-K prefill attention only */
    bool cuda_repack;    /* TND_CUDA_REPACK: re-lay Q4_K weights into tiles at upload */
    bool cuda_pair;      /* TND_CUDA_PAIR: fuse two matvecs over one x */
    int cuda_tile_mv;    /* TND_CUDA_TILE_MV: TND_CFG_TILE_* */
    int cuda_tile_depth; /* TND_CUDA_TILE_DEPTH: 1..4, 0 each kernel's default */
    int cuda_tile_pf;    /* TND_CUDA_TILE_PF: 0..2, -1 the default */
    int cuda_tile_i8_ns; /* TND_CUDA_TILE_I8_NS: 0|2|4|6|8, -1 the launch shape's pick */
    int cuda_pdl;        /* TND_CUDA_PDL: 0|1, -1 the default */
    int cuda_graphs;     /* TND_CUDA_GRAPHS: TND_CFG_GRAPHS_*: a decode round's GPU work as CUDA graphs; auto:
                          * decode steps, rounds with nothing on the CPU, those of a model with split MoE
                          * layers */
    /* hybrid execution */
    int expert_prefetch; /* TND_EXPERT_PREFETCH: slots per split MoE layer for experts copied a layer ahead
                          * (exec/prefetch.c); -1 (auto): the model's experts per token; 0: off */
    /* recipe */
    bool fuse;           /* TND_FUSE: the recipe's fused ops (norm + RoPE, residual add + norm) and the
                          * executor's ROPE_KV and MOE_GLU; 0: the unfused ops, the same results (A/B of
                          * the launches and pool regions saved) */
} tnd_config;

/* The configuration, read from the environment on the first call; later
 * changes to the environment have no effect. Never NULL. */
const tnd_config *tnd_config_get(void);

/* TND_OK, or TND_ERR_ARG with tnd_last_error() naming the first variable
 * whose value was refused and the values it accepts. */
tnd_status tnd_config_check(void);

/* Sets one knob as if the environment had said value (NULL: unset, the
 * default), for tests and dev benches that compare settings within one
 * process. Returns TND_ERR_ARG for an unknown name or a refused value.
 * Only for a single thread with no kernel running, before the modules that
 * cache a knob (the ISA, the prefetch distance, AMX) first read it. */
tnd_status tnd_config_set(const char *name, const char *value);

/* The knobs that change kernel timings and differ from their defaults, as
 * "name=value" separated by spaces ("default" when none): part of the perf
 * DB's cache key, so a profile taken under a knob does not steer a default
 * run. Written into buf (cap bytes); returns buf. */
const char *tnd_config_key(char *buf, size_t cap);

/* What this library was built from and with: the git commit (with "+" for
 * uncommitted changes) or the version, the C compiler, the build type and
 * the CUDA architectures. Also part of the perf DB's cache key. */
const char *tnd_build_id(void);

#ifdef __cplusplus
}
#endif

#endif
