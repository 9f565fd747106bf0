/* Daemon logging: "<N>" prefixes when stderr is the journal, readable prefixes otherwise. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "log.h"

static int log_max = LOG_INFO;
static bool log_journal;

/* systemd sets JOURNAL_STREAM=dev:ino for the stream stderr is connected to. */
static bool stderr_is_journal(void)
{
    const char *e = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init(int max_level)
{
    log_max = max_level;
    log_journal = stderr_is_journal();
}

/* Backends log through this, so their lines follow the daemon's level, reloads included
 * (main.c hands them LOG_DEBUG and lets log_at filter). */
void log_hook(void *user, int level, const char *line)
{
    (void)user;
    log_at(level, "%s", line);
}

void log_at(int level, const char *fmt, ...)
{
    static const char *const names[] = {"emerg", "alert", "crit", "error",
                                        "warning", "notice", "info", "debug"};
    if (level > log_max)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_journal)
        fprintf(stderr, "<%d>%s\n", level, line);
    else
        fprintf(stderr, "gllmd: %s: %s\n", names[level & 7], line);
}
