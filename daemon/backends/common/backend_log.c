/* The backends' side of the logging hook: format one line, hand it to the daemon's logger. */
#include <stdarg.h>
#include <stdio.h>

#include "backend_api.h"

void backend_logf(const struct backend_log *log, int level, const char *fmt, ...)
{
    if (!log || !log->fn || level > log->level)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log->fn(log->user, level, line);
}
