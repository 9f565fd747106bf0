/* debug_fault, the test-only method of fault-injection builds (GLLM_FAULT_INJECTION, set in
 * main.c): arms a fault that the caller's next job on a device meets in place of its work,
 * so the tests drive the daemon's whole recovery path (docs/hardening.md, "Faults and
 * resets"). */
#include <string.h>

#include "methods.h"
#include "scheduler.h"

bool debug_fault_enabled;

void method_debug_fault(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    if (!debug_fault_enabled) {    /* as any name not in the table */
        rpc_reply_error(c, GLLM_EMETHOD, "unknown method 'debug_fault'");
        return;
    }
    static const struct {
        const char *name;
        enum backend_fault kind;
    } kinds[] = {{"trap", BACKEND_FAULT_TRAP}, {"oob", BACKEND_FAULT_OOB},
                 {"spin", BACKEND_FAULT_SPIN}, {"sticky", BACKEND_FAULT_STICKY}};
    char name[16] = "";
    uint64_t dev = 0;
    if (proto_get_str(m->params, "kind", true, name, sizeof name) < 0 ||
        proto_get_u64(m->params, "device", false, &dev) < 0 || dev >= (uint64_t)srv->ndevices) {
        rpc_reply_error(c, GLLM_EPARAM, "debug_fault: 'kind' (trap, oob, spin or sticky) required, "
                        "'device' below %d", srv->ndevices);
        return;
    }
    enum backend_fault kind = BACKEND_FAULT_NONE;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (strcmp(name, kinds[i].name) == 0)
            kind = kinds[i].kind;
    if (kind == BACKEND_FAULT_NONE) {
        rpc_reply_error(c, GLLM_EPARAM, "debug_fault: kind '%s' is not trap, oob, spin or sticky",
                        name);
        return;
    }
    /* Jobs carry their channel as the owner's cookie (methods.c's submit). */
    sched_arm_fault(srv->sched, (int)dev, c->ch, kind);
    rpc_reply_empty(c);
}
