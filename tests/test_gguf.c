/* GGUF reader and writer: round trips of every value type, and one malformed
 * file for every validation rule (built byte by byte), each checked for the
 * status and for a message that names the file and the offending thing.
 *
 * `test_gguf --write-sample PATH` writes a file with every tensor type and
 * every value type (tests/test_info.py reads it back with gguf-py). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "util.h"

static char g_dir[512];

static const char *tmp_path(const char *name) {
    static char p[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

/* ---- byte builder for hand-made files ------------------------------------ */

typedef struct { uint8_t *p; size_t n, cap; } bb;

static void bb_raw(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_raw(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) {
    for (int i = 0; i < 4; i++) bb_u8(b, (uint8_t)(v >> (8 * i)));
}
static void bb_u64(bb *b, uint64_t v) {
    for (int i = 0; i < 8; i++) bb_u8(b, (uint8_t)(v >> (8 * i)));
}
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t align) {
    while (b->n % align) bb_u8(b, 0);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}
static void hdr(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    b->n = 0;
    bb_raw(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_t);
    bb_u64(b, n_kv);
}
static void kv_u32(bb *b, const char *k, uint32_t v) {
    bb_str(b, k);
    bb_u32(b, GGUF_UINT32);
    bb_u32(b, v);
}
static void kv_str(bb *b, const char *k, const char *v) {
    bb_str(b, k);
    bb_u32(b, GGUF_STRING);
    bb_str(b, v);
}
static void tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* Opens b from an exact-size heap copy (so ASan sees any read past the end). */
static tnd_status open_bb(const bb *b, tnd_gguf **g) {
    void *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(copy, b->p, b->n);
    tnd_status st = gguf_open_memory(b->n ? copy : NULL, b->n, "bad.gguf", g);
    if (st == TND_OK) tnd_gguf_free(*g);
    free(copy);
    return st;
}

/* Expects b to be rejected with status st and a message naming the file and
 * containing every one of the given fragments. */
static void expect_fail_(int line, const bb *b, tnd_status st, const char *f1, const char *f2) {
    tnd_gguf *g = NULL;
    tnd_status got = open_bb(b, &g);
    const char *m = tnd_last_error();
    bool ok = got == st && strstr(m, "bad.gguf") && (!f1 || strstr(m, f1)) && (!f2 || strstr(m, f2));
    if (!tc_count(ok))
        fprintf(stderr, "line %d: expected status %s with '%s' '%s'; got %s: %s\n", line, tnd_status_name(st),
                f1 ? f1 : "", f2 ? f2 : "", tnd_status_name(got), got ? m : "(opened)");
}
#define expect_fail(b, st, f1, f2) expect_fail_(__LINE__, b, st, f1, f2)

static void expect_ok_(int line, const bb *b) {
    tnd_gguf *g = NULL;
    tnd_status got = open_bb(b, &g);
    if (!tc_count(got == TND_OK)) fprintf(stderr, "line %d: expected the file to open: %s\n", line, tnd_last_error());
}
#define expect_ok(b) expect_ok_(__LINE__, b)

/* ---- writer round trip ---------------------------------------------------- */

static bool fill_pattern(void *user, uint64_t off, void *buf, size_t n) {
    uint8_t seed = *(uint8_t *)user;
    for (size_t i = 0; i < n; i++) ((uint8_t *)buf)[i] = (uint8_t)((off + i) * 31 + seed);
    return true;
}

static bool fill_fails(void *user, uint64_t off, void *buf, size_t n) {
    (void)user, (void)buf, (void)n;
    if (off >= (1u << 20)) {
        tnd_fail(TND_ERR_IO, "synthetic failure");
        return false;
    }
    memset(buf, 0, n);
    return true;
}

static const uint8_t u8s[] = {0, 1, 255};
static const int8_t i8s[] = {-128, 0, 127};
static const uint16_t u16s[] = {0, 65535, 258};
static const int16_t i16s[] = {-32768, 32767, -2};
static const uint32_t u32s[] = {0, 4000000000u, 7};
static const int32_t i32s[] = {INT32_MIN, INT32_MAX, -7};
static const uint64_t u64s[] = {0, UINT64_MAX, 1ull << 40};
static const int64_t i64s[] = {INT64_MIN, INT64_MAX, -1};
static const float f32s[] = {1.5f, -0.0f, 3.4e38f};
static const double f64s[] = {1e-300, -2.5, 3.141592653589793};
static const bool bools[] = {true, false, true};

