/* CUDA kernels' C entry points (one file per op family under src/cuda).
 *
 * Every pointer is a device pointer (or a mapped host pointer's device
 * address) unless its name ends in _host. Every function queues work on
 * `stream` and returns 0 on success or a cudaError_t value (as int) for a bad
 * launch; invalid arguments return cudaErrorInvalidValue (1) with nothing
 * queued. Shapes are in elements; rows are contiguous. Usable from C: the
 * stream and cuBLAS handle types are the runtime's own, named by their
 * struct tags. The backend (backend_cuda.cu) validates ops and calls these;
 * the tests call them directly too.
 */
#ifndef TND_CUDA_OPS_H
#define TND_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;
struct cublasContext;
typedef struct CUstream_st *tnd_cu_stream;   /* == cudaStream_t */
typedef struct cublasContext *tnd_cu_blas;   /* == cublasHandle_t */

/* Text of a cudaError_t value. */
const char *tnd_cu_error_string(int err);

/* ---- arch.cu: which code runs on this GPU ----------------------------------
 * Kernels that need sm_80 or sm_90 features are chosen by the architecture
 * their file's code was loaded as on the current device, not by the device's
 * own (a build without code for it runs older PTX, with those bodies compiled
 * out); the first time that is lower than the device's, one warning. */

/* (the architectures built in: tnd_cuda_build_archs, tandem.h) */
/* The current device's compute capability as 100*major + 10*minor (900 on
 * an H200); 0 on error. */
int tnd_cu_device_arch(void);
/* The architecture (e.g. 750, 900) of the code the runtime loaded for a
 * kernel (a __global__ function's address) on the current device; 0 on
 * error. */
int tnd_cu_code_arch(const void *kernel);
/* code_arch as the kernel choice may use it: capped by tnd_cu_arch_cap;
 * counts and (once) warns when it is below the device's. */
int tnd_cu_arch_usable(int code_arch);
/* Tests: treat all code as built for at most `arch` (e.g. 750), as a build
 * without newer code would be; 0 lifts the cap. Re-arms the warning. */
void tnd_cu_arch_cap(int arch);
/* How many kernel choices so far found the code's architecture below the
 * device's (each then took a fallback). */
int tnd_cu_arch_fallbacks(void);
/* Tests: arch.cu's probe kernel's architecture by cudaFuncGetAttributes
 * (*attr_arch) and as it ran (__CUDA_ARCH__, *ran_arch); synchronous.
 * Returns a cudaError_t. */
int tnd_cu_arch_probe(int *attr_arch, int *ran_arch);

/* ---- matvec.cu, matvec_mma.cu, matvec_tile.cu: decode products --------------
 * y[t][r] = sum_k W[r][k] * x[t][k] for t < n_tok, r < n_out.
 * W: n_out rows of n_in elements of type `type` (int, a tnd_type), aligned
 * to 16 bytes for Q4_K/Q5_K, 4 for F32/Q4_1/Q5_1/Q2_K, 2 for the rest; x: f32 [n_tok][n_in]; y: f32 [n_tok][n_out]. Full f32 accuracy
 * (weights decoded to f32, f32 accumulation). */

/* True if matvec / dequantize / get_rows can read this type. */
bool tnd_cu_type_supported(int type);
/* Bytes of a row of n elements of a readable type; 0 if n is not a multiple
 * of its block or the type is not readable. */
size_t tnd_cu_row_size(int type, int64_t n);
/* n_tok 1..8 (rows of W are read once for all tokens). */
int tnd_cu_matvec(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                  float *y, tnd_cu_stream stream);
/* One token, two matrices of one type and shape over one x (a MoE layer's
 * router and the next layer's, in one launch): y1 = W1 x, y2 = W2 x, each
 * the same bits as tnd_cu_matvec's. cudaErrorNotSupported where the type
 * takes a kernel family without a pair form. */
int tnd_cu_matvec_pair(int type, const void *W1, const void *W2, int64_t n_in, int64_t n_out, const float *x,
                       float *y1, float *y2, tnd_cu_stream stream);
/* n_tok == 1 with an explicit kernel and launch shape (for the bench's
 * variants and the tests): kernel 0 = the type's default, 1 = the
 * lane-per-sub kernel (every type), 2 = the type's own kernel (Q4_K; other
 * types fall back to their default). A warp per rows_per_warp (1, 2 or 4)
 * rows, threads (32..256, a multiple of 32) per block. */
