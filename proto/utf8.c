/* UTF-8 validation and repair: every string gllm sends is valid UTF-8, whatever bytes a peer's
 * process name or a request carried in. */
#include <string.h>

#include "proto.h"

size_t proto_utf8_seq(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0)
        return 0;
    if (p[0] < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;  /* the second byte's range: excludes overlongs, surrogates */
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        if (p[0] == 0xe0)
            lo = 0xa0;
        else if (p[0] == 0xed)
            hi = 0x9f;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        if (p[0] == 0xf0)
            lo = 0x90;
        else if (p[0] == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

bool proto_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {      /* the common case, byte by byte */
            i++;
            continue;
        }
        size_t k = proto_utf8_seq(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

size_t proto_utf8_repair(const char *s, size_t n, char *out, size_t cap)
{
    static const char replacement[] = "\xef\xbf\xbd";   /* U+FFFD */
    size_t used = 0;
    for (size_t i = 0; i < n;) {
        size_t k = proto_utf8_seq(s + i, n - i);
        const char *piece = k ? s + i : replacement;
        size_t len = k ? k : 3;
        if (used + len > cap)
            break;
        memcpy(out + used, piece, len);
        used += len;
        i += k ? k : 1;
    }
    return used;
}