/* Writes a file with every value type and every tensor type. */
static tnd_status write_sample(const char *path, uint32_t alignment) {
    gguf_writer *w = gguf_writer_new();
    tnd_status st = TND_OK;
    st |= gguf_set_str(w, "general.architecture", "llama");
    gguf_writer_set_alignment(w, alignment);
    st |= gguf_set_u8(w, "t.u8", 200);
    st |= gguf_set_i8(w, "t.i8", -100);
    st |= gguf_set_u16(w, "t.u16", 60000);
    st |= gguf_set_i16(w, "t.i16", -30000);
    st |= gguf_set_u32(w, "t.u32", 4000000000u);
    st |= gguf_set_i32(w, "t.i32", -2000000000);
    st |= gguf_set_u64(w, "t.u64", UINT64_MAX - 5);
    st |= gguf_set_i64(w, "t.i64", INT64_MIN + 3);
    st |= gguf_set_f32(w, "t.f32", 0.15625f);
    st |= gguf_set_f64(w, "t.f64", -1.0e200);
    st |= gguf_set_bool(w, "t.bool", true);
    st |= gguf_set_str(w, "t.str", "hello, world");
    st |= gguf_set_strn(w, "t.bytes", "a\0b\xff\n\"\\", 7);
    st |= gguf_set_str(w, "t.empty", "");
    st |= gguf_set_arr(w, "a.u8", GGUF_UINT8, u8s, 3);
    st |= gguf_set_arr(w, "a.i8", GGUF_INT8, i8s, 3);
    st |= gguf_set_arr(w, "a.u16", GGUF_UINT16, u16s, 3);
    st |= gguf_set_arr(w, "a.i16", GGUF_INT16, i16s, 3);
    st |= gguf_set_arr(w, "a.u32", GGUF_UINT32, u32s, 3);
    st |= gguf_set_arr(w, "a.i32", GGUF_INT32, i32s, 3);
    st |= gguf_set_arr(w, "a.u64", GGUF_UINT64, u64s, 3);
    st |= gguf_set_arr(w, "a.i64", GGUF_INT64, i64s, 3);
    st |= gguf_set_arr(w, "a.f32", GGUF_FLOAT32, f32s, 3);
    st |= gguf_set_arr(w, "a.f64", GGUF_FLOAT64, f64s, 3);
    st |= gguf_set_arr(w, "a.bool", GGUF_BOOL, bools, 3);
    st |= gguf_set_arr(w, "a.empty", GGUF_INT32, NULL, 0);
    gguf_str strs[] = {{3, "abc"}, {0, ""}, {4, "\xe2\x96\x81x"}};
    st |= gguf_set_arr_str(w, "a.str", strs, 3);
    st |= gguf_set_u32(w, "t.replaced", 1);
    st |= gguf_set_u32(w, "t.replaced", 2); /* keeps its position, new value */
    if (st) {
        gguf_writer_free(w);
        return TND_ERR_INTERNAL;
    }
    /* One tensor of every known type, shape (2 blocks, 3 rows). */
    uint8_t seed = 7;
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        int64_t bs;
        size_t ts;
        if (!gguf_type_size(t, &bs, &ts)) continue;
        char name[64];
        snprintf(name, sizeof name, "t.%s", gguf_type_name(t));
        int64_t ne[2] = {2 * bs, 3};
        if (t % 2) st = gguf_add_tensor_fill(w, name, (tnd_type)t, 2, ne, fill_pattern, &seed);
        else {
            size_t n = 2 * ts * 3;
            uint8_t *d = malloc(n);
            fill_pattern(&seed, 0, d, n);
            st = gguf_add_tensor(w, name, (tnd_type)t, 2, ne, d);
            free(d);
        }
        if (st) break;
    }
    if (!st) st = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return st;
}