int tnd_cu_matvec_cfg(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, float *y,
                      int kernel, int rows_per_warp, int threads, tnd_cu_stream stream);
/* Kernel family tnd_cu_matvec runs for this type, row length and n_tok
 * (x 16-byte aligned): TND_CU_MV_F32 (weights decoded exactly to f32, f32
 * products), TND_CU_MV_F16MMA (weights and x rounded to f16, tensor-core
 * products, f32 sums: errors up to ~2e-3 of sum|w x|) or TND_CU_MV_I8MMA
 * (Q4_K, n_tok <= 4: exact integer weights, x rounded to a 16-bit grid per
 * 256 values, int8 tensor-core products, exact s32 sums: error per value
 * <= max|x| over its 256 / 65278). The default per type is mv_default() in
 * matvec.cu; env TND_CUDA_MV=old|f16mma|i8mma overrides it for all types
 * (read once). Types and shapes a family cannot take (f16mma: Q4_K, Q6_K,
 * Q8_0 with n_in a multiple of 256, n_tok <= 8, n_tok * n_in <= 49152) get
 * F32. */
enum { TND_CU_MV_F32 = 0, TND_CU_MV_F16MMA = 1, TND_CU_MV_I8MMA = 2 };
int tnd_cu_matvec_kind(int type, int64_t n_in, int n_tok);
/* Forces tnd_cu_matvec's family (TND_CU_MV_F32, _F16MMA or _I8MMA; -1:
 * back to the default / env choice), for benches comparing both in one run.
 * Not thread-safe against concurrent tnd_cu_matvec calls. */
void tnd_cu_matvec_set_kind(int kind);
/* True if the f16 (i8) path below can take this type, row length and n_tok
 * on the current device. */
bool tnd_cu_matvec_f16mma_supported(int type, int64_t n_in, int n_tok);
bool tnd_cu_matvec_i8mma_supported(int type, int64_t n_in, int n_tok);
/* The f16 tensor-core path whatever the default (Q4_K, Q6_K, Q8_0 (n_in a
 * multiple of 256); n_tok 1..8; x 16-byte aligned, n_tok * n_in <= 49152): blocks of tiles_per_block 16-row tiles x
 * ksplit warps per tile (at most 8 warps; 0, 0: the default shape).
 * cudaErrorNotSupported (801) for a type or shape it cannot take. */
int tnd_cu_matvec_f16mma(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                         float *y, int tiles_per_block, int ksplit, tnd_cu_stream stream);
/* The int8 path likewise (Q4_K, n_tok 1..4, n_tok * n_in <= ~90000). */
int tnd_cu_matvec_i8mma(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                        float *y, int tiles_per_block, int ksplit, tnd_cu_stream stream);

/* Q4_K tile layout (q4k_tile.cuh): resident Q4_K weights re-laid in place
 * so that the f16 tensor-core decoder reads each 16-row tile as one
 * contiguous stream. Only the functions below (and tnd_cu_matmul_q4kt)
 * can read a tensor once it is re-laid. */
/* True if an n_out x n_in Q4_K tensor can be re-laid on the current device
 * (n_in % 256 == 0, n_out % 16 == 0, a 16-row group fits the opt-in shared
 * memory: n_in up to ~25k on the H200; sm_80+). */
bool tnd_cu_q4kt_supported(int64_t n_in, int64_t n_out);
/* Re-lays W (n_out rows of n_in Q4_K values, 16-byte aligned) in place,
 * queued on stream; no device memory beyond the kernel's shared memory.
 * cudaErrorNotSupported (801) if !tnd_cu_q4kt_supported. Repacking twice
 * scrambles the tensor: the caller remembers what it re-laid. */
