/* cuda_launch's graph cache against a fake driver: direct launches first, a graph from a shape's
 * second launch, least recently used shapes replaced, failures falling back to direct launches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_device.h"

/* What the fake driver saw, and what it should fail. */
static struct {
    int direct, created, destroyed, execs, exec_destroyed, set, graph_launch;
    int live_graphs, live_execs;
    bool fail_instantiate, fail_set;
    unsigned last_gx, last_param;   /* of the last launch of either kind */
} fk;

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                         void **extra)
{
    (void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)s, (void)extra;
    fk.direct++, fk.last_gx = gx, fk.last_param = *(unsigned *)params[0];
    return CUDA_SUCCESS;
}

static CUresult f_graph_create(CUgraph *g, unsigned flags)
{
    (void)flags;
    fk.created++, fk.live_graphs++;
    *g = (CUgraph)(uintptr_t)(0x1000 + fk.created);
    return CUDA_SUCCESS;
}

static CUresult f_graph_destroy(CUgraph g)
{
    (void)g;
    fk.destroyed++, fk.live_graphs--;
    return CUDA_SUCCESS;
}

static unsigned node_param;          /* the one node's parameter as last set (one graph at a time) */

static CUresult f_add_node(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t nd,
                           const CUDA_KERNEL_NODE_PARAMS *p)
{
    (void)g, (void)deps, (void)nd;
    *n = (CUgraphNode)(uintptr_t)0x2000;
    node_param = *(unsigned *)p->kernelParams[0];
    fk.last_gx = p->gridDimX;
    return CUDA_SUCCESS;
}

static CUresult f_instantiate(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    (void)g, (void)flags;
    if (fk.fail_instantiate)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fk.execs++, fk.live_execs++;
    *e = (CUgraphExec)(uintptr_t)(0x3000 + fk.execs);
    return CUDA_SUCCESS;
}

static CUresult f_exec_destroy(CUgraphExec e)
{
    (void)e;
    fk.exec_destroyed++, fk.live_execs--;
    return CUDA_SUCCESS;
}

static CUresult f_set(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    (void)e, (void)n;
    if (fk.fail_set)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fk.set++;
    node_param = *(unsigned *)p->kernelParams[0];
    return CUDA_SUCCESS;
}

static CUresult f_graph_launch(CUgraphExec e, CUstream s)
{
    (void)e, (void)s;
    fk.graph_launch++, fk.last_param = node_param;
    return CUDA_SUCCESS;
}

static struct cuda_driver drv = {
    .cuLaunchKernel = f_launch,
    .cuGraphCreate = f_graph_create,
    .cuGraphDestroy = f_graph_destroy,
    .cuGraphAddKernelNode = f_add_node,
    .cuGraphInstantiate = f_instantiate,
    .cuGraphExecDestroy = f_exec_destroy,
    .cuGraphExecKernelNodeSetParams = f_set,
    .cuGraphLaunch = f_graph_launch,
};

static struct cuda_dev dev;
static const CUfunction K1 = (CUfunction)(uintptr_t)0x10, K2 = (CUfunction)(uintptr_t)0x20;

static int setup(void **state)
{
    (void)state;
    memset(&fk, 0, sizeof fk);
    memset(&dev, 0, sizeof dev);
    dev.lane.graphs = true;
    return 0;
}

static void launch(CUfunction f, unsigned gx, unsigned param)
{
    assert_int_equal(cuda_launch(&drv, &dev, &dev.lane, f, gx, 8, 128, 0, &param), CUDA_SUCCESS);
    assert_int_equal(fk.last_param, param);      /* every launch runs with its own parameters */
}

/* A client's queue launches directly, however often a shape repeats: a graph shared by two
 * streams would order one client's jobs behind another's. */
