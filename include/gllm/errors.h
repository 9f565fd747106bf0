/* gllm error codes: one table feeds the C enum, the wire codes and gllm_strerror(). */
#ifndef GLLM_ERRORS_H
#define GLLM_ERRORS_H

/*
 * Every gllm function returns 0 (or a non-negative value) on success and a
 * negative number on failure: either a negative errno (-ENOMEM, -EINVAL, ...)
 * or one of the gllm codes below, which live in [-1999, -1000] so they never
 * collide with errno values. The same integers travel on the wire as the
 * `code` of an error reply (docs/PROTOCOL.md). Codes are stable: new ones are
 * appended, none is ever renumbered.
 */
#define GLLM_ERROR_MAP(X)                                                        \
    X(MALFORMED,    -1000, "malformed message")                                  \
    X(TOOBIG,       -1001, "message exceeds the size limit")                     \
    X(LIMIT,        -1002, "message exceeds a length or nesting limit")          \
    X(METHOD,       -1003, "unknown method")                                     \
    X(PARAM,        -1004, "missing, mistyped or out-of-range parameter")        \
    X(VERSION,      -1005, "unsupported protocol version")                       \
    X(NOHELLO,      -1006, "hello must be the first request")                    \
    X(NOARENA,      -1007, "no such arena in this session")                      \
    X(UNSEALED,     -1008, "arena fd is not sealed against shrinking")           \
    X(NOTMEMFD,     -1009, "arena fd is not a memfd")                            \
    X(ARENASIZE,    -1010, "arena fd size differs from the stated size")         \
    X(BOUNDS,       -1011, "tensor lies outside its arena")                      \
    X(OVERFLOW,     -1012, "tensor shape or offset overflows")                   \
    X(SHAPE,        -1013, "tensor shapes do not match")                         \
    X(DTYPE,        -1014, "unsupported or mismatched dtype")                    \
    X(HEADDIM,      -1015, "unsupported head dimension")                         \
    X(BUSY,         -1016, "too many requests in flight")                        \
    X(SHUTDOWN,     -1017, "daemon is shutting down")                            \
    X(BACKEND,      -1018, "backend failure")                                    \
    X(NOFD,         -1019, "request needs exactly one file descriptor")          \
    X(DISCONNECTED, -1020, "connection to gllmd closed")                         \
    X(NOJOB,        -1021, "no such job")                                        \
    X(QUOTA,        -1022, "session resource limit reached")                     \
    X(ALIAS,        -1023, "output tensor overlaps an input")                    \
    X(DEVMEM,       -1024, "out of device memory")                               \
    X(DENIED,       -1025, "not allowed by the daemon's access policy")      \
    X(NOTEXPORT,    -1026, "fd is not memory exported for this device")      \
    X(WAITTIMEOUT,  -1027, "a GPU-side wait was not satisfied in time")           \
    X(DEVLOST,      -1028, "the device was lost to a fault: its tensors are lost") \
    X(JOBTIMEOUT,   -1029, "a job ran past its watchdog deadline; its device was lost") \
    X(VARIANT,      -1030, "the backend does not compute this attention variant")

enum gllm_error {
#define GLLM_ERROR_ENUM_(name, code, text) GLLM_E##name = (code),
    GLLM_ERROR_MAP(GLLM_ERROR_ENUM_)
#undef GLLM_ERROR_ENUM_
};

#define GLLM_ERROR_MIN (-1999)
#define GLLM_ERROR_MAX (-1000)

#endif
