/* Hardware profiles (built-in and from files) and the per-op cost model of
 * hw.h. */
#include "sim/hw.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* ---- built-in profiles ------------------------------------------------------
 *
 * Sources and derivations, per number:
 * - "usable" memory bandwidth = spec x 0.88: the device's H200 copies at
 *   4.27 TB/s of its 4.8 TB/s spec (docs/BENCHMARKS.md), and GDDR6/6X reach
 *   a similar fraction in streaming reads.
 * - GPU FLOP/s: tandem's prefill GEMMs are cuBLAS f16 x f16 with f32
 *   accumulation (cuda/matmul.cu), which GeForce parts run at half their
 *   f16-accumulate tensor rate; usable = 70% of that peak (large cuBLAS GEMMs).
 * - pinned PCIe = the link's payload rate x 0.86 (the device moves 55 of
 *   PCIe 5.0 x16's 64 GB/s); pageable copies stage through a driver buffer,
 *   which bandwidthTest-style figures put at 40-60% of pinned on desktops
 *   (the device measures only 6 GB/s).
 * - per-copy latency 10 us: a small cudaMemcpyAsync's end-to-end time.
 * - launch: the device runs ~540 kernels per token at 333 tok/s = 5.6 us per
 *   op (BENCHMARKS.md, launch-bound SmolLM2 decode); desktop parts a bit less.
 * - CPU FLOP/s: what tandem's f32-activation matmuls reach, not peak: the
 *   device's 16 threads do qwen3-8b pp512 at 30.9 tok/s x ~15 GFLOP/token =
 *   0.47 TFLOPS, ~1/3 of an 8-core AVX2 part's peak scaled the same way.
 * - cpu_op 3 us: one thread-pool wake-up and barrier (cpu/pool.c). */
static const tnd_hw builtin_hw[] = {
    {
        .name = "rtx3060-laptop",
        .gpu = "RTX 3060 Laptop 6 GB",
        .cpu = "i7-11800H 8 cores, DDR4-3200 2ch",
        .vram = 6ull << 30,
        .hbm_bw = 296e9,          /* GDDR6 192-bit x 14 Gbps = 336 GB/s spec x 0.88 */
        .gpu_flops = 15e12,       /* 30 SMs x ~1.43 GHz (mid TGP) x 512 f32-acc FLOP/clk = 21.9 T x 0.7 */
        .pcie_bw = 13e9,          /* PCIe 4.0 x8 or 3.0 x16 as laptops wire it: 15.75 GB/s x 0.86 */
        .pcie_pageable_bw = 6e9,  /* ~45% of pinned */
        .pcie_lat = 10e-6,
        .launch = 5e-6,
        .cpu_bw = 40e9,           /* DDR4-3200 dual channel 51.2 GB/s spec, ~80% read with all threads */
        .cpu_flops = 0.3e12,      /* 8 cores x 32 FLOP/clk (2 AVX2 FMA) x ~3.5 GHz = 0.9 T peak, ~1/3 usable */
        .cpu_op = 3e-6,
        .cpu_threads = 8,
    },
    {
        .name = "rtx4090-desktop",
        .gpu = "RTX 4090 24 GB",
        .cpu = "i7-11700 8 cores, DDR4-3200 2ch",
        .vram = 24ull << 30,
        .hbm_bw = 887e9,          /* GDDR6X 384-bit x 21 Gbps = 1008 GB/s spec x 0.88 */
        .gpu_flops = 58e12,       /* 165 TFLOPS f16-acc dense, 82.6 with f32 acc (cuBLAS 32F) x 0.7 */
        .pcie_bw = 25e9,          /* PCIe 4.0 x16: 31.5 GB/s x ~0.8, the usual bandwidthTest figure */
        .pcie_pageable_bw = 10e9, /* ~40% of pinned */
        .pcie_lat = 10e-6,
        .launch = 4e-6,
        .cpu_bw = 40e9,           /* DDR4-3200 dual channel 51.2 GB/s spec, ~80% */
        .cpu_flops = 0.35e12,     /* 8 cores x 32 FLOP/clk x ~4.4 GHz all-core = 1.13 T peak, ~1/3 usable */
        .cpu_op = 3e-6,
        .cpu_threads = 8,
    },
    {
        .name = "h200-device",
        .gpu = "NVIDIA H200 139 GiB",
        .cpu = "16 cores AVX-512/AMX",
        .vram = 139ull << 30,     /* as the device reports it */
        .hbm_bw = 4.2e12,         /* measured D2D copy 4.27 TB/s (BENCHMARKS.md), spec 4.8 */
        .gpu_flops = 690e12,      /* 989 TFLOPS f16 dense (f32 acc, same rate on Hopper) x 0.7 */
        .pcie_bw = 55e9,          /* measured pinned H2D, PCIe 5.0 x16 */
        .pcie_pageable_bw = 6e9,  /* measured pageable H2D */
        .pcie_lat = 10e-6,
        .launch = 5.5e-6,         /* measured, see above */
        .cpu_bw = 103e9,          /* measured DRAM read, 16 threads */
        .cpu_flops = 0.5e12,      /* measured 0.47 TFLOPS (qwen3-8b pp512, f32 activations) */
        .cpu_op = 3e-6,
        .cpu_threads = 16,
    },
};