static void test_lane_without_graphs(void **state)
{
    (void)state;
    struct cuda_lane own = {.graphs = false};
    for (unsigned i = 1; i <= 3; i++) {
        unsigned param = i;
        assert_int_equal(cuda_launch(&drv, &dev, &own, K1, 32, 8, 128, 0, &param), CUDA_SUCCESS);
        assert_int_equal(fk.last_param, param);
    }
    assert_int_equal(fk.direct, 3);
    assert_int_equal(fk.execs, 0);
}

static void test_graph_from_second_launch(void **state)
{
    (void)state;
    launch(K1, 32, 1);
    assert_int_equal(fk.direct, 1);
    assert_int_equal(fk.execs, 0);
    launch(K1, 32, 2);                           /* seen before: its graph, built with these */
    assert_int_equal(fk.execs, 1);
    assert_int_equal(fk.graph_launch, 1);
    assert_int_equal(fk.set, 0);
    for (unsigned i = 3; i < 10; i++)
        launch(K1, 32, i);                       /* then only updated */
    assert_int_equal(fk.execs, 1);
    assert_int_equal(fk.set, 7);
    assert_int_equal(fk.graph_launch, 8);
    assert_int_equal(fk.direct, 1);
    launch(K2, 32, 11);                          /* another function, grid or block: a new shape */
    launch(K1, 16, 12);
    assert_int_equal(fk.direct, 3);
    cuda_launch_free(&drv, &dev);
    assert_int_equal(fk.live_execs, 0);
    assert_int_equal(fk.live_graphs, 0);
}

static void test_least_recent_replaced(void **state)
{
    (void)state;
    for (unsigned g = 1; g <= GLLM_CUDA_GRAPH_SLOTS; g++) {    /* every slot with a graph */
        launch(K1, g, g);
        launch(K1, g, g);
    }
    assert_int_equal(fk.live_execs, GLLM_CUDA_GRAPH_SLOTS);
    launch(K1, 1, 100);                          /* shape 1 used again: shape 2 is the oldest */
    launch(K2, 1, 101);                          /* a new shape takes shape 2's slot */
    assert_int_equal(fk.live_execs, GLLM_CUDA_GRAPH_SLOTS - 1);
    assert_int_equal(fk.exec_destroyed, 1);
    const int direct = fk.direct;
    launch(K1, 1, 102);                          /* still a graph */
    assert_int_equal(fk.direct, direct);
    launch(K1, 2, 103);                          /* forgotten: direct again */
    assert_int_equal(fk.direct, direct + 1);
    cuda_launch_free(&drv, &dev);
    assert_int_equal(fk.live_execs, 0);
    assert_int_equal(fk.live_graphs, 0);
}

static void test_failures_fall_back(void **state)
{
    (void)state;
    fk.fail_instantiate = true;
    launch(K1, 32, 1);
    launch(K1, 32, 2);                           /* the build fails: launched directly */
    assert_int_equal(fk.direct, 2);
    assert_int_equal(fk.live_graphs, 0);
    fk.fail_instantiate = false;
    launch(K1, 32, 3);                           /* and not tried again */
    assert_int_equal(fk.direct, 3);
    assert_int_equal(fk.execs, 0);

    launch(K2, 32, 4);
    launch(K2, 32, 5);
    assert_int_equal(fk.graph_launch, 1);
    fk.fail_set = true;
    launch(K2, 32, 6);                           /* an update refused: dropped, launched directly */
    assert_int_equal(fk.direct, 5);
    assert_int_equal(fk.live_execs, 0);
    fk.fail_set = false;
    launch(K2, 32, 7);
    assert_int_equal(fk.direct, 6);
    assert_int_equal(fk.execs, 1);
    cuda_launch_free(&drv, &dev);
    assert_int_equal(fk.live_graphs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_lane_without_graphs, setup),
        cmocka_unit_test_setup(test_graph_from_second_launch, setup),
        cmocka_unit_test_setup(test_least_recent_replaced, setup),
        cmocka_unit_test_setup(test_failures_fall_back, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
