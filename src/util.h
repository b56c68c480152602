/* Shared helpers: error reporting, logging, checked arithmetic, timing. */
#ifndef TND_UTIL_H
#define TND_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem.h"

/* Records a formatted message for tnd_last_error() and returns st, so a
 * failing path reads `return tnd_fail(TND_ERR_FORMAT, "%s: ...", path);`. */
tnd_status tnd_fail(tnd_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with more context ("loading x: " + old). */
tnd_status tnd_fail_wrap(tnd_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tnd_clear_error(void);

/* Log levels; messages go to stderr. TND_LOG env var or tnd_log_set_level. */
enum { TND_LOG_ERROR = 0, TND_LOG_WARN = 1, TND_LOG_INFO = 2, TND_LOG_DEBUG = 3 };
void tnd_log_set_level(int level);
int tnd_log_level(void);
void tnd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TND_WARN(...) tnd_log(TND_LOG_WARN, __VA_ARGS__)
#define TND_INFO(...) tnd_log(TND_LOG_INFO, __VA_ARGS__)
#define TND_DEBUG(...) tnd_log(TND_LOG_DEBUG, __VA_ARGS__)

/* Checked arithmetic: return false on overflow (result then unspecified). */
static inline bool tnd_mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool tnd_add_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }

/* Allocation that reports failure through tnd_fail (returns NULL). */
void *tnd_malloc(size_t n);
void *tnd_calloc(size_t n, size_t size);
/* 64-byte aligned allocation for SIMD buffers; free with tnd_aligned_free. */
void *tnd_aligned_alloc(size_t n);
void tnd_aligned_free(void *p);

/* Opens path for reading; it must be a regular file of at most max_bytes
 * (what names it in messages, e.g. "placement file"). A FIFO, a device, a
 * directory or a socket is refused before anything is read, and opening
 * never blocks (a FIFO without a writer would). *out: a stdio stream. */
tnd_status tnd_open_regular(const char *path, const char *what, uint64_t max_bytes, FILE **out);
/* Reads such a file whole: *out malloc'd, NUL-terminated, *n bytes (the
 * file may not grow past max_bytes while it is read either). */
tnd_status tnd_read_regular(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *n);
/* What kind of file a st_mode is, for messages: "a directory", "a FIFO"... */
const char *tnd_file_kind(unsigned mode);

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 if invalid:
 * overlong forms, surrogates and code points above U+10FFFF are invalid. */
size_t tnd_utf8_seq_len(const unsigned char *p, size_t n);
/* Writes n bytes of s to f as a quoted JSON string: quote, backslash and
 * control characters escaped, valid UTF-8 as is, each invalid byte as
 * \udcXX (Python's surrogateescape: a path's bytes can be recovered). The
 * one JSON string writer of the tools. */
void tnd_json_str(FILE *f, const char *s, size_t n);

/* Monotonic time in seconds. */
double tnd_time_s(void);

/* Number of physical cores (falls back to logical CPUs). */
int tnd_physical_cores(void);
/* The CPU's model name from /proc/cpuinfo ("unknown CPU" if none). Not thread-safe on first call. */
const char *tnd_cpu_model_name(void);
/* splitmix64: the next value of the sequence whose state is *state (seeds
 * generators, makes random placements; deterministic on every machine). */
uint64_t tnd_splitmix64(uint64_t *state);
/* FNV-1a of the n bytes at p, continuing from h (start: TND_FNV_SEED); the
 * cache keys' hash, not a cryptographic one. */
#define TND_FNV_SEED 0xcbf29ce484222325ull
uint64_t tnd_fnv1a(uint64_t h, const void *p, size_t n);

#define TND_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TND_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TND_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
