/* Shared scaffolding of the C and CUDA tests (header-only; C11 and C++, so
 * the .cu tests use it too): CHECK and its counters, the summary line and
 * exit status, a small deterministic PRNG with float fill helpers, and a few
 * helpers many tests need. Every test is one translation unit, so the
 * counters and the generator state belong to that test. */
#ifndef TND_TESTS_CHECK_H
#define TND_TESTS_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Failures CHECK prints in full; later ones are only counted (a broken
 * kernel can fail thousands of elements). Define before including to change. */
#ifndef TC_PRINT_MAX
#define TC_PRINT_MAX 50
#endif

static int tc_checks; /* checks made (CHECK, tc_count, tc_report) */
static int tc_fails;  /* of those, failed */

/* Counts one check; returns ok. */
static inline bool tc_count(bool ok) {
    tc_checks++;
    if (!ok) tc_fails++;
    return ok;
}

static inline void tc_fail_(const char *expr, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* CHECK's failure path: counts it and, for the first TC_PRINT_MAX, prints
 * "file:line: CHECK(expr) failed: message" on stderr (fmt starts with the
 * space CHECK puts before the message; " " alone: no message). */
static inline void tc_fail_(const char *expr, const char *file, int line, const char *fmt, ...) {
    tc_count(false);
    if (tc_fails > TC_PRINT_MAX) return;
    fprintf(stderr, "%s:%d: CHECK(%s) failed", file, line, expr);
    if (fmt[0] && fmt[1]) {
        va_list ap;
        va_start(ap, fmt);
        fputc(':', stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

/* CHECK(cond) or CHECK(cond, "format", ...): counts one check; a failure
 * prints file:line, the condition and the message (the message's arguments
 * are evaluated only then) and the test goes on. The message must be a
 * string literal. */
#define CHECK(c, ...)                                                           \
    do {                                                                        \
        if (c) tc_checks++;                                                     \
        else tc_fail_(#c, __FILE__, __LINE__, " " __VA_ARGS__);                 \
    } while (0)

static inline void tc_report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts one check and prints a line for it on stdout, "ok   message" or
 * "FAIL message" (for tests that list every check they make). */
static inline void tc_report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    tc_count(ok);
}

/* Evaluates a tnd_status call that the rest of the test depends on: on a
 * failure prints file:line, the call and tnd_last_error() and exits 1.
 * (The caller includes tandem.h.) */
#define CHECK_ST(call)                                                                              \
    do {                                                                                            \
        tnd_status st_ = (call);                                                                    \
        if (st_ != TND_OK) {                                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, tnd_last_error()); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* Prints "N passed, M failed" on stdout (and how many failures went
 * unprinted); returns the exit status: 0 when none failed, else 1. */
static inline int tc_summary(void) {
    if (tc_fails > TC_PRINT_MAX) printf("(the first %d failures printed)\n", TC_PRINT_MAX);
    printf("%d passed, %d failed\n", tc_checks - tc_fails, tc_fails);
    return tc_fails ? 1 : 0;
}

/* ---- deterministic random numbers ------------------------------------------ */

/* The generator's state: a test seeds it by assignment (nonzero for
 * xorshift) and draws from one of the two generators below. */
static uint64_t tc_rng = 0x9e3779b97f4a7c15ull;

/* Marsaglia's xorshift64 (shifts 13, 7, 17): the next state. */
static inline uint64_t tc_xorshift(void) {
    uint64_t x = tc_rng ? tc_rng : 0x9e3779b97f4a7c15ull; /* a zero state would stay zero */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return tc_rng = x;
}

/* SplitMix64 (Steele, Lea, Flood 2014): the next output. */
static inline uint64_t tc_splitmix(void) {
    uint64_t z = (tc_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The top 53 bits of r as a double in [0, 1). */
static inline double tc_unit(uint64_t r) { return (double)(r >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform in [lo, hi) (xorshift, 53 bits). */
static inline float tc_unif(float lo, float hi) { return lo + (hi - lo) * (float)tc_unit(tc_xorshift()); }

/* Uniform in [-1, 1) on a grid of 2^-23 (xorshift, top 24 bits). */
static inline float tc_frand(void) { return (float)((tc_xorshift() >> 40) * (1.0 / (1 << 23))) - 1.0f; }

/* x[0..n) = tc_unif(lo, hi). */
static inline void tc_fill_unif(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = tc_unif(lo, hi);
}

/* x[0..n) = tc_frand(). */
static inline void tc_fill_frand(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tc_frand();
}

/* ---- small helpers -------------------------------------------------------- */

/* malloc that never returns NULL (a test out of memory exits 1); n 0 gives a
 * valid pointer. */
static inline void *tc_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Index of the largest of x[0..n) (the first on ties). */
static inline int tc_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* max |a[i] - b[i]| over n values. */
static inline float tc_max_abs_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        float d = a[i] - b[i];
        d = d < 0 ? -d : d;
        m = d > m || d != d ? d : m; /* a NaN difference wins: NaN logits must not pass */
        if (m != m) return m;
    }
    return m;
}

#endif
