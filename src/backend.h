/* The backend interface (docs/ARCHITECTURE.md: Execution): what the CPU, CUDA and SimGPU
 * backends implement, and the only way the executor reaches a device.
 *
 * A backend is a table of function pointers (tnd_backend_iface) plus a
 * context. Every slot is commented; slots marked OPTIONAL may be NULL and the
 * tnd_backend_* wrappers below then fall back or report TND_ERR_UNSUPPORTED.
 *
 * Memory kinds:
 *   - device buffers: memory the backend computes on (VRAM for CUDA, a private
 *     heap for SimGPU, plain host memory for CPU). Every allocation, scratch
 *     included, counts against the backend's budget from the first one on; an
 *     allocation beyond it fails with TND_ERR_NOMEM and a message that gives
 *     the request, the budget and what is in use.
 *   - pinned host buffers: page-locked host memory that the device can also
 *     read directly (mapped). They do not count against the device budget.
 *
 * Ordering: work is queued on streams and runs in order per stream; events
 * order streams against each other without device-wide syncs. Pointers passed
 * to copies and ops must stay valid until the stream has passed them.
 *
 * Ops: one generic descriptor (tnd_op) names the op kind, its input and output
 * tensors (pointers in the backend's address space, types, shapes) and its
 * parameters. Each op kind's contract is stated at its enum value below;
 * the CPU backend is the reference every other backend is tested against.
 */
#ifndef TND_BACKEND_H
#define TND_BACKEND_H

/* Expert matmuls of at most this many tokens: one kernel over the (token,
 * slot) pairs on the GPU (TND_OP_MATMUL_ID) */
#define TND_MMID_PAIRS_MAX_TOK 64

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "tandem.h"

/* Longer expert matmuls group the pairs by expert and dequantize the
 * experts they use to f16 in runs of up to this many bytes, one launch a
 * run, then one grouped GEMM a run: how many experts of n_out x n_in a run
 * holds (at least one, at most those the pairs can use). The CUDA
 * backend's scratch and the layout's estimate of it both count it. */
#define TND_MMID_RUN_BYTES (64ull << 20)
static inline int64_t tnd_mmid_run_experts(int64_t n_in, int64_t n_out, int64_t n_expert, int64_t pairs) {
    int64_t k = (int64_t)(TND_MMID_RUN_BYTES / ((uint64_t)n_out * (uint64_t)n_in * 2u));
    if (k > n_expert) k = n_expert;
    if (k > pairs) k = pairs;
    return k < 1 ? 1 : k;
}

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tnd_backend tnd_backend;

typedef struct tnd_stream tnd_stream; /* opaque, owned by a backend */
typedef struct tnd_event tnd_event;   /* opaque, owned by a backend */

/* ---- tensors and ops ----------------------------------------------------- */

#define TND_MAX_DIMS 4

/* A tensor as an op sees it: contiguous, ne[0] the fastest dimension (GGUF
 * order). Rows of block types hold ne[0]/block_size blocks. data is a pointer
 * in the backend's address space (device pointer for CUDA). Unused dims = 1. */
typedef struct tnd_tensor {
    void *data;
    tnd_type type;
    int64_t ne[TND_MAX_DIMS];
} tnd_tensor;

