/* SPDX-License-Identifier: MIT
 * What ntfs-ctl's files share: the command, flag and argument types, the
 * run's context, and the helpers for output (output.c), requests to ntfsd
 * (request.c) and argument parsing (args.c).
 *
 * Exit codes: 0 success, EXIT_FAIL (the operation failed: the server refused
 * it or could not be reached), EXIT_USAGE (a usage error). The helpers that
 * report return the exit code for the command to return.
 */
#ifndef NTFS_CTL_CLI_H
#define NTFS_CTL_CLI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ctl/client/client.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* Bounds on what the command line may hand us. */
#define MAX_ARG_BYTES (64u * 1024)        /* one argument (a message, a command) */
#define MAX_POS 8
#define MAX_FLAGS 8
#define DEFAULT_TIMEOUT_MS (300u * 1000)  /* requests other than exec/gc/fsck */

/* ---- commands, flags, arguments ------------------------------------------ */

struct flagspec {
        const char *lng; /* "--at" without dashes: "at" */
        char shrt;       /* 'm' or 0 */
        bool arg;        /* takes a value */
};

struct args {
        const char *pos[MAX_POS];
        int npos;
        const char *val[MAX_FLAGS]; /* value, or "" for a boolean flag that is set */
        bool set[MAX_FLAGS];
        char **rest; /* exec: the words after "--" */
        int nrest;
        bool dashdash;
};

struct ctx {
        const char *socket;
        bool json;
        ntfs_client *client;
};

struct cmd;
typedef int (*cmd_fn)(struct ctx *c, const struct cmd *cmd, struct args *a);

/* The topic a command belongs to (one file of ctl/cli/ each): a section of
 * the manual. Not to be confused with the first word of a two-word name
 * ("session", "trunk", "remote"), which ntfs-ctl calls a command with
 * subcommands. */
enum cli_group {
        CLI_GROUP_STORE,    /* store.c: the daemon and the whole store */
        CLI_GROUP_SESSIONS, /* sessions.c: sessions and mounts */
        CLI_GROUP_HISTORY,  /* history.c: checkpoints, tags, rollback, log, diff */
        CLI_GROUP_EFFECTS,  /* exec.c: exec, fetch and the effect journal */
        CLI_GROUP_ARCHIVES, /* archive.c: export and import */
        CLI_GROUP_TRUNKS,   /* trunk.c: trunks and their forks */
        CLI_GROUP_REMOTES,  /* remote.c: S3 remotes, push, pull, clone */
        CLI_GROUP_COUNT
};

/* One row of the command table (commands.c). */
struct cmd {
        const char *name;             /* "checkpoint", "session new" */
        enum cli_group group;         /* its topic */
        const char *synopsis;         /* after the name: "NAME [-m MESSAGE]" */
        const char *summary;          /* one line for the overview */
        const char *help;             /* description, options, examples; ends in '\n' */
        const struct flagspec *flags; /* ends with { NULL }; never NULL */
        int min_pos, max_pos;         /* how many positional arguments */
        bool wants_rest;              /* the words after "--" are the command's (exec) */
        cmd_fn run;                   /* returns the exit code */
};

enum parse_result { PARSE_OK, PARSE_HELP, PARSE_USAGE };

/* ---- args.c ---- */

/* The value of flag --lng when it was given ("" for a boolean flag), else NULL. */
const char *flag(const struct cmd *cmd, const struct args *a, const char *lng);
bool has_flag(const struct cmd *cmd, const struct args *a, const char *lng);
int parse_size(const char *s, uint64_t *ret);
/* 0, or the usage error's exit code (reported). */
int parse_num_flag(const struct cmd *cmd, const char *flagname, const char *s, uint64_t max, uint64_t *ret);
/* The same with a lower bound: one usage error naming both bounds. */
int parse_num_flag_range(const struct cmd *cmd, const char *flagname, const char *s, uint64_t min, uint64_t max,
                         uint64_t *ret);
/* *handled: argv[*i] was --json or --socket (which may consume argv[*i + 1]);
 * -EINVAL when --socket has no value. */
int take_global(struct ctx *c, int argc, char **argv, int *i, bool *handled);
enum parse_result parse_args(struct ctx *c, const struct cmd *cmd, int argc, char **argv, struct args *a);

/* ---- output.c ---- */

