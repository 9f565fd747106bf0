/* The HSA runtime subset gllmd uses, declared here with the runtime's values and resolved
 * from libhsa-runtime64.so.1 with dlopen: building needs no ROCm package. */
#ifndef GLLMD_HSA_RUNTIME_H
#define GLLMD_HSA_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int hsa_status_t;
enum {
    HSA_STATUS_SUCCESS = 0x0,
    HSA_STATUS_INFO_BREAK = 0x1,          /* an iteration callback's "stop here" */
    HSA_STATUS_ERROR = 0x1000,
    HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
    HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
    HSA_STATUS_ERROR_INVALID_ISA = 0x100F,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT = 0x1010,
};

/* Opaque handles, each a struct of one uint64_t as in the runtime's ABI. */
typedef struct { uint64_t handle; } hsa_agent_t;
typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct { uint64_t handle; } hsa_isa_t;
typedef struct { uint64_t handle; } hsa_executable_t;
typedef struct { uint64_t handle; } hsa_executable_symbol_t;
typedef struct { uint64_t handle; } hsa_code_object_reader_t;
typedef struct { uint64_t handle; } hsa_loaded_code_object_t;
typedef struct { uint64_t handle; } hsa_amd_memory_pool_t;
typedef int64_t hsa_signal_value_t;

/* hsa_queue_t on a 64-bit little-endian host. */
typedef struct {
    uint32_t type;
    uint32_t features;
    void *base_address;                   /* size packets of 64 bytes */
    hsa_signal_t doorbell_signal;
    uint32_t size;
    uint32_t reserved1;
    uint64_t id;
} hsa_queue_t;

/* hsa_kernel_dispatch_packet_t: 64 bytes; grid sizes are in work-items, not workgroups. */
typedef struct {
    uint16_t header;
    uint16_t setup;
    uint16_t workgroup_size_x, workgroup_size_y, workgroup_size_z;
    uint16_t reserved0;
    uint32_t grid_size_x, grid_size_y, grid_size_z;
    uint32_t private_segment_size;
    uint32_t group_segment_size;
    uint64_t kernel_object;
    void *kernarg_address;
    uint64_t reserved2;
    hsa_signal_t completion_signal;
} hsa_kernel_dispatch_packet_t;

enum {
    HSA_DEVICE_TYPE_CPU = 0,
    HSA_DEVICE_TYPE_GPU = 1,
    HSA_AGENT_INFO_NAME = 0,              /* char[64], "gfx90a" */
    HSA_AGENT_INFO_WAVEFRONT_SIZE = 6,    /* uint32_t */
    HSA_AGENT_INFO_QUEUE_MAX_SIZE = 14,   /* uint32_t */
    HSA_AGENT_INFO_DEVICE = 17,           /* hsa_device_type_t */
    HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT = 0xA002,
    HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009,   /* char[64] */
    HSA_ISA_INFO_NAME_LENGTH = 0,
    HSA_ISA_INFO_NAME = 1,                /* "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" */
    HSA_PROFILE_FULL = 1,
    HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT = 0,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE = 11,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE = 13,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE = 14,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT = 22,
    HSA_QUEUE_TYPE_MULTI = 0,
    HSA_QUEUE_TYPE_SINGLE = 1,
    HSA_SIGNAL_CONDITION_EQ = 0,
    HSA_SIGNAL_CONDITION_LT = 2,
    HSA_WAIT_STATE_BLOCKED = 0,
    HSA_WAIT_STATE_ACTIVE = 1,
    HSA_PACKET_TYPE_INVALID = 1,
    HSA_PACKET_TYPE_KERNEL_DISPATCH = 2,
    HSA_FENCE_SCOPE_AGENT = 1,
    HSA_FENCE_SCOPE_SYSTEM = 2,
    HSA_PACKET_HEADER_TYPE = 0,           /* bit offsets in a packet header */
    HSA_PACKET_HEADER_BARRIER = 8,
    HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9,
    HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11,
    HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS = 0,
    HSA_AMD_SEGMENT_GLOBAL = 0,
    HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0,
    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1,
    HSA_AMD_MEMORY_POOL_INFO_SIZE = 2,    /* size_t */
    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5,   /* bool */
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4,
};

typedef hsa_status_t (*hsa_agent_cb)(hsa_agent_t agent, void *data);
typedef hsa_status_t (*hsa_isa_cb)(hsa_isa_t isa, void *data);
typedef hsa_status_t (*hsa_pool_cb)(hsa_amd_memory_pool_t pool, void *data);
typedef void (*hsa_queue_error_cb)(hsa_status_t status, hsa_queue_t *source, void *data);

