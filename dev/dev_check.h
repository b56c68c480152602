/* What the dev/ benchmarks share: a call that must succeed, and a
 * reproducible random stream (xorshift64) for their inputs. */
#ifndef TND_DEV_CHECK_H
#define TND_DEV_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"

/* Exits with the call, its place and the library's message when it fails. */
#define CK(call)                                                                                    \
    do {                                                                                            \
        if ((call) != TND_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tnd_last_error());        \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static inline uint64_t rnd(void) {
    static uint64_t s = 88172645463325252ull;
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}
/* Uniform in [lo, hi). */
static inline float unif(float lo, float hi) {
    return lo + (hi - lo) * (float)((rnd() >> 11) * (1.0 / 9007199254740992.0));
}

#endif