static void test_round_trip(void) {
    const char *path = tmp_path("sample.gguf");
    CHECK(write_sample(path, 64) == TND_OK);
    tnd_gguf *g = NULL;
    tnd_status st = tnd_gguf_open(path, &g);
    CHECK(st == TND_OK);
    if (st) {
        fprintf(stderr, "%s\n", tnd_last_error());
        return;
    }
    CHECK(gguf_version(g) == 3);
    CHECK(gguf_alignment(g) == 64);
    CHECK(gguf_data_offset(g) % 64 == 0);
    CHECK(!strcmp(gguf_path(g), path));
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == gguf_file_size(g));

    /* Key order is insertion order; the replaced key kept its slot. */
    const char *order[] = {"general.architecture", "general.alignment", "t.u8", "t.i8", "t.u16", "t.i16",
                           "t.u32", "t.i32", "t.u64", "t.i64", "t.f32", "t.f64", "t.bool", "t.str",
                           "t.bytes", "t.empty", "a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32",
                           "a.u64", "a.i64", "a.f32", "a.f64", "a.bool", "a.empty", "a.str", "t.replaced"};
    CHECK(gguf_n_kv(g) == (int64_t)TND_ARRAY_LEN(order));
    for (size_t i = 0; i < TND_ARRAY_LEN(order) && i < (size_t)gguf_n_kv(g); i++) {
        CHECK(gguf_str_eq(gguf_kv_at(g, (int64_t)i)->key, order[i]));
        CHECK(gguf_find(g, order[i]) == gguf_kv_at(g, (int64_t)i));
    }
    CHECK(gguf_kv_at(g, -1) == NULL && gguf_kv_at(g, gguf_n_kv(g)) == NULL);
    CHECK(gguf_find(g, "missing") == NULL);

    CHECK(gguf_find(g, "t.u8")->type == GGUF_UINT8 && gguf_find(g, "t.u8")->v.u64 == 200);
    CHECK(gguf_find(g, "t.i8")->type == GGUF_INT8 && gguf_find(g, "t.i8")->v.i64 == -100);
    CHECK(gguf_find(g, "t.u16")->type == GGUF_UINT16 && gguf_find(g, "t.u16")->v.u64 == 60000);
    CHECK(gguf_find(g, "t.i16")->type == GGUF_INT16 && gguf_find(g, "t.i16")->v.i64 == -30000);
    CHECK(gguf_find(g, "t.u32")->type == GGUF_UINT32 && gguf_find(g, "t.u32")->v.u64 == 4000000000u);
    CHECK(gguf_find(g, "t.i32")->type == GGUF_INT32 && gguf_find(g, "t.i32")->v.i64 == -2000000000);
    CHECK(gguf_find(g, "t.u64")->type == GGUF_UINT64 && gguf_find(g, "t.u64")->v.u64 == UINT64_MAX - 5);
    CHECK(gguf_find(g, "t.i64")->type == GGUF_INT64 && gguf_find(g, "t.i64")->v.i64 == INT64_MIN + 3);
    CHECK(gguf_find(g, "t.f32")->type == GGUF_FLOAT32 && gguf_find(g, "t.f32")->v.f64 == 0.15625);
    CHECK(gguf_find(g, "t.f64")->type == GGUF_FLOAT64 && gguf_find(g, "t.f64")->v.f64 == -1.0e200);
    CHECK(gguf_find(g, "t.bool")->type == GGUF_BOOL && gguf_find(g, "t.bool")->v.b);
    CHECK(gguf_find(g, "t.replaced")->v.u64 == 2);
    const gguf_kv *kb = gguf_find(g, "t.bytes");
    CHECK(kb->type == GGUF_STRING && kb->v.str.len == 7 && !memcmp(kb->v.str.ptr, "a\0b\xff\n\"\\", 7));
    CHECK(gguf_find(g, "t.empty")->v.str.len == 0);

    /* Typed getters: widening, range checks, type errors. */
    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f = 0;
    bool b = false;
    gguf_str s;
    CHECK(gguf_get_u32(g, "t.u8", &u32) && u32 == 200);
    CHECK(gguf_get_u32(g, "t.u32", &u32) && u32 == 4000000000u);
    u32 = 5;
    CHECK(!gguf_get_u32(g, "t.i8", &u32) && u32 == 5 && strstr(tnd_last_error(), "t.i8"));
    CHECK(!gguf_get_u32(g, "t.u64", &u32) && u32 == 5);
    CHECK(!gguf_get_u32(g, "missing", &u32) && u32 == 5);
    CHECK(!gguf_get_u32(g, "t.str", &u32) && strstr(tnd_last_error(), "t.str") && strstr(tnd_last_error(), "string"));
    CHECK(gguf_get_i64(g, "t.i64", &i64) && i64 == INT64_MIN + 3);
    CHECK(gguf_get_i64(g, "t.u32", &i64) && i64 == 4000000000);
    CHECK(!gguf_get_i64(g, "t.u64", &i64));
    CHECK(gguf_get_f32(g, "t.f32", &f) && f == 0.15625f);
    CHECK(gguf_get_f32(g, "t.i16", &f) && f == -30000.0f);
    CHECK(!gguf_get_f32(g, "t.bool", &f));
    CHECK(gguf_get_bool(g, "t.bool", &b) && b);
    CHECK(!gguf_get_bool(g, "t.u8", &b));
    CHECK(gguf_get_str(g, "t.str", &s) && gguf_str_eq(s, "hello, world"));
    CHECK(!gguf_get_str(g, "t.u8", &s));
    char *cs = gguf_get_cstr(g, "t.str");
    CHECK(cs && !strcmp(cs, "hello, world"));
    free(cs);
    CHECK(gguf_get_cstr(g, "missing") == NULL);

    /* Arrays. */
    struct { const char *key; gguf_vtype t; const void *d; } arrs[] = {
        {"a.u8", GGUF_UINT8, u8s}, {"a.i8", GGUF_INT8, i8s}, {"a.u16", GGUF_UINT16, u16s},
        {"a.i16", GGUF_INT16, i16s}, {"a.u32", GGUF_UINT32, u32s}, {"a.i32", GGUF_INT32, i32s},
        {"a.u64", GGUF_UINT64, u64s}, {"a.i64", GGUF_INT64, i64s}, {"a.f32", GGUF_FLOAT32, f32s},
        {"a.f64", GGUF_FLOAT64, f64s}, {"a.bool", GGUF_BOOL, bools}};
    for (size_t i = 0; i < TND_ARRAY_LEN(arrs); i++) {
        const gguf_kv *kv = gguf_find(g, arrs[i].key);
        CHECK(kv && kv->type == GGUF_ARRAY && kv->v.arr.type == arrs[i].t && kv->v.arr.n == 3);
        if (kv) CHECK(!memcmp(kv->v.arr.data, arrs[i].d, 3 * gguf_vtype_size(arrs[i].t)));
    }
    int64_t e = 0;
    double d = 0;
    CHECK(gguf_arr_i64(gguf_find(g, "a.i32"), 0, &e) && e == INT32_MIN);
    CHECK(gguf_arr_i64(gguf_find(g, "a.u16"), 1, &e) && e == 65535);
    CHECK(!gguf_arr_i64(gguf_find(g, "a.u64"), 1, &e));
    CHECK(!gguf_arr_i64(gguf_find(g, "a.u64"), 3, &e));
    CHECK(!gguf_arr_i64(gguf_find(g, "a.f32"), 0, &e));
    CHECK(gguf_arr_f64(gguf_find(g, "a.f32"), 0, &d) && d == 1.5);
    CHECK(gguf_arr_f64(gguf_find(g, "a.f64"), 2, &d) && d == 3.141592653589793);
    CHECK(gguf_arr_f64(gguf_find(g, "a.i8"), 0, &d) && d == -128);
    CHECK(!gguf_arr_f64(gguf_find(g, "t.u8"), 0, &d));
    const gguf_kv *ae = gguf_find(g, "a.empty");
    CHECK(ae && ae->type == GGUF_ARRAY && ae->v.arr.type == GGUF_INT32 && ae->v.arr.n == 0);
    const gguf_kv *as = gguf_find(g, "a.str");
    CHECK(as && as->v.arr.type == GGUF_STRING && as->v.arr.n == 3 && as->v.arr.strs);
    if (as && as->v.arr.strs) {
        CHECK(gguf_str_eq(as->v.arr.strs[0], "abc"));
        CHECK(as->v.arr.strs[1].len == 0);
        CHECK(gguf_str_eq(as->v.arr.strs[2], "\xe2\x96\x81x"));
    }

    /* Tensors: insertion order, aligned offsets, exact sizes, data. */
    int64_t k = 0;
    uint64_t prev_end = 0;
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        int64_t bs;
        size_t ts;
        if (!gguf_type_size(t, &bs, &ts)) continue;
        const gguf_tensor *tt = gguf_tensor_at(g, k++);
        char name[64];
        snprintf(name, sizeof name, "t.%s", gguf_type_name(t));
        CHECK(tt && gguf_str_eq(tt->name, name));
        if (!tt) continue;
        CHECK(gguf_find_tensor(g, name) == tt);
        CHECK((int)tt->type == t && tt->n_dims == 2 && tt->ne[0] == 2 * bs && tt->ne[1] == 3 && tt->ne[2] == 1 &&
              tt->ne[3] == 1);
        CHECK(tt->nbytes == 6 * ts);
        CHECK(tt->offset % 64 == 0 && tt->offset >= prev_end);
        prev_end = tt->offset + tt->nbytes;
        CHECK((const uint8_t *)tt->data == (const uint8_t *)gguf_tensor_at(g, 0)->data + tt->offset);
        uint8_t seed = 7, *want = malloc(tt->nbytes);
        fill_pattern(&seed, 0, want, tt->nbytes);
        CHECK(!memcmp(tt->data, want, tt->nbytes));
        free(want);
    }
    CHECK(gguf_n_tensors(g) == k && k == 32);
    CHECK(gguf_tensor_at(g, k) == NULL && gguf_find_tensor(g, "nope") == NULL);
    CHECK(gguf_data_offset(g) + prev_end <= gguf_file_size(g));

    /* copy_kvs by prefix into a new file, read back. */
    gguf_writer *w = gguf_writer_new();
    CHECK(gguf_copy_kvs(w, g, "a.") == TND_OK);
    CHECK(gguf_copy_kvs(w, g, "t.bytes") == TND_OK);
    const char *p2 = tmp_path("copy.gguf");
    CHECK(gguf_writer_write(w, p2, NULL, NULL) == TND_OK);
    gguf_writer_free(w);
    tnd_gguf *g2 = NULL;
    CHECK(tnd_gguf_open(p2, &g2) == TND_OK);
    if (g2) {
        CHECK(gguf_n_kv(g2) == 14 && gguf_n_tensors(g2) == 0);
        for (int64_t i = 0; i < gguf_n_kv(g2); i++) {
            const gguf_kv *a = gguf_kv_at(g2, i), *o = NULL;
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)a->key.len, a->key.ptr);
            o = gguf_find(g, key);
            CHECK(o && o->type == a->type);
            if (!o || o->type != a->type) continue;
            if (a->type == GGUF_STRING)
                CHECK(a->v.str.len == o->v.str.len && !memcmp(a->v.str.ptr, o->v.str.ptr, a->v.str.len));
            else if (a->v.arr.type == GGUF_STRING)
                for (uint64_t j = 0; j < a->v.arr.n; j++)
                    CHECK(a->v.arr.strs[j].len == o->v.arr.strs[j].len &&
                          !memcmp(a->v.arr.strs[j].ptr, o->v.arr.strs[j].ptr, a->v.arr.strs[j].len));
            else
                CHECK(a->v.arr.n == o->v.arr.n && (a->v.arr.n == 0 || !memcmp(a->v.arr.data, o->v.arr.data,
                                                                            a->v.arr.n * gguf_vtype_size(a->v.arr.type))));
        }
        tnd_gguf_free(g2);
    }
    tnd_gguf_free(g);
}

