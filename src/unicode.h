/* Unicode helpers for the tokenizer: UTF-8 decoding, general categories
 * (from the generated table in unicode_data.c), the classes the
 * pre-tokenizer patterns use, and GPT-2's byte <-> code point mapping. */
#ifndef TND_UNICODE_H
#define TND_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* General categories; the order is fixed by scripts/gen_unicode.py. */
enum uni_cat {
    UNI_Cn, UNI_Lu, UNI_Ll, UNI_Lt, UNI_Lm, UNI_Lo, UNI_Mn, UNI_Mc, UNI_Me,
    UNI_Nd, UNI_Nl, UNI_No, UNI_Pc, UNI_Pd, UNI_Ps, UNI_Pe, UNI_Pi, UNI_Pf, UNI_Po,
    UNI_Sm, UNI_Sc, UNI_Sk, UNI_So, UNI_Zs, UNI_Zl, UNI_Zp, UNI_Cc, UNI_Cf, UNI_Cs, UNI_Co,
};

/* Code point given to a byte that does not start a valid UTF-8 sequence; it
 * lies outside Unicode, so it belongs to no class (not letter, digit, space). */
#define UNI_INVALID 0x110000u

extern const char uni_data_version[];
extern const uint32_t uni_n_runs;
extern const uint32_t uni_runs[];

/* Decodes one code point from s[0..len) (len >= 1). Sets *n to the bytes
 * used (>= 1). Malformed, overlong, surrogate or truncated sequences give
 * UNI_INVALID with *n = 1, so every byte is consumed exactly once. */
uint32_t uni_decode(const char *s, size_t len, size_t *n);
/* Encodes cp (< 0x110000) as UTF-8 into out (4 bytes room); returns the length. */
size_t uni_encode(uint32_t cp, char *out);

/* General category of cp; UNI_Cn for UNI_INVALID. */
enum uni_cat uni_category(uint32_t cp);

bool uni_is_letter(uint32_t cp); /* \p{L} */
bool uni_is_number(uint32_t cp); /* \p{N} */
bool uni_is_punct(uint32_t cp);  /* \p{P} */
bool uni_is_symbol(uint32_t cp); /* \p{S} */
bool uni_is_mark(uint32_t cp);   /* \p{M} */
bool uni_is_cased(uint32_t cp);  /* Lu, Ll or Lt */
/* \s: the White_Space property (tab..CR, space, NEL, NBSP, Zs, LS, PS). */
bool uni_is_space(uint32_t cp);

/* GPT-2 byte-level mapping: each byte value to the code point that stands for
 * it in byte-level BPE vocabularies, and back (-1 if cp stands for no byte). */
uint32_t uni_byte_to_cp(uint8_t b);
int uni_cp_to_byte(uint32_t cp);

#endif
