/* The daemon's one door to the backends: the registry, selection by score, and a wrapper
 * for each entry of the interface (daemon/backends/common/backend_api.h). */
#ifndef GLLMD_BACKEND_H
#define GLLMD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend_api.h"

/* Names of the compiled-in backends in order of preference ("cuda, cpu"), for --version
 * and error messages. */
const char *backend_names(void);
/* true for "auto" and for the name of a compiled-in backend. */
bool backend_known(const char *name);
/* Writes each compiled-in backend's describe() line, separated by "; ". */
void backend_describe(char *buf, size_t len);
/* Picks and opens a backend: name "auto" tries each by score and falls back to the next
 * when one fails to open. why says what was passed over and why (one line), on success as
 * on failure. */
int backend_select(const char *name, const struct backend_config *cfg, struct backend **out,
                   char *why, size_t len);
void backend_close(struct backend *be);

const char *backend_name(const struct backend *be);
int backend_device_count(const struct backend *be);
const struct backend_caps *backend_caps(const struct backend *be);
/* The backend's modes as hello reports them and jobs are checked against, and each mode's
 * dtypes (dtypes NULL: not wanted): a mode the backend left zeroed is plain attention in the
 * backend's dtypes with head dims 1..caps.max_head_dim. Arrays of GLLM_MODE_COUNT. */
struct proto_mode_caps;
void backend_mode_caps(const struct backend *be, struct proto_mode_caps *out, uint32_t *dtypes);
void backend_caps_modes(const struct backend_caps *caps, struct proto_mode_caps *out,
                        uint32_t *dtypes);
/* The compiled-in backends, i in [0, backend_registered()), in order of preference: name,
 * whether auto may pick it, and what it declares (backend_iface.declare) without a device.
 * false (caps zeroed) when it declares nothing. */
size_t backend_registered(void);
bool backend_declared(size_t i, const char **name, bool *by_auto, struct backend_caps *caps);
bool backend_has(const struct backend *be, uint32_t feature);

int backend_device_info(struct backend *be, int dev, gllm_device_info *out);
/* -ENOTSUP when the backend does not report memory. */
int backend_memory_info(struct backend *be, int dev, uint64_t *used, uint64_t *total);
/* An arena jobs will name (fd backs [p, p + len)): 0 when the backend holds it now (call
 * backend_host_unmap when it goes), -ENOTSUP when it needs nothing (it runs in this
 * process), else a code. */
int backend_host_map(struct backend *be, void *p, size_t len, int fd);
void backend_host_unmap(struct backend *be, void *p);
/* Whether the backend registers host memory (GPUs): memory it must reach is registered. */
bool backend_registers_host(const struct backend *be);
/* 0 when p is now registered (pinned); -ENOTSUP when the backend has nothing to gain. */
int backend_host_register(struct backend *be, void *p, size_t len);
void backend_host_unregister(struct backend *be, void *p);
/* -ENOTSUP when the backend has no device tensors. */
int backend_dev_alloc(struct backend *be, int dev, size_t bytes, void **out);
void backend_dev_free(struct backend *be, int dev, void *p);
/* Memory shared with a client (backend_api.h says what each does); -ENOTSUP when the
 * backend shares none. size rounds bytes up to the share granularity (0 on overflow or
 * when there is none). */
size_t backend_share_size(const struct backend *be, size_t bytes);
int backend_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                        int *fd);
int backend_share_import(struct backend *be, int dev, int fd, size_t bytes,
                         struct backend_shared *out, char *why, size_t len);
void backend_share_free(struct backend *be, int dev, const struct backend_shared *s);
/* On the device's worker thread. */
int backend_copy(struct backend *be, int dev, const struct copy_args *c);
int backend_attention(struct backend *be, int dev, const struct attn_args *a);
int backend_paged(struct backend *be, int dev, const struct paged_args *p);
/* On the device's worker thread: the reset after a context-fatal error or a hung job, and
 * the test-only fault (backend_api.h). -ENOTSUP when the backend has no such entry. */
int backend_reset(struct backend *be, int dev, char *why, size_t len);
/* What a reset of dev may take beyond the daemon's bound (backend_api.h); 0 when nothing. */
uint32_t backend_reset_allowance_ms(struct backend *be, int dev);
/* Whether be says when a device is lost while idle (its lost entry, with reset), and whether
 * dev is (why: one line). On dev's worker thread. */
bool backend_watches_loss(const struct backend *be);
bool backend_device_lost(struct backend *be, int dev, char *why, size_t len);
/* Whether a device of be can be reset in this process after a fault (it has a reset entry);
 * if not, only a new process brings the device back. */
bool backend_recovers_in_process(const struct backend *be);
int backend_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                         uint64_t deadline_ns, char *why, size_t len);
/* Queues (backend_api.h, "Queues"): whether be has them (feature and all three entries);
 * open and poll on the device's worker thread, close on any thread with nothing in flight
 * (accepts NULL). */
bool backend_has_queues(const struct backend *be);
int backend_queue_open(struct backend *be, int dev, struct backend_queue **out);
int backend_queue_poll(struct backend *be, int dev, struct backend_queue *q, bool cancel);
void backend_queue_close(struct backend *be, int dev, struct backend_queue *q);
/* On the loop, before a paged job is queued: 0 when the backend can run it, else a code and
 * a one-line reason (GLLM_EMETHOD when the backend has no paged operations). */
int backend_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len);

#endif