typedef enum tnd_op_kind {
    TND_OP_NONE = 0,
    /* y = W x.  in[0] W: any supported type, ne = {n_in, n_out};
     * in[1] x: f32 {n_in, n_tok}; out[0] y: f32 {n_out, n_tok}.
     * y[t][r] = sum_k W[r][k] * x[t][k]. */
    TND_OP_MATMUL,
    /* Expert matmul. in[0] W: {n_in, n_out, n_expert}; in[1] x: f32
     * {n_in, n_x, n_tok} with n_x = 1 (every slot reads x[t]) or n_used
     * (slot u reads x[t][u], as the down projection does); in[2] ids: i32
     * {n_used, n_tok}; out[0] y: f32 {n_out, n_used, n_tok}:
     * y[t][u] = W[ids[t][u]] x[t][n_x == 1 ? 0 : u]. An id of -1 (any
     * negative id) skips its pair: y[t][u] is left untouched and x[t][u] is
     * not read (a layer split between the CPU and the GPU runs each side's
     * experts with the other side's ids at -1); ids >= n_expert are errors.
     * p.mmid.skip must be set when ids may be negative (backends that
     * cannot see the ids before launching, as CUDA's, then write through a
     * temporary); routing ids never are. Up to TND_MMID_PAIRS_MAX_TOK
     * tokens the CUDA backend runs one kernel over the (token, slot) pairs;
     * above, a GEMM per used expert (the layout's scratch and the cost model
     * follow the same line). */
    TND_OP_MATMUL_ID,
    /* Embedding lookup. in[0] table: any supported type {n, n_rows};
     * in[1] ids: i32 {n_ids}; out[0]: f32 {n, n_ids}. */
    TND_OP_GET_ROWS,
    /* RMSNorm over rows of ne[0]: y = x / sqrt(mean(x^2) + eps) * w.
     * in[0] x f32 {n, rows...}; in[1] w f32 {n} (data NULL: no weight);
     * out[0] f32 like x. Per-head norm (qwen3 q/k): view x as {head_dim,
     * n_head * n_tok} with w {head_dim}. out may alias in[0].
     * Fused residual add (in[2].data set): the row normed is s = in[0] +
     * in[2] (in[2] like in[0]), and s is also written to out[1] (like
     * in[0], may alias it): `x += o; h = norm(x)` as one op, one launch
     * instead of two (the sums are the ADD's, so results are the same). */
    TND_OP_RMS_NORM,
    /* Rotary embedding. in[0] x f32 {head_dim, n_head, n_tok}; in[1] pos
     * i32 {n_tok}; out[0] like x (may alias). The first p.rope.n_rot dims
     * of each head rotate, the rest are copied. mode NORMAL rotates pairs
     * (2i, 2i+1), NEOX pairs (i, i + n_rot/2); angle = pos * freq_scale *
     * freq_base^(-2i/n_rot).
     * Fused per-head norm (in[2].data set: w f32 {head_dim}): each head is
     * first RMS-normed over all head_dim values with eps p.rope.eps and
     * weight w, as RMS_NORM on rows of head_dim would (qwen3's q/k norms),
     * then rotated: one launch instead of two. */
    TND_OP_ROPE,
    /* Causal attention over an f16 KV cache, for one sequence. in[0] q f32
     * {head_dim, n_head, n_tok}; in[1] K f16 {n_head_kv * head_dim, n_ctx};
     * in[2] V f16 same; out[0] f32 {head_dim, n_head, n_tok}. Query t is at
     * position p.attn.pos0 + t and sees cache rows 0..pos0+t (the chunk's own
     * K/V must already be stored). q head h reads kv head h / (n_head /
     * n_head_kv). Scores are scaled by p.attn.scale, then soft-capped
     * (c*tanh(s/c)) if p.attn.softcap > 0. p.attn.window > 0: query at pos
     * sees only rows > pos - window (sliding-window layers).
     * Positions in memory (in[3].data set: pos i32 {n_tok}, consecutive):
     * query t is at pos[0] + t, read when the op runs, and p.attn.pos0 is
     * not used; p.attn.kv_cap >= pos[0] + n_tok bounds the rows any query
     * sees (it sizes a GPU launch). The op is then the same from one decode
     * step to the next, so a GPU backend can replay it (graph_defer).
     * Slots (p.attn.slot_rows > 0, with in[3]): several sequences at once
     * (a batched round's short segments). K and V hold slots of slot_rows
     * rows, one after another; in[3][t] = s * slot_rows + p puts query t at
     * position p of slot s, where it sees that slot's rows 0..p; queries
     * need not be consecutive. kv_cap > every p bounds the rows any query
     * sees (kv_cap <= slot_rows). */
    TND_OP_ATTN,
    /* Softmax over rows of ne[0] of (x * p.scale.s). in[0], out[0] f32. */
    TND_OP_SOFTMAX,
    /* out = silu(in[0]) * in[1], all f32, same element count. */
    TND_OP_SILU_MUL,
    /* out = gelu_tanh(in[0]) * in[1]. */
    TND_OP_GELU_MUL,
    /* out = in[0] + in[1], f32. in[1] has the same element count, or is one
     * row {ne[0]} broadcast over every row of in[0] (bias add). */
    TND_OP_ADD,
    /* out = in[0] * p.scale.s, f32. */
    TND_OP_SCALE,
    /* out = in[0] converted: f32->f32, f32->f16, f16->f32, f16->f16.
     * Element counts must match. Storing K/V into the cache is a CPY whose
     * out points at row pos0 of the cache.
     * Rows by position (in[1].data set: pos i32 {n}; f32 -> f16 only): in[0]
     * holds n rows of out's ne[0] values; row i goes to out's row pos[i],
     * read when the op runs (out spans the cache: ne[1] rows, and a
     * position outside them is an error). Like ATTN's in[3], for replays. */
    TND_OP_CPY,
    /* MoE router. in[0] logits f32 {n_expert, n_tok}; out[0] weights f32
     * {n_used, n_tok}; out[1] ids i32 {n_used, n_tok}. mode SOFTMAX_TOPK:
     * softmax over all experts, keep the top n_used (ties: lower id first),
     * renormalize them to sum 1 if p.route.norm. mode TOPK_SOFTMAX: top
     * n_used logits, softmax over those. Ids are in descending weight order. */
    TND_OP_MOE_ROUTE,
    /* Weighted sum of expert outputs. in[0] y f32 {n, n_used, n_tok};
     * in[1] weights f32 {n_used, n_tok}; out[0] f32 {n, n_tok}:
     * out[t] = sum_u w[t][u] * y[t][u]. */
    TND_OP_MOE_SUM,
    /* Two MATMULs over one x, as one op (a decode step's gate and up, or q
     * and k, in one launch): in[0] W1 {n_in, n_out1}, in[1] x, in[2] W2
     * {n_in, n_out2}; out[0] y1 = W1 x, out[1] y2 = W2 x. Optional: only a
     * backend whose op_supported accepts the op is handed one (the
     * executor fuses two MATMUL nodes only then). */
    TND_OP_MATMUL_PAIR,
    /* A decode step's q/k RoPE and K/V store as one op (one launch instead
     * of four): in[0] q f32 {head_dim, n_head, n_tok}; in[1] pos i32
     * {n_tok}; in[2] q's fused norm weight (optional, as ROPE's); in[3] k f32
     * {head_dim, n_head_kv, n_tok}; in[4] k's norm weight (present iff
     * in[2] is); in[5] v f32 {n_head_kv * head_dim, n_tok}; out[0] q, out[1]
     * k (each rotated in place: the same tensors as in[0], in[3]); out[2],
     * out[3] the K and V caches f16 {n_head_kv * head_dim, rows}. The same
     * as ROPE(q), ROPE(k), then CPY k and v into their caches by position,
     * with p.rope for both ropes (tnd_op_rope_kv_split gives those four
     * ops). Optional, like MATMUL_PAIR: the executor fuses the four nodes
     * only for a backend whose op_supported accepts the op. */
    TND_OP_ROPE_KV,
    /* An MoE FFN's gate, up and activation as one op (the CPU runs them in
     * one parallel region instead of three): in[0] gate W {n_in, n_ff,
     * n_expert}; in[1] x, in[2] ids as MATMUL_ID's; in[3] up W, shaped like
     * gate W; out[0] G, out[1] U, f32 {n_ff, n_used, n_tok}; p.mmid as
     * MATMUL_ID's. The same as MATMUL_ID(gate) -> G, MATMUL_ID(up) -> U,
     * then SILU_MUL(G, U) -> G over all of G (tnd_op_moe_glu_split gives
     * those three ops): a skipped pair's rows of U stay as they are, and its
     * rows of G become silu(G) * U of what they held. Optional, like
     * MATMUL_PAIR: the executor fuses the three nodes only for a backend
     * whose op_supported accepts the op. */
    TND_OP_MOE_GLU,
    /* MOE_GLU and the down projection that reads its G, as one op (the CPU
     * runs them in one parallel region, each down grain after its expert's
     * G rows): MOE_GLU's in[0..3], out[0..1] and p.mmid; in[4] down W
     * {n_ff, n_out, n_expert}; out[2] Y f32 {n_out, n_used, n_tok}. The
     * same as MOE_GLU then MATMUL_ID(down W, G, ids) -> Y with the same
     * skip (tnd_op_moe_ffn_split gives those two ops). Optional, like
     * MATMUL_PAIR. */
    TND_OP_MOE_FFN,
    /* An MoE layer's MOE_SUM and the fused-add RMS_NORM that adds its
     * output into the residual (`x += sum; h = norm(x)`), as one op (one
     * launch instead of two on a decode step's critical path): in[0] x,
     * in[1] the norm's weight (optional), as RMS_NORM's; in[2] y, in[3]
     * weights, as MOE_SUM's in[0], in[1]; out[0] h, out[1] x (the sum), as
     * RMS_NORM's; out[2] the MOE_SUM's output, which is also written. The
     * same as MOE_SUM(y, w) -> out[2], then RMS_NORM(x, weight, out[2]) ->
     * out[0], out[1] with p.norm (tnd_op_sum_norm_split gives those two
     * ops). Optional, like MATMUL_PAIR. */
    TND_OP_MOE_SUM_NORM,
    /* Two MOE_ROUTEs of one shape and p.route as one op (an MoE layer's
     * routing and the next layer's predicted one, model/forward.c): in[0],
     * out[0], out[1] the first's in[0], out[0], out[1]; in[1], out[2],
     * out[3] the second's (tnd_op_route_pair_split gives the two ops).
     * Optional, like MATMUL_PAIR. */
    TND_OP_MOE_ROUTE_PAIR,
    TND_OP_COUNT
} tnd_op_kind;