void print_usage_line(FILE *f, const struct cmd *cmd);
/* Reports a usage error (with cmd's usage line when cmd is not NULL); returns EXIT_USAGE. */
int usage_error(const struct cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reports a failure; returns EXIT_FAIL. */
int fail(struct ctx *c, const json_t *server_body, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
int print_json(const json_t *j);
const char *jstr(const json_t *o, const char *key, const char *dflt);
bool jint(const json_t *o, const char *key, json_int_t *ret);
bool jtrue(const json_t *o, const char *key);
const char *jscalar(const json_t *v, char *buf, size_t len);
const char *human_bytes(uint64_t b, char *buf, size_t len);
const char *human_time(const json_t *v, char *buf, size_t len);
void print_path(const char *s);
char *sanitize_dup(const char *s, size_t maxlen);

/* ---- a small table printer: aligned columns, two spaces apart ------------ */

#define TABLE_MAX_COLS 8

struct table {
        int ncols;
        size_t nrows, cap;
        char **cells; /* nrows * ncols, owned */
};

void table_free(struct table *t);
int table_add(struct table *t, const char *const *row);
void table_print(const struct table *t);

/* ---- request.c ---- */

/* The run's client (made on first use) with its timeout set to timeout_ms. */
int client_get(struct ctx *c, unsigned timeout_ms, ntfs_client **ret);
/* Reports a transport error (a negative errno); returns EXIT_FAIL. */
int transport_fail(struct ctx *c, int r);
int call_full(struct ctx *c, const char *method, const char *path, const json_t *body, unsigned timeout_ms,
              json_t **ret, long *ret_status, bool quiet_error);
/* call_full() with the default timeout, reporting every error. */
int call(struct ctx *c, const char *method, const char *path, const json_t *body, json_t **ret);
char *esc(const char *s);
char *session_path(const char *name, const char *suffix);
/* Reports out_of_memory; returns EXIT_FAIL. */
int oom(struct ctx *c);
int set_str(json_t *o, const char *key, const char *v);

/* ---- sessions.c: sessions and mounts ---- */

int cmd_session_new(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_session_ls(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_session_show(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_session_end(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_mount(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_mounts(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_umount(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- history.c: a session's history ---- */

int cmd_checkpoint(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_fork(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_tag(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_tags(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_rollback(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_log(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_diff(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- exec.c: effects: exec, fetch and their journal ---- */

int cmd_exec(struct ctx *c, const struct cmd *cmd, struct args *a);
/* ---- exec-stream.c: exec's streaming form ---- */
/* Runs the exec request body (borrowed; "tty"/"stdin" are added) through
 * POST /v1/sessions/SESSION/exec/stream; returns the exit code. */
int exec_stream(struct ctx *c, const char *session, json_t *body, bool tty, bool pass_stdin);
int cmd_fetch(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_effects(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_replay(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_conversation(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- store.c: the daemon and the store ---- */

int cmd_status(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_quota(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_gc(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_compact(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_fsck(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_api(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- web.c: the web interface (docs/web.md) ---- */

int cmd_web(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- progress.c: a progress bar for long transfers ---- */

/* A progress bar on stderr, fed by polling GET /v1/archive/progress/ID (or,
 * for remote transfers, GET /v1/transfers/ID) from its own thread (with its
 * own client: a client is not thread-safe). Drawn only when stderr is a
 * terminal. */
struct progress_bar {
        const char *socket;
        char id[40];
        const char *verb; /* "exporting" | "importing" | "pushing" ... */
        const char *route; /* the polled path, without the id */
        bool by_stream;   /* import: the fraction is archive bytes read */
        bool remote;      /* a push/pull/clone: bytes, objects and packs */
        pthread_t thread;
        bool started;
        int stop;         /* atomic */
        bool drawn;
};

/* Starts the bar when stderr is a terminal (and not quiet); pb->id is then
 * the id to send with the request, else empty. route is the polled path
 * without the id; remote draws objects and packs too. */
void progress_start_at(struct progress_bar *pb, struct ctx *c, const char *verb, const char *route,
                       bool by_stream, bool remote, bool quiet);
/* progress_start_at() for an export or import. */
void progress_start(struct progress_bar *pb, struct ctx *c, const char *verb, bool by_stream, bool quiet);
/* Stops the thread and wipes the bar's line; does nothing when not started. */
void progress_stop(struct progress_bar *pb);

/* ---- archive.c: archives ---- */

int cmd_export(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_import(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- trunk.c: trunks and forks ---- */

int cmd_trunk_init(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_trunk_fork(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_trunk_commit(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_trunk_abort(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_trunk_status(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- remote.c: remotes ---- */

int cmd_remote_add(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_remote_ls(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_remote_rm(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_push(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_pull(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_clone(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_remote_prune(struct ctx *c, const struct cmd *cmd, struct args *a);
int cmd_remote_tags(struct ctx *c, const struct cmd *cmd, struct args *a);

/* ---- commands.c: the command table ---- */

/* Every command, in the order `ntfs-ctl --help` lists them. The dispatch
 * (cli_lookup), the overview (cli_print_overview), `help COMMAND` and
 * `COMMAND --help` (cli_print_command_help) and the overview of a command
 * with subcommands (cli_print_subcommands) are all read from it; so is
 * docs/cli.md (tools/gen-cli-md.py), and a man page or shell completion
 * generator can walk it the same way. */
extern const struct cmd cli_commands[];
extern const size_t cli_ncommands;

/* "sessions", "history", ...: a short name of the group for file names and
 * anchors, and a title for a heading ("Sessions and mounts"). */
const char *cli_group_name(enum cli_group g);
const char *cli_group_title(enum cli_group g);

/* `ntfs-ctl --help`: usage, global options, one line per command, exit status. */
void cli_print_overview(FILE *f);
/* `ntfs-ctl help COMMAND`: usage line, summary, help text, global options. */
void cli_print_command_help(FILE *f, const struct cmd *cmd);
/* `ntfs-ctl WORD --help` for a command with subcommands ("session"). */
void cli_print_subcommands(FILE *f, const char *word);
/* Whether some command's name is WORD followed by a subcommand. */
bool cli_has_subcommands(const char *word);
/* The command named by argv[0] (and argv[1] for a subcommand), *used set to
 * how many words the name took; NULL when unknown. */
const struct cmd *cli_lookup(int argc, char **argv, int *used);

#endif