const char *tnd_hw_names(void) { return "rtx3060-laptop, rtx4090-desktop, h200-device"; }

/* ---- profile files -------------------------------------------------------------- */

enum { K_STR, K_BYTES, K_BW, K_FLOPS, K_TIME, K_INT };

typedef struct field {
    const char *key;
    int kind;
    size_t off;
} field;

#define F(k, kind) {#k, kind, offsetof(tnd_hw, k)}
static const field fields[] = {
    F(name, K_STR),       F(gpu, K_STR),       F(cpu, K_STR),        F(vram, K_BYTES),
    F(hbm_bw, K_BW),      F(gpu_flops, K_FLOPS), F(pcie_bw, K_BW),   F(pcie_pageable_bw, K_BW),
    F(pcie_lat, K_TIME),  F(launch, K_TIME),   F(cpu_bw, K_BW),      F(cpu_flops, K_FLOPS),
    F(cpu_op, K_TIME),    F(cpu_threads, K_INT),
};
#undef F

typedef struct unit {
    const char *sym;
    double mul;
} unit;

static const unit bytes_units[] = {{"B", 1},      {"KB", 1e3},           {"MB", 1e6},           {"GB", 1e9},
                                   {"TB", 1e12},  {"KiB", 1024.0},       {"MiB", 1048576.0},    {"GiB", 1073741824.0},
                                   {"TiB", 1099511627776.0}};
static const unit bw_units[] = {{"B/s", 1}, {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}};
static const unit flops_units[] = {{"FLOPS", 1}, {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15}};
static const unit time_units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};

static const char *kind_units(int kind) {
    switch (kind) {
    case K_BYTES: return "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB";
    case K_BW: return "B/s, KB/s, MB/s, GB/s, TB/s";
    case K_FLOPS: return "FLOPS, GFLOPS, TFLOPS, PFLOPS";
    case K_TIME: return "s, ms, us, ns";
    default: return "none";
    }
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Parses "number [unit]" for a numeric field; false with *why set. */
static bool parse_number(const char *v, int kind, double *out, const char **why) {
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || errno || !isfinite(x)) {
        *why = "not a number";
        return false;
    }
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    if (*end) {
        const unit *u = NULL;
        size_t nu = 0;
        switch (kind) {
        case K_BYTES: u = bytes_units, nu = TND_ARRAY_LEN(bytes_units); break;
        case K_BW: u = bw_units, nu = TND_ARRAY_LEN(bw_units); break;
        case K_FLOPS: u = flops_units, nu = TND_ARRAY_LEN(flops_units); break;
        case K_TIME: u = time_units, nu = TND_ARRAY_LEN(time_units); break;
        default: break;
        }
        size_t i = 0;
        while (i < nu && strcmp(end, u[i].sym) != 0) i++;
        if (i == nu) {
            *why = "unknown unit";
            return false;
        }
        mul = u[i].mul;
    }
    x *= mul;
    if (kind == K_INT && (x != floor(x) || x < 1 || x > 1e6)) {
        *why = "must be a whole number >= 1";
        return false;
    }
    if (kind == K_TIME ? x < 0 : x <= 0) {
        *why = kind == K_TIME ? "must be >= 0" : "must be > 0";
        return false;
    }
    if (kind == K_BYTES && x >= 1.8e19) {
        *why = "too large";
        return false;
    }
    *out = x;
    return true;
}