static int count_dir_entries(const char *prefix) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void prog(void *u, uint64_t done, uint64_t total) {
    ((uint64_t *)u)[0] = done;
    ((uint64_t *)u)[1] = total;
}

static void test_writer_failures(void) {
    /* A failing fill leaves neither the final file nor a temporary one. */
    gguf_writer *w = gguf_writer_new();
    int64_t ne[1] = {1 << 20}; /* 4 MiB of F32: several fill chunks */
    CHECK(gguf_add_tensor_fill(w, "big", TND_TYPE_F32, 1, ne, fill_fails, NULL) == TND_OK);
    const char *p = tmp_path("failing.gguf");
    tnd_status st = gguf_writer_write(w, p, NULL, NULL);
    CHECK(st != TND_OK && strstr(tnd_last_error(), "synthetic failure") && strstr(tnd_last_error(), "big"));
    CHECK(access(p, F_OK) != 0);
    CHECK(count_dir_entries("failing.gguf") == 0);
    gguf_writer_free(w);

    /* An existing file is not touched by a failed write. */
    FILE *f = fopen(p, "wb");
    fputs("old", f);
    fclose(f);
    w = gguf_writer_new();
    CHECK(gguf_add_tensor_fill(w, "big", TND_TYPE_F32, 1, ne, fill_fails, NULL) == TND_OK);
    CHECK(gguf_writer_write(w, p, NULL, NULL) != TND_OK);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && sb.st_size == 3);
    CHECK(count_dir_entries("failing.gguf") == 1);
    gguf_writer_free(w);

    /* Bad arguments. */
    w = gguf_writer_new();
    int64_t ne2[2] = {33, 1};
    CHECK(gguf_add_tensor(w, "q", TND_TYPE_Q4_0, 2, ne2, "") == TND_ERR_ARG); /* not a block multiple */
    int64_t ne3[1] = {4};
    float x[4] = {1, 2, 3, 4};
    CHECK(gguf_add_tensor(w, "x", TND_TYPE_F32, 1, ne3, x) == TND_OK);
    CHECK(gguf_add_tensor(w, "x", TND_TYPE_F32, 1, ne3, x) == TND_ERR_ARG && strstr(tnd_last_error(), "duplicate"));
    CHECK(gguf_add_tensor(w, "y", TND_TYPE_F32, 0, ne3, x) == TND_ERR_ARG);
    CHECK(gguf_add_tensor(w, "y", (tnd_type)4, 1, ne3, x) == TND_ERR_ARG);
    CHECK(gguf_set_arr(w, "k", GGUF_STRING, x, 1) == TND_ERR_ARG);
    CHECK(gguf_set_arr(w, "k", GGUF_ARRAY, x, 1) == TND_ERR_ARG);
    CHECK(gguf_writer_write(w, tmp_path("no-such-dir/x.gguf"), NULL, NULL) == TND_ERR_IO);
    gguf_writer_set_alignment(w, 48);
    CHECK(gguf_writer_write(w, tmp_path("bad-align.gguf"), NULL, NULL) == TND_ERR_ARG &&
          strstr(tnd_last_error(), "48"));
    CHECK(access(tmp_path("bad-align.gguf"), F_OK) != 0);
    gguf_writer_free(w);
    gguf_writer_free(NULL);

    /* Progress reaches the total, which is the file size. */
    w = gguf_writer_new();
    CHECK(gguf_add_tensor(w, "x", TND_TYPE_F32, 1, ne3, x) == TND_OK);
    uint64_t last[2] = {0, 0};
    CHECK(gguf_writer_write(w, tmp_path("prog.gguf"), prog, last) == TND_OK);
    CHECK(stat(tmp_path("prog.gguf"), &sb) == 0 && last[0] == last[1] && last[1] == (uint64_t)sb.st_size);
    gguf_writer_free(w);
}

