/* The embedded AMDGPU code objects: where they are, what an ELF note and the kernel
 * descriptors say about each, and which one an agent's ISA loads. */
#ifndef GLLMD_HSA_CODEOBJ_H
#define GLLMD_HSA_CODEOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HSACO_MAX_KERNELS 16

struct hsaco_image {
    const char *target;          /* the processor it was built for, "gfx90a" */
    const unsigned char *data;
    size_t size;
};

/* One kernel descriptor (the 64-byte "<name>.kd" object the dispatch packet points at). */
struct hsaco_kernel {
    char name[48];               /* without ".kd" */
    uint32_t group_bytes;        /* static shared memory */
    uint32_t private_bytes;      /* scratch per work-item */
    uint32_t kernarg_bytes;
    int wave;                    /* 32 or 64 */
};

struct hsaco_info {
    char target[32];             /* from the NT_AMDGPU_METADATA note: "gfx90a" */
    uint32_t mach;               /* EF_AMDGPU_MACH of e_flags */
    int nkernels;
    struct hsaco_kernel kernels[HSACO_MAX_KERNELS];
};

/* The code objects linked into gllmd (hsaco_embed.S), in build order; returns their count. */
int hsaco_embedded(const struct hsaco_image **out);
/* Reads an AMDGPU code object: its target from the metadata note and its kernel descriptors
 * from the dynamic symbols. 0, or -EINVAL with a one-line reason for anything else. */
int hsaco_parse(const void *data, size_t size, struct hsaco_info *out, char *why, size_t len);
/* The processor of an ISA name ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" -> "gfx90a");
 * false when the name has no such part. */
bool hsaco_isa_processor(const char *isa, char *out, size_t len);
/* Index of the image built for processor (exactly: the objects are built for any xnack and
 * sramecc setting), or -1 and a reason naming the processor and the embedded targets. */
int hsaco_choose(const struct hsaco_image *imgs, int n, const char *processor, char *why,
                 size_t len);
/* The kernel named name in info, or NULL. */
const struct hsaco_kernel *hsaco_find(const struct hsaco_info *info, const char *name);
/* "HSACO gfx90a gfx942 gfx1100 gfx1201 (portable kernels)" for --version. */
const char *hsaco_line(void);

#endif
