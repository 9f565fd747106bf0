/* Sessions: a client's regions and their counters, its quotas and its job count. */
#include "session.h"

void session_init(struct session *s, struct region_totals *totals)
{
    *s = (struct session){.totals = totals};
    atomic_init(&s->inflight, 0);
}

/* Adds (sign 1) or removes (sign -1) a region's bytes from the counters. */
static void account(struct session *s, const struct arena *a, int sign)
{
    struct region_totals *t = s->totals;
    uint64_t n = a->size;
    if (a->device) {
        s->device_bytes = sign > 0 ? s->device_bytes + n : s->device_bytes - n;
        t->device_bytes = sign > 0 ? t->device_bytes + n : t->device_bytes - n;
        t->dtensors += (uint32_t)sign;
        if (a->share == ARENA_EXPORTED) {
            s->exported_bytes = sign > 0 ? s->exported_bytes + n : s->exported_bytes - n;
            t->exported_bytes = sign > 0 ? t->exported_bytes + n : t->exported_bytes - n;
        } else if (a->share == ARENA_IMPORTED) {
            s->imported_bytes = sign > 0 ? s->imported_bytes + n : s->imported_bytes - n;
            t->imported_bytes = sign > 0 ? t->imported_bytes + n : t->imported_bytes - n;
        }
    } else {
        s->narenas += (uint32_t)sign;
        s->arena_bytes = sign > 0 ? s->arena_bytes + n : s->arena_bytes - n;
        t->bytes_mapped = sign > 0 ? t->bytes_mapped + n : t->bytes_mapped - n;
        t->arenas += (uint32_t)sign;
    }
}

int session_region_add(struct session *s, struct arena *a)
{
    int r = arena_table_add(&s->regions, a, ARENA_TABLE_MAX);
    if (r == 0)
        account(s, a, 1);
    return r;
}

struct arena *session_region_take(struct session *s, uint64_t id, bool device)
{
    struct arena *a = id <= UINT32_MAX ? arena_table_find(&s->regions, (uint32_t)id) : NULL;
    if (!a || a->device != device)
        return NULL;
    arena_table_remove(&s->regions, (uint32_t)id);
    account(s, a, -1);
    return a;
}

void session_release(struct session *s)
{
    for (uint32_t i = 0; i < ARENA_TABLE_MAX; i++) {
        struct arena *a = s->regions.slot[i];
        if (a)
            arena_unref(session_region_take(s, a->id, a->device));
    }
}

bool session_may_add_arena(const struct session *s, const struct limits *l, uint64_t bytes)
{
    const uint64_t held = s->arena_bytes + s->pending_arena_bytes;
    return held <= l->max_arena_bytes && bytes <= l->max_arena_bytes - held;
}

bool session_may_add_device(const struct session *s, const struct limits *l, uint64_t bytes)
{
    const struct region_totals *t = s->totals;
    const uint64_t mine = s->device_bytes + s->pending_device_bytes;
    const uint64_t all = t->device_bytes + t->pending_device_bytes;
    return mine <= l->max_device_bytes && bytes <= l->max_device_bytes - mine &&
           all <= l->max_device_bytes_total && bytes <= l->max_device_bytes_total - all;
}

void session_device_pending(struct session *s, uint64_t bytes, int sign)
{
    const uint64_t delta = sign > 0 ? bytes : 0 - bytes;   /* modulo 2^64: a subtraction */
    s->pending_device_bytes += delta;
    s->totals->pending_device_bytes += delta;
}

bool session_may_submit(const struct session *s, const struct limits *l)
{
    return atomic_load_explicit(&s->inflight, memory_order_relaxed) < l->max_inflight;
}

void session_job_started(struct session *s)
{
    atomic_fetch_add_explicit(&s->inflight, 1, memory_order_relaxed);
}

void session_job_finished(struct session *s)
{
    atomic_fetch_sub_explicit(&s->inflight, 1, memory_order_relaxed);
}
