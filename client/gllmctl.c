/* gllmctl: the operator's tool, built only on libgllm-client: global options, one table of
 * commands with their help, and the dispatch to each. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static int run_bench(const struct ctl_globals *g, int argc, char **argv)
{
    struct ctl_bench_opts o;
    int r = ctl_bench_parse(argc, argv, &o);
    if (r)
        return r;
    o.json = o.json || g->json;
    return o.decode ? ctl_cmd_bench_decode(g->socket, &o) : ctl_cmd_bench(g->socket, &o);
}

static int run_help(const struct ctl_globals *g, int argc, char **argv);

/* Every command: its name, its arguments, one line on what it does, and the rest of its
 * help (options, one per line). `help`, `--help` and the completion script read this. */
static const struct command {
    const char *name, *args, *summary, *details;
    int (*run)(const struct ctl_globals *g, int argc, char **argv);
} commands[] = {
    {"status", "[--wide] [--watch [SECS] [--count N]]",
     "the daemon, its devices, clients and job counts",
     "  --wide           past 80 columns: kernel images, jobs by method, mean\n"
     "                   latencies\n"
     "  --watch [SECS]   again every SECS seconds (default 2, 0.1 to 3600) until\n"
     "                   interrupted; on a terminal the screen is redrawn, else\n"
     "                   one report (a CSV row, a JSON line) follows another\n"
     "  --count N        with --watch: stop after N reports\n"
     "  --json           one JSON object (\"schema_version\": 1)\n"
     "  --format csv     a header line and one row of the main figures\n"
     "Exit status: 0 running, 3 not running, 4 no permission or unknown, as\n"
     "systemctl's; gllmd's state is printed on stdout either way.\n",
     ctl_cmd_status},
    {"metrics", "[--textfile PATH]", "the daemon's metrics in the Prometheus text format",
     "  --textfile PATH  write them to PATH atomically (a temporary file in the\n"
     "                   same directory, renamed), for node_exporter's textfile\n"
     "                   collector\n"
     "  --json           the same metrics as one JSON object\n"
     "  --format csv     one row per sample: metric,labels,value\n"
     "When gllmd is not running, gllm_up 0 is still written (exit status 3).\n",
     ctl_cmd_metrics},
    {"drain", "[--wait]", "stop gllmd gracefully, as SIGTERM does (administrators)",
     "gllmd accepts no more connections or jobs, answers the jobs it accepted\n"
     "(cancelling those still queued at drain_timeout_s) and exits.\n"
     "  --wait           return once gllmd has finished and closed\n"
     "Administrators only: root, gllmd's user, admin_users and admin_groups of\n"
     "gllmd.conf (exit status 4 for anyone else).\n",
     ctl_cmd_drain},
    {"reload", "", "re-read gllmd.conf, as SIGHUP does (administrators)",
     "A file with an error is refused, with the reason, and the running\n"
     "configuration kept (exit status 1). Administrators only, as drain.\n",
     ctl_cmd_reload},
    {"client", "list | jobs ID | disconnect ID",
     "the daemon's connections: list, one's jobs, close one (administrators)",
     "  list             every connection: its ID, process, memory, jobs\n"
     "  jobs ID          connection ID's jobs: in flight, and settled by method\n"
     "  disconnect ID    close connection ID as if its client hung up: its jobs\n"
     "                   in flight finish unanswered, its memory is released\n"
     "  --json, --format csv  machine-readable lists\n"
     "Administrators only, as drain.\n",
     ctl_cmd_client},
    {"attn", "Q.npy K.npy V.npy -o OUT.npy [OPTIONS]",
     "one attention job on tensors from NumPy .npy files",
     "Q [B, Hq, Sq, D], K and V [B, Hkv, Skv, D], in one dtype: float32 ('<f4') or\n"
     "float16 ('<f2') files (numpy: x.astype(numpy.float32)).\n"
     "  -o, --output OUT the output, [B, Hq, Sq, D], in the inputs' dtype\n"
     "  --causal         mask aligned bottom-right: query i sees keys\n"
     "                   j <= i + Skv - Sq\n"
     "  --scale X        instead of 1/sqrt(D)\n"
     "  --dtype T        run the job in f32, f16 or bf16 (default: the files'\n"
     "                   dtype); the files are converted to it and the output\n"
     "                   back (.npy has no bf16)\n"
     "  --lse PATH       also write the log-sum-exp of each row, float32\n"
     "                   [B, Hq, Sq]\n"
     "  --json           print the job's times as JSON\n",
     ctl_cmd_attn},
    {"bench", "[--decode] [--iters N] [--wide]", "time standard shapes through the daemon",
     "  --decode         paged decode with device-resident data: the latency\n"
     "                   gllmd adds (default: prefill shapes, median time and\n"
     "                   FLOP/s)\n"
     "  --iters N        repetitions per shape (1 to 100000, default 5)\n"
     "  --wide           every column (default: a table in 80 columns)\n"
     "  --json           the results as JSON\n"
     "  Progress, with an estimate of the time left, goes to stderr on a terminal.\n",
     run_bench},
    {"version", "", "gllmctl's, libgllm-client's and (when reachable) gllmd's versions",
     "  --json           as one JSON object\n", ctl_cmd_version},
    {"help", "[COMMAND]", "this help, or a command's", "", run_help},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static const char global_help[] =
    "Global options (before or after the command):\n"
    "  -s, --socket PATH  gllmd's socket (default: $GLLM_SOCKET; else, for root,\n"
    "                   /run/gllm/gllmd.sock; else $XDG_RUNTIME_DIR/gllm/gllmd.sock,\n"
    "                   then /run/gllm/gllmd.sock)\n"
    "  --json           machine-readable output, with \"schema_version\"\n"
    "  --format F       text (default), json (as --json) or csv (status, metrics,\n"
    "                   client)\n"
    "  --no-color       no colour (also: NO_COLOR set, or not a terminal)\n"
    "  -h, --help       help: gllmctl help COMMAND for one command's\n"
    "  --version        gllmctl's and libgllm-client's versions (gllmctl version\n"
    "                   also asks gllmd)\n\n"
    "Exit status: 0 success; 1 failure; 2 usage error; 3 gllmd not running;\n"
    "4 permission denied (status: or unknown).\n";

static const struct command *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

void ctl_usage(FILE *f)
{
    fprintf(f, "Usage: gllmctl [OPTIONS] COMMAND [ARGS]\n\nCommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n%s\nSee gllmctl(1), and 'gllmctl help COMMAND' for a command's options.\n",
            global_help);
}

static void command_usage(FILE *f, const struct command *cmd)
{
    fprintf(f, "Usage: gllmctl %s%s%s\n\n%c%s.\n", cmd->name, cmd->args[0] ? " " : "",
            cmd->args, toupper((unsigned char)cmd->summary[0]), cmd->summary + 1);
    if (cmd->details[0])
        fprintf(f, "\n%s", cmd->details);
    fprintf(f, "\nGlobal options: -s PATH, --json, --format F, --no-color (gllmctl help).\n");
}

/* Edits (insertions, deletions, substitutions) from a to b, at most 9. */
static int distance(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    if (la > 16 || lb > 16)
        return 9;
    int d[17][17];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            d[i][j] = best;
        }
    return d[la][lb] < 9 ? d[la][lb] : 9;
}