enum { TND_ROPE_NORMAL = 0, TND_ROPE_NEOX = 2 };
/* Rounds of at most this many tokens read their positions from memory in
 * ATTN and the KV store (in[3], in[1] above; model/forward.c) and may run
 * as replayed CUDA graphs (exec.c). */
#define TND_GRAPH_MAX_TOK 8
/* ... and ATTN's p.attn.kv_cap is pos0 + n_tok rounded up to this, so a
 * replayed launch changes once every TND_KV_CAP_STEP positions. */
#define TND_KV_CAP_STEP 256
enum { TND_ROUTE_SOFTMAX_TOPK = 0, TND_ROUTE_TOPK_SOFTMAX = 1 };

#define TND_OP_MAX_IN 6 /* ROPE_KV's */
#define TND_OP_MAX_OUT 4

/* One op. Zero-initialize, then fill what the kind needs. */
typedef struct tnd_op {
    tnd_op_kind kind;
    tnd_tensor in[TND_OP_MAX_IN];
    tnd_tensor out[TND_OP_MAX_OUT];
    union {
        struct { float eps; } norm;
        struct { int32_t n_rot, mode; float freq_base, freq_scale, eps; } rope; /* eps: the fused norm's */
        struct {
            int32_t n_head, n_head_kv, head_dim, pos0;
            float scale;
            int32_t window;
            float softcap;
            int32_t kv_cap, slot_rows;
        } attn;
        struct { float s; } scale;   /* SOFTMAX (0 is taken as 1) and SCALE */
        struct { int32_t n_used, mode; bool norm; } route;
        struct {
            bool skip;                /* some ids may be -1 */
            const int32_t *ids_host;  /* optional: the ids, current on the host (a backend that groups
                                         pairs by expert on the host then needs no read-back) */
        } mmid;                       /* MATMUL_ID */
    } p;
} tnd_op;