int tnd_cu_q4kt_repack(void *W, int64_t n_in, int64_t n_out, tnd_cu_stream stream);
/* y = W x for a re-laid W, n_tok 1..8 (x any 4-byte alignment; tokens run
 * in groups when x is too wide for shared memory). With all-default
 * arguments (0, 0, 0, -1) and one or two tokens: the int8 kernel that
 * tnd_cu_matvec_q4kt_mode() picks (below), else, and otherwise, the f16 tensor-core
 * math of tnd_cu_matvec_f16mma (same bits for the same shape): blocks of
 * tiles_per_block tiles x ksplit warps per tile (at most 8 warps; 0, 0:
 * the default shape), depth 1..4 super-blocks in flight per lane (0: the
 * default, tnd_cu_matvec_q4kt_depth()), prefetch 1: an L2 prefetch of the
 * chunk 4 steps past the loads in flight, 2: of the warp's first 8 chunks
 * past them, before the kernel waits for its predecessor, 0: none, -1:
 * the default (tnd_cu_matvec_q4kt_prefetch()). Launched with programmatic
 * dependent launch when tnd_cu_matvec_q4kt_pdl() (sm_90+): the weights'
 * loads start while the previous kernel on the stream finishes. */
int tnd_cu_matvec_q4kt(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                       int tiles_per_block, int ksplit, int depth, int prefetch, tnd_cu_stream stream);
/* y = W x for a re-laid W on the int8 tensor cores, n_tok 1..2: the math
 * of tnd_cu_matvec_i8mma (x rounded per super-block to a 16-bit grid,
 * error <= max|x| / 65278 a value; exact integer sums), the loads and
 * launch of tnd_cu_matvec_q4kt, blocks of tiles_per_block tiles x ksplit
 * warps per tile (0, 0: the default shape); stages 0: depth (1..2, 0 the
 * default) chunks in flight per lane in registers, at most 16 warps a
 * block; stages 2, 4, 6, 8 (sm_90): each warp's chunks through a ring of
 * that many slots in shared memory, fed by cp.async.bulk, at most 24
 * warps; -1: the default (tnd_cu_matvec_q4kt_i8_stages(); with a given
 * shape, registers up to 16 warps, else the deepest ring that fits).
 * 801 if unsupported (n_tok, shape, device, W not 16-byte aligned, or the
 * ring does not fit). tnd_cu_matvec_q4kt with all-default arguments takes
 * this kernel for one or two tokens as tnd_cu_matvec_q4kt_mode() says, and
 * the f16 one where this refuses with 801. */
int tnd_cu_matvec_q4kt_i8(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                          int tiles_per_block, int ksplit, int depth, int stages, tnd_cu_stream stream);
bool tnd_cu_matvec_q4kt_i8_supported(int64_t n_in, int64_t n_out, int n_tok);
/* The same math and result tolerance as tnd_cu_matvec_q4kt_i8, on an even
 * share of the rows per block (8-row half-tiles, so no block shares a row)
 * and of the block's chunks per warp: blocks (0: one per SM, more where a
 * block's partial sums would not fit its shared memory; at most n_out / 8)
 * of warps warps (0: the most that fit; at most 16 with the register
 * ring, 24 with the shared one); stages 0: depth (1..2, 0 the default)
 * chunks in flight per lane in registers (the default: 1, not
 * tnd_cu_matvec_q4kt_i8_depth), 2..4 (sm_90): a ring of that
 * many slots per warp, -1: the default; prefetch 0..16 (sm_90): chunks
 * per warp past those in flight asked of L2 before the kernel waits for
 * its predecessor, -1: the default. The bits depend on blocks and warps
 * only. 801 where tnd_cu_matvec_q4kt_i8_supported is false, W is not
 * 16-byte aligned or shared memory is short (the rings, or the partial
 * sums of the rows of a given grid's blocks). */
int tnd_cu_matvec_q4kt_i8b(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                           int blocks, int warps, int depth, int stages, int prefetch, tnd_cu_stream stream);
/* Two matvecs over one x in one launch (a decode step's gate and up, or
 * q and k): y1 = W1 x and y2 = W2 x, both W re-laid Q4_K of n_in columns,
 * through tnd_cu_matvec_q4kt_i8b's kernel over the rows of W1 then W2 (its
 * arguments, register ring only). One launch streams twice the bytes for
 * one launch's fixed cost (docs/DECISIONS.md, "Two matrices in one launch"). The bits depend on
 * blocks and warps only, and differ from two separate launches' in the
 * last place. 801 where tnd_cu_matvec_q4kt_pair_supported is false, a W is
 * not 16-byte aligned or shared memory is short. */
int tnd_cu_matvec_q4kt_pair(const void *W1, const void *W2, int64_t n_in, int64_t n_out1, int64_t n_out2,
                            const float *x, int n_tok, float *y1, float *y2, int blocks, int warps, int depth,
                            int prefetch, tnd_cu_stream stream);
