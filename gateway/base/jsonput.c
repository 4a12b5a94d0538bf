/*
 * jsonput.c: the out-of-line parts of jsonput.h: strings (escaped and cut)
 * and the clock's time.
 *
 * Owns: each thread's date of the last second it wrote (lg_jput_time).
 */
#include "base/jsonput.h"

const char lg_jput_digits2[200] = "00010203040506070809101112131415161718192021222324"
                                  "25262728293031323334353637383940414243444546474849"
                                  "50515253545556575859606162636465666768697071727374"
                                  "75767778798081828384858687888990919293949596979899";

#define JPUT_F1(a, b, c)  { '.', a, b, c }
#define JPUT_F10(a, b)                                                                         \
    JPUT_F1(a, b, '0'), JPUT_F1(a, b, '1'), JPUT_F1(a, b, '2'), JPUT_F1(a, b, '3'),             \
        JPUT_F1(a, b, '4'), JPUT_F1(a, b, '5'), JPUT_F1(a, b, '6'), JPUT_F1(a, b, '7'),         \
        JPUT_F1(a, b, '8'), JPUT_F1(a, b, '9')
#define JPUT_F100(a)                                                                           \
    JPUT_F10(a, '0'), JPUT_F10(a, '1'), JPUT_F10(a, '2'), JPUT_F10(a, '3'), JPUT_F10(a, '4'),   \
        JPUT_F10(a, '5'), JPUT_F10(a, '6'), JPUT_F10(a, '7'), JPUT_F10(a, '8'), JPUT_F10(a, '9')

const char lg_jput_frac3[1000][4] = {
    JPUT_F100('0'), JPUT_F100('1'), JPUT_F100('2'), JPUT_F100('3'), JPUT_F100('4'),
    JPUT_F100('5'), JPUT_F100('6'), JPUT_F100('7'), JPUT_F100('8'), JPUT_F100('9'),
};

#undef JPUT_F100
#undef JPUT_F10
#undef JPUT_F1

const bool lg_jput_esc[256] = {
    [0x00 ... 0x1f] = true,
    ['"'] = true,
    ['\\'] = true,
    [0x7f] = true,
};

char *
lg_jput_str(char *p, const char *s, size_t n, size_t max)
{
    char *start = p, *d = p;
    size_t i = 0, budget;

    if (s == NULL) {
        return LG_JPUT_LIT(p, "null");
    }
    if (n <= (max - 16) / 6) {
        /*
         * Room for the worst case (every byte a 6-byte escape): eight bytes
         * are tested and stored per step, and the output moves on by those
         * that needed no escape (no copy call, no room checks).
         */
        *d++ = '"';
        for (;;) {
            while (n - i >= 8) {
                uint64_t x, m;

                memcpy(&x, s + i, 8);
                memcpy(d, &x, 8);
                m = lg_jput_esc8(x);
                if (m != 0) {
                    size_t k = lg_swar_first(m);

                    d += k;
                    i += k;
                    goto escape;
                }
                d += 8;
                i += 8;
            }
            while (i < n && !lg_jput_esc[(unsigned char)s[i]]) {
                *d++ = s[i++];
            }
            if (i == n) {
                break;
            }
        escape:
            d += lg_jput_escape(d, (unsigned char)s[i++]);
        }
        *d++ = '"';
        return d;
    }
    /* may not fit: byte by byte within the budget, which keeps 5 for `..."` */
    budget = max - 5;
    *d++ = '"';
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = lg_jput_esc[c] ? (c == '"' || c == '\\' ? 2 : 6) : 1;

        if ((size_t)(d - start) + k > budget) {
            /* cut before a continuation byte: back to the sequence's start */
            while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80 && d[-1] == s[i - 1]) {
                i--;
                d--;
            }
            memcpy(d, "...", 3);
            d += 3;
            break;
        }
        if (k == 1) {
            *d++ = (char)c;
        } else {
            d += lg_jput_escape(d, c);
        }
        i++;
    }
    *d++ = '"';
    return d;
}

char *
lg_jput_time(char *p, uint64_t wall_ns)
{
    static __thread time_t cached_sec = -1;
    static __thread char cached[LG_JPUT_TIME_MAX];
    static __thread size_t cached_len;
    time_t sec = (time_t)(wall_ns / LG_NS_PER_S);
    unsigned us = (unsigned)((wall_ns / 1000) % 1000000);

    if (sec != cached_sec) {
        struct tm tm;

        gmtime_r(&sec, &tm);
        cached_len = strftime(cached, LG_JPUT_TIME_MAX - 10, "\"%Y-%m-%dT%H:%M:%S", &tm);
        cached_sec = sec;
    }
    p = lg_jput_raw(p, cached, cached_len);
    /* ".uuuuuuZ\"" */
    *p = '.';
    memcpy(p + 1, lg_jput_digits2 + 2 * (us / 10000), 2);
    memcpy(p + 3, lg_jput_digits2 + 2 * (us / 100 % 100), 2);
    memcpy(p + 5, lg_jput_digits2 + 2 * (us % 100), 2);
    p[7] = 'Z';
    p[8] = '"';
    return p + 9;
}
