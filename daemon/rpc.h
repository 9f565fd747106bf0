/* The RPC channel's entry: a client connection accepted, its packets decoded, bounded and
 * dispatched through the one method table, every refusal answered with the request's id
 * when it can be read, and counted. */
#ifndef GLLMD_RPC_H
#define GLLMD_RPC_H

#include "server.h"

/* Takes ownership of a connected, non-blocking, close-on-exec fd: identifies the peer
 * (SO_PEERCRED, the access policy) and starts serving it. On failure the fd is the
 * caller's to close. */
int rpc_accept(struct server *srv, int fd);

#endif
