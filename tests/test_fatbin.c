/* The embedded fatbin: readable, holds the promised images, and the right one is chosen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "elf64.h"
#include "fatbin.h"
#include "kernel_registry.h"

static void test_embedded_images(void **state)
{
    (void)state;
    struct fatbin_image img[FATBIN_MAX_IMAGES];
    int n = fatbin_images(fatbin_data(), fatbin_size(), img, FATBIN_MAX_IMAGES);
    assert_int_equal(n, 5);
    int sass = 0, ptx80 = 0;
    for (int i = 0; i < n; i++) {
        if (img[i].ptx)
            ptx80 += img[i].arch == 80;
        else
            sass |= 1 << (img[i].arch - 80);
    }
    assert_int_equal(ptx80, 1);                                      /* the fallback for new chips */
    assert_int_equal(sass, 1 << 0 | 1 << 6 | 1 << 9 | 1 << 10);      /* sm_80, 86, 89, 90 */
}

static void test_choice(void **state)
{
    (void)state;
    struct fatbin_image img[FATBIN_MAX_IMAGES];
    int n = fatbin_images(fatbin_data(), fatbin_size(), img, FATBIN_MAX_IMAGES);
    char buf[32];
    assert_true(fatbin_choose(img, n, 9, 0, buf, sizeof buf));
    assert_string_equal(buf, "sm_90a SASS");
    assert_true(fatbin_choose(img, n, 8, 7, buf, sizeof buf));      /* Orin runs sm_86 code */
    assert_string_equal(buf, "sm_86 SASS");
    assert_true(fatbin_choose(img, n, 12, 0, buf, sizeof buf));     /* newer: the PTX */
    assert_string_equal(buf, "compute_80 PTX (JIT)");
    assert_true(fatbin_choose(img, n, 10, 0, buf, sizeof buf));     /* sm_90a never runs on 10.0 */
    assert_string_equal(buf, "compute_80 PTX (JIT)");
    assert_false(fatbin_choose(img, n, 7, 5, buf, sizeof buf));     /* older than every image */
}

