/* Shared-memory arenas: checked, mapped client memfds, and the per-session table of them. */
#ifndef GLLMD_ARENA_H
#define GLLMD_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct backend;
struct arena;

/* Where an arena's last reference sends its teardown when it could hold the loop: unpinning
 * and unmapping take time in proportion to the bytes, and freeing a device tensor waits for
 * its device process's control channel, which another client's registration may hold for
 * seconds. ctx's thread pool (methods.c), whose thread calls arena_teardown. */
struct arena_reaper {
    void (*reap)(void *ctx, struct arena *a);
    void *ctx;
};

/* Reference counted: the session's table holds one reference and every job
 * that names the arena holds one, so a release during a job unmaps after it.
 * Touched only on the loop thread, but for arena_teardown. */
struct arena {
    uint32_t id;
    unsigned refs;
    void *base;
    uint64_t size;
    struct backend *pinned_by;  /* backend that registered the mapping, or NULL */
    struct backend *mapped_by;  /* backend that mapped it in its own process, or NULL */
    const struct arena_reaper *reaper;   /* or NULL: the last reference tears it down */
    bool device;                /* a device tensor: base is the backend's pointer */
    struct backend *owner;      /* device tensors: the backend that allocated base */
    int dev;
    /* Device tensors mapped by the client too: exported from here, or the client's memory
     * imported (the import holds the memory until it is unmapped, whatever the client does). */
    enum { ARENA_OWN, ARENA_EXPORTED, ARENA_IMPORTED } share;
    uint64_t share_handle;      /* the backend's, for share_free */
    uint32_t gen;               /* device tensors: the device's generation when made */
};

/* Checks that fd is a memfd sealed against shrinking whose size is exactly
 * size, then maps it shared read/write. Does not take ownership of fd. */
int arena_map(int fd, uint64_t size, struct arena **out);
/* Makes every page of a mapped arena now (any thread; fd is its memfd), as pinning it would:
 * pages made here cost a device process's pinning, which holds its control channel, only
 * their mapping. */
void arena_populate(const struct arena *a, int fd);
/* A device tensor of size bytes on device dev of be (contents undefined until written). */
int arena_new_device(struct backend *be, int dev, uint64_t size, struct arena **out);
/* A device tensor the client maps too: size (a multiple of the backend's share granularity)
 * on dev, and *fd, close-on-exec, for the client (the caller sends it, then closes it). */
int arena_new_exported(struct backend *be, int dev, uint64_t size, struct arena **out, int *fd);
/* The client's exported memory (fd, not consumed) of size bytes on dev, as a device tensor;
 * on refusal a code and a one-line why (backend_share_import). */
int arena_import(struct backend *be, int dev, int fd, uint64_t size, struct arena **out,
                 char *why, size_t len);
/* A device tensor whose device has been reset since it was made: its memory went with the
 * old context; using it answers GLLM_EDEVLOST, freeing it releases only the bookkeeping. */
bool arena_lost(const struct arena *a);
struct arena *arena_ref(struct arena *a);
void arena_unref(struct arena *a);
/* Unregisters, unmaps and frees a (no reference left): on the loop, or the reaper's thread. */
void arena_teardown(struct arena *a);

#define ARENA_TABLE_MAX 256

struct arena_table {
    struct arena *slot[ARENA_TABLE_MAX];
    uint32_t count;
    uint32_t next_id;   /* ids are never reused within a session */
};

/* Takes the caller's reference; assigns a->id. -ENOSPC when full. */
int arena_table_add(struct arena_table *t, struct arena *a, uint32_t limit);
struct arena *arena_table_find(const struct arena_table *t, uint32_t id);
/* Removes and returns the table's reference, or NULL if id is unknown. */
struct arena *arena_table_remove(struct arena_table *t, uint32_t id);

#endif
