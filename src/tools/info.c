/* tandem info FILE [--json]: a GGUF file's header, model summary, tokenizer
 * summary, full metadata, tensor table and totals.
 *
 * Text output summarizes long arrays ("[string x 49152]") and truncates long
 * strings; --json prints one object with every value in full. JSON strings
 * are valid UTF-8 only where the file's bytes are: each byte that is not part
 * of a valid UTF-8 sequence is written as \udcXX (the PEP 383 convention, so
 * Python's .encode("utf-8", "surrogateescape") gives the exact bytes back). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tools.h"
#include "util.h"

/* Writes bytes as the inside of a quoted string, with C-like escapes
 * (invalid bytes as \xNN). At most max bytes of input are shown (then
 * "..."); max 0 means all. JSON strings: tnd_json_str. */
static void put_escaped(FILE *f, const char *s, uint64_t n, uint64_t max) {
    const unsigned char *p = (const unsigned char *)s;
    uint64_t i = 0;
    while (i < n) {
        if (max && i >= max) {
            fputs("...", f);
            return;
        }
        unsigned c = p[i];
        size_t l = tnd_utf8_seq_len(p + i, (size_t)(n - i < 8 ? n - i : 8));
        if (l > 1) {
            fwrite(p + i, 1, l, f);
            i += l;
            continue;
        }
        i++;
        if (l == 0) {
            fprintf(f, "\\x%02x", c);
            continue;
        }
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
            else fputc((int)c, f);
        }
    }
}

static void put_jstr(FILE *f, const char *s, uint64_t n) { tnd_json_str(f, s, (size_t)n); }
static void put_jcstr(FILE *f, const char *s) { put_jstr(f, s, strlen(s)); }

/* JSON: %.17g (exact). Text: the shortest form that reads back as the same
 * float (f32) or double. */
static void put_double(FILE *f, double d, bool json, bool is_f32) {
    if (isfinite(d) && !json) {
        char b[40];
        for (int prec = is_f32 ? 6 : 15; prec <= 17; prec++) {
            snprintf(b, sizeof b, "%.*g", prec, d);
            double r = strtod(b, NULL);
            if (is_f32 ? (float)r == (float)d : r == d) break;
        }
        fputs(b, f);
    } else if (isfinite(d)) fprintf(f, "%.17g", d);
    else if (json) fputs("null", f); /* JSON has no NaN or infinity */
    else fputs(isnan(d) ? "nan" : d > 0 ? "inf" : "-inf", f);
}

static void put_scalar(FILE *f, const gguf_kv *kv, bool json) {
    switch (kv->type) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        fprintf(f, "%llu", (unsigned long long)kv->v.u64);
        break;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        fprintf(f, "%lld", (long long)kv->v.i64);
        break;
    case GGUF_FLOAT32: case GGUF_FLOAT64: put_double(f, kv->v.f64, json, kv->type == GGUF_FLOAT32); break;
    case GGUF_BOOL: fputs(kv->v.b ? "true" : "false", f); break;
    default: break;
    }
}

/* Element i of a non-string array. */
static void put_arr_elem(FILE *f, const gguf_kv *kv, uint64_t i, bool json) {
    gguf_vtype t = kv->v.arr.type;
    if (t == GGUF_FLOAT32 || t == GGUF_FLOAT64) {
        double d = 0;
        gguf_arr_f64(kv, i, &d);
        put_double(f, d, json, t == GGUF_FLOAT32);
    } else if (t == GGUF_UINT64) {
        const uint8_t *p = (const uint8_t *)kv->v.arr.data + i * 8;
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--) v = (v << 8) | p[b];
        fprintf(f, "%llu", (unsigned long long)v);
    } else if (t == GGUF_BOOL) {
        fputs(((const uint8_t *)kv->v.arr.data)[i] ? "true" : "false", f);
    } else {
        int64_t v = 0;
        gguf_arr_i64(kv, i, &v);
        fprintf(f, "%lld", (long long)v);
    }
}

