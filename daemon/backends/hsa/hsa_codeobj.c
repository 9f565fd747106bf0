/* Reads the embedded AMDGPU code objects (ELF64): the target in the NT_AMDGPU_METADATA note,
 * the kernel descriptors behind the ".kd" dynamic symbols; picks one for an agent's ISA. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend_api.h"
#include "elf64.h"
#include "hsa_codeobj.h"

#define EIMAGE(name)                                 \
    extern const unsigned char gllm_hsaco_##name[];  \
    extern const unsigned char gllm_hsaco_##name##_end[];
EIMAGE(gfx90a)
EIMAGE(gfx942)
EIMAGE(gfx1100)
EIMAGE(gfx1201)

int hsaco_embedded(const struct hsaco_image **out)
{
#define IMAGE(name) {#name, gllm_hsaco_##name, 0}
    static struct hsaco_image imgs[] = {IMAGE(gfx90a), IMAGE(gfx942), IMAGE(gfx1100), IMAGE(gfx1201)};
    static const unsigned char *const ends[] = {gllm_hsaco_gfx90a_end, gllm_hsaco_gfx942_end,
                                                gllm_hsaco_gfx1100_end, gllm_hsaco_gfx1201_end};
    for (size_t i = 0; i < sizeof imgs / sizeof *imgs; i++)
        imgs[i].size = (size_t)(ends[i] - imgs[i].data);
    *out = imgs;
    return (int)(sizeof imgs / sizeof *imgs);
}

enum {
    EM_AMDGPU = 224,
    ELFOSABI_AMDGPU_HSA = 64,
    SHT_NOTE = 7,
    SHT_DYNSYM = 11,
    NT_AMDGPU_METADATA = 32,
    EF_AMDGPU_MACH = 0xff,
    KD_WAVE32 = 1u << 10,          /* kernel_code_properties: ENABLE_WAVEFRONT_SIZE32 */
};

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* The metadata is msgpack; the target is the string after the key "amdhsa.target". */
static bool metadata_target(const unsigned char *d, uint64_t n, char *out, size_t len)
{
    static const char key[] = "\xad" "amdhsa.target";
    const size_t klen = sizeof key - 1;
    for (uint64_t i = 0; i + klen < n; i++) {
        if (memcmp(d + i, key, klen) != 0)
            continue;
        uint64_t j = i + klen, slen;
        if ((d[j] & 0xe0) == 0xa0)
            slen = d[j] & 0x1f, j += 1;
        else if (d[j] == 0xd9 && j + 1 < n)
            slen = d[j + 1], j += 2;
        else
            return false;
        if (slen > n - j)
            return false;
        const char *s = (const char *)d + j, *dash = memmem(s, slen, "--", 2);
        if (!dash)
            return false;
        size_t from = (size_t)(dash + 2 - s), plen = 0;
        while (from + plen < slen && s[from + plen] != ':')
            plen++;
        if (plen == 0 || plen >= len)
            return false;
        memcpy(out, s + from, plen);
        out[plen] = '\0';
        return true;
    }
    return false;
}

static bool read_note(const struct elf64 *e, const unsigned char *sh, struct hsaco_info *out)
{
    const unsigned char *d;
    uint64_t n;
    if (!elf64_section_bytes(e, sh, &d, &n))
        return false;
    for (uint64_t at = 0; at + 12 <= n;) {
        uint64_t namesz = rd32(d + at), descsz = rd32(d + at + 4), type = rd32(d + at + 8);
        uint64_t name = at + 12, desc = name + ((namesz + 3) & ~3ull);
        if (desc > n || descsz > n - desc)
            return false;
        if (type == NT_AMDGPU_METADATA && namesz == 7 && memcmp(d + name, "AMDGPU", 7) == 0)
            return metadata_target(d + desc, descsz, out->target, sizeof out->target);
        at = desc + ((descsz + 3) & ~3ull);
    }
    return false;
}

/* Each ".kd" object of the dynamic symbols: its 64-byte descriptor, found through the
 * section that holds it. */
