/* The embedded AMDGPU code objects: each readable (target from its metadata note, kernel
 * descriptors from its dynamic symbols), the one for an agent's ISA chosen, junk refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hsa_codeobj.h"
#include "pk_host.h"

static void test_embedded_objects(void **state)
{
    (void)state;
    const struct hsaco_image *imgs;
    int n = hsaco_embedded(&imgs);
    assert_int_equal(n, 4);
    static const struct { const char *target; unsigned mach; int wave; } want[] = {
        {"gfx90a", 0x3f, 64}, {"gfx942", 0x4c, 64}, {"gfx1100", 0x41, 32}, {"gfx1201", 0x4e, 32}};
    for (int i = 0; i < n; i++) {
        struct hsaco_info info;
        char why[160] = "";
        assert_string_equal(imgs[i].target, want[i].target);
        assert_true(imgs[i].size > 4096);
        assert_int_equal(hsaco_parse(imgs[i].data, imgs[i].size, &info, why, sizeof why), 0);
        assert_string_equal(info.target, want[i].target);   /* what the note says */
        assert_int_equal(info.mach, want[i].mach);          /* and e_flags agree */
        assert_int_equal(info.nkernels, PK_NKERNELS);
        for (int k = 0; k < PK_NKERNELS; k++) {
            const struct hsaco_kernel *kd = hsaco_find(&info, pk_kernel_names[k]);
            assert_non_null(kd);
            assert_int_equal(kd->wave, want[i].wave);
            assert_int_equal(kd->private_bytes, 0);          /* no spills to scratch */
            if (k <= PK_ATTN_BF16)
                assert_int_equal(kd->kernarg_bytes, sizeof(struct pk_attn_params));
            else
                assert_int_equal(kd->kernarg_bytes, sizeof(struct pk_paged_params));
            /* K and V staged as f32, PK_KEYS keys of up to PK_MAX_D each. */
            assert_int_equal(kd->group_bytes, k == PK_APPEND ? 0 : 2 * PK_KEYS * PK_MAX_D * 4);
        }
        assert_null(hsaco_find(&info, "gllm_pk_missing"));
    }
}

static void test_choice(void **state)
{
    (void)state;
    const struct hsaco_image *imgs;
    int n = hsaco_embedded(&imgs);
    char proc[32], why[200] = "";
    assert_true(hsaco_isa_processor("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", proc, sizeof proc));
    assert_string_equal(proc, "gfx90a");
    assert_int_equal(hsaco_choose(imgs, n, proc, why, sizeof why), 0);
    assert_true(hsaco_isa_processor("amdgcn-amd-amdhsa--gfx1201", proc, sizeof proc));
    assert_int_equal(hsaco_choose(imgs, n, proc, why, sizeof why), 3);
    assert_false(hsaco_isa_processor("amdgcn-amd-amdhsa", proc, sizeof proc));
    assert_false(hsaco_isa_processor("amdgcn-amd-amdhsa--:xnack-", proc, sizeof proc));
    /* gfx1030 (RDNA2) has no object: the reason names it and what gllmd has. */
    assert_int_equal(hsaco_choose(imgs, n, "gfx1030", why, sizeof why), -1);
    assert_string_equal(why, "no code object for gfx1030 (gllmd has: gfx90a gfx942 gfx1100 gfx1201)");
    /* Exact names only: gfx940 is not gfx942. */
    assert_int_equal(hsaco_choose(imgs, n, "gfx940", why, sizeof why), -1);
    assert_string_equal(hsaco_line(), "HSACO gfx90a gfx942 gfx1100 gfx1201 (portable kernels)");
}

static void expect_refused(const void *data, size_t size, const char *reason)
{
    struct hsaco_info info;
    char why[160] = "";
    assert_int_equal(hsaco_parse(data, size, &info, why, sizeof why), -EINVAL);
    if (!strstr(why, reason))
        fail_msg("reason '%s' does not say '%s'", why, reason);
}

static void test_refusals(void **state)
{
    (void)state;
    const struct hsaco_image *imgs;
    hsaco_embedded(&imgs);
    unsigned char junk[256];
    memset(junk, 0xab, sizeof junk);
    expect_refused(junk, sizeof junk, "not a 64-bit little-endian ELF");
    expect_refused(imgs[0].data, 32, "not a 64-bit little-endian ELF");
    /* An ELF for another machine (this test program itself). */
    FILE *f = fopen("/proc/self/exe", "rb");
    assert_non_null(f);
    unsigned char self[64];
    assert_int_equal(fread(self, 1, sizeof self, f), sizeof self);
    fclose(f);
    expect_refused(self, sizeof self, "not an AMDGPU HSA code object");
    /* Cut short: the section headers (at the end) are gone. */
    expect_refused(imgs[1].data, imgs[1].size / 2, "section headers outside the file");
    /* Every section's offset pointed past the end. */
    unsigned char *copy = malloc(imgs[2].size);
    assert_non_null(copy);
    memcpy(copy, imgs[2].data, imgs[2].size);
    uint64_t shoff;
    memcpy(&shoff, copy + 40, 8);
    uint16_t shnum;
    memcpy(&shnum, copy + 60, 2);
    for (unsigned i = 0; i < shnum; i++) {
        uint32_t type;
        memcpy(&type, copy + shoff + i * 64 + 4, 4);
        if (type == 11 /* SHT_DYNSYM */) {
            uint64_t far = imgs[2].size + 1;
            memcpy(copy + shoff + i * 64 + 24, &far, 8);
        }
    }
    expect_refused(copy, imgs[2].size, "dynamic symbol table outside the file");
    /* The metadata note's target key altered: no target. */
    memcpy(copy, imgs[2].data, imgs[2].size);
    unsigned char *key = memmem(copy, imgs[2].size, "amdhsa.target", 13);
    assert_non_null(key);
    key[0] = 'X';
    expect_refused(copy, imgs[2].size, "no amdhsa.target");
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_objects),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
