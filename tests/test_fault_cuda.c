/* The CUDA backend's classification of driver errors (no GPU needed): out of memory is the
 * job's own DEVMEM, a sticky error poisons the context (DEVLOST, with the driver's words
 * kept for the job's reply), anything else is a plain BACKEND failure. */
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cuda_device.h"

static void test_sticky_errors(void **state)
{
    (void)state;
    static const CUresult sticky[] = {
        CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_ASSERT, CUDA_ERROR_ECC_UNCORRECTABLE, CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_NVLINK_UNCORRECTABLE, CUDA_ERROR_UNKNOWN,
    };
    for (size_t i = 0; i < sizeof sticky / sizeof *sticky; i++)
        assert_true(cuda_error_sticky(sticky[i]));
    /* Out of memory, an invalid value (1), not ready, too many resources for a launch (701):
     * the context goes on. */
    static const CUresult local[] = {CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, 1,
                                     CUDA_ERROR_NOT_READY, 701};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        assert_false(cuda_error_sticky(local[i]));
}

static void test_fail_maps_codes(void **state)
{
    (void)state;
    struct cuda_ctx c = {0};     /* no driver, no log: the mapping alone */
    cuda_fault_clear();
    assert_int_equal(cuda_fail(&c, CUDA_ERROR_OUT_OF_MEMORY, "scratch"), GLLM_EDEVMEM);
    assert_int_equal(cuda_fail(&c, 1, "launch"), GLLM_EBACKEND);
    assert_string_equal(cuda_fault_why(), "");
    assert_int_equal(cuda_fail(&c, CUDA_ERROR_ILLEGAL_ADDRESS, "attention kernel"),
                     GLLM_EDEVLOST);
    assert_non_null(strstr(cuda_fault_why(), "(attention kernel)"));
    cuda_fault_clear();
    assert_string_equal(cuda_fault_why(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sticky_errors),
        cmocka_unit_test(test_fail_maps_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
