/* SPDX-License-Identifier: MIT
 * jail-internal.h — pieces shared by the ntfs-jail helper and libntfs-exec:
 * the shell-state codec, a JSON string writer, and per-run cgroups.
 * Not a public interface; see exec/jail.h for the library the daemon uses.
 */
#ifndef NTFS_EXEC_JAIL_INTERNAL_H
#define NTFS_EXEC_JAIL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "exec/jail.h"

/* ---- shell state ------------------------------------------------------
 * The state blob is ASCII text, one record per line:
 *
 *     ntfs-jail-state 1
 *     cwd <escaped path relative to /workspace, may be empty>
 *     env <NAME>=<escaped value>
 *
 * "escaped" keeps printable ASCII except '\' as is and writes every other
 * byte as \xHH, so the blob is one line per record whatever the values
 * hold (spaces, newlines, UTF-8). NAME is a shell identifier. */
#define JAIL_STATE_MAX (1024 * 1024)
#define JAIL_STATE_VARS_MAX 4096

struct jail_state {
        char *cwd;      /* relative to /workspace, "" for /workspace itself */
        size_t n_vars;
        char **vars;    /* "NAME=value" */
};

void jail_state_release(struct jail_state *s);
/* Parses a blob. -EINVAL on any malformed line, -E2BIG past the bounds. */
int jail_state_parse(const char *blob, size_t len, struct jail_state *ret);
/* Builds a blob from the raw record the shell epilogue writes: NUL-separated
 * "cwd=<absolute path>" and "env=NAME=value" items. Variables the shell owns
 * (PWD, OLDPWD, SHLVL, _) are skipped; a cwd outside /workspace becomes "". */
int jail_state_from_raw(const char *raw, size_t len, char **ret, size_t *ret_len);
bool jail_env_name_valid(const char *s, size_t len);

/* ---- growable buffer --------------------------------------------------- */
struct jbuf {
        char *p;
        size_t len, cap;
};
int jbuf_put(struct jbuf *b, const void *p, size_t n);
int jbuf_puts(struct jbuf *b, const char *s);
int jbuf_printf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a JSON string literal: valid UTF-8 is kept, control characters are
 * \u-escaped, and each byte of an invalid sequence becomes U+FFFD. */
int jbuf_json_string(struct jbuf *b, const char *s, size_t n);

/* Appends "key":TEXT for a command's output: the bytes as they are when
 * they are clean text (common/util.h, ntfs_text_clean), else their lossy
 * text followed by "key_b64":BASE64 of the exact bytes. */
int jbuf_json_output(struct jbuf *b, const char *key, const char *s, size_t n);

/* ---- cgroups ----------------------------------------------------------- */
struct jail_cgroup {
        int version;            /* 0: none, 1, 2 */
        char *v2;               /* v2: the run's directory */
        char *v1_memory, *v1_pids, *v1_cpu, *v1_cpuacct; /* v1: the run's directories */
        bool memory, pids, cpu; /* limits in force */
        /* The group's directories (--group), each the parent of the run's
         * directory in its hierarchy; removed at the end when empty. */
        char *g_v2, *g_v1_memory, *g_v1_pids, *g_v1_cpu, *g_v1_cpuacct;
        bool g_memory, g_pids, g_cpu; /* the group's limits in force */
};

/* A group of runs sharing limits (a session's: docs/jail.md, "Groups"). */
struct jail_cgroup_group {
        const char *name;  /* a directory name under the helper's own cgroup */
        uint64_t memory, pids;
        unsigned cpu;      /* 0: no limit for that resource */
};

/* Creates the per-run cgroup(s) named name under this process's own cgroup
 * and writes the limits (0 = no limit for that controller, which still is
 * created for accounting where cheap). Best effort: a controller the host
 * lacks is left out and its flag stays false. Returns 0 or -errno for a
 * hard failure (e.g. out of memory). */
int jail_cgroup_create(struct jail_cgroup *cg, const char *name, uint64_t memory, uint64_t pids,
                       unsigned cpu_percent, const struct jail_cgroup_group *group);
/* CPU time the run's processes used (v2 cpu.stat, v1 cpuacct.usage), in ns;
 * -1 when no counter is there. Read before jail_cgroup_destroy. */
int64_t jail_cgroup_cpu_ns(const struct jail_cgroup *cg);
/* Moves the calling process into every directory of cg. */
int jail_cgroup_enter(const struct jail_cgroup *cg);
/* Moves process pid (of the caller's pid namespace; 0: the caller) into
 * every directory of cg. Its children forked afterwards are born there. */
int jail_cgroup_attach(const struct jail_cgroup *cg, pid_t pid);
/* v1: opens the `tasks` file of every directory of cg (O_WRONLY, close-on-
 * exec) into fds[], for a process to move itself by writing "0" to each
 * (jail_cgroup_join_self): a single thread moving itself skips the
 * kernel's threadgroup lock, whose write side waits for an RCU grace
 * period (2-12 ms on this guest) when another process moves a pid
 * through cgroup.procs. A process that is single-threaded is thereby
 * moved whole. Returns the count (0: nothing to open, v2 or no cgroup:
 * use jail_cgroup_attach) or a negative errno, with no fd left open. */
#define JAIL_CGROUP_DIRS 5
int jail_cgroup_open_tasks(const struct jail_cgroup *cg, int fds[JAIL_CGROUP_DIRS]);
/* Writes "0" to each of the n fds and closes them all. 0 or -errno. */
int jail_cgroup_join_self(int *fds, int n);
/* Hands n (0..JAIL_CGROUP_DIRS) fds over a Unix socket in one message
 * (SCM_RIGHTS), and receives them (close-on-exec). 0 / the count, or
 * -errno (-EPIPE: the other side is gone; -EPROTO: not such a message). */
int jail_cgroup_send_fds(int sock, const int *fds, int n);
int jail_cgroup_recv_fds(int sock, int fds[JAIL_CGROUP_DIRS]);
/* SIGKILLs every process still in cg (v2 cgroup.kill, v1 by listing procs). */
void jail_cgroup_kill(const struct jail_cgroup *cg);
/* True when the memory controller recorded an OOM kill in this run. */
bool jail_cgroup_oom(const struct jail_cgroup *cg);
/* Kills what is left, removes the directories, frees cg. Accepts a zeroed cg. */
void jail_cgroup_destroy(struct jail_cgroup *cg);
/* Which controllers a run would get, without creating anything permanent. */
int jail_cgroup_probe(struct ntfs_jail_caps *caps);

#endif