/* The command name was probably meant: the one it begins, else the nearest within two
 * edits; NULL when none is close. */
static const char *suggest(const char *name)
{
    const char *best = NULL;
    int best_d = 3;
    for (int i = 0; i < NCOMMANDS; i++) {
        if (name[0] && strncmp(commands[i].name, name, strlen(name)) == 0)
            return commands[i].name;
        const int d = distance(name, commands[i].name);
        if (d < best_d) {
            best_d = d;
            best = commands[i].name;
        }
    }
    return best;
}

/* "unknown command" with the suggestion, if any. */
static void unknown_command(const char *what, const char *name)
{
    const char *s = suggest(name);
    if (s)
        ctl_error("%s '%s'; did you mean '%s'? (the commands: gllmctl help)", what, name, s);
    else
        ctl_error("%s '%s'; the commands are listed by 'gllmctl help'", what, name);
}

static int run_help(const struct ctl_globals *g, int argc, char **argv)
{
    (void)g;
    if (argc > 2) {
        ctl_error("help takes at most one command");
        return CTL_EXIT_USAGE;
    }
    if (argc == 1) {
        ctl_usage(stdout);
        return 0;
    }
    const struct command *cmd = find_command(argv[1]);
    if (!cmd) {
        unknown_command("no command", argv[1]);
        return CTL_EXIT_USAGE;
    }
    command_usage(stdout, cmd);
    return 0;
}