/* Name of an op kind ("matmul"), for messages and traces. */
const char *tnd_op_name(tnd_op_kind k);

/* ROPE_KV (f) as the four ops it stands for, in order: ROPE q, ROPE k, CPY
 * k, CPY v. */
void tnd_op_rope_kv_split(const tnd_op *f, tnd_op part[4]);
/* The four ops a decode step's recipe emits after q, k and v (ROPE q,
 * ROPE k, CPY k and v by position, model/forward.c) as one ROPE_KV in *f;
 * false when they do not have that form (each rope in place, one p.rope
 * and the same positions for all, the stored k the roped one, the norm
 * fused into both ropes or neither, V's rows as wide as K's). */
bool tnd_op_rope_kv_fuse(const tnd_op part[4], tnd_op *f);
/* MOE_GLU (f) as the three ops it stands for, in order: MATMUL_ID gate,
 * MATMUL_ID up, SILU_MUL in place over the whole of G. */
void tnd_op_moe_glu_split(const tnd_op *f, tnd_op part[3]);
/* An MoE FFN's gate and up MATMUL_IDs and their SILU_MUL (model/forward.c)
 * as one MOE_GLU in *f; false when they do not have that form (one x, one
 * ids tensor and skip for both, weights of one shape, the SILU_MUL in place
 * over exactly the gate's output times the up's, no output overlapping
 * another tensor of the op). */
bool tnd_op_moe_glu_fuse(const tnd_op part[3], tnd_op *f);
/* MOE_FFN (f) as its MOE_GLU and the down MATMUL_ID, in order. */
void tnd_op_moe_ffn_split(const tnd_op *f, tnd_op part[2]);
/* A MOE_GLU and the down MATMUL_ID after it as one MOE_FFN in *f; false
 * when they do not have that form (the down reads exactly the GLU's G with
 * its ids and skip, its weight has the gate's experts and n_ff inputs, and
 * its output overlaps no other tensor of the op). */
bool tnd_op_moe_ffn_fuse(const tnd_op part[2], tnd_op *f);
/* MOE_SUM_NORM (f) as its MOE_SUM and fused-add RMS_NORM, in order. */
void tnd_op_sum_norm_split(const tnd_op *f, tnd_op part[2]);
/* A MOE_SUM and the RMS_NORM after it as one MOE_SUM_NORM in *f; false
 * when they do not have that form (the norm's residual in[2] is exactly
 * the sum's output, its sum out[1] is its x, and the sum's output overlaps
 * none of the sum's inputs, x or h). */
