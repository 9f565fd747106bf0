/* Requests answered from libuv's thread pool: the ones whose backend call can wait seconds
 * behind another client's (a device process pinning an arena of tens of GiB). */
#ifndef GLLMD_POOL_CALL_H
#define GLLMD_POOL_CALL_H

#include <uv.h>

#include "channel.h"

/* Embedded in a method's own record. run works on a pool thread and touches nothing of the
 * loop's (sessions, channels, counters); answer replies on the loop through c and frees the
 * record. The call's connection is not read again until the answer, so an immediate
 * method is still answered before its connection's next request (docs/PROTOCOL.md). */
struct pool_call {
    uv_work_t work;
    struct channel *ch;           /* a reference, until the answer */
    uint64_t id;
    void (*run)(struct pool_call *pc);
    void (*answer)(struct pool_call *pc, struct rpc_call *c);
};

/* Queues pc for c's call; a libuv error when the pool cannot take it, and then the call is
 * still the caller's to answer and pc the caller's to free. */
int pool_call_start(struct rpc_call *c, struct pool_call *pc);

#endif