static void test_not_a_fatbin(void **state)
{
    (void)state;
    struct fatbin_image img[4];
    unsigned char junk[64];
    memset(junk, 0xab, sizeof junk);
    assert_int_equal(fatbin_images(junk, sizeof junk, img, 4), -1);
    unsigned char lying[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(fatbin_images(lying, sizeof lying, img, 4), -1); /* size past the end */
}

/* Machine code facts of sm_90, read off nvdisasm's decoding of ptxas's output: the opcode is
 * the low 12 bits of an instruction's first 64-bit word; wgmma is HGMMA, 0x9f0 with both
 * operands in shared memory and 0xdf0 with A in registers; an HGMMA whose result the next
 * instruction waits for (nvdisasm's "gsb0") has bits 20-22 of the second word below 7;
 * local-memory stores and loads (spills) are STL, 0x387, and LDL, 0x983. */
enum { SM90_HGMMA_SS = 0x9f0, SM90_HGMMA_RS = 0xdf0, SM90_STL = 0x387, SM90_LDL = 0x983 };

static uint64_t le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

struct sm90_counts {
    int instr, hgmma, hgmma_waited, local;
};

static struct sm90_counts sm90_count(const unsigned char *code, size_t size)
{
    struct sm90_counts c = {0};
    for (size_t i = 0; i + 16 <= size; i += 16) {
        const uint64_t w0 = le64(code + i), w1 = le64(code + i + 8);
        const unsigned op = (unsigned)(w0 & 0xfff);
        c.instr++;
        if (op == SM90_HGMMA_SS || op == SM90_HGMMA_RS) {
            c.hgmma++;
            c.hgmma_waited += ((w1 >> 20) & 7) != 7;
        }
        c.local += op == SM90_STL || op == SM90_LDL;
    }
    return c;
}

/* The sm_90a image's Hopper kernels as ptxas left them. Two of its choices cost every shape
 * and show only in its notes or not at all: every wgmma serialised (each HGMMA waited for
 * before the next issues; -25 to -30%), and registers spilled to local memory. Here ptxas's
 * wait follows about one HGMMA in eight, at each group's end, and no dense kernel touches local
 * memory but the TMA ones at D = 128 not causal: their second walk, over the split units, has
 * ptxas keep a few words of the schedule in local memory, stored once and read at tile
 * boundaries, never in a key loop (up to 40 instructions, measured level on shapes it does not
 * split); the paged prefill at D = 64 keeps a 4-byte spill in its producer; the D = 256
 * variant kernels keep 16 bytes of their consumers' state (beside O's 128 registers a thread)
 * in local memory, read twice a key tile of 80 x 256 (at most 20 instructions; soft-cap there
 * ran at 0.88x of the plain kernel, a 4095-key window at 0.96x). */
static void test_hopper_code(void **state)
{
    (void)state;
    struct fatbin_image img[FATBIN_MAX_IMAGES];
    const int n = fatbin_images(fatbin_data(), fatbin_size(), img, FATBIN_MAX_IMAGES);
    const unsigned char *elf = NULL;
    size_t elf_size = 0;
    for (int i = 0; i < n; i++)
        if (!img[i].ptx && img[i].arch == 90)
            elf = img[i].payload, elf_size = img[i].payload_size;
    assert_non_null(elf);
    assert_true(elf_size > 64 && memcmp(elf, "\x7f" "ELF", 4) == 0 && elf[4] == 2); /* ELF64 */
    struct elf64 e;
    assert_true(elf64_headers(&e, elf, elf_size));
    int kernels = 0;
    for (unsigned i = 0; i < e.shnum; i++) {
        const unsigned char *sh = elf64_section(&e, i), *code;
        uint64_t size;
        const char *sec = elf64_section_name(&e, sh);
        assert_non_null(sec);
        assert_true(elf64_section_bytes(&e, sh, &code, &size));
        if (strncmp(sec, ".text.", 6) != 0 || !strstr(sec, "hopper"))
            continue;
        const struct sm90_counts c = sm90_count(code, size);
        print_message("%-46s %5d instr %3d HGMMA, %2d waited, %d local\n", sec + 6, c.instr,
                      c.hgmma, c.hgmma_waited, c.local);
        assert_true(c.hgmma >= 24);
        assert_true(2 * c.hgmma_waited <= c.hgmma);                  /* not serialised */
        const size_t len = strlen(sec);
        if (strstr(sec, "paged_prefill_hopper_var_"))
            assert_true(c.local <= 8);     /* the producer's (32 registers), past the consumers' */
        else if (strstr(sec, "paged_prefill") && strstr(sec, "_d64"))
            assert_true(c.local <= 2);
        else if (strstr(sec, "hopper_tma_") && len > 5 && !strcmp(sec + len - 5, "_d128"))
            assert_true(c.local <= 40);
        else if (strstr(sec, "hopper_wide_var_"))
            assert_true(c.local <= 20);
        else
            assert_int_equal(c.local, 0);
        kernels++;
    }
    assert_int_equal(kernels, 48);   /* 24 dense (TMA, cp.async, variants), 8 paged, 16 wide */
}

static const char *const registry[] = {
#define SYMBOL(mode, dtype, D, flags, symbol) #symbol,
    GLLM_CUDA_KERNELS(SYMBOL)
#undef SYMBOL
};

/* Every machine-code image holds exactly the registry's kernels (kernel_registry.h): each row's
 * entry point, and no gllm_ entry point the loader would never find. */
static void test_registry(void **state)
{
    (void)state;
    struct fatbin_image img[FATBIN_MAX_IMAGES];
    const int n = fatbin_images(fatbin_data(), fatbin_size(), img, FATBIN_MAX_IMAGES);
    assert_int_equal(sizeof registry / sizeof registry[0], GLLM_CUDA_KERNEL_COUNT);
    int elves = 0;
    for (int i = 0; i < n; i++) {
        if (img[i].ptx)
            continue;
        struct elf64 e;
        assert_true(elf64_headers(&e, img[i].payload, img[i].payload_size));
        bool seen[GLLM_CUDA_KERNEL_COUNT] = {false};
        for (unsigned s = 0; s < e.shnum; s++) {
            const char *sec = elf64_section_name(&e, elf64_section(&e, s));
            if (!sec || strncmp(sec, ".text.gllm_", 11) != 0)
                continue;
            int k = 0;
            while (k < GLLM_CUDA_KERNEL_COUNT && strcmp(sec + 6, registry[k]) != 0)
                k++;
            if (k == GLLM_CUDA_KERNEL_COUNT)
                fail_msg("sm_%d: %s is not in kernel_registry.h", img[i].arch, sec + 6);
            seen[k] = true;
        }
        for (int k = 0; k < GLLM_CUDA_KERNEL_COUNT; k++)
            if (!seen[k])
                fail_msg("sm_%d: no %s in the image", img[i].arch, registry[k]);
        elves++;
    }
    assert_int_equal(elves, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_images),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_not_a_fatbin),
        cmocka_unit_test(test_hopper_code),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