bool tnd_op_sum_norm_fuse(const tnd_op part[2], tnd_op *f);
/* MOE_ROUTE_PAIR (f) as its two MOE_ROUTEs, in order. */
void tnd_op_route_pair_split(const tnd_op *f, tnd_op part[2]);
/* Two MOE_ROUTEs as one MOE_ROUTE_PAIR in *f; false when they do not have
 * that form (one p.route, logits and outputs of one shape, and no output
 * of either overlapping the other's logits or another output). */
bool tnd_op_route_pair_fuse(const tnd_op part[2], tnd_op *f);

/* The positions of an ATTN (in[3] and kv_cap, or p.attn.pos0, against its
 * cache's rows) or a CPY by position (in[1]), checked for a backend whose
 * name (`who`) prefixes the message; TND_OK for other ops. */
tnd_status tnd_op_check_positions(const tnd_op *op, const char *who);

/* ---- the backend table --------------------------------------------------- */

typedef struct tnd_mem_info {
    uint64_t budget;      /* bytes this backend may allocate in all */
    uint64_t used;        /* bytes allocated now through this backend */
    uint64_t peak;        /* highest `used` so far */
    uint64_t dev_free;    /* device's free memory as the driver reports it (0 if n/a) */
    uint64_t dev_total;   /* device's total memory (0 if n/a) */
    char dev_name[64];    /* the device's model name ("" if n/a): part of the perf cache key */
} tnd_mem_info;