/* ---- malformed files ----------------------------------------------------- */

/* A small valid file whose last byte belongs to the last tensor, so every
 * proper prefix is invalid. */
static void valid_small(bb *b) {
    hdr(b, 3, 2, 3);
    kv_str(b, "general.architecture", "llama");
    bb_str(b, "tokenizer.ggml.tokens");
    bb_u32(b, GGUF_ARRAY);
    bb_u32(b, GGUF_STRING);
    bb_u64(b, 2);
    bb_str(b, "a");
    bb_str(b, "bc");
    bb_str(b, "scores");
    bb_u32(b, GGUF_ARRAY);
    bb_u32(b, GGUF_FLOAT32);
    bb_u64(b, 2);
    bb_u32(b, 0);
    bb_u32(b, 0x3f800000);
    tinfo(b, "w", 2, (uint64_t[]){32, 2}, TND_TYPE_Q8_0, 0);
    tinfo(b, "n", 1, (uint64_t[]){8}, TND_TYPE_F32, 96);
    bb_pad(b, 32);
    bb_zeros(b, 128);
}

static void test_truncation(void) {
    bb b = {0};
    valid_small(&b);
    expect_ok(&b);
    size_t full = b.n;
    int bad = 0;
    for (size_t n = 0; n < full; n++) {
        bb t = {b.p, n, n};
        tnd_gguf *g;
        tnd_status st = open_bb(&t, &g);
        if (st == TND_OK || !strstr(tnd_last_error(), "bad.gguf")) {
            if (!bad++) fprintf(stderr, "truncated at %zu: %s\n", n, st ? tnd_last_error() : "opened");
        }
    }
    CHECK(bad == 0);
    /* On disk too (mmap path): a few prefixes, and the empty file. */
    size_t cuts[] = {0, 3, 23, 24, 40, full / 2, full - 1};
    for (size_t i = 0; i < TND_ARRAY_LEN(cuts); i++) {
        const char *p = tmp_path("trunc.gguf");
        FILE *f = fopen(p, "wb");
        fwrite(b.p, 1, cuts[i], f);
        fclose(f);
        tnd_gguf *g = NULL;
        CHECK(tnd_gguf_open(p, &g) == TND_ERR_FORMAT && strstr(tnd_last_error(), p));
    }
    free(b.p);
}

