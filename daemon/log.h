/* Daemon logging: one line per event on stderr, with syslog priority prefixes under journald. */
#ifndef GLLMD_LOG_H
#define GLLMD_LOG_H

#include <syslog.h>

void log_init(int max_level);
/* Who writes the lines ("gllmd", or "gllmd[device 0]" in a device process). */
void log_set_who(const char *who);
void log_at(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The hook handed to backends (backend_config.log): one line at a syslog level. */
void log_hook(void *user, int level, const char *line);

#define log_err(...) log_at(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

#endif