typedef struct tnd_backend_iface {
    const char *name; /* "cpu", "cuda", "sim" */

    /* Releases everything the backend allocated, then the backend. */
    void (*free)(tnd_backend *b);

    /* -- device memory -- */
    /* Allocates size bytes of device memory (256-byte aligned), readable up
     * to the next multiple of 16 bytes (kernels may read aligned words that
     * straddle the requested end). Fails with
     * TND_ERR_NOMEM if used + size would exceed the budget or the device is
     * out of memory; *out is written only on success. */
    tnd_status (*buf_alloc)(tnd_backend *b, size_t size, void **out);
    /* Frees a buf_alloc pointer (NULL: no-op). Waits for queued work first. */
    void (*buf_free)(tnd_backend *b, void *ptr);
    /* Fills *out with the budget, usage and the device's view of memory. */
    void (*mem_info)(tnd_backend *b, tnd_mem_info *out);

    /* -- pinned host memory -- OPTIONAL (NULL: the backend reads host memory
     * directly, as the CPU backend does). Allocates size bytes of page-locked
     * host memory mapped into the device: *host is the CPU address, *dev the
     * address kernels use (may equal *host). If one pinned region of that size
     * cannot be had, it is pinned in pieces over one contiguous range; if that
     * fails too, TND_ERR_NOMEM says how much could be pinned. */
    tnd_status (*host_alloc)(tnd_backend *b, size_t size, void **host, void **dev);
    /* OPTIONAL with host_alloc. Frees a host_alloc region by its host pointer. */
    void (*host_free)(tnd_backend *b, void *host);
    /* OPTIONAL. Page-locks [p, p + size), memory the caller owns and keeps
     * (page-aligned; read-only allowed: a model file's mapping), so that
     * copies from it run at the pinned rate; no device address is needed.
     * Registering the same range again only counts it. host_unregister
     * undoes one registration (after the work that may read it), given the
     * p registered. */
    tnd_status (*host_register)(tnd_backend *b, void *p, size_t size);
    void (*host_unregister)(tnd_backend *b, void *p);
    /* OPTIONAL with host_register. True if [p, p + size) is registered
     * already, so that registering it again only counts it (nothing to
     * wait for). */
    bool (*host_registered)(tnd_backend *b, const void *p, size_t size);

    /* -- streams -- */
    /* Creates an in-order queue of work (non-blocking w.r.t. other streams). */
    tnd_status (*stream_new)(tnd_backend *b, tnd_stream **out);
    /* Waits for the stream's work, then frees it (NULL: no-op). */
    void (*stream_free)(tnd_backend *b, tnd_stream *s);
    /* Blocks the calling thread until everything queued on s is done;
     * reports an asynchronous failure of that work as TND_ERR_BACKEND. */
    tnd_status (*stream_sync)(tnd_backend *b, tnd_stream *s);

    /* -- events -- */
    /* Creates an event with timing enabled. */
    tnd_status (*event_new)(tnd_backend *b, tnd_event **out);
    void (*event_free)(tnd_backend *b, tnd_event *e);
    /* Marks the point of s's queue reached so far. */
    tnd_status (*event_record)(tnd_backend *b, tnd_event *e, tnd_stream *s);
    /* Makes later work on s wait until e's point is passed (no host wait). */
    tnd_status (*stream_wait)(tnd_backend *b, tnd_stream *s, tnd_event *e);
    /* Blocks the calling thread until e's point is passed. */
    tnd_status (*event_sync)(tnd_backend *b, tnd_event *e);
    /* OPTIONAL. Milliseconds between two recorded, completed events. */
    tnd_status (*event_elapsed)(tnd_backend *b, tnd_event *start, tnd_event *end, float *ms);

    /* -- copies (asynchronous on s; host pointers should be pinned for the
     * copy to overlap, pageable ones work but may serialize) -- */
    tnd_status (*copy_h2d)(tnd_backend *b, void *dst_dev, const void *src_host, size_t n, tnd_stream *s);
    tnd_status (*copy_d2h)(tnd_backend *b, void *dst_host, const void *src_dev, size_t n, tnd_stream *s);
    tnd_status (*copy_d2d)(tnd_backend *b, void *dst_dev, const void *src_dev, size_t n, tnd_stream *s);
    /* OPTIONAL. Copies n bytes between device memory and mapped pinned host
     * memory (either side may be the mapped one, given by its dev address)
     * with a compute kernel instead of the copy engine, so a small activation
     * copy never queues behind a large weight copy (docs/ARCHITECTURE.md,
     * Execution).
     * NULL: the wrappers use copy_d2d. */
    tnd_status (*copy_mapped)(tnd_backend *b, void *dst, const void *src, size_t n, tnd_stream *s);
    /* OPTIONAL. Sets n bytes of device memory to the byte value v. */
    tnd_status (*memset)(tnd_backend *b, void *dst_dev, int v, size_t n, tnd_stream *s);

    /* -- ops -- */
    /* OPTIONAL. TND_OK if op_run can run this op (kinds, types, shapes);
     * otherwise TND_ERR_UNSUPPORTED or TND_ERR_ARG with the reason. NULL:
     * the backend runs every op but the optional MATMUL_PAIR and ROPE_KV,
     * which are then never handed to it. */
    tnd_status (*op_supported)(tnd_backend *b, const tnd_op *op);
    /* Queues op on s. Validates shapes and types first (TND_ERR_ARG /
     * TND_ERR_UNSUPPORTED, nothing queued). Scratch memory the op needs is
     * the stream's own (so ops on different streams never share it) and is
     * counted against the budget. */
    tnd_status (*op_run)(tnd_backend *b, const tnd_op *op, tnd_stream *s);
    /* OPTIONAL. Allocates now the scratch that running op on s would need
     * (counted against the budget), so that the run allocates nothing: the
     * executor reserves the largest ops of a round when it lays memory out,
     * and a budget that is too small fails then, not mid-generation. */
    tnd_status (*reserve)(tnd_backend *b, const tnd_op *op, tnd_stream *s);

    /* -- weights -- */
    /* OPTIONAL (NULL: weights are read as uploaded). Called once after a
     * resident weight w (a 2-D tensor in a buf_alloc buffer) is uploaded and
     * before any op reads it, only for weights that TND_OP_MATMUL alone
     * reads (never embedding tables, expert tensors, or buffers that are
     * refilled later). May re-lay the bytes in place, queued on s (order
     * other streams after it); allocates no device memory. The backend
     * remembers the ranges it re-laid: MATMUL over exactly that tensor
     * reads the new layout, any other op touching the range fails with
     * TND_ERR_UNSUPPORTED; freeing the buffer forgets them. A second call
     * for the same tensor is a no-op. The CUDA backend re-lays Q4_K
     * tensors of n_out % 16 == 0 (env TND_CUDA_REPACK=0: never). */
    tnd_status (*weight_prepare)(tnd_backend *b, const tnd_tensor *w, tnd_stream *s);

    /* -- graphs (docs/ARCHITECTURE.md: CUDA graphs) -- */
    /* OPTIONAL (NULL: work is always launched as it is queued). on: the
     * ops, SM copies, event records and event waits queued on s from now on
     * may be collected instead of launched, and launched together (as one
     * CUDA graph, replayed or updated when the same run of work comes
     * again) at the next graph_flush, or before anything that observes
     * them: a host wait on s or on an event recorded in the run, another
     * stream's wait on such an event, a copy through the copy engine on s,
     * freeing memory. Work the backend cannot collect (it would wait for
     * the host or allocate) launches the run so far, then itself. off:
     * flushes, then launches as queued again. Results are the same either
     * way: the same kernels run in the same order. */
    tnd_status (*graph_defer)(tnd_backend *b, tnd_stream *s, bool on);
    /* OPTIONAL with graph_defer. Launches the work collected on s so far
     * (nothing collected: no-op); s keeps collecting. */
    tnd_status (*graph_flush)(tnd_backend *b, tnd_stream *s);

    /* OPTIONAL (events, continued). *done: e's point is passed, without
     * waiting (an event never recorded counts as passed). */
    tnd_status (*event_done)(tnd_backend *b, tnd_event *e, bool *done);

    /* OPTIONAL. Queues a kernel that does nothing on s (which must have
     * nothing queued: call it after a sync) and waits for it; *secs is how
     * long that took: how soon the device takes new work now. Another
     * process's kernels time-share a GPU, and each of ours then waits for
     * a time slice (milliseconds) where it waited microseconds. A real
     * device reports the host's wall time; SimGPU its timing model's
     * (tnd_sim_set_gpu_slowdown), so tests are deterministic. */
    tnd_status (*ping)(tnd_backend *b, tnd_stream *s, double *secs);
} tnd_backend_iface;