static tnd_status load_file(const char *path, tnd_hw *out) {
    if (access(path, F_OK) != 0)
        return tnd_fail(TND_ERR_IO, "hw profile '%s': not a built-in (%s) and cannot be opened: %s", path,
                        tnd_hw_names(), strerror(errno));
    FILE *f;
    tnd_status ost = tnd_open_regular(path, "hw profile", 1u << 20, &f);
    if (ost) return ost;
    tnd_hw hw;
    memset(&hw, 0, sizeof hw);
    bool have_base = false;
    int set_line[TND_ARRAY_LEN(fields)] = {0};
    char buf[1024];
    int line = 0, n_keys = 0;
    tnd_status st = TND_OK;
    while (fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n' && !feof(f)) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: line too long", path, line);
            break;
        }
        /* '#' starts a comment unless inside double quotes */
        bool q = false;
        for (char *p = buf; *p; p++) {
            if (*p == '"') q = !q;
            else if (*p == '#' && !q) {
                *p = 0;
                break;
            }
        }
        char *s = trim(buf);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: expected 'key = value', got '%s'", path, line, s);
            break;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        n_keys++;
        if (strcmp(key, "base") == 0) {
            if (n_keys != 1) {
                st = tnd_fail(TND_ERR_ARG, "%s:%d: 'base' must be the first key", path, line);
                break;
            }
            size_t i = 0;
            while (i < TND_ARRAY_LEN(builtin_hw) && strcmp(val, builtin_hw[i].name) != 0) i++;
            if (i == TND_ARRAY_LEN(builtin_hw)) {
                st = tnd_fail(TND_ERR_ARG, "%s:%d: base '%s' is not a built-in profile (%s)", path, line, val,
                              tnd_hw_names());
                break;
            }
            hw = builtin_hw[i];
            have_base = true;
            continue;
        }
        size_t k = 0;
        while (k < TND_ARRAY_LEN(fields) && strcmp(key, fields[k].key) != 0) k++;
        if (k == TND_ARRAY_LEN(fields)) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: unknown key '%s'", path, line, key);
            break;
        }
        const field *fd = &fields[k];
        if (set_line[k]) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: key '%s' given twice (also on line %d)", path, line, key, set_line[k]);
            break;
        }
        set_line[k] = line;
        if (!*val) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: key '%s' has no value", path, line, key);
            break;
        }
        if (fd->kind == K_STR) {
            size_t n = strlen(val);
            if (n >= 2 && val[0] == '"' && val[n - 1] == '"') {
                val[n - 1] = 0;
                val++;
                n -= 2;
            }
            if (n >= 64) {
                st = tnd_fail(TND_ERR_ARG, "%s:%d: %s is longer than 63 bytes", path, line, key);
                break;
            }
            memcpy((char *)&hw + fd->off, val, n + 1);
            continue;
        }
        double x;
        const char *why = NULL;
        if (!parse_number(val, fd->kind, &x, &why)) {
            st = tnd_fail(TND_ERR_ARG, "%s:%d: %s = '%s': %s (units: %s)", path, line, key, val, why,
                          kind_units(fd->kind));
            break;
        }
        char *dst = (char *)&hw + fd->off;
        if (fd->kind == K_BYTES) *(uint64_t *)(void *)dst = (uint64_t)llround(x);
        else if (fd->kind == K_INT) *(int *)(void *)dst = (int)x;
        else *(double *)(void *)dst = x;
    }
    if (st == TND_OK && ferror(f)) st = tnd_fail(TND_ERR_IO, "%s: read error after line %d", path, line);
    fclose(f);
    if (st != TND_OK) return st;
    if (!have_base) {
        for (size_t k = 0; k < TND_ARRAY_LEN(fields); k++)
            if (!set_line[k]) return tnd_fail(TND_ERR_ARG, "%s: missing key '%s' (and no 'base')", path, fields[k].key);
    }
    if (!set_line[0]) { /* fields[0] is name */
        /* a derived profile without its own name is named after its file */
        const char *b = strrchr(path, '/');
        snprintf(hw.name, sizeof hw.name, "%s", b ? b + 1 : path);
    }
    *out = hw;
    return TND_OK;
}