bool tnd_cu_matvec_q4kt_pair_supported(int64_t n_in, int64_t n_out1, int64_t n_out2, int n_tok);
/* Which kernel tnd_cu_matvec_q4kt with all-default arguments takes for one
 * or two tokens: F16 the f16 tiles (k_mvt_q4k); I8 the int8 tiles
 * (tnd_cu_matvec_q4kt_i8); I8B the even share (tnd_cu_matvec_q4kt_i8b, its
 * defaults), the int8 tiles where it refuses; AUTO (the default) the even
 * share for W of 20 MiB or more, the int8 tiles below (measured, session
 * 14). Env TND_CUDA_TILE_MV=f16|i8|i8b|auto; set_mode overrides it (for
 * the bench and the tests; other values are ignored). i8_default: the
 * mode is not F16. */
enum { TND_CU_Q4KT_F16 = 0, TND_CU_Q4KT_I8 = 1, TND_CU_Q4KT_I8B = 2, TND_CU_Q4KT_AUTO = 3 };
int tnd_cu_matvec_q4kt_mode(void);
void tnd_cu_matvec_q4kt_set_mode(int mode);
bool tnd_cu_matvec_q4kt_i8_default(void);
/* The defaults: depth (env TND_CUDA_TILE_DEPTH, as the f16 kernel's,
 * clamped to 1..2) and stages (env TND_CUDA_TILE_I8_NS=0|2|4|6|8). */
int tnd_cu_matvec_q4kt_i8_depth(void);
int tnd_cu_matvec_q4kt_i8_stages(void);
/* The defaults (env TND_CUDA_TILE_DEPTH=1..4, TND_CUDA_TILE_PF=0|1|2 and
 * TND_CUDA_PDL=0|1 override the built-in ones; set_pdl overrides the
 * environment, for the bench and the tests). */
int tnd_cu_matvec_q4kt_depth(void);
int tnd_cu_matvec_q4kt_prefetch(void);
bool tnd_cu_matvec_q4kt_pdl(void);
void tnd_cu_matvec_q4kt_set_pdl(bool on);

/* Q6_K tile layout (q6k_tile.cuh), as the Q4_K one: resident Q6_K weights
 * re-laid in place so the f16 tensor-core decoder streams each 16-row tile
 * as one contiguous run. Only the functions below (and tnd_cu_matmul_q6kt)
 * can read a tensor once it is re-laid. */
/* True if an n_out x n_in Q6_K tensor can be re-laid on the current device
 * (n_in % 256 == 0, n_out % 16 == 0, a 16-row group fits the opt-in shared
 * memory: n_in up to ~17k on the H200; sm_80+). */
bool tnd_cu_q6kt_supported(int64_t n_in, int64_t n_out);
/* Re-lays W (16-byte aligned) in place, queued on stream; 801 if
 * !tnd_cu_q6kt_supported. Repacking twice scrambles the tensor. */
int tnd_cu_q6kt_repack(void *W, int64_t n_in, int64_t n_out, tnd_cu_stream stream);
/* y = W x for a re-laid W, n_tok 1..8 (x any 4-byte alignment; tokens run
 * in groups when x is too wide for shared memory): the f16 tensor-core
 * math of tnd_cu_matvec_f16mma (same bits for the same shape), blocks of
 * tiles_per_block tiles x ksplit warps per tile (at most 8 warps; 0, 0: the
 * default shape), depth chunks in flight per lane (1..2; 0: the default),
 * launched with programmatic dependent launch as tnd_cu_matvec_q4kt. */
int tnd_cu_matvec_q6kt(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                       int tiles_per_block, int ksplit, int depth, tnd_cu_stream stream);
/* Expert matvec: W [n_expert][n_out][n_in]; ids int32 [n_tok][n_used];
 * y[t][u][r] = sum_k W[ids[t][u]][r][k] * xs[k], xs = x[t] (x [n_tok][n_in])
 * or, if x_per_slot, x[t][u] (x [n_tok][n_used][n_in], the down projection).
 * An id outside [0, n_expert) yields NaN outputs (never a wild read). */
int tnd_cu_matvec_id(int type, const void *W, int64_t n_in, int64_t n_out, int64_t n_expert,
                     const float *x, bool x_per_slot, int64_t n_tok, const int32_t *ids, int n_used,
                     float *y, tnd_cu_stream stream);

