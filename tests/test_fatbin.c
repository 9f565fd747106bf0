/* The embedded fatbin: readable, holds the promised images, and the right one is chosen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "fatbin.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_images),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_not_a_fatbin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