/* Takes the global options out of argv wherever they are (up to "--", which goes too),
 * leaving the command and its own arguments in order in argv[0 .. *argc). 0, or an exit
 * status. */
static int take_globals(int *argc, char **argv, struct ctl_globals *g, bool *help,
                        bool *version)
{
    int out = 0;
    bool rest = false;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (rest) {
            argv[out++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            rest = true;
        } else if (strcmp(a, "--socket") == 0 || strncmp(a, "--socket=", 9) == 0 ||
                   strcmp(a, "-s") == 0) {
            const char *v = a[1] == '-' && a[8] == '=' ? a + 9 : i + 1 < *argc ? argv[++i] : NULL;
            if (!v || !v[0]) {
                ctl_error("%s needs a path, as in %s /run/gllm/gllmd.sock", a[1] == 's' ? "-s"
                          : "--socket", a[1] == 's' ? "-s" : "--socket");
                return CTL_EXIT_USAGE;
            }
            g->socket = v;
        } else if (strcmp(a, "--json") == 0) {
            g->format = CTL_FORMAT_JSON;
        } else if (strcmp(a, "--format") == 0 || strncmp(a, "--format=", 9) == 0) {
            const char *v = a[8] == '=' ? a + 9 : i + 1 < *argc ? argv[++i] : NULL;
            if (v && strcmp(v, "text") == 0) {
                g->format = CTL_FORMAT_TEXT;
            } else if (v && strcmp(v, "json") == 0) {
                g->format = CTL_FORMAT_JSON;
            } else if (v && strcmp(v, "csv") == 0) {
                g->format = CTL_FORMAT_CSV;
            } else {
                ctl_error("--format wants text, json or csv%s%s%s", v ? ", not '" : "",
                          v ? v : "", v ? "'" : "");
                return CTL_EXIT_USAGE;
            }
        } else if (strcmp(a, "--no-color") == 0 || strcmp(a, "--no-colour") == 0) {
            ctl_color_disable();
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = true;
        } else if (strcmp(a, "--version") == 0 && out == 0) {
            *version = true;
        } else {
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    return 0;
}

int main(int argc, char **argv)
{
    struct ctl_globals g = {0};
    bool help = false, version = false;
    int r = take_globals(&argc, argv, &g, &help, &version);
    if (r)
        return r;
    /* What is left: the command, then its arguments. */
    g.json = g.format == CTL_FORMAT_JSON;
    /* --version is this program's: it asks no daemon (gllmctl version does). */
    if (version && argc == 0)
        return ctl_print_own_version(&g);
    if (argc == 0) {
        ctl_usage(help ? stdout : stderr);
        return help ? 0 : CTL_EXIT_USAGE;
    }
    if (argv[0][0] == '-') {
        ctl_error("unknown option '%s'; a command's own options go after it (gllmctl help)",
                  argv[0]);
        return CTL_EXIT_USAGE;
    }
    const struct command *cmd = find_command(argv[0]);
    if (!cmd) {
        unknown_command("unknown command", argv[0]);
        return CTL_EXIT_USAGE;
    }
    if (g.format == CTL_FORMAT_CSV && cmd->run != ctl_cmd_status &&
        cmd->run != ctl_cmd_metrics && cmd->run != ctl_cmd_client) {
        ctl_error("%s has no CSV form (--format csv: status, metrics, client); try --json",
                  cmd->name);
        return CTL_EXIT_USAGE;
    }
    if (help) {
        command_usage(stdout, cmd);
        return 0;
    }
    argv[argc] = NULL;
    r = cmd->run(&g, argc, argv);
    if (r == CTL_EXIT_USAGE && cmd->run != run_help)
        fprintf(stderr, "Try 'gllmctl help %s'.\n", cmd->name);
    return r;
}