/* Text form of a value: short arrays in full, long ones as "[type x N]". */
static void put_value_text(FILE *f, const gguf_kv *kv) {
    if (kv->type == GGUF_STRING) {
        fputc('"', f);
        put_escaped(f, kv->v.str.ptr, kv->v.str.len, 80);
        fputc('"', f);
    } else if (kv->type == GGUF_ARRAY) {
        uint64_t n = kv->v.arr.n;
        if (n > 8) {
            fprintf(f, "[%s x %llu]", gguf_vtype_name(kv->v.arr.type), (unsigned long long)n);
            return;
        }
        fputc('[', f);
        for (uint64_t i = 0; i < n; i++) {
            if (i) fputs(", ", f);
            if (kv->v.arr.type == GGUF_STRING) {
                fputc('"', f);
                put_escaped(f, kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len, 40);
                fputc('"', f);
            } else put_arr_elem(f, kv, i, false);
        }
        fputc(']', f);
    } else put_scalar(f, kv, false);
}

static void put_value_json(FILE *f, const gguf_kv *kv) {
    if (kv->type == GGUF_STRING) put_jstr(f, kv->v.str.ptr, kv->v.str.len);
    else if (kv->type == GGUF_ARRAY) {
        fputc('[', f);
        for (uint64_t i = 0; i < kv->v.arr.n; i++) {
            if (i) fputc(',', f);
            if (kv->v.arr.type == GGUF_STRING) put_jstr(f, kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len);
            else put_arr_elem(f, kv, i, true);
        }
        fputc(']', f);
    } else put_scalar(f, kv, true);
}

static bool key_has_prefix(gguf_str k, const char *p, size_t pl) {
    return k.len > pl && !memcmp(k.ptr, p, pl);
}

typedef struct {
    uint64_t count, bytes;
} type_total;