tnd_status tnd_hw_load(const char *name_or_path, tnd_hw *out) {
    if (!name_or_path || !*name_or_path || !out) return tnd_fail(TND_ERR_ARG, "hw profile: no name given");
    for (size_t i = 0; i < TND_ARRAY_LEN(builtin_hw); i++) {
        if (strcmp(name_or_path, builtin_hw[i].name) == 0) {
            *out = builtin_hw[i];
            return TND_OK;
        }
    }
    return load_file(name_or_path, out);
}

/* ---- cost model -------------------------------------------------------------- */

typedef struct op_cost {
    double bytes, flops;
} op_cost;

static int64_t dim(const tnd_tensor *t, int i) { return t->ne[i] > 0 ? t->ne[i] : 1; }
/* Bytes of a tensor that is given (ne[0] > 0); 0 for an unused slot. */
static double tbytes(const tnd_tensor *t) { return t->ne[0] > 0 ? (double)tnd_tensor_nbytes(t) : 0; }

static op_cost cost_of(const tnd_op *op) {
    op_cost c = {0, 0};
    const tnd_tensor *in = op->in, *out = op->out;
    switch (op->kind) {
    case TND_OP_MATMUL: {
        double n_in = (double)in[0].ne[0], n_out = (double)dim(&in[0], 1);
        double n_tok = n_in > 0 ? (double)tnd_tensor_nelem(&in[1]) / n_in : 0;
        c.bytes = tbytes(&in[0]) + tbytes(&in[1]) + tbytes(&out[0]);
        c.flops = 2 * n_in * n_out * n_tok;
        return c;
    }
    case TND_OP_MATMUL_ID: {
        int64_t n_in = in[0].ne[0], n_out = dim(&in[0], 1), n_exp = dim(&in[0], 2);
        int64_t n_used = dim(&in[2], 0), n_tok = dim(&in[2], 1) * dim(&in[2], 2) * dim(&in[2], 3);
        int64_t pairs = n_used * n_tok, distinct = TND_MIN(pairs, n_exp);
        const int32_t *ids = in[2].data;
        if (ids) {
            bool *seen = calloc((size_t)n_exp, 1);
            if (seen) {
                distinct = 0;
                for (int64_t i = 0; i < pairs; i++) {
                    int32_t e = ids[i];
                    if (e >= 0 && e < n_exp && !seen[e]) seen[e] = true, distinct++;
                }
                free(seen);
            }
        }
        double slice = (double)tnd_row_size(in[0].type, n_in) * (double)n_out;
        c.bytes = slice * (double)distinct + tbytes(&in[1]) + tbytes(&in[2]) + tbytes(&out[0]);
        c.flops = 2.0 * (double)n_in * (double)n_out * (double)pairs;
        return c;
    }
    case TND_OP_GET_ROWS: {
        double n_ids = (double)tnd_tensor_nelem(&in[1]);
        c.bytes = n_ids * (double)tnd_row_size(in[0].type, in[0].ne[0]) + tbytes(&in[1]) + tbytes(&out[0]);
        c.flops = (double)tnd_tensor_nelem(&out[0]);
        return c;
    }
    case TND_OP_ATTN: {
        int64_t n_tok = dim(&in[0], 2) * dim(&in[0], 3);
        double row_bytes = (double)in[1].ne[0] * 2; /* f16 */
        if (op->p.attn.slot_rows > 0 && in[3].data) { /* slots: each query reads its own slot's rows */
            const int32_t *row = in[3].data;
            double seen = 0;
            for (int64_t t = 0; t < n_tok; t++) {
                int64_t p = row[t] % op->p.attn.slot_rows + 1, w = op->p.attn.window;
                seen += (double)(w > 0 ? TND_MIN(p, w) : p);
            }
            c.bytes = tbytes(&in[0]) + tbytes(&out[0]) + 2 * row_bytes * seen;
            c.flops = 4.0 * op->p.attn.n_head * op->p.attn.head_dim * seen;
            return c;
        }
        /* positions in memory (backend.h): read as MATMUL_ID's ids are, when the op runs */
        int64_t pos0 = in[3].data ? *(const int32_t *)in[3].data : op->p.attn.pos0;
        if (pos0 < 0) pos0 = 0;
        int64_t seen = pos0 + n_tok; /* rows a query sees, at most (the last query) */
        int64_t rows = seen;         /* rows the chunk reads */
        int64_t w = op->p.attn.window;
        if (w > 0) {
            seen = TND_MIN(seen, w);
            rows = TND_MIN(rows, w + n_tok - 1);
        }
        c.bytes = tbytes(&in[0]) + tbytes(&out[0]) + 2 * row_bytes * (double)rows;
        c.flops = 4.0 * op->p.attn.n_head * op->p.attn.head_dim * (double)seen * (double)n_tok;
        return c;
    }
    case TND_OP_ROPE_KV:  /* its four ops' bytes in one launch */
    case TND_OP_MOE_GLU:  /* its three */
    case TND_OP_MOE_FFN:        /* its MOE_GLU and down */
    case TND_OP_MOE_SUM_NORM:   /* its MOE_SUM and RMS_NORM */
    case TND_OP_MOE_ROUTE_PAIR: { /* its two MOE_ROUTEs */
        tnd_op part[4];
        int n = 3;
        if (op->kind == TND_OP_ROPE_KV) tnd_op_rope_kv_split(op, part), n = 4;
        else if (op->kind == TND_OP_MOE_FFN) tnd_op_moe_ffn_split(op, part), n = 2;
        else if (op->kind == TND_OP_MOE_SUM_NORM) tnd_op_sum_norm_split(op, part), n = 2;
        else if (op->kind == TND_OP_MOE_ROUTE_PAIR) tnd_op_route_pair_split(op, part), n = 2;
        else tnd_op_moe_glu_split(op, part);
        for (int i = 0; i < n; i++) {
            op_cost p = cost_of(&part[i]);
            c.bytes += p.bytes, c.flops += p.flops;
        }
        return c;
    }
    case TND_OP_CPY:
        if (in[1].data) { /* rows by position: out spans the cache, only in[0]'s rows are written (f16) */
            c.bytes = tbytes(&in[0]) + tbytes(&in[1]) + 2.0 * (double)tnd_tensor_nelem(&in[0]);
            c.flops = (double)tnd_tensor_nelem(&in[0]);
            return c;
        }
        /* fall through */
    default:
        for (int i = 0; i < TND_OP_MAX_IN; i++) c.bytes += tbytes(&in[i]);
        for (int i = 0; i < TND_OP_MAX_OUT; i++) c.bytes += tbytes(&out[i]);
        c.flops = out[0].ne[0] > 0 ? (double)tnd_tensor_nelem(&out[0]) : 0;
        return c;
    }
}

static double roofline(op_cost c, double bw, double peak, double fixed) {
    double tb = bw > 0 ? c.bytes / bw : 0, tf = peak > 0 ? c.flops / peak : 0;
    return (tb > tf ? tb : tf) + fixed;
}

double tnd_hw_op_time_gpu(const tnd_hw *hw, const tnd_op *op) {
    if (op->kind == TND_OP_NONE) return 0;
    return roofline(cost_of(op), hw->hbm_bw, hw->gpu_flops, hw->launch);
}

double tnd_hw_op_time_cpu(const tnd_hw *hw, const tnd_op *op) {
    if (op->kind == TND_OP_NONE) return 0;
    return roofline(cost_of(op), hw->cpu_bw, hw->cpu_flops, hw->cpu_op);
}

double tnd_hw_copy_time(const tnd_hw *hw, size_t n, bool pinned) {
    if (n == 0) return 0;
    double bw = pinned ? hw->pcie_bw : hw->pcie_pageable_bw;
    return hw->pcie_lat + (bw > 0 ? (double)n / bw : 0);
}
