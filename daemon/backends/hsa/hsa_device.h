/* One HSA GPU agent as a gllmd device: its queue, completion signal, memory pools, loaded
 * code object and kernels, and the copies and dispatches the portable job logic asks for. */
#ifndef GLLMD_HSA_DEVICE_H
#define GLLMD_HSA_DEVICE_H

#include <pthread.h>

#include "backend_api.h"
#include "hsa_runtime.h"
#include "pk_host.h"

/* How long one copy or kernel may take before the device is declared hung. */
#define HSA_WAIT_DEFAULT_NS (60ull * 1000000000ull)
/* Host bounce buffer for copies from memory the runtime has not locked, at most. */
#define HSA_BOUNCE_MAX (64u << 20)

struct hsa_kernel_sym {
    uint64_t object;               /* the kernel descriptor's address, for the packet */
    uint32_t kernarg_bytes, group_bytes, private_bytes;
};

struct hsa_dev {
    const struct hsa_runtime *rt;
    hsa_agent_t agent;
    hsa_agent_t host;              /* a CPU agent: the other end of copies */
    hsa_amd_memory_pool_t device_pool;   /* coarse-grained, on the GPU */
    hsa_amd_memory_pool_t kernarg_pool;  /* the host's fine-grained kernarg pool */
    hsa_queue_t *queue;
    uint32_t queue_size;
    int queue_fault;               /* hsa_status_t the runtime reported on the queue; 0: none */
    hsa_signal_t signal;           /* completion of the dispatch or copy in flight */
    bool have_signal, have_exe, have_reader;
    hsa_executable_t exe;
    hsa_code_object_reader_t reader;
    struct hsa_kernel_sym k[PK_NKERNELS];
    int wave;
    void *kernarg;                 /* one dispatch's arguments (jobs run one at a time) */
    size_t kernarg_bytes;
    void *scratch;                 /* device memory for staged tensors */
    size_t scratch_bytes;
    void *bounce;                  /* host memory the GPU can reach, for copies */
    size_t bounce_bytes;
    uint64_t wait_ns;              /* HSA_WAIT_DEFAULT_NS; tests shorten it */
    struct hsa_locked *locked;     /* the backend's table of locked host ranges */
    struct backend_log log;
    char processor[32];            /* "gfx90a" */
    gllm_device_info info;
};

/* Host ranges locked for every GPU (host_register), looked up by copies. */
#define HSA_MAX_LOCKED 256
struct hsa_locked {
    pthread_mutex_t lock;
    int n;
    struct {
        const char *host;
        size_t bytes;
        char *agent_ptr;
    } r[HSA_MAX_LOCKED];
};

/* Opens GPU agent a into x (zeroed, x->rt, x->host, x->locked, x->log set): picks and loads
 * the embedded code object for its ISA, its kernels, queue, signal and pools. On failure why
 * says what failed in one line; close it anyway. */
int hsa_device_open(struct hsa_dev *x, hsa_agent_t a, char *why, size_t len);
void hsa_device_close(struct hsa_dev *x);
/* The processor ("gfx90a") of agent a's first ISA; false when it has none. */
bool hsa_agent_processor(const struct hsa_runtime *rt, hsa_agent_t a, char *out, size_t len);

/* Device memory of bytes on x: 0, GLLM_EDEVMEM or GLLM_EBACKEND. */
int hsa_device_alloc(struct hsa_dev *x, size_t bytes, void **out);
void hsa_device_free(struct hsa_dev *x, void *p);
/* A blocking copy between host and device memory. */
int hsa_device_copy(struct hsa_dev *x, void *dst, const void *src, size_t bytes, bool to_device);

/* The portable job logic's interface over x (pk_host.h). */
extern const struct pk_device_ops hsa_pk_ops;

#endif
