/* Backend-independent helpers of backend.h, and the CUDA entry points'
 * stand-ins when tandem is built without CUDA (so nothing references CUDA
 * symbols in the CPU-only and sanitizer builds). */
#include "backend.h"

#include "util.h"

const char *tnd_op_name(tnd_op_kind k) {
    switch (k) {
    case TND_OP_NONE: return "none";
    case TND_OP_MATMUL: return "matmul";
    case TND_OP_MATMUL_ID: return "matmul_id";
    case TND_OP_GET_ROWS: return "get_rows";
    case TND_OP_RMS_NORM: return "rms_norm";
    case TND_OP_ROPE: return "rope";
    case TND_OP_ATTN: return "attn";
    case TND_OP_SOFTMAX: return "softmax";
    case TND_OP_SILU_MUL: return "silu_mul";
    case TND_OP_GELU_MUL: return "gelu_mul";
    case TND_OP_ADD: return "add";
    case TND_OP_SCALE: return "scale";
    case TND_OP_CPY: return "cpy";
    case TND_OP_MOE_ROUTE: return "moe_route";
    case TND_OP_MOE_SUM: return "moe_sum";
    case TND_OP_MATMUL_PAIR: return "matmul_pair";
    case TND_OP_COUNT: break;
    }
    return "?";
}

void tnd_backend_free(tnd_backend *b) {
    if (b && b->iface && b->iface->free) b->iface->free(b);
}

int64_t tnd_tensor_nelem(const tnd_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < TND_MAX_DIMS; i++) n *= t->ne[i] > 0 ? t->ne[i] : 1;
    return n;
}

size_t tnd_tensor_nbytes(const tnd_tensor *t) {
    for (int i = 0; i < TND_MAX_DIMS; i++)
        if (t->ne[i] < 0) return 0;
    size_t row = tnd_row_size(t->type, t->ne[0]);
    if (row == 0 && t->ne[0] != 0) return 0;
    uint64_t n = row;
    for (int i = 1; i < TND_MAX_DIMS; i++)
        if (!tnd_mul_ok(n, (uint64_t)(t->ne[i] > 0 ? t->ne[i] : 1), &n)) return 0;
    return (size_t)n;
}

#ifndef TND_HAVE_CUDA
int tnd_cuda_device_count(void) { return 0; }

const char *tnd_cuda_build_archs(void) { return ""; }

tnd_status tnd_cuda_device_get(int dev, tnd_cuda_device_info *out) {
    (void)dev;
    (void)out;
    return tnd_fail(TND_ERR_UNSUPPORTED, "this tandem was built without CUDA");
}

tnd_status tnd_backend_cuda_new(const tnd_cuda_params *p, tnd_backend **out) {
    (void)p;
    (void)out;
    return tnd_fail(TND_ERR_UNSUPPORTED, "this tandem was built without CUDA");
}

void *tnd_cuda_stream_handle(tnd_stream *s) {
    (void)s;
    return NULL;
}
#endif
