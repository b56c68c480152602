/* GGUF v2/v3: a validating reader over an mmapped file (or a memory buffer)
 * and a streaming writer.
 *
 * Reader: everything is checked before anything is exposed (see gguf.h). The
 * parser reads through a bounds-checked cursor, so no count or length taken
 * from the file is used for an allocation or a pointer before it has been
 * compared with what is left of the file. Layout facts (GGUF spec): all
 * integers little-endian; header = "GGUF", u32 version, u64 tensor count,
 * u64 kv count; strings = u64 length + bytes; arrays = u32 element type +
 * u64 count + elements; tensor info = name, u32 n_dims, u64 ne[n_dims],
 * u32 type, u64 offset (relative to the data section, which starts at the
 * first multiple of general.alignment after the tensor infos).
 *
 * Nested arrays (an array whose element type is ARRAY) are rejected as
 * unsupported: no model file uses them, and the flat gguf_kv stays simple.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* ---- type sizes ---------------------------------------------------------- */

/* Block size and bytes per block of every GGML type id, kept here so that
 * validation does not depend on which kernels are built. Cross-checked
 * against gguf-py's GGML_QUANT_SIZES by tests/test_info.py. */
typedef struct { const char *name; int64_t block; size_t size; } type_size_entry;

static const type_size_entry g_type_sizes[TND_TYPE_COUNT] = {
    [TND_TYPE_F32] = {"F32", 1, 4},
    [TND_TYPE_F16] = {"F16", 1, 2},
    [TND_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [TND_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [TND_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [TND_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [TND_TYPE_Q8_0] = {"Q8_0", 32, 34},
    /* ggml's block_q8_1 is two halves + 32 int8 = 36 bytes (gguf-py still
     * lists 40, from an older float layout). */
    [TND_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [TND_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [TND_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [TND_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [TND_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [TND_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [TND_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [TND_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [TND_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [TND_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [TND_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [TND_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [TND_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [TND_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [TND_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [TND_TYPE_I8] = {"I8", 1, 1},
    [TND_TYPE_I16] = {"I16", 1, 2},
    [TND_TYPE_I32] = {"I32", 1, 4},
    [TND_TYPE_I64] = {"I64", 1, 8},
    [TND_TYPE_F64] = {"F64", 1, 8},
    [TND_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [TND_TYPE_BF16] = {"BF16", 1, 2},
    [TND_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [TND_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [TND_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

bool gguf_type_size(int type, int64_t *block_size, size_t *type_size) {
    if (type < 0 || type >= TND_TYPE_COUNT || !g_type_sizes[type].name) return false;
    if (block_size) *block_size = g_type_sizes[type].block;
    if (type_size) *type_size = g_type_sizes[type].size;
    return true;
}

const char *gguf_type_name(int type) {
    if (type < 0 || type >= TND_TYPE_COUNT || !g_type_sizes[type].name) return "?";
    return g_type_sizes[type].name;
}

bool gguf_tensor_bytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes) {
    int64_t bs;
    size_t ts;
    if (!gguf_type_size(type, &bs, &ts) || n_dims < 1 || n_dims > GGUF_MAX_DIMS) return false;
    for (uint32_t i = 0; i < n_dims; i++)
        if (ne[i] <= 0) return false;
    if (ne[0] % bs) return false;
    uint64_t n = (uint64_t)(ne[0] / bs) * ts, ne_all = (uint64_t)ne[0];
    for (uint32_t i = 1; i < n_dims; i++)
        if (!tnd_mul_ok(n, (uint64_t)ne[i], &n) || !tnd_mul_ok(ne_all, (uint64_t)ne[i], &ne_all)) return false;
    if (ne_all > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX) return false;
    *nbytes = n;
    return true;
}

static const size_t g_vtype_size[GGUF_VTYPE_COUNT] = {
    [GGUF_UINT8] = 1, [GGUF_INT8] = 1, [GGUF_UINT16] = 2, [GGUF_INT16] = 2,
    [GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
    [GGUF_STRING] = 0, [GGUF_ARRAY] = 0, [GGUF_UINT64] = 8, [GGUF_INT64] = 8,
    [GGUF_FLOAT64] = 8,
};

size_t gguf_vtype_size(gguf_vtype t) { return (unsigned)t < GGUF_VTYPE_COUNT ? g_vtype_size[t] : 0; }

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return (unsigned)t < GGUF_VTYPE_COUNT ? names[t] : "?";
}

static bool vtype_is_uint(gguf_vtype t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}
static bool vtype_is_sint(gguf_vtype t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* ---- little-endian loads (explicit, so the host's byte order never matters) */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* ---- string hash (open addressing) --------------------------------------- */

typedef struct { const char *ptr; uint64_t len; int64_t idx; } hslot;
typedef struct { hslot *slots; uint64_t mask; } strhash;

static uint64_t hash_bytes(const char *p, uint64_t n) { return tnd_fnv1a(TND_FNV_SEED, p, (size_t)n); }

static bool strhash_init(strhash *h, int64_t n) {
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    h->slots = tnd_calloc(cap, sizeof(hslot));
    h->mask = cap - 1;
    if (!h->slots) return false;
    for (uint64_t i = 0; i < cap; i++) h->slots[i].idx = -1;
    return true;
}

/* Index stored under (p, n), or -1. */
static int64_t strhash_find(const strhash *h, const char *p, uint64_t n) {
    if (!h->slots) return -1;
    for (uint64_t i = hash_bytes(p, n) & h->mask;; i = (i + 1) & h->mask) {
        const hslot *s = &h->slots[i];
        if (s->idx < 0) return -1;
        if (s->len == n && (n == 0 || !memcmp(s->ptr, p, n))) return s->idx;
    }
}

/* Inserts (p, n) -> idx; returns the index already there, or -1 if new.
 * The table never fills: it was sized for twice the number of entries. */
static int64_t strhash_insert(strhash *h, const char *p, uint64_t n, int64_t idx) {
    for (uint64_t i = hash_bytes(p, n) & h->mask;; i = (i + 1) & h->mask) {
        hslot *s = &h->slots[i];
        if (s->idx < 0) {
            s->ptr = p;
            s->len = n;
            s->idx = idx;
            return -1;
        }
        if (s->len == n && (n == 0 || !memcmp(s->ptr, p, n))) return s->idx;
    }
}

/* ---- reader -------------------------------------------------------------- */

struct tnd_gguf {
    char *path;
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* base is an mmap of size bytes */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kvs;
    int64_t n_tensors;
    gguf_tensor *tensors;
    strhash kv_hash;
    strhash tensor_hash;
};

typedef struct {
    const uint8_t *p;
    uint64_t size, pos;
    const char *name;
} cursor;

/* Writes s into buf (cap >= 8) printable: other bytes as \xNN, cut at ~64. */
static const char *printable(gguf_str s, char *buf, size_t cap) {
    size_t o = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (o + 8 >= cap) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

static tnd_status truncated(const cursor *c, uint64_t need, const char *what) {
    return tnd_fail(TND_ERR_FORMAT,
                    "%s: truncated: %s at byte %llu needs %llu bytes, only %llu left (file size %llu)",
                    c->name, what, (unsigned long long)c->pos, (unsigned long long)need,
                    (unsigned long long)(c->size - c->pos), (unsigned long long)c->size);
}

static bool cur_has(const cursor *c, uint64_t n) { return n <= c->size - c->pos; }

static tnd_status cur_u32(cursor *c, uint32_t *v, const char *what) {
    if (!cur_has(c, 4)) return truncated(c, 4, what);
    *v = ld32(c->p + c->pos);
    c->pos += 4;
    return TND_OK;
}

static tnd_status cur_u64(cursor *c, uint64_t *v, const char *what) {
    if (!cur_has(c, 8)) return truncated(c, 8, what);
    *v = ld64(c->p + c->pos);
    c->pos += 8;
    return TND_OK;
}

static tnd_status cur_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t at = c->pos, len = 0;
    tnd_status st = cur_u64(c, &len, what);
    if (st) return st;
    if (!cur_has(c, len))
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: %s at byte %llu has length %llu, past the end of the file (size %llu)",
                        c->name, what, (unsigned long long)at, (unsigned long long)len,
                        (unsigned long long)c->size);
    s->len = len;
    s->ptr = (const char *)c->p + c->pos;
    c->pos += len;
    return TND_OK;
}

/* Reads one scalar of type t (not string/array) into kv's value. */
static void load_scalar(gguf_kv *kv, gguf_vtype t, const uint8_t *p) {
    switch (t) {
    case GGUF_UINT8: kv->v.u64 = p[0]; break;
    case GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_UINT16: kv->v.u64 = ld16(p); break;
    case GGUF_INT16: kv->v.i64 = (int16_t)ld16(p); break;
    case GGUF_UINT32: kv->v.u64 = ld32(p); break;
    case GGUF_INT32: kv->v.i64 = (int32_t)ld32(p); break;
    case GGUF_UINT64: kv->v.u64 = ld64(p); break;
    case GGUF_INT64: kv->v.i64 = (int64_t)ld64(p); break;
    case GGUF_FLOAT32: {
        uint32_t b = ld32(p);
        float f;
        memcpy(&f, &b, 4);
        kv->v.f64 = f;
        break;
    }
    case GGUF_FLOAT64: {
        uint64_t b = ld64(p);
        memcpy(&kv->v.f64, &b, 8);
        break;
    }
    case GGUF_BOOL: kv->v.b = p[0] != 0; break;
    default: break;
    }
}

static tnd_status parse_kv(cursor *c, gguf_kv *kv, int64_t i) {
    char kb[96];
    uint64_t at = c->pos;
    char what[128];
    snprintf(what, sizeof what, "key of metadata entry %lld", (long long)i);
    tnd_status st = cur_str(c, &kv->key, what);
    if (st) return st;
    printable(kv->key, kb, sizeof kb);
    uint32_t t = 0;
    snprintf(what, sizeof what, "value type of key '%.40s'", kb);
    if ((st = cur_u32(c, &t, what))) return st;
    if (t >= GGUF_VTYPE_COUNT)
        return tnd_fail(TND_ERR_FORMAT, "%s: key '%s' (entry at byte %llu) has unknown value type %u",
                        c->name, kb, (unsigned long long)at, t);
    kv->type = (gguf_vtype)t;
    snprintf(what, sizeof what, "value of key '%.40s'", kb);
    if (t == GGUF_STRING) return cur_str(c, &kv->v.str, what);
    if (t != GGUF_ARRAY) {
        size_t n = g_vtype_size[t];
        if (!cur_has(c, n)) return truncated(c, n, what);
        load_scalar(kv, kv->type, c->p + c->pos);
        c->pos += n;
        return TND_OK;
    }
    uint32_t et = 0;
    uint64_t arr_at = c->pos, n = 0;
    if ((st = cur_u32(c, &et, what))) return st;
    if ((st = cur_u64(c, &n, what))) return st;
    if (et >= GGUF_VTYPE_COUNT)
        return tnd_fail(TND_ERR_FORMAT, "%s: key '%s': array at byte %llu has unknown element type %u",
                        c->name, kb, (unsigned long long)arr_at, et);
    if (et == GGUF_ARRAY)
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: key '%s': nested arrays (at byte %llu) are not supported",
                        c->name, kb, (unsigned long long)arr_at);
    kv->v.arr.type = (gguf_vtype)et;
    kv->v.arr.n = n;
    if (et == GGUF_STRING) {
        /* Each string takes at least its 8-byte length: bound n by the file
         * before allocating the table. */
        if (n > (c->size - c->pos) / 8)
            return tnd_fail(TND_ERR_FORMAT,
                            "%s: key '%s': string array at byte %llu claims %llu elements, more than the "
                            "%llu bytes left in the file can hold",
                            c->name, kb, (unsigned long long)arr_at, (unsigned long long)n,
                            (unsigned long long)(c->size - c->pos));
        gguf_str *strs = tnd_calloc(n ? n : 1, sizeof(gguf_str));
        if (!strs) return TND_ERR_NOMEM;
        kv->v.arr.strs = strs;
        for (uint64_t j = 0; j < n; j++) {
            snprintf(what, sizeof what, "element %llu of key '%.30s'", (unsigned long long)j, kb);
            if ((st = cur_str(c, &strs[j], what))) return st;
        }
        return TND_OK;
    }
    uint64_t bytes;
    if (!tnd_mul_ok(n, g_vtype_size[et], &bytes) || !cur_has(c, bytes))
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: key '%s': array at byte %llu of %llu %s elements extends past the end of "
                        "the file (size %llu)",
                        c->name, kb, (unsigned long long)arr_at, (unsigned long long)n,
                        gguf_vtype_name((gguf_vtype)et), (unsigned long long)c->size);
    kv->v.arr.data = c->p + c->pos;
    c->pos += bytes;
    return TND_OK;
}

static tnd_status parse_tensor_info(cursor *c, gguf_tensor *t, int64_t i) {
    char nb[96], what[80];
    uint64_t at = c->pos;
    snprintf(what, sizeof what, "name of tensor info %lld", (long long)i);
    tnd_status st = cur_str(c, &t->name, what);
    if (st) return st;
    printable(t->name, nb, sizeof nb);
    snprintf(what, sizeof what, "tensor info '%.50s'", nb);
    if ((st = cur_u32(c, &t->n_dims, what))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return tnd_fail(TND_ERR_FORMAT, "%s: tensor '%s' (info at byte %llu) has n_dims %u (must be 1..%d)",
                        c->name, nb, (unsigned long long)at, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v = 0;
        if ((st = cur_u64(c, &v, what))) return st;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return tnd_fail(TND_ERR_FORMAT, "%s: tensor '%s' (info at byte %llu): ne[%u] is %lld (must be > 0)",
                            c->name, nb, (unsigned long long)at, d, (long long)v);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type = 0;
    if ((st = cur_u32(c, &type, what))) return st;
    if ((st = cur_u64(c, &t->offset, what))) return st;
    int64_t bs;
    if (!gguf_type_size((int)type, &bs, NULL))
        return tnd_fail(TND_ERR_FORMAT, "%s: tensor '%s' (info at byte %llu) has unknown type id %u",
                        c->name, nb, (unsigned long long)at, type);
    t->type = (tnd_type)type;
    if (t->ne[0] % bs)
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: tensor '%s' (info at byte %llu): ne[0] = %lld is not a multiple of the %s block "
                        "size %lld",
                        c->name, nb, (unsigned long long)at, (long long)t->ne[0], gguf_type_name((int)type),
                        (long long)bs);
    if (!gguf_tensor_bytes((int)type, t->n_dims, t->ne, &t->nbytes))
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: tensor '%s' (info at byte %llu): element or byte count overflows "
                        "(shape %lld x %lld x %lld x %lld)",
                        c->name, nb, (unsigned long long)at, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3]);
    return TND_OK;
}

typedef struct { uint64_t off; int64_t idx; } off_idx;

static int cmp_off(const void *a, const void *b) {
    const off_idx *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static tnd_status parse(tnd_gguf *g) {
    cursor c = {g->base, g->size, 0, g->path};
    tnd_status st;
    if (g->size < 4 || memcmp(g->base, "GGUF", 4)) {
        char mb[40];
        gguf_str m = {g->size < 4 ? g->size : 4, (const char *)g->base};
        return tnd_fail(TND_ERR_FORMAT, "%s: not a GGUF file (magic at byte 0 is '%s', expected 'GGUF')",
                        g->path, printable(m, mb, sizeof mb));
    }
    c.pos = 4;
    if ((st = cur_u32(&c, &g->version, "version"))) return st;
    uint32_t v = g->version;
    if (v == 1)
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (only versions 2 and 3)",
                        g->path);
    if (v != 2 && v != 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw >= 1 && sw <= 3)
            return tnd_fail(TND_ERR_UNSUPPORTED,
                            "%s: big-endian GGUF (version %u byte-swapped) is not supported; only "
                            "little-endian files",
                            g->path, sw);
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: unknown GGUF version %u at byte 4 (supported: 2 and 3)",
                        g->path, v);
    }
    uint64_t n_tensors, n_kv;
    if ((st = cur_u64(&c, &n_tensors, "tensor count"))) return st;
    if ((st = cur_u64(&c, &n_kv, "metadata count"))) return st;
    /* Minimum encoded sizes: a kv is >= 13 bytes (key length, type, 1-byte
     * value); a tensor info >= 32 (name length, n_dims, one ne, type,
     * offset). Counts beyond what the rest of the file can hold are rejected
     * before anything is allocated from them. */
    uint64_t left = g->size - c.pos;
    if (n_kv > left / 13)
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: metadata count %llu (at byte 16) is impossible: the %llu bytes left in the file "
                        "hold at most %llu entries",
                        g->path, (unsigned long long)n_kv, (unsigned long long)left,
                        (unsigned long long)(left / 13));
    if (n_tensors > left / 32)
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: tensor count %llu (at byte 8) is impossible: the %llu bytes left in the file "
                        "hold at most %llu tensor infos",
                        g->path, (unsigned long long)n_tensors, (unsigned long long)left,
                        (unsigned long long)(left / 32));
    g->kvs = tnd_calloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    g->tensors = tnd_calloc(n_tensors ? n_tensors : 1, sizeof(gguf_tensor));
    if (!g->kvs || !g->tensors) return TND_ERR_NOMEM;
    if (!strhash_init(&g->kv_hash, (int64_t)n_kv) || !strhash_init(&g->tensor_hash, (int64_t)n_tensors))
        return TND_ERR_NOMEM;

    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t at = c.pos;
        gguf_kv *kv = &g->kvs[i];
        g->n_kv = (int64_t)i + 1; /* so free releases a partly read string array */
        if ((st = parse_kv(&c, kv, (int64_t)i))) return st;
        int64_t prev = strhash_insert(&g->kv_hash, kv->key.ptr, kv->key.len, (int64_t)i);
        if (prev >= 0) {
            char kb[96];
            return tnd_fail(TND_ERR_FORMAT, "%s: duplicate key '%s' (entries %lld and %lld, at byte %llu)",
                            g->path, printable(kv->key, kb, sizeof kb), (long long)prev, (long long)i,
                            (unsigned long long)at);
        }
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32)
            return tnd_fail(TND_ERR_FORMAT, "%s: general.alignment has type %s (must be uint32)", g->path,
                            gguf_vtype_name(al->type));
        if (al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)))
            return tnd_fail(TND_ERR_FORMAT, "%s: general.alignment is %llu (must be a nonzero power of two)",
                            g->path, (unsigned long long)al->v.u64);
        g->alignment = al->v.u64;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        uint64_t at = c.pos;
        gguf_tensor *t = &g->tensors[i];
        if ((st = parse_tensor_info(&c, t, (int64_t)i))) return st;
        g->n_tensors = (int64_t)i + 1;
        int64_t prev = strhash_insert(&g->tensor_hash, t->name.ptr, t->name.len, (int64_t)i);
        if (prev >= 0) {
            char nb[96];
            return tnd_fail(TND_ERR_FORMAT,
                            "%s: duplicate tensor name '%s' (tensors %lld and %lld, info at byte %llu)",
                            g->path, printable(t->name, nb, sizeof nb), (long long)prev, (long long)i,
                            (unsigned long long)at);
        }
    }

    /* Data section: first multiple of the alignment after the infos. A file
     * without tensors (vocab-only) may end before it. */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (!tnd_add_ok(c.pos, pad, &g->data_offset)) return tnd_fail(TND_ERR_FORMAT, "%s: bad data offset", g->path);
    if (n_tensors && g->data_offset > g->size)
        return tnd_fail(TND_ERR_FORMAT,
                        "%s: data section (aligned to %llu: byte %llu) starts past the end of the file (size %llu)",
                        g->path, (unsigned long long)g->alignment, (unsigned long long)g->data_offset,
                        (unsigned long long)g->size);
    uint64_t data_size = n_tensors ? g->size - g->data_offset : 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        char nb[96];
        if (t->offset % g->alignment)
            return tnd_fail(TND_ERR_FORMAT,
                            "%s: tensor '%s' data offset %llu is not a multiple of the alignment %llu",
                            g->path, printable(t->name, nb, sizeof nb), (unsigned long long)t->offset,
                            (unsigned long long)g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            unsigned long long fo = t->offset <= UINT64_MAX - g->data_offset ? t->offset + g->data_offset
                                                                           : (unsigned long long)t->offset;
            return tnd_fail(TND_ERR_FORMAT,
                            "%s: tensor '%s' data [offset %llu, %llu bytes] extends past end of file (size %llu)",
                            g->path, printable(t->name, nb, sizeof nb), fo, (unsigned long long)t->nbytes,
                            (unsigned long long)g->size);
        }
        t->data = g->base + g->data_offset + t->offset;
    }
    if (n_tensors > 1) {
        off_idx *o = tnd_malloc(n_tensors * sizeof(off_idx));
        if (!o) return TND_ERR_NOMEM;
        for (uint64_t i = 0; i < n_tensors; i++) o[i] = (off_idx){g->tensors[i].offset, (int64_t)i};
        qsort(o, n_tensors, sizeof *o, cmp_off);
        for (uint64_t i = 0; i + 1 < n_tensors; i++) {
            const gguf_tensor *a = &g->tensors[o[i].idx], *b = &g->tensors[o[i + 1].idx];
            if (a->offset + a->nbytes > b->offset) {
                char na[96], nb[96];
                st = tnd_fail(TND_ERR_FORMAT,
                              "%s: tensors '%s' [offset %llu, %llu bytes] and '%s' [offset %llu] overlap",
                              g->path, printable(a->name, na, sizeof na), (unsigned long long)a->offset,
                              (unsigned long long)a->nbytes, printable(b->name, nb, sizeof nb),
                              (unsigned long long)b->offset);
                free(o);
                return st;
            }
        }
        free(o);
    }
    return TND_OK;
}

static tnd_status open_common(const uint8_t *base, uint64_t size, bool mapped, const char *name,
                              tnd_gguf **out) {
    tnd_gguf *g = tnd_calloc(1, sizeof *g);
    if (!g) {
        if (mapped) munmap((void *)base, size);
        return TND_ERR_NOMEM;
    }
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    g->path = strdup(name ? name : "(memory)");
    if (!g->path) {
        tnd_gguf_free(g);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    tnd_status st = parse(g);
    if (st) {
        tnd_gguf_free(g);
        return st;
    }
    *out = g;
    return TND_OK;
}

tnd_status gguf_open_memory(const void *data, size_t size, const char *name, tnd_gguf **out) {
    if (!out || (!data && size)) return tnd_fail(TND_ERR_ARG, "gguf_open_memory: bad arguments");
    static const uint8_t empty[1];
    return open_common(data ? data : empty, size, false, name, out);
}

tnd_status tnd_gguf_open(const char *path, tnd_gguf **out) {
    if (!path || !out) return tnd_fail(TND_ERR_ARG, "tnd_gguf_open: bad arguments");
    /* O_NONBLOCK: a FIFO without a writer must not hang the open (it is
     * refused below); regular files ignore the flag */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tnd_fail(TND_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tnd_fail(TND_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tnd_fail(TND_ERR_IO, "%s is %s, not a regular file", path, tnd_file_kind(sb.st_mode));
    }
    if (sb.st_size < 24) {
        close(fd);
        return tnd_fail(TND_ERR_FORMAT, "%s: too small for a GGUF file (%lld bytes; the header alone is 24)",
                        path, (long long)sb.st_size);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (m == MAP_FAILED) return tnd_fail(TND_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
    return open_common(m, (uint64_t)sb.st_size, true, path, out);
}

void tnd_gguf_free(tnd_gguf *g) {
    if (!g) return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++)
            if (g->kvs[i].type == GGUF_ARRAY) free((void *)g->kvs[i].v.arr.strs);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_hash.slots);
    free(g->tensor_hash.slots);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

uint32_t gguf_version(const tnd_gguf *g) { return g->version; }
const char *gguf_path(const tnd_gguf *g) { return g->path; }
uint64_t gguf_file_size(const tnd_gguf *g) { return g->size; }
uint64_t gguf_alignment(const tnd_gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const tnd_gguf *g) { return g->data_offset; }
int64_t gguf_n_kv(const tnd_gguf *g) { return g->n_kv; }
int64_t gguf_n_tensors(const tnd_gguf *g) { return g->n_tensors; }

const gguf_kv *gguf_kv_at(const tnd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}

const gguf_kv *gguf_find(const tnd_gguf *g, const char *key) {
    if (!key) return NULL;
    int64_t i = strhash_find(&g->kv_hash, key, strlen(key));
    return i >= 0 ? &g->kvs[i] : NULL;
}

const gguf_tensor *gguf_tensor_at(const tnd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const tnd_gguf *g, const char *name) {
    if (!name) return NULL;
    int64_t i = strhash_find(&g->tensor_hash, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || !memcmp(s.ptr, c, n));
}

static bool wrong_type(const tnd_gguf *g, const gguf_kv *kv, const char *want) {
    char kb[96];
    tnd_fail(TND_ERR_FORMAT, "%s: key '%s' has type %s, expected %s", g->path, printable(kv->key, kb, sizeof kb),
             gguf_vtype_name(kv->type), want);
    return false;
}

static bool out_of_range(const tnd_gguf *g, const gguf_kv *kv, const char *want) {
    char kb[96];
    tnd_fail(TND_ERR_FORMAT, "%s: key '%s': value does not fit in %s", g->path, printable(kv->key, kb, sizeof kb),
             want);
    return false;
}

bool gguf_get_u32(const tnd_gguf *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (vtype_is_uint(kv->type)) {
        if (kv->v.u64 > UINT32_MAX) return out_of_range(g, kv, "uint32");
        *out = (uint32_t)kv->v.u64;
        return true;
    }
    if (vtype_is_sint(kv->type)) {
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX) return out_of_range(g, kv, "uint32");
        *out = (uint32_t)kv->v.i64;
        return true;
    }
    return wrong_type(g, kv, "an integer");
}

bool gguf_get_i64(const tnd_gguf *g, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (vtype_is_uint(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX) return out_of_range(g, kv, "int64");
        *out = (int64_t)kv->v.u64;
        return true;
    }
    if (vtype_is_sint(kv->type)) {
        *out = kv->v.i64;
        return true;
    }
    return wrong_type(g, kv, "an integer");
}

bool gguf_get_f32(const tnd_gguf *g, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64) *out = (float)kv->v.f64;
    else if (vtype_is_uint(kv->type)) *out = (float)kv->v.u64;
    else if (vtype_is_sint(kv->type)) *out = (float)kv->v.i64;
    else return wrong_type(g, kv, "a number");
    return true;
}

bool gguf_get_bool(const tnd_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (kv->type != GGUF_BOOL) return wrong_type(g, kv, "bool");
    *out = kv->v.b;
    return true;
}

bool gguf_get_str(const tnd_gguf *g, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (kv->type != GGUF_STRING) return wrong_type(g, kv, "string");
    *out = kv->v.str;
    return true;
}

char *gguf_get_cstr(const tnd_gguf *g, const char *key) {
    gguf_str s;
    if (!gguf_get_str(g, key, &s)) return NULL;
    if (s.len >= SIZE_MAX) return NULL;
    char *r = tnd_malloc((size_t)s.len + 1);
    if (!r) return NULL;
    if (s.len) memcpy(r, s.ptr, (size_t)s.len);
    r[s.len] = 0;
    return r;
}

bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->v.arr.n) return false;
    const uint8_t *p = (const uint8_t *)kv->v.arr.data + i * g_vtype_size[kv->v.arr.type];
    switch (kv->v.arr.type) {
    case GGUF_UINT8: *out = p[0]; return true;
    case GGUF_INT8: *out = (int8_t)p[0]; return true;
    case GGUF_UINT16: *out = ld16(p); return true;
    case GGUF_INT16: *out = (int16_t)ld16(p); return true;
    case GGUF_UINT32: *out = ld32(p); return true;
    case GGUF_INT32: *out = (int32_t)ld32(p); return true;
    case GGUF_INT64: *out = (int64_t)ld64(p); return true;
    case GGUF_UINT64: {
        uint64_t v = ld64(p);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    case GGUF_BOOL: *out = p[0] != 0; return true;
    default: return false;
    }
}

bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->v.arr.n) return false;
    const uint8_t *p = (const uint8_t *)kv->v.arr.data + i * g_vtype_size[kv->v.arr.type];
    if (kv->v.arr.type == GGUF_FLOAT32) {
        uint32_t b = ld32(p);
        float f;
        memcpy(&f, &b, 4);
        *out = f;
        return true;
    }
    if (kv->v.arr.type == GGUF_FLOAT64) {
        uint64_t b = ld64(p);
        memcpy(out, &b, 8);
        return true;
    }
    if (kv->v.arr.type == GGUF_UINT64) {
        *out = (double)ld64(p);
        return true;
    }
    int64_t v;
    if (!gguf_arr_i64(kv, i, &v)) return false;
    *out = (double)v;
    return true;
}

/* ---- writer -------------------------------------------------------------- */

typedef struct wtensor {
    char *name;
    size_t name_len;
    tnd_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;
    void *data;
    gguf_fill_fn fill;
    void *user;
} wtensor;

struct gguf_writer {
    gguf_kv *kvs; /* every pointer inside is owned */
    int64_t n_kv, cap_kv;
    wtensor *ts;
    int64_t n_t, cap_t;
    bool bad_alignment;
    uint32_t bad_alignment_value;
};

gguf_writer *gguf_writer_new(void) { return tnd_calloc(1, sizeof(gguf_writer)); }

static void wkv_clear(gguf_kv *kv) {
    if (kv->type == GGUF_STRING) free((void *)kv->v.str.ptr);
    if (kv->type == GGUF_ARRAY) {
        if (kv->v.arr.strs)
            for (uint64_t i = 0; i < kv->v.arr.n; i++) free((void *)kv->v.arr.strs[i].ptr);
        free((void *)kv->v.arr.strs);
        free((void *)kv->v.arr.data);
    }
    memset(&kv->v, 0, sizeof kv->v);
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        wkv_clear(&w->kvs[i]);
        free((void *)w->kvs[i].key.ptr);
    }
    free(w->kvs);
    for (int64_t i = 0; i < w->n_t; i++) {
        free(w->ts[i].name);
        free(w->ts[i].data);
    }
    free(w->ts);
    free(w);
}

static char *dup_bytes(const char *p, uint64_t n) {
    if (n >= SIZE_MAX) return NULL;
    char *r = tnd_malloc((size_t)n + 1);
    if (!r) return NULL;
    if (n) memcpy(r, p, (size_t)n);
    r[n] = 0;
    return r;
}

/* The slot for key (existing, cleared, or appended); NULL on OOM/bad key. */
static gguf_kv *wkv_slot(gguf_writer *w, const char *key, size_t key_len) {
    if (!w || !key) {
        tnd_fail(TND_ERR_ARG, "gguf writer: NULL writer or key");
        return NULL;
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        gguf_kv *kv = &w->kvs[i];
        if (kv->key.len == key_len && !memcmp(kv->key.ptr, key, key_len)) {
            wkv_clear(kv);
            return kv;
        }
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        gguf_kv *n = realloc(w->kvs, (size_t)cap * sizeof *n);
        if (!n) {
            tnd_fail(TND_ERR_NOMEM, "gguf writer: out of memory");
            return NULL;
        }
        w->kvs = n;
        w->cap_kv = cap;
    }
    char *k = dup_bytes(key, key_len);
    if (!k) return NULL;
    gguf_kv *kv = &w->kvs[w->n_kv++];
    memset(kv, 0, sizeof *kv);
    kv->key.ptr = k;
    kv->key.len = key_len;
    return kv;
}

static tnd_status set_scalar(gguf_writer *w, const char *key, gguf_vtype t, gguf_kv val) {
    gguf_kv *kv = wkv_slot(w, key, key ? strlen(key) : 0);
    if (!kv) return w && key ? TND_ERR_NOMEM : TND_ERR_ARG;
    kv->type = t;
    kv->v = val.v;
    return TND_OK;
}

tnd_status gguf_set_u8(gguf_writer *w, const char *key, uint8_t v) { return set_scalar(w, key, GGUF_UINT8, (gguf_kv){.v.u64 = v}); }
tnd_status gguf_set_i8(gguf_writer *w, const char *key, int8_t v) { return set_scalar(w, key, GGUF_INT8, (gguf_kv){.v.i64 = v}); }
tnd_status gguf_set_u16(gguf_writer *w, const char *key, uint16_t v) { return set_scalar(w, key, GGUF_UINT16, (gguf_kv){.v.u64 = v}); }
tnd_status gguf_set_i16(gguf_writer *w, const char *key, int16_t v) { return set_scalar(w, key, GGUF_INT16, (gguf_kv){.v.i64 = v}); }
tnd_status gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) { return set_scalar(w, key, GGUF_UINT32, (gguf_kv){.v.u64 = v}); }
tnd_status gguf_set_i32(gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, GGUF_INT32, (gguf_kv){.v.i64 = v}); }
tnd_status gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, GGUF_UINT64, (gguf_kv){.v.u64 = v}); }
tnd_status gguf_set_i64(gguf_writer *w, const char *key, int64_t v) { return set_scalar(w, key, GGUF_INT64, (gguf_kv){.v.i64 = v}); }
tnd_status gguf_set_f32(gguf_writer *w, const char *key, float v) { return set_scalar(w, key, GGUF_FLOAT32, (gguf_kv){.v.f64 = v}); }
tnd_status gguf_set_f64(gguf_writer *w, const char *key, double v) { return set_scalar(w, key, GGUF_FLOAT64, (gguf_kv){.v.f64 = v}); }
tnd_status gguf_set_bool(gguf_writer *w, const char *key, bool v) { return set_scalar(w, key, GGUF_BOOL, (gguf_kv){.v.b = v}); }

tnd_status gguf_set_strn(gguf_writer *w, const char *key, const char *v, size_t len) {
    if (!v && len) return tnd_fail(TND_ERR_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    char *s = dup_bytes(v, len);
    if (!s) return TND_ERR_NOMEM;
    gguf_kv *kv = wkv_slot(w, key, key ? strlen(key) : 0);
    if (!kv) {
        free(s);
        return w && key ? TND_ERR_NOMEM : TND_ERR_ARG;
    }
    kv->type = GGUF_STRING;
    kv->v.str = (gguf_str){len, s};
    return TND_OK;
}

tnd_status gguf_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) return tnd_fail(TND_ERR_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    return gguf_set_strn(w, key, v, strlen(v));
}

static tnd_status set_arr_keyed(gguf_writer *w, const char *key, size_t key_len, gguf_vtype type,
                                const void *data, uint64_t n) {
    if ((unsigned)type >= GGUF_VTYPE_COUNT || type == GGUF_STRING || type == GGUF_ARRAY)
        return tnd_fail(TND_ERR_ARG, "gguf writer: key '%.*s': bad array element type %d", (int)key_len,
                        key ? key : "", (int)type);
    uint64_t bytes;
    if (!tnd_mul_ok(n, g_vtype_size[type], &bytes) || bytes > SIZE_MAX / 2 || (!data && n))
        return tnd_fail(TND_ERR_ARG, "gguf writer: key '%.*s': bad array", (int)key_len, key ? key : "");
    void *copy = tnd_malloc((size_t)bytes);
    if (!copy) return TND_ERR_NOMEM;
    if (bytes) memcpy(copy, data, (size_t)bytes);
    gguf_kv *kv = wkv_slot(w, key, key_len);
    if (!kv) {
        free(copy);
        return w && key ? TND_ERR_NOMEM : TND_ERR_ARG;
    }
    kv->type = GGUF_ARRAY;
    kv->v.arr.type = type;
    kv->v.arr.n = n;
    kv->v.arr.data = copy;
    return TND_OK;
}

tnd_status gguf_set_arr(gguf_writer *w, const char *key, gguf_vtype type, const void *data, uint64_t n) {
    return set_arr_keyed(w, key, key ? strlen(key) : 0, type, data, n);
}

static tnd_status set_arr_str_keyed(gguf_writer *w, const char *key, size_t key_len, const gguf_str *strs,
                                    uint64_t n) {
    if ((!strs && n) || n > SIZE_MAX / sizeof(gguf_str))
        return tnd_fail(TND_ERR_ARG, "gguf writer: key '%.*s': bad string array", (int)key_len, key ? key : "");
    gguf_str *copy = tnd_calloc(n ? n : 1, sizeof(gguf_str));
    if (!copy) return TND_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        char *s = (strs[i].ptr || !strs[i].len) ? dup_bytes(strs[i].ptr, strs[i].len) : NULL;
        if (!s) {
            for (uint64_t j = 0; j < i; j++) free((void *)copy[j].ptr);
            free(copy);
            return strs[i].ptr || !strs[i].len ? TND_ERR_NOMEM
                                               : tnd_fail(TND_ERR_ARG, "gguf writer: NULL string in array");
        }
        copy[i] = (gguf_str){strs[i].len, s};
    }
    gguf_kv *kv = wkv_slot(w, key, key_len);
    if (!kv) {
        for (uint64_t j = 0; j < n; j++) free((void *)copy[j].ptr);
        free(copy);
        return w && key ? TND_ERR_NOMEM : TND_ERR_ARG;
    }
    kv->type = GGUF_ARRAY;
    kv->v.arr.type = GGUF_STRING;
    kv->v.arr.n = n;
    kv->v.arr.strs = copy;
    return TND_OK;
}

tnd_status gguf_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n) {
    return set_arr_str_keyed(w, key, key ? strlen(key) : 0, strs, n);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (!w) return;
    if (alignment == 0 || (alignment & (alignment - 1))) {
        w->bad_alignment = true; /* reported by gguf_writer_write */
        w->bad_alignment_value = alignment;
        return;
    }
    w->bad_alignment = false;
    if (gguf_set_u32(w, "general.alignment", alignment)) w->bad_alignment = true;
}

tnd_status gguf_copy_kvs(gguf_writer *w, const tnd_gguf *src, const char *prefix) {
    if (!w || !src) return tnd_fail(TND_ERR_ARG, "gguf_copy_kvs: bad arguments");
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kvs[i];
        if (kv->key.len < pl || (pl && memcmp(kv->key.ptr, prefix, pl))) continue;
        tnd_status st;
        /* Keys may hold bytes strlen would stop at, so the keyed helpers take
         * the length explicitly; scalars go through a copy of the key. */
        if (kv->type == GGUF_ARRAY && kv->v.arr.type == GGUF_STRING)
            st = set_arr_str_keyed(w, kv->key.ptr, (size_t)kv->key.len, kv->v.arr.strs, kv->v.arr.n);
        else if (kv->type == GGUF_ARRAY)
            st = set_arr_keyed(w, kv->key.ptr, (size_t)kv->key.len, kv->v.arr.type, kv->v.arr.data, kv->v.arr.n);
        else {
            char *s = NULL;
            if (kv->type == GGUF_STRING && !(s = dup_bytes(kv->v.str.ptr, kv->v.str.len))) return TND_ERR_NOMEM;
            gguf_kv *d = wkv_slot(w, kv->key.ptr, (size_t)kv->key.len);
            if (!d) {
                free(s);
                return TND_ERR_NOMEM;
            }
            d->type = kv->type;
            d->v = kv->v;
            if (s) d->v.str.ptr = s;
            st = TND_OK;
        }
        if (st) return st;
    }
    return TND_OK;
}

static tnd_status add_tensor(gguf_writer *w, const char *name, tnd_type type, uint32_t n_dims, const int64_t *ne,
                             const void *data, gguf_fill_fn fill, void *user) {
    if (!w || !name || !ne) return tnd_fail(TND_ERR_ARG, "gguf writer: bad tensor arguments");
    size_t nl = strlen(name);
    uint64_t nbytes;
    if (!gguf_tensor_bytes((int)type, n_dims, ne, &nbytes))
        return tnd_fail(TND_ERR_ARG, "gguf writer: tensor '%s': bad type %d or shape (n_dims %u)", name,
                        (int)type, n_dims);
    for (int64_t i = 0; i < w->n_t; i++)
        if (w->ts[i].name_len == nl && !memcmp(w->ts[i].name, name, nl))
            return tnd_fail(TND_ERR_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *n = realloc(w->ts, (size_t)cap * sizeof *n);
        if (!n) return tnd_fail(TND_ERR_NOMEM, "gguf writer: out of memory");
        w->ts = n;
        w->cap_t = cap;
    }
    wtensor t = {0};
    t.name = dup_bytes(name, nl);
    if (!t.name) return TND_ERR_NOMEM;
    t.name_len = nl;
    t.type = type;
    t.n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < (int)n_dims ? ne[d] : 1;
    t.nbytes = nbytes;
    if (fill) {
        t.fill = fill;
        t.user = user;
    } else {
        if (!data) {
            free(t.name);
            return tnd_fail(TND_ERR_ARG, "gguf writer: tensor '%s': NULL data", name);
        }
        if (nbytes > SIZE_MAX / 2 || !(t.data = tnd_malloc((size_t)nbytes))) {
            free(t.name);
            return TND_ERR_NOMEM;
        }
        memcpy(t.data, data, (size_t)nbytes);
    }
    w->ts[w->n_t++] = t;
    return TND_OK;
}

tnd_status gguf_add_tensor(gguf_writer *w, const char *name, tnd_type type, uint32_t n_dims, const int64_t *ne,
                           const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

tnd_status gguf_add_tensor_fill(gguf_writer *w, const char *name, tnd_type type, uint32_t n_dims,
                                const int64_t *ne, gguf_fill_fn fill, void *user) {
    if (!fill) return tnd_fail(TND_ERR_ARG, "gguf writer: tensor '%s': NULL fill callback", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, user);
}

/* Buffered output with running byte count and progress. */
typedef struct {
    FILE *f;
    const char *tmp;
    uint64_t done, total;
    void (*progress)(void *, uint64_t, uint64_t);
    void *puser;
    uint64_t next_report;
    bool failed;
} wout;

static void out_bytes(wout *o, const void *p, size_t n) {
    if (o->failed || !n) return;
    if (fwrite(p, 1, n, o->f) != n) {
        o->failed = true;
        tnd_fail(TND_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
        return;
    }
    o->done += n;
    if (o->progress && o->done >= o->next_report) {
        o->progress(o->puser, o->done, o->total);
        o->next_report = o->done + (64u << 20);
    }
}

static void out_u32(wout *o, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    out_bytes(o, b, 4);
}

static void out_u64(wout *o, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    out_bytes(o, b, 8);
}

static void out_str(wout *o, gguf_str s) {
    out_u64(o, s.len);
    out_bytes(o, s.ptr, (size_t)s.len);
}

static void out_zeros(wout *o, uint64_t n) {
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        out_bytes(o, z, k);
        n -= k;
    }
}

static void out_scalar(wout *o, gguf_vtype t, const gguf_kv *kv) {
    uint8_t b[8];
    uint64_t bits = 0;
    switch (t) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64: bits = kv->v.u64; break;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64: bits = (uint64_t)kv->v.i64; break;
    case GGUF_BOOL: bits = kv->v.b ? 1 : 0; break;
    case GGUF_FLOAT32: {
        float f = (float)kv->v.f64;
        uint32_t u;
        memcpy(&u, &f, 4);
        bits = u;
        break;
    }
    case GGUF_FLOAT64: memcpy(&bits, &kv->v.f64, 8); break;
    default: break;
    }
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(bits >> (8 * i));
    out_bytes(o, b, g_vtype_size[t]);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Encoded size of the header, kvs and tensor infos. */
static uint64_t header_size(const gguf_writer *w) {
    uint64_t n = 24;
    for (int64_t i = 0; i < w->n_kv; i++) {
        const gguf_kv *kv = &w->kvs[i];
        n += 8 + kv->key.len + 4;
        if (kv->type == GGUF_STRING) n += 8 + kv->v.str.len;
        else if (kv->type == GGUF_ARRAY) {
            n += 12;
            if (kv->v.arr.type == GGUF_STRING)
                for (uint64_t j = 0; j < kv->v.arr.n; j++) n += 8 + kv->v.arr.strs[j].len;
            else n += kv->v.arr.n * g_vtype_size[kv->v.arr.type];
        } else n += g_vtype_size[kv->type];
    }
    for (int64_t i = 0; i < w->n_t; i++) n += 8 + w->ts[i].name_len + 4 + 8ull * w->ts[i].n_dims + 4 + 8;
    return n;
}

tnd_status gguf_writer_write(gguf_writer *w, const char *path,
                             void (*progress)(void *user, uint64_t done, uint64_t total), void *puser) {
    if (!w || !path) return tnd_fail(TND_ERR_ARG, "gguf_writer_write: bad arguments");
    if (w->bad_alignment)
        return tnd_fail(TND_ERR_ARG, "%s: alignment %u is not a nonzero power of two", path,
                        w->bad_alignment_value);
    uint64_t alignment = GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < w->n_kv; i++) {
        const gguf_kv *kv = &w->kvs[i];
        if (!gguf_str_eq(kv->key, "general.alignment")) continue;
        if (kv->type != GGUF_UINT32 || kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)))
            return tnd_fail(TND_ERR_ARG, "%s: general.alignment must be a uint32 power of two", path);
        alignment = kv->v.u64;
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        off = align_up(off, alignment);
        w->ts[i].offset = off;
        off += w->ts[i].nbytes;
    }
    uint64_t hdr = header_size(w), data_start = align_up(hdr, alignment);
    uint64_t total = w->n_t ? data_start + align_up(off, alignment) : hdr;

    size_t pl = strlen(path);
    char *tmp = tnd_malloc(pl + 16);
    if (!tmp) return TND_ERR_NOMEM;
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tnd_status st = tnd_fail(TND_ERR_IO, "%s: cannot create temporary file: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a model file is normally readable */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        tnd_status st = tnd_fail(TND_ERR_IO, "%s: fdopen failed: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    wout o = {f, tmp, 0, total, progress, puser, 0, false};

    out_bytes(&o, "GGUF", 4);
    out_u32(&o, 3);
    out_u64(&o, (uint64_t)w->n_t);
    out_u64(&o, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        const gguf_kv *kv = &w->kvs[i];
        out_str(&o, kv->key);
        out_u32(&o, kv->type);
        if (kv->type == GGUF_STRING) out_str(&o, kv->v.str);
        else if (kv->type == GGUF_ARRAY) {
            out_u32(&o, kv->v.arr.type);
            out_u64(&o, kv->v.arr.n);
            /* Stored raw little-endian already (the reader's contract). */
            if (kv->v.arr.type == GGUF_STRING)
                for (uint64_t j = 0; j < kv->v.arr.n; j++) out_str(&o, kv->v.arr.strs[j]);
            else out_bytes(&o, kv->v.arr.data, (size_t)(kv->v.arr.n * g_vtype_size[kv->v.arr.type]));
        } else out_scalar(&o, kv->type, kv);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        out_str(&o, (gguf_str){t->name_len, t->name});
        out_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) out_u64(&o, (uint64_t)t->ne[d]);
        out_u32(&o, (uint32_t)t->type);
        out_u64(&o, t->offset);
    }
    if (w->n_t) {
        out_zeros(&o, data_start - hdr);
        uint64_t pos = 0;
        uint8_t *buf = NULL;
        for (int64_t i = 0; i < w->n_t && !o.failed; i++) {
            const wtensor *t = &w->ts[i];
            out_zeros(&o, t->offset - pos);
            if (t->data) out_bytes(&o, t->data, (size_t)t->nbytes);
            else {
                const size_t chunk = 1 << 20;
                if (!buf && !(buf = tnd_malloc(chunk))) {
                    o.failed = true;
                    break;
                }
                for (uint64_t d = 0; d < t->nbytes && !o.failed; d += chunk) {
                    size_t n = t->nbytes - d < chunk ? (size_t)(t->nbytes - d) : chunk;
                    if (!t->fill(t->user, d, buf, n)) {
                        o.failed = true;
                        tnd_fail_wrap(TND_ERR_IO, "%s: producing tensor '%s': ", path, t->name);
                    } else out_bytes(&o, buf, n);
                }
            }
            pos = t->offset + t->nbytes;
        }
        free(buf);
        out_zeros(&o, align_up(off, alignment) - pos);
    }
    if (!o.failed && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
        o.failed = true;
        tnd_fail(TND_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (fclose(f) != 0 && !o.failed) {
        o.failed = true;
        tnd_fail(TND_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    }
    if (!o.failed && rename(tmp, path) != 0) {
        o.failed = true;
        tnd_fail(TND_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    }
    if (o.failed) {
        unlink(tmp);
        const char *m = tnd_last_error();
        if (!strstr(m, path)) tnd_fail_wrap(TND_ERR_IO, "%s: ", path);
        free(tmp);
        return TND_ERR_IO;
    }
    free(tmp);
    if (progress) progress(puser, total, total);
    return TND_OK;
}
