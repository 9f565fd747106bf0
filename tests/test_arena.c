/* Arena checks: only a memfd sealed against shrinking, of the stated size, is ever mapped. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "arena.h"
#include "device_health.h"
#include "gllm/errors.h"
#include "testutil.h"

static int memfd_of(size_t size, unsigned seals)
{
    int fd = make_memfd(size, seals);
    assert_true(fd >= 0);
    return fd;
}

static void test_sealed_memfd_maps_and_shares(void **state)
{
    (void)state;
    int fd = memfd_of(8192, F_SEAL_SHRINK);
    struct arena *a;
    assert_int_equal(arena_map(fd, 8192, &a), 0);
    char *mine = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(mine != MAP_FAILED);
    mine[4000] = 42;                         /* the client's writes are the daemon's reads */
    assert_int_equal(((char *)a->base)[4000], 42);
    /* Shrinking is now impossible, so the mapping can never SIGBUS. */
    assert_int_equal(ftruncate(fd, 100), -1);
    arena_unref(a);
    munmap(mine, 8192);
    close(fd);
}

static void test_refused_fds(void **state)
{
    (void)state;
    struct arena *a = NULL;
    int fd = memfd_of(4096, 0);
    assert_int_equal(arena_map(fd, 4096, &a), GLLM_EUNSEALED);
    close(fd);

    fd = memfd_of(4096, F_SEAL_SHRINK);
    assert_int_equal(arena_map(fd, 8192, &a), GLLM_EARENASIZE);   /* larger than the file */
    assert_int_equal(arena_map(fd, 0, &a), GLLM_EARENASIZE);
    close(fd);

    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(arena_map(p[0], 4096, &a), GLLM_ENOTMEMFD);
    close(p[0]), close(p[1]);

    int s[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    assert_int_equal(arena_map(s[0], 4096, &a), GLLM_ENOTMEMFD);
    close(s[0]), close(s[1]);

    fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(arena_map(fd, 4096, &a), GLLM_ENOTMEMFD);
    close(fd);

    char path[] = "/tmp/gllm-arena-XXXXXX";   /* a regular file cannot be sealed */
    fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(ftruncate(fd, 4096), 0);
    assert_int_equal(arena_map(fd, 4096, &a), GLLM_ENOTMEMFD);
    close(fd);
    assert_null(a);
}

static struct arena *fake_arena(void)
{
    int fd = memfd_of(4096, F_SEAL_SHRINK);
    struct arena *a;
    assert_int_equal(arena_map(fd, 4096, &a), 0);
    close(fd);
    return a;
}

static void test_table(void **state)
{
    (void)state;
    struct arena_table t = {0};
    struct arena *a = fake_arena(), *b = fake_arena(), *c = fake_arena();
    assert_int_equal(arena_table_add(&t, a, 2), 0);
    assert_int_equal(arena_table_add(&t, b, 2), 0);
    assert_int_equal(arena_table_add(&t, c, 2), -ENOSPC);        /* per-session limit */
    assert_true(a->id != b->id && a->id != 0);
    assert_ptr_equal(arena_table_find(&t, b->id), b);
    assert_null(arena_table_find(&t, 0));
    assert_null(arena_table_find(&t, 999));
    uint32_t old = a->id;
    assert_ptr_equal(arena_table_remove(&t, old), a);
    assert_null(arena_table_remove(&t, old));                     /* twice: unknown */
    assert_int_equal(arena_table_add(&t, c, 2), 0);
    assert_true(c->id != old);                                    /* ids are never reused */
    assert_null(arena_table_find(&t, old));
    arena_unref(a);
    arena_unref(arena_table_remove(&t, b->id));
    arena_unref(arena_table_remove(&t, c->id));
    assert_int_equal(t.count, 0);
}

static void test_refcount_keeps_mapping(void **state)
{
    (void)state;
    struct arena *a = fake_arena();
    arena_ref(a);                 /* a job holds it */
    arena_unref(a);               /* the client released it */
    ((char *)a->base)[0] = 1;     /* still mapped for the job (ASan would catch a use after free) */
    assert_int_equal(a->refs, 1);
    arena_unref(a);
}

/* Device memory is made and freed on the loop and on the thread pool at once: neither turns
 * the other away as a reset would (a mutex's try did, and a device tensor then failed with
 * DEVLOST, or was never freed). Only a reset does. */
static void test_health_lock_shared_until_reset(void **state)
{
    (void)state;
    assert_true(health_lock(0));
    assert_true(health_lock(0));
    health_unlock(0);
    health_unlock(0);
    const uint32_t gen = health_gen(0);
    health_reset_begin(0, "test");
    assert_false(health_lock(0));
    assert_int_equal(health_gen(0), gen + 1);
    health_reset_end(0, 0, "");
    assert_true(health_lock(0));
    health_unlock(0);
    assert_false(health_lock(-1));
}

/* A populated arena reads what was in it (the pages are made, not replaced). */
static void test_populate_keeps_contents(void **state)
{
    (void)state;
    int fd = memfd_of(1 << 20, F_SEAL_SHRINK);
    struct arena *a;
    assert_int_equal(arena_map(fd, 1 << 20, &a), 0);
    memset(a->base, 0x5a, 4096);
    arena_populate(a, fd);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(st.st_blocks * 512 >= (1 << 20));   /* every page made */
    assert_int_equal(((unsigned char *)a->base)[4095], 0x5a);
    assert_int_equal(((unsigned char *)a->base)[(1 << 20) - 1], 0);
    arena_unref(a);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sealed_memfd_maps_and_shares),
        cmocka_unit_test(test_refused_fds),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_refcount_keeps_mapping),
        cmocka_unit_test(test_health_lock_shared_until_reset),
        cmocka_unit_test(test_populate_keeps_contents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