/* ---- matmul.cu: prefill products ------------------------------------------
 * Same product for any n_tok: x is converted to f16, W is decoded to f16 in
 * chunks of rows, cuBLAS multiplies (f16 in, f32 accumulate and out). */

/* Scratch bytes tnd_cu_matmul needs for this shape with chunks of
 * chunk_rows rows (0: the default, 4096). */
size_t tnd_cu_matmul_scratch(int64_t n_in, int64_t n_out, int64_t n_tok, int64_t chunk_rows);
/* scratch: at least tnd_cu_matmul_scratch(..., chunk_rows) bytes, 256-byte
 * aligned; blas bound to `stream` by this call. Returns 1 (invalid value) for
 * bad arguments, a cuBLAS status + 1000 if cuBLAS fails. */
int tnd_cu_matmul(tnd_cu_blas blas, int type, const void *W, int64_t n_in, int64_t n_out,
                  const float *x, int64_t n_tok, float *y, void *scratch, size_t scratch_size,
                  int64_t chunk_rows, tnd_cu_stream stream);
/* Decodes rows [r0, r1) of W into out (f16 bits, [r1-r0][n_in]). */
int tnd_cu_dequant_f16(int type, const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out,
                       tnd_cu_stream stream);
/* tnd_cu_matmul for a Q4_K W in the tile layout (tnd_cu_q4kt_repack):
 * same contract and scratch; chunk_rows is rounded down to a multiple of
 * 16 (at least 16). */
int tnd_cu_matmul_q4kt(tnd_cu_blas blas, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                       float *y, void *scratch, size_t scratch_size, int64_t chunk_rows, tnd_cu_stream stream);
/* tnd_cu_dequant_f16 for a re-laid Q4_K W; r0 and r1 multiples of 16. */
int tnd_cu_dequant_f16_q4kt(const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out, tnd_cu_stream stream);
/* The same two for a Q6_K W in its tile layout (tnd_cu_q6kt_repack). */
int tnd_cu_matmul_q6kt(tnd_cu_blas blas, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                       float *y, void *scratch, size_t scratch_size, int64_t chunk_rows, tnd_cu_stream stream);
int tnd_cu_dequant_f16_q6kt(const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out, tnd_cu_stream stream);
/* Expert matmul for larger batches: groups the (token, slot) pairs by expert
 * on the host (ids_host: the routing result, already on the host), then
 * dequantizes the used experts to f16 in runs of up to n_run consecutive
 * experts (one launch a run) and multiplies each run's experts by their
 * tokens in one grouped GEMM. Same contract as tnd_cu_matvec_id, except
 * for negative ids: with skip their rows of y are left untouched
 * (backend.h's MATMUL_ID), without it they become NaN. Scratch at least
 * tnd_cu_matmul_id_scratch() bytes. stage_host/stage_dev (may be NULL):
 * pinned mapped memory of tnd_cu_matmul_id_stage_words() int32s, free to
 * overwrite, for uploading the grouping without the copy engine.
 * Synchronizes nothing. */
size_t tnd_cu_matmul_id_scratch(int64_t n_in, int64_t n_out, int64_t n_expert, int64_t n_tok, int n_used,
                                int64_t n_run);
size_t tnd_cu_matmul_id_stage_words(int64_t n_expert, int64_t n_tok, int n_used);
int tnd_cu_matmul_id(tnd_cu_blas blas, int type, const void *W, int64_t n_in, int64_t n_out,
                     int64_t n_expert, const float *x, bool x_per_slot, int64_t n_tok, const int32_t *ids_host,
                     int n_used, bool skip, float *y, void *scratch, size_t scratch_size, int64_t n_run,
                     int32_t *stage_host, const int32_t *stage_dev, tnd_cu_stream stream);

/* ---- getrows.cu ------------------------------------------------------------
 * out[i][k] = float(table[ids[i]][k]); table rows of n elements. Bad ids give
 * NaN rows. */
int tnd_cu_get_rows(int type, const void *table, int64_t n, int64_t n_rows, const int32_t *ids,
                    int64_t n_ids, float *out, tnd_cu_stream stream);

/* ---- norm.cu ---------------------------------------------------------------
 * y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w over rows of n (w NULL: 1).
 * y may equal x. Per-head norm: rows = n_tok * n_head, n = head_dim. */
