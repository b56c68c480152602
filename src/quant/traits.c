/* The type-traits table: name and block geometry of every GGML type id (so a
 * GGUF reader can validate any file), reference functions for the types
 * tandem computes with. Sizes are facts of the GGML formats. */
#include <stdlib.h>

#include "quant/quant.h"

#define QK TND_QK_K

/* Types tandem only sizes: block_size, type_size, is_quantized. */
#define SIZED(NAME, BS, TS, Q) { .name = NAME, .block_size = BS, .type_size = TS, .is_quantized = Q }

/* Supported types: all three reference functions. */
#define FULL(NAME, BS, TS, Q, VDT, SUF, DOT)                                              \
    { .name = NAME, .block_size = BS, .type_size = TS, .is_quantized = Q, .supported = true, \
      .vec_dot_type = VDT, .to_float = tnd_ref_to_float_##SUF,                             \
      .from_float = tnd_ref_from_float_##SUF, .vec_dot = DOT }

static const tnd_type_traits traits[TND_TYPE_COUNT] = {
    [TND_TYPE_F32] = FULL("F32", 1, 4, false, TND_TYPE_F32, f32, tnd_ref_vec_dot_f32_f32),
    [TND_TYPE_F16] = FULL("F16", 1, 2, false, TND_TYPE_F32, f16, tnd_ref_vec_dot_f16_f32),
    [TND_TYPE_Q4_0] = FULL("Q4_0", 32, sizeof(block_q4_0), true, TND_TYPE_Q8_0, q4_0, tnd_ref_vec_dot_q4_0_q8_0),
    [TND_TYPE_Q4_1] = FULL("Q4_1", 32, sizeof(block_q4_1), true, TND_TYPE_Q8_1, q4_1, tnd_ref_vec_dot_q4_1_q8_1),
    [TND_TYPE_Q5_0] = FULL("Q5_0", 32, sizeof(block_q5_0), true, TND_TYPE_Q8_0, q5_0, tnd_ref_vec_dot_q5_0_q8_0),
    [TND_TYPE_Q5_1] = FULL("Q5_1", 32, sizeof(block_q5_1), true, TND_TYPE_Q8_1, q5_1, tnd_ref_vec_dot_q5_1_q8_1),
    [TND_TYPE_Q8_0] = FULL("Q8_0", 32, sizeof(block_q8_0), true, TND_TYPE_Q8_0, q8_0, tnd_ref_vec_dot_q8_0_q8_0),
    /* ggml's current block_q8_1 (half d and s, 36 bytes); gguf-py's table
     * still says 40 (float d, s). Q8_1 never appears in files. */
    [TND_TYPE_Q8_1] = FULL("Q8_1", 32, sizeof(block_q8_1), true, TND_TYPE_Q8_1, q8_1, tnd_ref_vec_dot_q8_1_q8_1),
    [TND_TYPE_Q2_K] = FULL("Q2_K", QK, sizeof(block_q2_K), true, TND_TYPE_Q8_K, q2_K, tnd_ref_vec_dot_q2_K_q8_K),
    [TND_TYPE_Q3_K] = FULL("Q3_K", QK, sizeof(block_q3_K), true, TND_TYPE_Q8_K, q3_K, tnd_ref_vec_dot_q3_K_q8_K),
    [TND_TYPE_Q4_K] = FULL("Q4_K", QK, sizeof(block_q4_K), true, TND_TYPE_Q8_K, q4_K, tnd_ref_vec_dot_q4_K_q8_K),
    [TND_TYPE_Q5_K] = FULL("Q5_K", QK, sizeof(block_q5_K), true, TND_TYPE_Q8_K, q5_K, tnd_ref_vec_dot_q5_K_q8_K),
    [TND_TYPE_Q6_K] = FULL("Q6_K", QK, sizeof(block_q6_K), true, TND_TYPE_Q8_K, q6_K, tnd_ref_vec_dot_q6_K_q8_K),
    [TND_TYPE_Q8_K] = FULL("Q8_K", QK, sizeof(block_q8_K), true, TND_TYPE_Q8_K, q8_K, tnd_ref_vec_dot_q8_K_q8_K),
    [TND_TYPE_IQ2_XXS] = SIZED("IQ2_XXS", QK, 2 + QK / 4, true),
    [TND_TYPE_IQ2_XS] = SIZED("IQ2_XS", QK, 2 + QK / 4 + QK / 32, true),
    [TND_TYPE_IQ3_XXS] = SIZED("IQ3_XXS", QK, 2 + QK / 4 + QK / 8, true),
    [TND_TYPE_IQ1_S] = SIZED("IQ1_S", QK, 2 + QK / 8 + QK / 16, true),
    [TND_TYPE_IQ4_NL] = SIZED("IQ4_NL", 32, 2 + 16, true),
    [TND_TYPE_IQ3_S] = SIZED("IQ3_S", QK, 2 + QK / 4 + QK / 8 + QK / 32 + 4, true),
    [TND_TYPE_IQ2_S] = SIZED("IQ2_S", QK, 2 + QK / 4 + QK / 16, true),
    [TND_TYPE_IQ4_XS] = SIZED("IQ4_XS", QK, 2 + 2 + QK / 2 + QK / 64, true),
    [TND_TYPE_I8] = SIZED("I8", 1, 1, false),
    [TND_TYPE_I16] = SIZED("I16", 1, 2, false),
    [TND_TYPE_I32] = SIZED("I32", 1, 4, false),
    [TND_TYPE_I64] = SIZED("I64", 1, 8, false),
    [TND_TYPE_F64] = SIZED("F64", 1, 8, false),
    [TND_TYPE_IQ1_M] = SIZED("IQ1_M", QK, QK / 8 + QK / 16 + QK / 32, true),
    [TND_TYPE_BF16] = FULL("BF16", 1, 2, false, TND_TYPE_F32, bf16, tnd_ref_vec_dot_bf16_f32),
    [TND_TYPE_TQ1_0] = SIZED("TQ1_0", QK, 2 + 4 * 13, true),
    [TND_TYPE_TQ2_0] = SIZED("TQ2_0", QK, 2 + 64, true),
    [TND_TYPE_MXFP4] = FULL("MXFP4", 32, sizeof(block_mxfp4), true, TND_TYPE_Q8_0, mxfp4, tnd_ref_vec_dot_mxfp4_q8_0),
};

const tnd_type_traits *tnd_type_traits_get(int t) {
    if (t < 0 || t >= TND_TYPE_COUNT || traits[t].name == NULL) return NULL; /* ids 4, 5, 31-33, 36-38 were removed from GGML */
    return &traits[t];
}

const char *tnd_type_name(int t) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    return tr ? tr->name : "?";
}

size_t tnd_row_size(tnd_type t, int64_t n) {
    const tnd_type_traits *tr = tnd_type_traits_get((int)t);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    return (size_t)(n / tr->block_size) * tr->type_size;
}

double tnd_ref_dot_f32(tnd_type t, int64_t n, const void *w, const float *x) {
    const tnd_type_traits *tr = tnd_type_traits_get((int)t);
    if (!tr || !tr->to_float || n % tr->block_size != 0) return 0.0;
    /* Dequantize a chunk at a time; every block size divides 256. */
    float buf[TND_QK_K];
    const uint8_t *wp = (const uint8_t *)w;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i += TND_QK_K) {
        int64_t k = n - i < TND_QK_K ? n - i : TND_QK_K;
        tr->to_float(wp + (size_t)(i / tr->block_size) * tr->type_size, buf, k);
        for (int64_t j = 0; j < k; j++) acc += (double)buf[j] * (double)x[i + j];
    }
    return acc;
}