/* What a backend was asked to do and did, summed from its creation
 * (tnd_backend_counters; bench -v prints them per token). host_syncs:
 * every wait of the calling thread for the device (stream_sync,
 * event_sync, and the backend's own waits inside an op); ops: op_run
 * calls; launches: ops and SM copies sent to the device one by one (a
 * backend without graph_defer: every op_run and copy_mapped);
 * graph_*: runs of collected work launched as one graph, of which replayed
 * unchanged, updated in place (cudaGraphExecUpdate) and instantiated anew,
 * and the ops they held. */
typedef struct tnd_backend_counters {
    uint64_t host_syncs, ops, launches;
    uint64_t graph_launches, graph_replays, graph_updates, graph_inst, graph_ops;
} tnd_backend_counters;

struct tnd_backend {
    const tnd_backend_iface *iface;
    void *ctx; /* the implementation's state */
    tnd_backend_counters cnt; /* zeroed at creation (the backends calloc b) */
};

/* ---- CPU backend --------------------------------------------------------- */

struct tnd_pool;
/* The CPU backend: ops run synchronously on the caller with pool's threads
 * (pool may be NULL: one thread); streams and events are trivial; device
 * memory is host memory, so host pointers (mmapped weights) work directly.
 * budget 0 = unlimited. */
tnd_status tnd_backend_cpu_new(struct tnd_pool *pool, uint64_t budget, tnd_backend **out);
/* Matmuls of CPU backend b over quantized weights: on (the default) =
 * activations quantized to Q8 blocks and integer dot products, as llama.cpp
 * does (faster decode and prefill; ~0.1 logit of noise per logit on the
 * default model, tests/test_ref_logits.py); off = f32 activations, the
 * exact mode (--cpu-exact), the same for chunked prefill and decode.
 * tnd_backend_cpu_new starts from tnd_cpu_int8_env(). No effect on other
 * backends; tnd_backend_cpu_int8 is false for them. */
void tnd_backend_cpu_set_int8(tnd_backend *b, bool on);
bool tnd_backend_cpu_int8(const tnd_backend *b);
/* The process default: true unless the environment has TND_CPU_INT8=0. */
bool tnd_cpu_int8_env(void);

/* ---- CUDA backend -------------------------------------------------------- */

typedef struct tnd_cuda_params {
    int device;            /* CUDA device index */
    uint64_t vram_budget;  /* bytes; 0 = the device's free memory at start less 512 MiB */
} tnd_cuda_params;

/* (tnd_cuda_device_count and tnd_cuda_device_get: tandem.h) */
/* Creates the CUDA backend on p->device. TND_ERR_UNSUPPORTED when built
 * without CUDA; TND_ERR_BACKEND if the device cannot be opened. */
tnd_status tnd_backend_cuda_new(const tnd_cuda_params *p, tnd_backend **out);

/* The cudaStream_t of a CUDA backend stream, for calling src/cuda/cuda_ops.h
 * directly (tests, benches); NULL when built without CUDA. */
void *tnd_cuda_stream_handle(tnd_stream *s);

/* ---- helpers over any backend -------------------------------------------- */

/* Frees b (NULL: no-op). */
void tnd_backend_free(tnd_backend *b);
/* The slots above as calls: tnd_backend_X(b, ...) is b->iface->X(b, ...);
 * the OPTIONAL ones fall back as their comments say. */
const char *tnd_backend_name(const tnd_backend *b);
void tnd_backend_mem_info(tnd_backend *b, tnd_mem_info *out);
tnd_status tnd_backend_buf_alloc(tnd_backend *b, size_t size, void **out);
void tnd_backend_buf_free(tnd_backend *b, void *ptr);
/* TND_ERR_UNSUPPORTED when the backend has no pinned host memory. */
tnd_status tnd_backend_host_alloc(tnd_backend *b, size_t size, void **host, void **dev);
/* Test hook: while on, every tnd_backend_host_alloc fails with TND_ERR_NOMEM
 * (as a driver refusing to pin), for the fallback to pageable memory. */
