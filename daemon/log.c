/* Daemon logging: "<N>" prefixes when stderr is the journal, readable prefixes otherwise. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "proto.h"

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

static char log_who[32] = "gllmd";

void log_init(int max_level)
{
    log_max = max_level;
    log_journal = stderr_is_journal();
}

void log_set_who(const char *who)
{
    snprintf(log_who, sizeof log_who, "%s", who);
}

/* Backends log through this, so their lines follow the daemon's level, reloads included
 * (main.c hands them LOG_DEBUG and lets log_at filter). */
void log_hook(void *user, int level, const char *line)
{
    (void)user;
    log_at(level, "%s", line);
}

/* One log line is one line of valid UTF-8: a newline or an invalid byte from a peer (a
 * process name, a method name) is written as \xNN, and a backslash as \\, so nothing a
 * client sends can forge a line or break a reader of the journal. */
static void escape_line(const char *in, char *out, size_t cap)
{
    size_t used = 0, n = strlen(in);
    for (size_t i = 0; i < n && used + 5 < cap;) {
        unsigned char c = (unsigned char)in[i];
        size_t k = c >= 0x20 && c != 0x7f && c != '\\' ? proto_utf8_seq(in + i, n - i) : 0;
        if (k) {
            memcpy(out + used, in + i, k);
            used += k;
            i += k;
        } else {
            used += (size_t)snprintf(out + used, cap - used, c == '\\' ? "\\\\" : "\\x%02x", c);
            i++;
        }
    }
    out[used] = '\0';
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
    char clean[sizeof line * 2];
    escape_line(line, clean, sizeof clean);
    const bool main_process = strcmp(log_who, "gllmd") == 0;
    if (log_journal)
        fprintf(stderr, "<%d>%s%s%s\n", level, main_process ? "" : log_who,
                main_process ? "" : ": ", clean);
    else
        fprintf(stderr, "%s: %s: %s\n", log_who, names[level & 7], clean);
}