static void test_malformed(void) {
    bb b = {0};
    uint64_t ne1[1] = {8};

    /* magic, version, endianness */
    valid_small(&b);
    memcpy(b.p, "GGUX", 4);
    expect_fail(&b, TND_ERR_FORMAT, "magic", "GGUX");
    valid_small(&b);
    b.p[4] = 1;
    expect_fail(&b, TND_ERR_UNSUPPORTED, "version 1", NULL);
    valid_small(&b);
    b.p[4] = 99;
    expect_fail(&b, TND_ERR_UNSUPPORTED, "version 99", NULL);
    valid_small(&b);
    b.p[4] = 0, b.p[7] = 3;
    expect_fail(&b, TND_ERR_UNSUPPORTED, "big-endian", NULL);
    valid_small(&b);
    b.p[4] = 2; /* version 2 has the same layout */
    expect_ok(&b);

    /* huge counts */
    hdr(&b, 3, 0, 1ull << 60);
    kv_u32(&b, "a", 1);
    expect_fail(&b, TND_ERR_FORMAT, "metadata count", "1152921504606846976");
    hdr(&b, 3, UINT64_MAX, 0);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "tensor count", "18446744073709551615");
    hdr(&b, 3, 3, 0); /* 3 tensor infos cannot fit in 64 bytes */
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "tensor count", NULL);

    /* string lengths */
    hdr(&b, 3, 0, 1);
    bb_u64(&b, 1000); /* key length past EOF */
    bb_raw(&b, "abcdefgh", 8);
    expect_fail(&b, TND_ERR_FORMAT, "key of metadata entry 0", "past the end");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.s");
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, UINT64_MAX); /* value length: overflow-safe check */
    bb_zeros(&b, 8);
    expect_fail(&b, TND_ERR_FORMAT, "k.s", "past the end");

    /* arrays */
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.arr");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_UINT64);
    bb_u64(&b, 1ull << 61); /* n * 8 overflows */
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_FORMAT, "k.arr", "past the end");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.arr");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_INT32);
    bb_u64(&b, 5); /* 20 bytes needed, 16 present */
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_FORMAT, "k.arr", "past the end");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.sarr");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, UINT64_MAX / 2);
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_FORMAT, "k.sarr", "string array");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.sarr");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "x");
    bb_u64(&b, 99); /* element 1 past EOF */
    bb_zeros(&b, 8);
    expect_fail(&b, TND_ERR_FORMAT, "element 1", "k.sarr");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.nest");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_UNSUPPORTED, "k.nest", "nested");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.badel");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, 13);
    bb_u64(&b, 1);
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_FORMAT, "k.badel", "unknown element type 13");
    hdr(&b, 3, 0, 1);
    bb_str(&b, "k.badtype");
    bb_u32(&b, 77);
    bb_zeros(&b, 16);
    expect_fail(&b, TND_ERR_FORMAT, "k.badtype", "unknown value type 77");

    /* duplicate key; message keeps arbitrary key bytes printable */
    hdr(&b, 3, 0, 2);
    kv_u32(&b, "dup.key", 1);
    kv_str(&b, "dup.key", "x");
    expect_fail(&b, TND_ERR_FORMAT, "duplicate key 'dup.key'", NULL);
    hdr(&b, 3, 0, 2);
    kv_u32(&b, "k\n\x01", 1);
    kv_u32(&b, "k\n\x01", 1);
    expect_fail(&b, TND_ERR_FORMAT, "duplicate key 'k\\x0a\\x01'", NULL);

    /* alignment */
    uint32_t bad_al[] = {0, 48, 3};
    for (size_t i = 0; i < TND_ARRAY_LEN(bad_al); i++) {
        hdr(&b, 3, 0, 1);
        kv_u32(&b, "general.alignment", bad_al[i]);
        char want[32];
        snprintf(want, sizeof want, "is %u", bad_al[i]);
        expect_fail(&b, TND_ERR_FORMAT, "general.alignment", want);
    }
    hdr(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_UINT64);
    bb_u64(&b, 32);
    expect_fail(&b, TND_ERR_FORMAT, "general.alignment", "uint32");
    hdr(&b, 3, 1, 1); /* alignment 64 honoured: offset 32 is misaligned */
    kv_u32(&b, "general.alignment", 64);
    tinfo(&b, "t64", 1, ne1, TND_TYPE_F32, 32);
    bb_pad(&b, 64);
    bb_zeros(&b, 128);
    expect_fail(&b, TND_ERR_FORMAT, "t64", "alignment 64");

    /* tensor dims */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.nd0", 0, ne1, TND_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.nd0", "n_dims 0");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.nd5", 5, (uint64_t[]){1, 1, 1, 1, 1}, TND_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.nd5", "n_dims 5");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.ne0", 2, (uint64_t[]){8, 0}, TND_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.ne0", "ne[1] is 0");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.neg", 1, (uint64_t[]){(uint64_t)-5}, TND_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.neg", "ne[0] is -5");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.ovf", 4, (uint64_t[]){1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20}, TND_TYPE_I8, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.ovf", "overflow");
    hdr(&b, 3, 1, 0); /* elements fit int64, bytes do not */
    tinfo(&b, "t.ovb", 2, (uint64_t[]){1ull << 31, 1ull << 31}, TND_TYPE_F64, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.ovb", "overflow");

    /* types */
    uint32_t bad_types[] = {4, 5, 31, 36, 40, 1000};
    for (size_t i = 0; i < TND_ARRAY_LEN(bad_types); i++) {
        hdr(&b, 3, 1, 0);
        tinfo(&b, "t.type", 1, ne1, bad_types[i], 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 64);
        char want[40];
        snprintf(want, sizeof want, "unknown type id %u", bad_types[i]);
        expect_fail(&b, TND_ERR_FORMAT, "t.type", want);
    }
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.blk", 2, (uint64_t[]){48, 2}, TND_TYPE_Q4_0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(&b, TND_ERR_FORMAT, "t.blk", "not a multiple of the Q4_0 block size 32");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.blkk", 1, (uint64_t[]){128}, TND_TYPE_Q4_K, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 256);
    expect_fail(&b, TND_ERR_FORMAT, "t.blkk", "block size 256");

    /* offsets */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.mis", 1, ne1, TND_TYPE_F32, 4);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.mis", "offset 4 is not a multiple of the alignment 32");
    hdr(&b, 3, 1, 0);
    tinfo(&b, "blk.0.attn_q.weight", 1, ne1, TND_TYPE_F32, 64);
    bb_pad(&b, 32);
    size_t data_at = b.n;
    bb_zeros(&b, 64);
    char want[160];
    snprintf(want, sizeof want, "tensor 'blk.0.attn_q.weight' data [offset %zu, 32 bytes] extends past end of file (size %zu)",
             data_at + 64, b.n);
    expect_fail(&b, TND_ERR_FORMAT, want, NULL);
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t.far", 1, ne1, TND_TYPE_F32, UINT64_MAX - 31); /* offset + size overflows */
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "t.far", "past end of file");
    hdr(&b, 3, 1, 0); /* data section itself past EOF */
    tinfo(&b, "t.nodat", 1, ne1, TND_TYPE_F32, 0); /* infos end at byte 63 */
    CHECK(b.n == 63);
    expect_fail(&b, TND_ERR_FORMAT, "data section", "starts past the end");
    hdr(&b, 3, 2, 0);
    tinfo(&b, "t.a", 1, (uint64_t[]){16}, TND_TYPE_F32, 0);
    tinfo(&b, "t.b", 1, ne1, TND_TYPE_F32, 32); /* t.a covers [0, 64) */
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(&b, TND_ERR_FORMAT, "overlap", "'t.a'");
    hdr(&b, 3, 2, 0);
    tinfo(&b, "t.b", 1, ne1, TND_TYPE_F32, 0);
    tinfo(&b, "t.a", 1, ne1, TND_TYPE_F32, 0); /* same offset */
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(&b, TND_ERR_FORMAT, "overlap", "'t.b'");
    hdr(&b, 3, 2, 0); /* out of order but disjoint: fine */
    tinfo(&b, "t.b", 1, ne1, TND_TYPE_F32, 32);
    tinfo(&b, "t.a", 1, ne1, TND_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_ok(&b);
    hdr(&b, 3, 2, 0);
    tinfo(&b, "same", 1, ne1, TND_TYPE_F32, 0);
    tinfo(&b, "same", 1, ne1, TND_TYPE_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail(&b, TND_ERR_FORMAT, "duplicate tensor name 'same'", NULL);

    /* vocab-only: no tensors, file ends right after the metadata */
    hdr(&b, 3, 0, 1);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    expect_ok(&b);
    hdr(&b, 3, 0, 0);
    expect_ok(&b);
    free(b.p);

    /* files */
    tnd_gguf *g = NULL;
    CHECK(tnd_gguf_open(tmp_path("does-not-exist.gguf"), &g) == TND_ERR_IO &&
          strstr(tnd_last_error(), "does-not-exist.gguf"));
    CHECK(tnd_gguf_open(g_dir, &g) == TND_ERR_IO && strstr(tnd_last_error(), "not a regular file"));
    CHECK(gguf_open_memory(NULL, 0, "empty", &g) == TND_ERR_FORMAT && strstr(tnd_last_error(), "empty"));
    tnd_gguf_free(NULL);
}

/* The real files: vocab files and the default model open, and every tensor is
 * found by name. Cross-checking values against gguf-py is test_info.py's. */
static void test_real_files(void) {
    const char *src = getenv("TND_SRC");
    char paths[8][1024];
    int n = 0;
    const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"};
    for (size_t i = 0; i < TND_ARRAY_LEN(names); i++) {
        snprintf(paths[n], sizeof paths[n], "%s/../shared/testdata/vocab/%s", src ? src : ".", names[i]);
        if (access(paths[n], R_OK)) snprintf(paths[n], sizeof paths[n], "/work/shared/testdata/vocab/%s", names[i]);
        if (!access(paths[n], R_OK)) n++;
    }
    snprintf(paths[n], sizeof paths[n], "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    if (!access(paths[n], R_OK)) n++;
    for (int i = 0; i < n; i++) {
        tnd_gguf *g = NULL;
        tnd_status st = tnd_gguf_open(paths[i], &g);
        CHECK(st == TND_OK);
        if (st) {
            fprintf(stderr, "%s\n", tnd_last_error());
            continue;
        }
        const gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
        CHECK(toks && toks->type == GGUF_ARRAY && toks->v.arr.type == GGUF_STRING && toks->v.arr.n > 1000);
        for (int64_t t = 0; t < gguf_n_tensors(g); t++) {
            const gguf_tensor *tt = gguf_tensor_at(g, t);
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)tt->name.len, tt->name.ptr);
            CHECK(gguf_find_tensor(g, name) == tt);
        }
        printf("ok: %s (%lld keys, %lld tensors)\n", paths[i], (long long)gguf_n_kv(g), (long long)gguf_n_tensors(g));
        tnd_gguf_free(g);
    }
}

/* The reader's size table agrees with the quant module's traits. */
static void test_type_table(void) {
    for (int t = -1; t <= TND_TYPE_COUNT + 1; t++) {
        int64_t bs = 0;
        size_t ts = 0;
        bool known = gguf_type_size(t, &bs, &ts);
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        CHECK(known == (tr != NULL));
        if (known && tr) {
            CHECK(tr->block_size == bs && tr->type_size == ts);
            CHECK(!strcmp(tr->name, gguf_type_name(t)));
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-sample")) {
        tnd_status st = write_sample(argv[2], 32);
        if (st) fprintf(stderr, "write failed: %s\n", tnd_last_error());
        return st ? 1 : 0;
    }
    const char *base = getenv("TND_BUILD");
    snprintf(g_dir, sizeof g_dir, "%s/test_gguf.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_type_table();
    test_round_trip();
    test_writer_failures();
    test_truncation();
    test_malformed();
    test_real_files();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tc_summary();
}
