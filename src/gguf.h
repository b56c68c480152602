/* GGUF v2/v3 reading (mmap, strict validation) and writing.
 *
 * The reader validates everything before anything else looks at the file:
 * after tnd_gguf_open succeeds, every key, string, array and tensor it exposes
 * lies inside the file, every tensor's byte size is exact and aligned, and no
 * two tensors overlap. Strings point into the mapping and are NOT
 * NUL-terminated; use their len.
 */
#ifndef TND_GGUF_H
#define TND_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "quant/quant.h"
#include "tandem.h"

typedef enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_VTYPE_COUNT
} gguf_vtype;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str {
    uint64_t len;
    const char *ptr; /* into the mapping (reader) or owned (writer) */
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;
    union {
        uint64_t u64;   /* every unsigned integer type, widened */
        int64_t i64;    /* every signed integer type, widened */
        double f64;     /* FLOAT32 and FLOAT64, widened */
        bool b;
        gguf_str str;
        struct {
            gguf_vtype type;     /* element type (never ARRAY: nested arrays are rejected) */
            uint64_t n;
            const void *data;    /* raw little-endian elements (non-string arrays) */
            const gguf_str *strs;/* n strings (string arrays), owned by the reader */
        } arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    tnd_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const void *data;          /* into the mapping; NULL for a vocab-only reader */
} gguf_tensor;

/* tnd_gguf is defined in gguf.c. Accessors: */
uint32_t gguf_version(const tnd_gguf *g);
const char *gguf_path(const tnd_gguf *g);
uint64_t gguf_file_size(const tnd_gguf *g);
uint64_t gguf_alignment(const tnd_gguf *g);
uint64_t gguf_data_offset(const tnd_gguf *g); /* file offset of the data section */

int64_t gguf_n_kv(const tnd_gguf *g);
const gguf_kv *gguf_kv_at(const tnd_gguf *g, int64_t i);
/* Looks up a key; NULL if absent. */
const gguf_kv *gguf_find(const tnd_gguf *g, const char *key);

/* Typed getters: return false (and leave *out alone) if the key is absent;
 * return false with a tnd_fail message if present with an incompatible type.
 * Integer getters accept any integer type whose value fits. */
bool gguf_get_u32(const tnd_gguf *g, const char *key, uint32_t *out);
bool gguf_get_i64(const tnd_gguf *g, const char *key, int64_t *out);
bool gguf_get_f32(const tnd_gguf *g, const char *key, float *out);
bool gguf_get_bool(const tnd_gguf *g, const char *key, bool *out);
bool gguf_get_str(const tnd_gguf *g, const char *key, gguf_str *out);
/* Copies a string value to a malloc'd NUL-terminated C string; NULL if absent. */
char *gguf_get_cstr(const tnd_gguf *g, const char *key);

int64_t gguf_n_tensors(const tnd_gguf *g);
const gguf_tensor *gguf_tensor_at(const tnd_gguf *g, int64_t i);
/* Looks up a tensor by name; NULL if absent (hashed, O(1)). */
const gguf_tensor *gguf_find_tensor(const tnd_gguf *g, const char *name);

/* Compares a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);
/* Name of a value type ("uint32", "string", ...). */
const char *gguf_vtype_name(gguf_vtype t);

/* Block size (elements) and bytes per block of a GGML type id; false if the
 * id is unknown. Independent of which kernels are built. */
bool gguf_type_size(int type, int64_t *block_size, size_t *type_size);
/* Name of a GGML type id ("Q4_K"), "?" if unknown. */
const char *gguf_type_name(int type);
/* Exact byte size of a tensor; false if the type is unknown, n_dims is not
 * 1..4, a dim is <= 0, ne[0] is not a multiple of the block size, or a count
 * overflows int64. */
bool gguf_tensor_bytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes);
/* Bytes of one element of a scalar value type; 0 for STRING and ARRAY. */
size_t gguf_vtype_size(gguf_vtype t);
/* Element i of a non-string array (data may be unaligned: use these rather
 * than casting). _i64: integer and bool elements (uint64 above INT64_MAX
 * fails); _f64: any numeric element. False if out of range or not numeric. */
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out);

/* Opens from memory instead of a file (fuzzing, tests). The buffer must stay
 * alive until tnd_gguf_free. name is used in messages. */
tnd_status gguf_open_memory(const void *data, size_t size, const char *name, tnd_gguf **out);

/* ---- writer --------------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

/* Produces a tensor's bytes in pieces while writing, so multi-GB files (synth)
 * never sit in memory: fill buf[0..n) with bytes [off, off+n) of the tensor's
 * data. Returns false to abort the write (with a tnd_fail message). */
typedef bool (*gguf_fill_fn)(void *user, uint64_t off, void *buf, size_t n);

gguf_writer *gguf_writer_new(void); /* NULL on OOM (message set) */
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment); /* also writes general.alignment */

/* Metadata setters copy their arguments. Adding an existing key replaces it. */
tnd_status gguf_set_u8(gguf_writer *w, const char *key, uint8_t v);
tnd_status gguf_set_i8(gguf_writer *w, const char *key, int8_t v);
tnd_status gguf_set_u16(gguf_writer *w, const char *key, uint16_t v);
tnd_status gguf_set_i16(gguf_writer *w, const char *key, int16_t v);
tnd_status gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
tnd_status gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
tnd_status gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
tnd_status gguf_set_i64(gguf_writer *w, const char *key, int64_t v);
tnd_status gguf_set_f32(gguf_writer *w, const char *key, float v);
tnd_status gguf_set_f64(gguf_writer *w, const char *key, double v);
tnd_status gguf_set_bool(gguf_writer *w, const char *key, bool v);
tnd_status gguf_set_str(gguf_writer *w, const char *key, const char *v);
tnd_status gguf_set_strn(gguf_writer *w, const char *key, const char *v, size_t len);
/* Array of a non-string type: n elements of raw little-endian data. */
tnd_status gguf_set_arr(gguf_writer *w, const char *key, gguf_vtype type, const void *data, uint64_t n);
tnd_status gguf_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n);
/* Copies every key of a reader whose name starts with prefix (e.g. "tokenizer."). */
tnd_status gguf_copy_kvs(gguf_writer *w, const tnd_gguf *src, const char *prefix);

/* Tensors: data is copied now (add_tensor) or produced while writing
 * (add_tensor_fill; fill/user must stay valid until gguf_writer_write). */
tnd_status gguf_add_tensor(gguf_writer *w, const char *name, tnd_type type,
                           uint32_t n_dims, const int64_t *ne, const void *data);
tnd_status gguf_add_tensor_fill(gguf_writer *w, const char *name, tnd_type type,
                                uint32_t n_dims, const int64_t *ne, gguf_fill_fn fill, void *user);

/* Writes version 3 to path via a temporary file renamed at the end, so a
 * failed write never leaves a truncated file under the final name. progress
 * (may be NULL) is called with bytes written and total. */
tnd_status gguf_writer_write(gguf_writer *w, const char *path,
                             void (*progress)(void *user, uint64_t done, uint64_t total), void *puser);

#endif
