/* Kernel launches through one-node CUDA graphs kept per launch shape: cheaper for the host. */
#include <string.h>

#include "cuda_device.h"

/* Why graphs: on the H100 and H200 hosts we measured, updating a one-node graph's parameters
 * and launching it costs the host about 2.2 µs, against 3.4–3.6 µs for cuLaunchKernel, and
 * the GPU starts the kernel that much sooner (docs/performance.md). The saving holds only
 * while the node's function, grid, block and shared memory stay as the graph was built, so
 * each shape gets its own graph. A shape's graph is built the second time it is launched:
 * shapes seen once (a prefill of an odd length) never pay for building one. */

/* Destroys s's graph, if it has one; the shape stays remembered. */
static void release(const struct cuda_driver *d, struct cuda_graph_slot *s)
{
    if (s->exec)
        d->cuGraphExecDestroy(s->exec);
    if (s->graph)
        d->cuGraphDestroy(s->graph);
    s->exec = NULL, s->graph = NULL;
}

void cuda_launch_free(const struct cuda_driver *d, struct cuda_dev *x)
{
    for (int i = 0; i < GLLM_CUDA_GRAPH_SLOTS; i++) {
        release(d, &x->graphs[i]);
        memset(&x->graphs[i], 0, sizeof x->graphs[i]);
    }
}

CUresult cuda_launch(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                     CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned smem,
                     void *param)
{
    void *args[] = {param};
    if (!ln->graphs)
        return d->cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, smem, ln->stream, args, NULL);
    const CUDA_KERNEL_NODE_PARAMS kp = {.func = f, .gridDimX = gx, .gridDimY = gy, .gridDimZ = 1,
                                        .blockDimX = bx, .blockDimY = 1, .blockDimZ = 1,
                                        .sharedMemBytes = smem, .kernelParams = args};
    struct cuda_graph_slot *s = NULL, *oldest = &x->graphs[0];
    for (int i = 0; i < GLLM_CUDA_GRAPH_SLOTS && !s; i++) {
        struct cuda_graph_slot *t = &x->graphs[i];
        if (t->f == f && t->gx == gx && t->gy == gy && t->bx == bx && t->smem == smem)
            s = t;
        else if (t->used < oldest->used)
            oldest = t;
    }
    const bool seen = s != NULL;
    if (!seen) {                             /* a new shape: remembered, launched directly */
        s = oldest;
        release(d, s);
        *s = (struct cuda_graph_slot){.f = f, .gx = gx, .gy = gy, .bx = bx, .smem = smem};
    }
    s->used = ++x->graph_clock;
    if (seen && !s->exec && !s->failed) {    /* the second time: its graph, built with kp */
        if (d->cuGraphCreate(&s->graph, 0) == CUDA_SUCCESS &&
            d->cuGraphAddKernelNode(&s->node, s->graph, NULL, 0, &kp) == CUDA_SUCCESS &&
            d->cuGraphInstantiate(&s->exec, s->graph, 0) == CUDA_SUCCESS)
            return d->cuGraphLaunch(s->exec, ln->stream);
        s->exec = NULL;                      /* (not set by a failed instantiate) */
        release(d, s);
        s->failed = true;                    /* launched directly from now */
    } else if (s->exec) {
        if (d->cuGraphExecKernelNodeSetParams(s->exec, s->node, &kp) == CUDA_SUCCESS)
            return d->cuGraphLaunch(s->exec, ln->stream);
        release(d, s);                       /* not updatable: launched directly from now */
        s->failed = true;
    }
    return d->cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, smem, ln->stream, args, NULL);
}