void tnd_backend_set_pin_fault(bool on);
void tnd_backend_host_free(tnd_backend *b, void *host);
/* TND_ERR_UNSUPPORTED when the backend cannot register host memory. */
tnd_status tnd_backend_host_register(tnd_backend *b, void *p, size_t size);
/* Test hook: while on, every tnd_backend_host_register fails with
 * TND_ERR_NOMEM (pin_fault above refuses it too). */
void tnd_backend_set_register_fault(bool on);
void tnd_backend_host_unregister(tnd_backend *b, void *p);
/* False when the backend cannot tell. */
bool tnd_backend_host_registered(tnd_backend *b, const void *p, size_t size);
tnd_status tnd_backend_stream_new(tnd_backend *b, tnd_stream **out);
void tnd_backend_stream_free(tnd_backend *b, tnd_stream *s); /* s NULL: no-op */
tnd_status tnd_backend_stream_sync(tnd_backend *b, tnd_stream *s);
tnd_status tnd_backend_event_new(tnd_backend *b, tnd_event **out);
void tnd_backend_event_free(tnd_backend *b, tnd_event *e); /* e NULL: no-op */
tnd_status tnd_backend_event_record(tnd_backend *b, tnd_event *e, tnd_stream *s);
tnd_status tnd_backend_stream_wait(tnd_backend *b, tnd_stream *s, tnd_event *e);
tnd_status tnd_backend_event_sync(tnd_backend *b, tnd_event *e);
/* TND_ERR_UNSUPPORTED without event_done. */
tnd_status tnd_backend_event_done(tnd_backend *b, tnd_event *e, bool *done);
/* TND_ERR_UNSUPPORTED without event timing. */
tnd_status tnd_backend_event_elapsed(tnd_backend *b, tnd_event *start, tnd_event *end, float *ms);
tnd_status tnd_backend_copy_h2d(tnd_backend *b, void *dst_dev, const void *src_host, size_t n, tnd_stream *s);
tnd_status tnd_backend_copy_d2h(tnd_backend *b, void *dst_host, const void *src_dev, size_t n, tnd_stream *s);
tnd_status tnd_backend_copy_d2d(tnd_backend *b, void *dst_dev, const void *src_dev, size_t n, tnd_stream *s);
/* Without memset: TND_ERR_UNSUPPORTED. */
tnd_status tnd_backend_memset(tnd_backend *b, void *dst_dev, int v, size_t n, tnd_stream *s);
/* Without copy_mapped: copy_d2d. */
tnd_status tnd_backend_copy_mapped(tnd_backend *b, void *dst, const void *src, size_t n, tnd_stream *s);
/* Without op_supported: TND_OK for every op but MATMUL_PAIR and ROPE_KV
 * (the CPU backend, which has none, runs MOE_GLU and MOE_FFN). */
tnd_status tnd_backend_op_supported(tnd_backend *b, const tnd_op *op);
tnd_status tnd_backend_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s);
/* Without reserve: TND_OK (nothing to reserve). */
tnd_status tnd_backend_reserve(tnd_backend *b, const tnd_op *op, tnd_stream *s);
/* Without weight_prepare: TND_OK (weights are read as uploaded). */
tnd_status tnd_backend_weight_prepare(tnd_backend *b, const tnd_tensor *w, tnd_stream *s);
/* Without graph_defer: TND_OK, nothing changes (work launches as queued). */
tnd_status tnd_backend_graph_defer(tnd_backend *b, tnd_stream *s, bool on);
/* Without graph_flush: TND_OK. */
tnd_status tnd_backend_graph_flush(tnd_backend *b, tnd_stream *s);
/* The backend's ping (TND_ERR_UNSUPPORTED where it has none). */
tnd_status tnd_backend_ping(tnd_backend *b, tnd_stream *s, double *secs);
/* b's counters so far (b NULL: zeros). */
tnd_backend_counters tnd_backend_counters_get(const tnd_backend *b);
/* Bytes of a contiguous tensor (ne[0] a multiple of the block size);
 * 0 if the shape is invalid. */
size_t tnd_tensor_nbytes(const tnd_tensor *t);
/* Whether the bytes of s and t overlap (a fused op must not write what it reads). */
bool tnd_tensors_overlap(const tnd_tensor *s, const tnd_tensor *t);
/* Number of elements of t. */
int64_t tnd_tensor_nelem(const tnd_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
