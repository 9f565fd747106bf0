/* Section headers of 64-bit little-endian ELF files, every read bounded by the file. */
#include <string.h>

#include "elf64.h"

static uint64_t rd(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

bool elf64_headers(struct elf64 *e, const void *data, size_t size)
{
    const unsigned char *p = data;
    if (size < 64)
        return false;
    *e = (struct elf64){.p = p, .size = size, .shoff = rd(p + 40, 8),
                        .shnum = (unsigned)rd(p + 60, 2), .shstrndx = (unsigned)rd(p + 62, 2)};
    return rd(p + 58, 2) == 64 && e->shoff <= size && (uint64_t)e->shnum * 64 <= size - e->shoff;
}

const unsigned char *elf64_section(const struct elf64 *e, unsigned i)
{
    return i < e->shnum ? e->p + e->shoff + (uint64_t)i * 64 : NULL;
}

bool elf64_section_bytes(const struct elf64 *e, const unsigned char *sh, const unsigned char **out,
                         uint64_t *size)
{
    const uint64_t off = rd(sh + 24, 8), sz = rd(sh + 32, 8);
    if (off > e->size || sz > e->size - off)
        return false;
    *out = e->p + off;
    *size = sz;
    return true;
}

const char *elf64_section_name(const struct elf64 *e, const unsigned char *sh)
{
    const unsigned char *names, *strsh = elf64_section(e, e->shstrndx);
    uint64_t n;
    const uint64_t at = rd(sh, 4);
    if (!strsh || !elf64_section_bytes(e, strsh, &names, &n) || at >= n ||
        !memchr(names + at, 0, n - at))
        return NULL;
    return (const char *)names + at;
}
