/*
 * tracectx.c: W3C Trace Context headers (tracectx.h). Strict: anything
 * the specification does not allow is refused whole, and the caller
 * starts a trace of its own (a traceparent) or drops it (a tracestate).
 * Owns nothing; reads the bytes it is given, never past n.
 */
#include "http/tracectx.h"

#include <string.h>

static int
tc_hexval(char ch)
{
    if (ch >= '0' && ch <= '9') {
        return ch - '0';
    }
    if (ch >= 'a' && ch <= 'f') {
        return ch - 'a' + 10;
    }
    return -1; /* uppercase is not allowed either */
}

/* n hex digits into n/2 bytes; false on anything else. */
static bool
tc_hex_bytes(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i += 2) {
        int hi = tc_hexval(s[i]);
        int lo = tc_hexval(s[i + 1]);

        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

int
lg_tracectx_parse(const char *s, size_t n, struct lg_tracectx *out)
{
    uint8_t version, flags, trace_id[16], parent[8];
    uint64_t pid = 0;
    bool zero = true;

    if (s == NULL || n < LG_TRACEPARENT_LEN || !tc_hex_bytes(s, 2, &version) || version == 0xff) {
        return LG_EINVAL;
    }
    if (version == 0 ? n != LG_TRACEPARENT_LEN : (n > LG_TRACEPARENT_LEN && s[55] != '-')) {
        return LG_EINVAL;
    }
    if (s[2] != '-' || s[35] != '-' || s[52] != '-' || !tc_hex_bytes(s + 3, 32, trace_id)
        || !tc_hex_bytes(s + 36, 16, parent) || !tc_hex_bytes(s + 53, 2, &flags)) {
        return LG_EINVAL;
    }
    for (int i = 0; i < 16; i++) {
        zero = zero && trace_id[i] == 0;
    }
    for (int i = 0; i < 8; i++) {
        pid = pid << 8 | parent[i];
    }
    if (zero || pid == 0) {
        return LG_EINVAL;
    }
    memcpy(out->trace_id, trace_id, 16);
    out->parent_id = pid;
    out->flags = version == 0 ? flags : (uint8_t)(flags & LG_TRACECTX_SAMPLED);
    return LG_OK;
}

static bool
tc_is_lcalpha(char ch)
{
    return ch >= 'a' && ch <= 'z';
}

static bool
tc_is_keych(char ch)
{
    return tc_is_lcalpha(ch) || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '*'
           || ch == '/';
}

/* key = simple-key / multi-tenant-key (tenant-id "@" system-id). */
static bool
tc_key_valid(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);

    if (at == NULL) {
        if (n < 1 || n > 256 || !tc_is_lcalpha(k[0])) {
            return false;
        }
        for (size_t i = 1; i < n; i++) {
            if (!tc_is_keych(k[i])) {
                return false;
            }
        }
        return true;
    }
    {
        size_t tn = (size_t)(at - k);
        size_t sn = n - tn - 1;

        /* tenant-id: (lcalpha / DIGIT) 0*240(keych); system-id: lcalpha 0*13(keych) */
        if (tn < 1 || tn > 241 || sn < 1 || sn > 14 || !tc_is_lcalpha(at[1])
            || !(tc_is_lcalpha(k[0]) || (k[0] >= '0' && k[0] <= '9'))) {
            return false;
        }
        for (size_t i = 1; i < tn; i++) {
            if (!tc_is_keych(k[i])) {
                return false;
            }
        }
        for (size_t i = 2; i < sn + 1; i++) {
            if (!tc_is_keych(at[i])) {
                return false;
            }
        }
        return true;
    }
}

/* value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E */
static bool
tc_value_valid(const char *v, size_t n)
{
    if (n < 1 || n > 256 || v[n - 1] == ' ') {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];

        if (ch < 0x20 || ch > 0x7e || ch == ',' || ch == '=') {
            return false;
        }
    }
    return true;
}

bool
lg_tracestate_valid(const char *s, size_t n)
{
    struct {
        const char *k;
        size_t n;
    } keys[LG_TRACESTATE_MEMBERS];
    size_t nkeys = 0;
    size_t i = 0;

    if (s == NULL || n > LG_TRACESTATE_MAX) {
        return false;
    }
    while (i <= n) {
        size_t end = i;
        size_t a, b;
        const char *eq;

        while (end < n && s[end] != ',') {
            end++;
        }
        a = i;
        b = end;
        while (a < b && (s[a] == ' ' || s[a] == '\t')) {
            a++;
        }
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) {
            b--;
        }
        if (a < b) { /* an empty member is allowed, and skipped */
            eq = memchr(s + a, '=', b - a);
            if (eq == NULL || nkeys == LG_TRACESTATE_MEMBERS
                || !tc_key_valid(s + a, (size_t)(eq - (s + a)))
                || !tc_value_valid(eq + 1, (size_t)(s + b - eq - 1))) {
                return false;
            }
            for (size_t k = 0; k < nkeys; k++) {
                if (keys[k].n == (size_t)(eq - (s + a)) && memcmp(keys[k].k, s + a, keys[k].n) == 0) {
                    return false; /* a key twice */
                }
            }
            keys[nkeys].k = s + a;
            keys[nkeys].n = (size_t)(eq - (s + a));
            nkeys++;
        }
        i = end + 1;
    }
    return true;
}

void
lg_tracectx_hex(char *out, const uint8_t *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
}

/*
 * v's 16 hex digits, most significant first, eight at a time in a word:
 * each nibble spread into a byte of its own, then '0'+n or 'a'+n-10 in
 * all bytes at once (a traceparent is formatted for every attempt).
 */
static inline void
tracectx_hex32(char *out, uint32_t v)
{
    uint64_t x = v;
    uint64_t letters;

    x = (x | (x << 16)) & 0x0000ffff0000ffffull;
    x = (x | (x << 8)) & 0x00ff00ff00ff00ffull;
    x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0full; /* nibble k (from the top) in byte 7-k */
    letters = ((x + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull; /* 1 where >= 10 */
    x += 0x3030303030303030ull + letters * ('a' - '0' - 10);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    memcpy(out, &x, 8);
}

static inline void
tracectx_hex64(char *out, uint64_t v)
{
    tracectx_hex32(out, (uint32_t)(v >> 32));
    tracectx_hex32(out + 8, (uint32_t)v);
}

void
lg_tracectx_format(char *out, const uint8_t trace_id[16], uint64_t span_id, uint8_t flags)
{
    uint64_t hi, lo;

    memcpy(&hi, trace_id, 8);
    memcpy(&lo, trace_id + 8, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    hi = __builtin_bswap64(hi); /* the id's first byte, the first two digits */
    lo = __builtin_bswap64(lo);
#endif
    memcpy(out, "00-", 3);
    tracectx_hex64(out + 3, hi);
    tracectx_hex64(out + 19, lo);
    out[35] = '-';
    tracectx_hex64(out + 36, span_id);
    out[52] = '-';
    lg_tracectx_hex(out + 53, &flags, 1);
}
