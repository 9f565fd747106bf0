/* cuda_pin against a fake driver: arenas registered in pieces that never cross a piece's end,
 * all or nothing, unregistered piece by piece; host copies split where the pieces end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "cuda_pin.h"

#define MAXCALLS 64
static struct {
    uintptr_t reg[MAXCALLS];
    size_t reg_len[MAXCALLS];
    int nreg, fail_reg_at;        /* fail the fail_reg_at-th registration (1-based; 0: none) */
    uintptr_t unreg[MAXCALLS];
    int nunreg;
    uintptr_t host[MAXCALLS];
    CUdeviceptr dev[MAXCALLS];
    size_t copy_len[MAXCALLS];
    int ncopy, fail_copy_at;
} fk;

static CUresult f_reg(void *p, size_t n, unsigned flags)
{
    (void)flags;
    if (++fk.nreg == fk.fail_reg_at)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fk.reg[fk.nreg - 1] = (uintptr_t)p, fk.reg_len[fk.nreg - 1] = n;
    return CUDA_SUCCESS;
}

static CUresult f_unreg(void *p)
{
    fk.unreg[fk.nunreg++] = (uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult copy(uintptr_t host, CUdeviceptr dev, size_t n)
{
    if (++fk.ncopy == fk.fail_copy_at)
        return CUDA_ERROR_LAUNCH_FAILED;
    fk.host[fk.ncopy - 1] = host, fk.dev[fk.ncopy - 1] = dev, fk.copy_len[fk.ncopy - 1] = n;
    return CUDA_SUCCESS;
}

static CUresult f_htod(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    return copy((uintptr_t)src, dst, n);
}

static CUresult f_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    return copy((uintptr_t)dst, src, n);
}

static const struct cuda_driver drv = {.cuMemHostRegister = f_reg, .cuMemHostUnregister = f_unreg,
                                       .cuMemcpyHtoDAsync = f_htod, .cuMemcpyDtoHAsync = f_dtoh};
static struct cuda_pins pins = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define PIECE CUDA_PIN_PIECE
#define MiB ((size_t)1 << 20)
/* An address 8 KiB before a piece's end, in address space reserved without access: cuda_pin
 * populates each piece before registering it, which here fails and changes nothing. */
static void *BASE;

static int setup(void **state)
{
    (void)state;
    memset(&fk, 0, sizeof fk);
    return 0;
}

static void test_piece(void **state)
{
    (void)state;
    assert_int_equal(cuda_pin_piece(PIECE - 4096, 1 << 30), 4096);
    assert_int_equal(cuda_pin_piece(3 * PIECE, 1 << 30), PIECE);
    assert_int_equal(cuda_pin_piece(3 * PIECE + 1, 10), 10);
    assert_int_equal(cuda_pin_piece(4 * PIECE - 1, 10), 1);
}

static void test_pinned_in_pieces(void **state)
{
    (void)state;
    const size_t len = 600 * MiB;
    assert_int_equal(cuda_pin(&drv, &pins, BASE, len, 3), CUDA_SUCCESS);
    assert_int_equal(fk.nreg, 4);
    const size_t want[4] = {8192, PIECE, PIECE, len - 8192 - 2 * PIECE};
    uintptr_t at = (uintptr_t)BASE;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fk.reg[i], at);
        assert_int_equal(fk.reg_len[i], want[i]);
        assert_true((fk.reg[i] & (PIECE - 1)) + fk.reg_len[i] <= PIECE);   /* inside one piece */
        at += want[i];
    }
    cuda_unpin(&drv, &pins, BASE);
    assert_int_equal(fk.nunreg, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fk.unreg[i], fk.reg[i]);
    cuda_unpin(&drv, &pins, BASE);                     /* no longer pinned: nothing */
    assert_int_equal(fk.nunreg, 4);
    assert_null(pins.list);
}

static void test_failure_undoes(void **state)
{
    (void)state;
    fk.fail_reg_at = 3;
    assert_int_equal(cuda_pin(&drv, &pins, BASE, 600 * MiB, 3), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(fk.nunreg, 2);                    /* the two made before it */
    assert_int_equal(fk.unreg[0], fk.reg[0]);
    assert_int_equal(fk.unreg[1], fk.reg[1]);
    assert_null(pins.list);
    cuda_unpin(&drv, &pins, BASE);
    assert_int_equal(fk.nunreg, 2);
}

static void test_two_arenas(void **state)
{
    (void)state;
    void *other = (void *)((uintptr_t)BASE + 600 * MiB);   /* right after: pieces adjoin */
    assert_int_equal(cuda_pin(&drv, &pins, BASE, 600 * MiB, 3), CUDA_SUCCESS);
    assert_int_equal(cuda_pin(&drv, &pins, other, 10 * MiB, 3), CUDA_SUCCESS);
    cuda_unpin(&drv, &pins, other);
    assert_int_equal(fk.nunreg, 1);
    assert_int_equal(fk.unreg[0], (uintptr_t)other);
    cuda_unpin(&drv, &pins, BASE);
    assert_int_equal(fk.nunreg, 5);
    assert_null(pins.list);
}

static void test_copies_split(void **state)
{
    (void)state;
    const CUdeviceptr dev = 0x7000000000ull;
    const size_t n = PIECE + 8192 + 100;               /* from BASE: crosses two piece ends */
    assert_int_equal(cuda_copy_htod(&drv, dev, BASE, n, NULL), CUDA_SUCCESS);
    assert_int_equal(fk.ncopy, 3);
    const size_t want[3] = {8192, PIECE, 100};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fk.host[i], (uintptr_t)BASE + off);
        assert_int_equal(fk.dev[i], dev + off);
        assert_int_equal(fk.copy_len[i], want[i]);
        off += want[i];
    }
    fk.ncopy = 0;
    assert_int_equal(cuda_copy_dtoh(&drv, BASE, dev, n, NULL), CUDA_SUCCESS);
    assert_int_equal(fk.ncopy, 3);
    assert_int_equal(fk.host[2], (uintptr_t)BASE + 8192 + PIECE);
    assert_int_equal(fk.dev[2], dev + 8192 + PIECE);
    fk.ncopy = 0, fk.fail_copy_at = 2;                 /* a failure ends the copy there */
    assert_int_equal(cuda_copy_htod(&drv, dev, BASE, n, NULL), CUDA_ERROR_LAUNCH_FAILED);
    assert_int_equal(fk.ncopy, 2);
    fk.ncopy = 0, fk.fail_copy_at = 0;
    assert_int_equal(cuda_copy_htod(&drv, dev, (void *)(uintptr_t)(3 * PIECE), 4096, NULL),
                     CUDA_SUCCESS);
    assert_int_equal(fk.ncopy, 1);
}

int main(void)
{
    void *r = mmap(NULL, (size_t)2 << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (r == MAP_FAILED)
        return 1;
    BASE = (void *)((((uintptr_t)r + PIECE - 1) & ~(uintptr_t)(PIECE - 1)) + PIECE - 8192);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_piece, setup),
        cmocka_unit_test_setup(test_pinned_in_pieces, setup),
        cmocka_unit_test_setup(test_failure_undoes, setup),
        cmocka_unit_test_setup(test_two_arenas, setup),
        cmocka_unit_test_setup(test_copies_split, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
