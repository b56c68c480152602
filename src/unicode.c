/* UTF-8, general categories and the GPT-2 byte mapping (see unicode.h). */
#include "unicode.h"

uint32_t uni_decode(const char *s, size_t len, size_t *n) {
    const uint8_t *u = (const uint8_t *)s;
    uint8_t c = u[0];
    *n = 1;
    if (c < 0x80) return c;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07; min = 0x10000; }
    else return UNI_INVALID;
    if (len < need + 1) return UNI_INVALID;
    for (size_t i = 1; i <= need; i++) {
        if ((u[i] & 0xc0) != 0x80) return UNI_INVALID;
        cp = (cp << 6) | (u[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return UNI_INVALID;
    *n = need + 1;
    return cp;
}

size_t uni_encode(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xc0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xe0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (uint8_t)(0xf0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

enum uni_cat uni_category(uint32_t cp) {
    if (cp >= 0x110000) return UNI_Cn;
    /* Last run whose start is <= cp. */
    uint32_t lo = 0, hi = uni_n_runs;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((uni_runs[mid] >> 5) <= cp) lo = mid;
        else hi = mid;
    }
    return (enum uni_cat)(uni_runs[lo] & 31);
}

bool uni_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    enum uni_cat c = uni_category(cp);
    return c >= UNI_Lu && c <= UNI_Lo;
}

bool uni_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    enum uni_cat c = uni_category(cp);
    return c >= UNI_Nd && c <= UNI_No;
}

bool uni_is_punct(uint32_t cp) {
    enum uni_cat c = uni_category(cp);
    return c >= UNI_Pc && c <= UNI_Po;
}

bool uni_is_symbol(uint32_t cp) {
    enum uni_cat c = uni_category(cp);
    return c >= UNI_Sm && c <= UNI_So;
}

bool uni_is_mark(uint32_t cp) {
    enum uni_cat c = uni_category(cp);
    return c >= UNI_Mn && c <= UNI_Me;
}

bool uni_is_cased(uint32_t cp) {
    enum uni_cat c = uni_category(cp);
    return c == UNI_Lu || c == UNI_Ll || c == UNI_Lt;
}

bool uni_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
    switch (cp) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202f: case 0x205f: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200a;
    }
}

/* GPT-2's mapping: printable Latin-1 bytes ('!'..'~', 0xa1..0xac,
 * 0xae..0xff) stand for themselves; the other 68 bytes, in order, take
 * U+0100, U+0101, ... so every byte has a visible, non-space stand-in. */
static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

uint32_t uni_byte_to_cp(uint8_t b) {
    if (byte_is_self(b)) return b;
    unsigned n = 0; /* number of non-self bytes below b */
    for (unsigned i = 0; i < b; i++) n += !byte_is_self(i);
    return 0x100 + n;
}

int uni_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_self(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    unsigned n = cp - 0x100;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_self(b) && n-- == 0) return (int)b;
    return -1;
}
