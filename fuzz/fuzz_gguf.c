/* libFuzzer target for the GGUF reader: any input must either be rejected
 * with a message or give a reader whose every accessor stays inside the
 * buffer (ASan checks the reads; the asserts check the validated invariants).
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DTND_FUZZ=ON
 * Run:   build-fuzz/fuzz_gguf fuzz/corpus/gguf -max_len=65536 */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "util.h"

#define FUZZ_ASSERT(c) \
    do {               \
        if (!(c)) abort(); \
    } while (0)

static volatile uint64_t g_sink;

static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++) h = h * 31 + b[i];
    g_sink += h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy, so ASan flags a read one byte past the input. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    tnd_gguf *g = NULL;
    tnd_status st = gguf_open_memory(size ? buf : NULL, size, "fuzz.gguf", &g);
    if (st != TND_OK) {
        FUZZ_ASSERT(strstr(tnd_last_error(), "fuzz.gguf") || st == TND_ERR_NOMEM);
        free(buf);
        return 0;
    }
    const uint8_t *lo = buf, *hi = buf + size;
    FUZZ_ASSERT(gguf_version(g) == 2 || gguf_version(g) == 3);
    uint64_t al = gguf_alignment(g);
    FUZZ_ASSERT(al && !(al & (al - 1)));
    FUZZ_ASSERT(gguf_file_size(g) == size);

    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        touch(kv->key.ptr, kv->key.len);
        /* Lookup by name finds this entry unless the key has a NUL in it. */
        char key[128];
        if (kv->key.len < sizeof key && !memchr(kv->key.ptr, 0, kv->key.len)) {
            memcpy(key, kv->key.ptr, kv->key.len);
            key[kv->key.len] = 0;
            FUZZ_ASSERT(gguf_find(g, key) == kv);
            uint32_t u32;
            int64_t i64;
            float f;
            bool b;
            gguf_str s;
            (void)gguf_get_u32(g, key, &u32);
            (void)gguf_get_i64(g, key, &i64);
            (void)gguf_get_f32(g, key, &f);
            (void)gguf_get_bool(g, key, &b);
            if (gguf_get_str(g, key, &s)) touch(s.ptr, s.len);
            free(gguf_get_cstr(g, key));
        }
        if (kv->type == GGUF_STRING) {
            FUZZ_ASSERT((const uint8_t *)kv->v.str.ptr >= lo && (const uint8_t *)kv->v.str.ptr + kv->v.str.len <= hi);
            touch(kv->v.str.ptr, kv->v.str.len);
        } else if (kv->type == GGUF_ARRAY) {
            FUZZ_ASSERT(kv->v.arr.type != GGUF_ARRAY);
            if (kv->v.arr.type == GGUF_STRING) {
                for (uint64_t j = 0; j < kv->v.arr.n; j++) touch(kv->v.arr.strs[j].ptr, kv->v.arr.strs[j].len);
            } else {
                touch(kv->v.arr.data, kv->v.arr.n * gguf_vtype_size(kv->v.arr.type));
                for (uint64_t j = 0; j < kv->v.arr.n && j < 64; j++) {
                    int64_t v;
                    double d;
                    if (gguf_arr_i64(kv, j, &v)) g_sink += (uint64_t)v;
                    if (gguf_arr_f64(kv, j, &d)) g_sink += (uint64_t)(d == d);
                }
            }
        }
        (void)gguf_vtype_name(kv->type);
    }
    FUZZ_ASSERT(gguf_kv_at(g, gguf_n_kv(g)) == NULL);

    uint64_t data_off = gguf_data_offset(g);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        FUZZ_ASSERT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        uint64_t nb = 0;
        FUZZ_ASSERT(gguf_tensor_bytes(t->type, t->n_dims, t->ne, &nb) && nb == t->nbytes);
        FUZZ_ASSERT(t->offset % al == 0);
        FUZZ_ASSERT((const uint8_t *)t->data == lo + data_off + t->offset);
        FUZZ_ASSERT(t->nbytes <= (uint64_t)(hi - (const uint8_t *)t->data));
        touch(t->data, t->nbytes);
        (void)gguf_type_name(t->type);
        char name[128];
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            FUZZ_ASSERT(gguf_find_tensor(g, name) == t);
        }
    }
    FUZZ_ASSERT(gguf_tensor_at(g, -1) == NULL);
    (void)gguf_find(g, "general.architecture");
    (void)gguf_find_tensor(g, "token_embd.weight");
    tnd_gguf_free(g);
    free(buf);
    return 0;
}