int tnd_cu_rms_norm(const float *x, const float *w, float *y, int64_t n, int64_t rows, float eps,
                    tnd_cu_stream stream);
/* The fused residual add: sum = x + r (sum may equal x), y = norm(sum) * w,
 * in one launch. y may equal x or sum. */
int tnd_cu_rms_norm_add(const float *x, const float *r, const float *w, float *y, float *sum, int64_t n,
                        int64_t rows, float eps, tnd_cu_stream stream);
/* MOE_SUM_NORM (backend.h) in one launch: o = sum_u wt[u] * ey[u] per row
 * (tnd_cu_moe_sum's), then the fused residual add of o as
 * tnd_cu_rms_norm_add: the two launches' bits. ey f32 [rows][n_used][n], wt
 * [rows][n_used]; o and y must not alias ey or wt. Rows up to 32 values a
 * thread (tnd_cu_moe_sum_norm_supported). */
bool tnd_cu_moe_sum_norm_supported(int64_t n, int n_used);
int tnd_cu_moe_sum_norm(const float *x, const float *ey, const float *wt, const float *w, float *y, float *sum,
                        float *o, int64_t n, int n_used, int64_t rows, float eps, tnd_cu_stream stream);

/* ---- rope.cu ---------------------------------------------------------------
 * x, y: f32 [n_tok][n_head][head_dim] (y may equal x); pos: int32 [n_tok].
 * mode 0 (normal): pairs (2i, 2i+1); mode 2 (NeoX): pairs (i, i+n_rot/2);
 * angle = pos * freq_scale * freq_base^(-2i/n_rot), i < n_rot/2; dims past
 * n_rot are copied. n_rot even, <= head_dim. */
int tnd_cu_rope(const float *x, float *y, const int32_t *pos, int64_t n_tok, int n_head, int head_dim,
                int n_rot, int mode, float freq_base, float freq_scale, tnd_cu_stream stream);
/* The fused per-head norm: each head of x RMS-normed over head_dim (weight
 * w, eps), then rotated as tnd_cu_rope does, in one launch (a block per
 * head). y may equal x. */
int tnd_cu_rope_norm(const float *x, float *y, const int32_t *pos, const float *w, float eps, int64_t n_tok,
                     int n_head, int head_dim, int n_rot, int mode, float freq_base, float freq_scale,
                     tnd_cu_stream stream);
/* ROPE_KV (backend.h) in one launch: q [n_tok][n_head][head_dim] and k
 * [n_tok][n_head_kv][head_dim] rotated in place (each head normed first by
 * wq / wk, both or neither, as tnd_cu_rope_norm does), then k and v (rows
 * of n_head_kv * head_dim) stored as f16 into rows pos[t] of K and V (rows
 * outside [0, cap) skipped). The same bits as the four ops. */
int tnd_cu_rope_kv(float *q, float *k, const float *v, const int32_t *pos, const float *wq, const float *wk,
                   float eps, uint16_t *K, uint16_t *V, int64_t cap, int64_t n_tok, int n_head, int n_head_kv,
                   int head_dim, int n_rot, int mode, float freq_base, float freq_scale, tnd_cu_stream stream);

/* ---- attn.cu ---------------------------------------------------------------
 * Causal attention of n_tok queries over an f16 KV cache (one sequence).
 * q, o: f32 [n_tok][n_head][head_dim]; K, V: f16 bits [n_ctx][n_head_kv *
 * head_dim]. Query t (position pos0 + t) attends to rows 0..pos0+t (only
 * rows > pos0+t-window if window > 0); q head h uses kv head h / (n_head /
 * n_head_kv). Scores are scaled, then soft-capped (c*tanh(s/c)) if softcap > 0. Split over the keys in chunks, then
 * a combine pass. head_dim <= 256, n_head a multiple of n_head_kv. */
size_t tnd_cu_attn_scratch(int64_t n_tok, int n_head, int head_dim, int64_t n_kv_max);
/* pos (optional, device memory): pos0 is read from pos[0] when the kernel
 * runs, and kv_cap >= pos0 + n_tok sizes the launch instead (a launch that
 * does not change from one decode step to the next, for graph replays).
 * slot_rows > 0 (with pos): K and V hold slots of slot_rows rows, and
 * pos[t] = s * slot_rows + p puts query t at position p of slot s, where it
 * attends to that slot's rows (backend.h's ATTN); kv_cap > every p. K and
 * V hold n_slots slots: a query whose pos[t] names none (the executor
 * never asks one) reads nothing and gets no defined output. */
