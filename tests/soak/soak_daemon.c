/* The soak's gllmd: started on a socket and configuration of its own (kept, so SIGHUP
 * re-reads it), stopped, watched, and its fds, threads and memory read from /proc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "soak.h"

/* Short bounds, so that faults come and go many times a minute: a hung job is failed after
 * 1 s, an unmet wait after 2 s, a drain cancels what is queued after 2 s. A connection may
 * hold 16 MiB of device memory, so the limits fault can pass it; 8 arenas. */
static const char conf_text[] =
    "watchdog_ms = 1000\n"
    "wait_timeout_ms = 2000\n"
    "drain_timeout_s = 2\n"
    "max_device_bytes = 16777216\n"
    "max_arenas = 8\n"
    "max_inflight = 256\n";

static bool socket_answers(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int soak_daemon_start(struct soak_daemon *d, const char *gllmd)
{
    if (!d->dir[0]) {
        snprintf(d->dir, sizeof d->dir, "/tmp/gllm-soak-XXXXXX");
        if (!mkdtemp(d->dir))
            return -errno;
        snprintf(d->socket, sizeof d->socket, "%s/gllmd.sock", d->dir);
        snprintf(d->conf, sizeof d->conf, "%s/gllmd.conf", d->dir);
        FILE *f = fopen(d->conf, "w");
        if (!f)
            return -errno;
        fputs(conf_text, f);
        fclose(f);
    }
    const char *argv[] = {gllmd, "--socket", d->socket, "--threads", "2", "--backend", "cpu",
                          "--config", d->conf, NULL};
    d->pid = fork();
    if (d->pid < 0)
        return -errno;
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Its log, kept for a failure's report (soak_main.c prints its tail). */
        char log[128];
        snprintf(log, sizeof log, "%s/gllmd.log", d->dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        execv(gllmd, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 3000; i++) {
        if (socket_answers(d->socket))
            return 0;
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return -ECHILD;
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return -ETIMEDOUT;
}

int soak_daemon_stop(struct soak_daemon *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -ESRCH;
    kill(d->pid, SIGTERM);
    for (int waited = 0; waited <= timeout_ms; waited += 2) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    return -ETIMEDOUT;
}

bool soak_daemon_died(struct soak_daemon *d, int *status)
{
    int st;
    if (d->pid <= 0 || waitpid(d->pid, &st, WNOHANG) != d->pid)
        return false;
    d->pid = 0;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
}

static int count_dir(const char *path)
{
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

int soak_proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    return count_dir(path);
}

int soak_proc_threads(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    return count_dir(path);
}

long soak_proc_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

pid_t soak_proc_child(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    long child = -1;
    struct dirent *e;
    while (child < 0 && (e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char kids[384];
        snprintf(kids, sizeof kids, "%s/%s/children", path, e->d_name);
        FILE *f = fopen(kids, "r");
        if (!f)
            continue;
        if (fscanf(f, "%ld", &child) != 1)
            child = -1;
        fclose(f);
    }
    closedir(dir);
    return (pid_t)child;
}

int soak_status(const char *sock, gllm_status *st, uint64_t *dev_used)
{
    gllm_client *c;
    int r = gllm_connect(sock, &c);
    if (r < 0)
        return r;
    *st = (gllm_status)GLLM_STATUS_INIT;
    r = gllm_status_get(c, st);
    uint64_t total = 0;
    if (r == 0 && dev_used && gllm_status_device_memory(c, 0, dev_used, &total) < 0)
        *dev_used = 0;
    gllm_disconnect(c);
    return r;
}

uint64_t soak_resets(const char *sock)
{
    gllm_client *c;
    if (gllm_connect(sock, &c) < 0)
        return 0;
    gllm_status st = GLLM_STATUS_INIT;
    gllm_metrics m = GLLM_METRICS_INIT;
    uint64_t n = 0;
    if (gllm_status_get(c, &st) == 0 && gllm_status_metrics(c, &m) == 0)
        n = m.device_resets;
    gllm_disconnect(c);
    return n;
}
