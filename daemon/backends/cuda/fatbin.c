/* Reads the fatbin container header (magic 0xBA55ED50) to list its SASS and PTX images. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fatbin.h"

/* Assembled from kernels/prebuilt/gllm_kernels.fatbin by fatbin_embed.S. */
extern const unsigned char gllm_cuda_fatbin[];
extern const unsigned char gllm_cuda_fatbin_end[];

const void *fatbin_data(void)
{
    return gllm_cuda_fatbin;
}

size_t fatbin_size(void)
{
    return (size_t)(gllm_cuda_fatbin_end - gllm_cuda_fatbin);
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Container: u32 magic, u16 version, u16 header size, u64 payload size; then entries of
 * u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size, ..., u32 arch
 * at byte 28 of the entry header. */
int fatbin_images(const void *data, size_t size, struct fatbin_image *out, int max)
{
    const unsigned char *p = data;
    if (size < 16 || rd32(p) != 0xBA55ED50u)
        return -1;
    uint32_t hsize = (uint32_t)(p[6] | p[7] << 8);
    uint64_t total = rd64(p + 8);
    if (hsize < 16 || total > size - hsize)
        return -1;
    const unsigned char *e = p + hsize, *end = e + total;
    int n = 0;
    while (e + 32 <= end && n < max) {
        uint32_t kind = (uint32_t)(e[0] | e[1] << 8);
        uint32_t ehs = rd32(e + 4);
        uint64_t payload = rd64(e + 8);
        if (ehs < 32 || payload > (uint64_t)(end - e) - ehs)
            return -1;
        if (kind == 1 || kind == 2)
            out[n++] = (struct fatbin_image){.ptx = kind == 1,
                                             .arch = (int)rd32(e + 28),
                                             .payload = e + ehs,
                                             .payload_size = (size_t)payload};
        e += ehs + payload;
    }
    return n;
}

bool fatbin_choose(const struct fatbin_image *imgs, int n, int major, int minor, char *buf,
                   size_t len)
{
    int cc = major * 10 + minor, best_sass = -1, best_ptx = -1;
    for (int i = 0; i < n; i++) {
        int a = imgs[i].arch;
        if (!imgs[i].ptx && a / 10 == major && a <= cc && (a != 90 || cc == 90) && a > best_sass)
            best_sass = a;
        if (imgs[i].ptx && a <= cc && a > best_ptx)
            best_ptx = a;
    }
    if (best_sass >= 0)
        snprintf(buf, len, "sm_%d%s SASS", best_sass, best_sass == 90 ? "a" : "");
    else if (best_ptx >= 0)
        snprintf(buf, len, "compute_%d PTX (JIT)", best_ptx);
    else
        return false;
    return true;
}