static int read_kernels(const struct elf64 *e, const unsigned char *sh, struct hsaco_info *out,
                        char *why, size_t len)
{
    const unsigned char *syms, *strs, *strsh = elf64_section(e, rd32(sh + 40));
    uint64_t nsyms, nstrs;
    if (!strsh || !elf64_section_bytes(e, sh, &syms, &nsyms) ||
        !elf64_section_bytes(e, strsh, &strs, &nstrs)) {
        snprintf(why, len, "dynamic symbol table outside the file");
        return -EINVAL;
    }
    for (uint64_t at = 0; at + 24 <= nsyms; at += 24) {
        const unsigned char *s = syms + at;
        uint64_t name = rd32(s), value = rd64(s + 8), size = rd64(s + 16);
        if (name >= nstrs || (s[4] & 0xf) != 1 /* STT_OBJECT */)
            continue;
        const char *nm = (const char *)strs + name;
        size_t nlen = strnlen(nm, (size_t)(nstrs - name));
        if (nlen == nstrs - name || nlen < 4 || strcmp(nm + nlen - 3, ".kd") != 0)
            continue;
        const unsigned char *holder = elf64_section(e, rd16(s + 6)), *kd;
        uint64_t hsz;
        if (size != 64 || !holder || !elf64_section_bytes(e, holder, &kd, &hsz) ||
            value < rd64(holder + 16) || value - rd64(holder + 16) > hsz ||
            hsz - (value - rd64(holder + 16)) < 64) {
            snprintf(why, len, "kernel descriptor %.40s outside its section", nm);
            return -EINVAL;
        }
        kd += value - rd64(holder + 16);
        if (out->nkernels == HSACO_MAX_KERNELS || nlen - 3 >= sizeof out->kernels[0].name) {
            snprintf(why, len, "more kernels, or longer names, than gllmd reads");
            return -EINVAL;
        }
        struct hsaco_kernel *k = &out->kernels[out->nkernels++];
        memcpy(k->name, nm, nlen - 3);
        k->name[nlen - 3] = '\0';
        k->group_bytes = rd32(kd);
        k->private_bytes = rd32(kd + 4);
        k->kernarg_bytes = rd32(kd + 8);
        k->wave = rd16(kd + 56) & KD_WAVE32 ? 32 : 64;
    }
    return 0;
}

int hsaco_parse(const void *data, size_t size, struct hsaco_info *out, char *why, size_t len)
{
    const unsigned char *p = data;
    memset(out, 0, sizeof *out);
    if (size < 64 || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 || p[5] != 1) {
        snprintf(why, len, "not a 64-bit little-endian ELF file");
        return -EINVAL;
    }
    if (rd16(p + 18) != EM_AMDGPU || p[7] != ELFOSABI_AMDGPU_HSA) {
        snprintf(why, len, "not an AMDGPU HSA code object (machine %u, OS ABI %u)", rd16(p + 18), p[7]);
        return -EINVAL;
    }
    struct elf64 e;
    if (!elf64_headers(&e, p, size)) {
        snprintf(why, len, "section headers outside the file");
        return -EINVAL;
    }
    out->mach = rd32(p + 48) & EF_AMDGPU_MACH;
    bool target = false;
    for (unsigned i = 0; i < e.shnum; i++) {
        const unsigned char *sh = elf64_section(&e, i);
        uint32_t type = rd32(sh + 4);
        if (type == SHT_NOTE && !target)
            target = read_note(&e, sh, out);
        else if (type == SHT_DYNSYM) {
            int rc = read_kernels(&e, sh, out, why, len);
            if (rc < 0)
                return rc;
        }
    }
    if (!target) {
        snprintf(why, len, "no amdhsa.target in the code object's metadata note");
        return -EINVAL;
    }
    if (out->nkernels == 0) {
        snprintf(why, len, "no kernel descriptors in the code object");
        return -EINVAL;
    }
    return 0;
}

bool hsaco_isa_processor(const char *isa, char *out, size_t len)
{
    const char *dash = strstr(isa, "--");
    if (!dash)
        return false;
    size_t n = strcspn(dash + 2, ":");
    if (n == 0 || n >= len)
        return false;
    memcpy(out, dash + 2, n);
    out[n] = '\0';
    return true;
}

int hsaco_choose(const struct hsaco_image *imgs, int n, const char *processor, char *why,
                 size_t len)
{
    for (int i = 0; i < n; i++)
        if (strcmp(imgs[i].target, processor) == 0)
            return i;
    size_t used = (size_t)snprintf(why, len, "no code object for %s (gllmd has:", processor);
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(why + used, len - used, " %s", imgs[i].target);
    if (used < len)
        snprintf(why + used, len - used, ")");
    return -1;
}

const struct hsaco_kernel *hsaco_find(const struct hsaco_info *info, const char *name)
{
    for (int i = 0; i < info->nkernels; i++)
        if (strcmp(info->kernels[i].name, name) == 0)
            return &info->kernels[i];
    return NULL;
}

const char *hsaco_line(void)
{
    static char line[128];
    if (!line[0]) {
        const struct hsaco_image *imgs;
        int n = hsaco_embedded(&imgs);
        size_t used = (size_t)snprintf(line, sizeof line, "HSACO");
        for (int i = 0; i < n && used < sizeof line; i++)
            used += (size_t)snprintf(line + used, sizeof line - used, " %s", imgs[i].target);
        if (used < sizeof line)
            snprintf(line + used, sizeof line - used, " (portable kernels)");
    }
    return line;
}