static void usage(FILE *f) {
    fputs("usage: tandem info FILE [--json]\n\n"
          "Validates a GGUF file and prints its header, model and tokenizer summary,\n"
          "every metadata key, the tensor table and totals per type.\n\n"
          "  --json      one JSON object with the same content, values in full\n"
          "  -h, --help  this help\n",
          f);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return tools_bad_option("info", argv[i], true, usage);
        } else if (path) {
            fprintf(stderr, "tandem info: more than one FILE given\n\n");
            usage(stderr);
            return 2;
        } else path = argv[i];
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    tnd_gguf *g = NULL;
    if (tnd_gguf_open(path, &g) != TND_OK) {
        tools_print_error(NULL);
        return 1;
    }
    FILE *f = stdout;

    type_total totals[TND_TYPE_COUNT] = {{0, 0}};
    uint64_t n_params = 0, n_bytes = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        uint64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= (uint64_t)t->ne[d]; /* validated: no overflow */
        n_params += ne;
        n_bytes += t->nbytes;
        totals[t->type].count++;
        totals[t->type].bytes += t->nbytes;
    }
    gguf_str arch = {0, NULL}, name = {0, NULL};
    const gguf_kv *ak = gguf_find(g, "general.architecture");
    if (ak && ak->type == GGUF_STRING) arch = ak->v.str;
    const gguf_kv *nk = gguf_find(g, "general.name");
    if (nk && nk->type == GGUF_STRING) name = nk->v.str;
    char prefix[256] = "";
    if (arch.len && arch.len < 200) snprintf(prefix, sizeof prefix, "%.*s.", (int)arch.len, arch.ptr);
    size_t pl = strlen(prefix);

    const gguf_kv *tok_model = gguf_find(g, "tokenizer.ggml.model"), *tok_pre = gguf_find(g, "tokenizer.ggml.pre"),
                  *tokens = gguf_find(g, "tokenizer.ggml.tokens"), *merges = gguf_find(g, "tokenizer.ggml.merges"),
                  *tmpl = gguf_find(g, "tokenizer.chat_template"),
                  *bos = gguf_find(g, "tokenizer.ggml.bos_token_id"),
                  *eos = gguf_find(g, "tokenizer.ggml.eos_token_id");
    int64_t vocab = tokens && tokens->type == GGUF_ARRAY ? (int64_t)tokens->v.arr.n : -1;
    int64_t n_merges = merges && merges->type == GGUF_ARRAY ? (int64_t)merges->v.arr.n : -1;

    if (json) {
        fputs("{\"file\":", f);
        put_jcstr(f, path);
        fprintf(f, ",\"version\":%u,\"size\":%llu,\"alignment\":%llu,\"data_offset\":%llu", gguf_version(g),
                (unsigned long long)gguf_file_size(g), (unsigned long long)gguf_alignment(g),
                (unsigned long long)gguf_data_offset(g));
        fputs(",\"architecture\":", f);
        if (arch.ptr) put_jstr(f, arch.ptr, arch.len);
        else fputs("null", f);
        fputs(",\"name\":", f);
        if (name.ptr) put_jstr(f, name.ptr, name.len);
        else fputs("null", f);
        fputs(",\"hparams\":{", f);
        bool first = true;
        for (int64_t i = 0; pl && i < gguf_n_kv(g); i++) {
            const gguf_kv *kv = gguf_kv_at(g, i);
            if (!key_has_prefix(kv->key, prefix, pl)) continue;
            if (!first) fputc(',', f);
            first = false;
            put_jstr(f, kv->key.ptr + pl, kv->key.len - pl);
            fputc(':', f);
            put_value_json(f, kv);
        }
        fputs("},\"tokenizer\":{\"model\":", f);
        if (tok_model) put_value_json(f, tok_model);
        else fputs("null", f);
        fputs(",\"pre\":", f);
        if (tok_pre) put_value_json(f, tok_pre);
        else fputs("null", f);
        fprintf(f, ",\"vocab_size\":%lld,\"bos_id\":", (long long)vocab);
        if (bos && bos->type != GGUF_ARRAY && bos->type != GGUF_STRING) put_scalar(f, bos, true);
        else fputs("null", f);
        fputs(",\"eos_id\":", f);
        if (eos && eos->type != GGUF_ARRAY && eos->type != GGUF_STRING) put_scalar(f, eos, true);
        else fputs("null", f);
        fprintf(f, ",\"merges\":%lld,\"chat_template\":%s}", (long long)n_merges, tmpl ? "true" : "false");
        fprintf(f, ",\"n_kv\":%lld,\"metadata\":[", (long long)gguf_n_kv(g));
        for (int64_t i = 0; i < gguf_n_kv(g); i++) {
            const gguf_kv *kv = gguf_kv_at(g, i);
            fputs(i ? ",{\"key\":" : "{\"key\":", f);
            put_jstr(f, kv->key.ptr, kv->key.len);
            fprintf(f, ",\"type\":\"%s\"", gguf_vtype_name(kv->type));
            if (kv->type == GGUF_ARRAY)
                fprintf(f, ",\"elem_type\":\"%s\",\"n\":%llu", gguf_vtype_name(kv->v.arr.type),
                        (unsigned long long)kv->v.arr.n);
            fputs(",\"value\":", f);
            put_value_json(f, kv);
            fputc('}', f);
        }
        fprintf(f, "],\"n_tensors\":%lld,\"tensors\":[", (long long)gguf_n_tensors(g));
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            fputs(i ? ",{\"name\":" : "{\"name\":", f);
            put_jstr(f, t->name.ptr, t->name.len);
            fprintf(f, ",\"type\":\"%s\",\"type_id\":%d,\"shape\":[", gguf_type_name(t->type), (int)t->type);
            for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, d ? ",%lld" : "%lld", (long long)t->ne[d]);
            fprintf(f, "],\"bytes\":%llu,\"offset\":%llu,\"file_offset\":%llu}", (unsigned long long)t->nbytes,
                    (unsigned long long)t->offset, (unsigned long long)(t->offset + gguf_data_offset(g)));
        }
        fputs("],\"types\":{", f);
        first = true;
        for (int t = 0; t < TND_TYPE_COUNT; t++) {
            if (!totals[t].count) continue;
            fprintf(f, "%s\"%s\":{\"count\":%llu,\"bytes\":%llu}", first ? "" : ",", gguf_type_name(t),
                    (unsigned long long)totals[t].count, (unsigned long long)totals[t].bytes);
            first = false;
        }
        fprintf(f, "},\"n_params\":%llu,\"tensor_bytes\":%llu}\n", (unsigned long long)n_params,
                (unsigned long long)n_bytes);
    } else {
        fprintf(f, "file:          %s\n", path);
        fprintf(f, "version:       %u\n", gguf_version(g));
        fprintf(f, "size:          %llu bytes (%.2f MiB)\n", (unsigned long long)gguf_file_size(g),
                (double)gguf_file_size(g) / (1024.0 * 1024.0));
        fprintf(f, "alignment:     %llu\n", (unsigned long long)gguf_alignment(g));
        fprintf(f, "data offset:   %llu\n", (unsigned long long)gguf_data_offset(g));
        fputs("architecture:  ", f);
        if (arch.ptr) put_escaped(f, arch.ptr, arch.len, 80);
        else fputs("(none)", f);
        fputs("\nname:          ", f);
        if (name.ptr) put_escaped(f, name.ptr, name.len, 80);
        else fputs("(none)", f);
        fputc('\n', f);
        if (pl) {
            fputs("\nhyperparameters:\n", f);
            for (int64_t i = 0; i < gguf_n_kv(g); i++) {
                const gguf_kv *kv = gguf_kv_at(g, i);
                if (!key_has_prefix(kv->key, prefix, pl)) continue;
                fputs("  ", f);
                put_escaped(f, kv->key.ptr + pl, kv->key.len - pl, 60);
                fputs(" = ", f);
                put_value_text(f, kv);
                fputc('\n', f);
            }
        }
        if (tok_model || tokens) {
            fputs("\ntokenizer:\n  model:         ", f);
            if (tok_model) put_value_text(f, tok_model);
            else fputs("(none)", f);
            fputs("\n  pre-tokenizer: ", f);
            if (tok_pre) put_value_text(f, tok_pre);
            else fputs("(none)", f);
            fprintf(f, "\n  vocab size:    %lld\n  bos id:        ", (long long)vocab);
            if (bos) put_value_text(f, bos);
            else fputs("(none)", f);
            fputs("\n  eos id:        ", f);
            if (eos) put_value_text(f, eos);
            else fputs("(none)", f);
            if (n_merges >= 0) fprintf(f, "\n  merges:        %lld", (long long)n_merges);
            if (tmpl && tmpl->type == GGUF_STRING)
                fprintf(f, "\n  chat template: yes (%llu bytes)", (unsigned long long)tmpl->v.str.len);
            else fputs("\n  chat template: no", f);
            fputc('\n', f);
        }
        fprintf(f, "\nmetadata (%lld keys):\n", (long long)gguf_n_kv(g));
        for (int64_t i = 0; i < gguf_n_kv(g); i++) {
            const gguf_kv *kv = gguf_kv_at(g, i);
            fprintf(f, "  %4lld  ", (long long)i);
            put_escaped(f, kv->key.ptr, kv->key.len, 60);
            if (kv->type == GGUF_ARRAY) fprintf(f, " (array of %s) = ", gguf_vtype_name(kv->v.arr.type));
            else fprintf(f, " (%s) = ", gguf_vtype_name(kv->type));
            put_value_text(f, kv);
            fputc('\n', f);
        }
        fprintf(f, "\ntensors (%lld):\n", (long long)gguf_n_tensors(g));
        if (gguf_n_tensors(g))
            fprintf(f, "  %5s  %-40s %-8s %-26s %12s %12s\n", "index", "name", "type", "shape", "bytes", "offset");
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            char shape[128];
            int o = 0;
            for (uint32_t d = 0; d < t->n_dims; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, d ? " x %lld" : "%lld", (long long)t->ne[d]);
            fprintf(f, "  %5lld  ", (long long)i);
            put_escaped(f, t->name.ptr, t->name.len, 64);
            int pad = 40 - (int)(t->name.len < 64 ? t->name.len : 67);
            fprintf(f, "%*s %-8s %-26s %12llu %12llu\n", pad > 0 ? pad : 0, "", gguf_type_name(t->type), shape,
                    (unsigned long long)t->nbytes, (unsigned long long)(t->offset + gguf_data_offset(g)));
        }
        if (gguf_n_tensors(g)) {
            fputs("\ntotals by type:\n", f);
            for (int t = 0; t < TND_TYPE_COUNT; t++)
                if (totals[t].count)
                    fprintf(f, "  %-8s %6llu tensors %14llu bytes\n", gguf_type_name(t),
                            (unsigned long long)totals[t].count, (unsigned long long)totals[t].bytes);
        }
        fprintf(f, "\nparameters:    %llu (%.1fM)\ntensor bytes:  %llu (%.2f MiB)\n", (unsigned long long)n_params,
                (double)n_params / 1e6, (unsigned long long)n_bytes, (double)n_bytes / (1024.0 * 1024.0));
        fputs("(offsets are file offsets)\n", f);
    }
    tnd_gguf_free(g);
    if (fflush(f) != 0) {
        fprintf(stderr, "tandem: error: writing the output failed\n");
        return 1;
    }
    return 0;
}