/* X(return, name, args): every symbol is exported under its own name. */
#define HSA_RUNTIME_FUNCS(X)                                                                 \
    X(hsa_status_t, hsa_init, (void))                                                        \
    X(hsa_status_t, hsa_shut_down, (void))                                                   \
    X(hsa_status_t, hsa_status_string, (hsa_status_t s, const char **text))                  \
    X(hsa_status_t, hsa_iterate_agents, (hsa_agent_cb cb, void *data))                       \
    X(hsa_status_t, hsa_agent_get_info, (hsa_agent_t a, int attribute, void *value))         \
    X(hsa_status_t, hsa_agent_iterate_isas, (hsa_agent_t a, hsa_isa_cb cb, void *data))      \
    X(hsa_status_t, hsa_isa_get_info_alt, (hsa_isa_t isa, int attribute, void *value))       \
    X(hsa_status_t, hsa_amd_agent_iterate_memory_pools, (hsa_agent_t a, hsa_pool_cb cb, void *data)) \
    X(hsa_status_t, hsa_amd_memory_pool_get_info, (hsa_amd_memory_pool_t p, int attribute, void *value)) \
    X(hsa_status_t, hsa_amd_memory_pool_allocate, (hsa_amd_memory_pool_t p, size_t bytes, uint32_t flags, void **ptr)) \
    X(hsa_status_t, hsa_amd_memory_pool_free, (void *ptr))                                   \
    X(hsa_status_t, hsa_amd_agents_allow_access, (uint32_t n, const hsa_agent_t *agents, const uint32_t *flags, const void *ptr)) \
    X(hsa_status_t, hsa_amd_memory_lock, (void *host, size_t bytes, hsa_agent_t *agents, int n, void **agent_ptr)) \
    X(hsa_status_t, hsa_amd_memory_unlock, (void *host))                                     \
    X(hsa_status_t, hsa_amd_memory_async_copy,                                               \
      (void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent, size_t bytes, \
       uint32_t ndeps, const hsa_signal_t *deps, hsa_signal_t completion))                   \
    X(hsa_status_t, hsa_queue_create,                                                        \
      (hsa_agent_t a, uint32_t size, uint32_t type, hsa_queue_error_cb cb, void *data,       \
       uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **queue))     \
    X(hsa_status_t, hsa_queue_destroy, (hsa_queue_t * q))                                    \
    X(uint64_t, hsa_queue_add_write_index_scacq_screl, (const hsa_queue_t *q, uint64_t n))   \
    X(uint64_t, hsa_queue_load_read_index_scacquire, (const hsa_queue_t *q))                 \
    X(hsa_status_t, hsa_signal_create,                                                       \
      (hsa_signal_value_t initial, uint32_t nconsumers, const hsa_agent_t *consumers, hsa_signal_t *s)) \
    X(hsa_status_t, hsa_signal_destroy, (hsa_signal_t s))                                    \
    X(void, hsa_signal_store_screlease, (hsa_signal_t s, hsa_signal_value_t v))              \
    X(hsa_signal_value_t, hsa_signal_wait_scacquire,                                         \
      (hsa_signal_t s, int condition, hsa_signal_value_t compare, uint64_t timeout_hint, int wait_state)) \
    X(hsa_status_t, hsa_code_object_reader_create_from_memory,                               \
      (const void *image, size_t bytes, hsa_code_object_reader_t *r))                        \
    X(hsa_status_t, hsa_code_object_reader_destroy, (hsa_code_object_reader_t r))            \
    X(hsa_status_t, hsa_executable_create_alt,                                               \
      (int profile, int rounding, const char *options, hsa_executable_t *e))                 \
    X(hsa_status_t, hsa_executable_load_agent_code_object,                                   \
      (hsa_executable_t e, hsa_agent_t a, hsa_code_object_reader_t r, const char *options,   \
       hsa_loaded_code_object_t *loaded))                                                    \
    X(hsa_status_t, hsa_executable_freeze, (hsa_executable_t e, const char *options))        \
    X(hsa_status_t, hsa_executable_destroy, (hsa_executable_t e))                            \
    X(hsa_status_t, hsa_executable_get_symbol_by_name,                                       \
      (hsa_executable_t e, const char *name, const hsa_agent_t *a, hsa_executable_symbol_t *s)) \
    X(hsa_status_t, hsa_executable_symbol_get_info,                                          \
      (hsa_executable_symbol_t s, int attribute, void *value))

/* The resolved table. Tests build their own (a fake runtime) and hand it to the backend
 * through hsa_runtime_override. */
struct hsa_runtime {
    void *handle;
#define HSA_RUNTIME_FIELD_(ret, name, args) ret(*name) args;
    HSA_RUNTIME_FUNCS(HSA_RUNTIME_FIELD_)
#undef HSA_RUNTIME_FIELD_
};

/* Opens libhsa-runtime64.so.1 (once per process) and resolves every symbol, or returns NULL
 * and a one-line reason. With an override set, returns that table instead. */
const struct hsa_runtime *hsa_runtime_load(char *why, size_t len);
/* Tests: every later hsa_runtime_load returns rt (NULL: back to the real library). */
void hsa_runtime_override(const struct hsa_runtime *rt);
/* "HSA_STATUS_ERROR_OUT_OF_RESOURCES: ..." style text from the runtime, for logs. */
const char *hsa_error_text(const struct hsa_runtime *rt, hsa_status_t s, char *buf, size_t len);

#endif
