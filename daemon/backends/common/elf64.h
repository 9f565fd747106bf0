/* Section headers of 64-bit little-endian ELF files (elf64.c): the embedded kernel images
 * (cubins, AMDGPU code objects), every read bounded by the file. */
#ifndef GLLM_ELF64_H
#define GLLM_ELF64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 64-bit little-endian ELF file's section headers; the caller checks what the file is. */
struct elf64 {
    const unsigned char *p;
    size_t size;
    uint64_t shoff;
    unsigned shnum, shstrndx;
};
/* e for the file at data; false when it is shorter than an ELF header or its section headers
 * (of 64 bytes each) do not lie inside it. */
bool elf64_headers(struct elf64 *e, const void *data, size_t size);
/* Section i's header, or NULL past the last. */
const unsigned char *elf64_section(const struct elf64 *e, unsigned i);
/* The bytes of section header sh; false when they do not lie inside the file. */
bool elf64_section_bytes(const struct elf64 *e, const unsigned char *sh, const unsigned char **out,
                         uint64_t *size);
/* Section sh's name, or NULL when the name table or a terminated name in it is not there. */
const char *elf64_section_name(const struct elf64 *e, const unsigned char *sh);

#endif