int tnd_cu_attn(const float *q, const uint16_t *K, const uint16_t *V, float *o, int64_t n_tok, int n_head,
                int n_head_kv, int head_dim, int64_t pos0, const int32_t *pos, int64_t kv_cap, int64_t slot_rows,
                int64_t n_slots, float scale, float softcap, int64_t window, void *scratch, size_t scratch_size,
                tnd_cu_stream stream);

/* ---- act.cu ----------------------------------------------------------------
 * Element-wise, n elements, outputs may alias inputs. */
int tnd_cu_silu_mul(const float *g, const float *u, float *y, int64_t n, tnd_cu_stream stream);
int tnd_cu_gelu_mul(const float *g, const float *u, float *y, int64_t n, tnd_cu_stream stream);
int tnd_cu_add(const float *a, const float *b, float *y, int64_t n, tnd_cu_stream stream);
int tnd_cu_scale(const float *x, float s, float *y, int64_t n, tnd_cu_stream stream);
/* y[i] = a[i] + b[i % nb]: nb = n is a plain add, nb = row length a bias
 * broadcast over rows. */
int tnd_cu_add_bcast(const float *a, const float *b, float *y, int64_t n, int64_t nb, tnd_cu_stream stream);
/* out[t][i] = sum_u w[t][u] * y[t][u][i]; y f32 [n_tok][n_used][n]. */
int tnd_cu_moe_sum(const float *y, const float *w, float *out, int64_t n, int n_used, int64_t n_tok,
                   tnd_cu_stream stream);
/* Softmax over rows of n of x*scale. */
int tnd_cu_softmax(const float *x, float *y, int64_t n, int64_t rows, float scale, tnd_cu_stream stream);
/* Conversions (f16 as raw bits, round to nearest even). */
int tnd_cu_f32_to_f16(const float *x, uint16_t *y, int64_t n, tnd_cu_stream stream);
/* n values, rows of rl: row i of x to row pos[i] of y (pos read on the
 * device; rows outside [0, cap) skipped): the KV store of a replayed step */
int tnd_cu_f32_to_f16_at(const float *x, uint16_t *y, const int32_t *pos, int64_t rl, int64_t n, int64_t cap,
                         tnd_cu_stream stream);
int tnd_cu_f16_to_f32(const uint16_t *x, float *y, int64_t n, tnd_cu_stream stream);
/* Copies n bytes with SM threads (not the copy engine): for activations to
 * or from mapped pinned host memory (docs/ARCHITECTURE.md, "Hybrid execution"). Any alignment. */
int tnd_cu_copy_sm(void *dst, const void *src, size_t n, tnd_cu_stream stream);

/* ---- moe.cu ----------------------------------------------------------------
 * Router: logits f32 [n_tok][n_expert] -> weights f32 [n_tok][n_used], ids
 * int32 [n_tok][n_used] in descending order (ties: lower id first).
 * mode 0: softmax over all, top n_used, renormalized if norm; mode 1: top
 * n_used logits, softmax over them. n_expert <= 512, n_used <= n_expert,
 * n_used <= 32. */
int tnd_cu_moe_route(const float *logits, int64_t n_tok, int n_expert, int n_used, int mode, bool norm,
                     float *weights, int32_t *ids, tnd_cu_stream stream);
/* Two routings of one shape in one launch (MOE_ROUTE_PAIR): logits2,
 * weights2 and ids2 as the first's; the same bits as two launches. */
int tnd_cu_moe_route_pair(const float *logits, const float *logits2, int64_t n_tok, int n_expert, int n_used,
                          int mode, bool norm, float *weights, int32_t *ids, float *weights2, int32_t *ids2,
                          tnd_cu_stream stream);
/* Skipping expert matmuls (split layers): dst[p] = src[p] for each of the
 * n_pairs rows of n_out floats whose ids[p] >= 0; the other rows of dst are
 * not touched. dst may be mapped host memory. */
int tnd_cu_moe_keep_rows(const float *src, const int32_t *ids, int64_t n_pairs, int64_t n_out, float *dst,
                         tnd_cu_stream stream);

#ifdef __cplusplus
}
#endif
#endif
