/* SPDX-License-Identifier: MIT
 * jail.h — run one shell command in the ntfs jail (libntfs-exec).
 *
 * The library never builds the jail in the calling process: ntfs_jail_run()
 * posix_spawns the ntfs-jail helper (docs/jail.md) with an empty environment
 * and only three fds (stdin: the state blob in a memfd, stdout: the helper's
 * JSON result, stderr: its diagnostics; a streaming run adds spec->io's),
 * then reads the result. The caller's
 * threads, fds, memory and credentials never enter the jail, and nothing in
 * the library touches the workspace path itself (in ntfsd it is a FUSE mount
 * served by the same process; only the helper opens it).
 *
 * Thread safety: every function may be called from several threads at once;
 * there is no global state. Memory is bounded by the spec's output_limit
 * (stdout and stderr, each) plus JAIL_STATE_MAX for the state blob.
 *
 * Lifecycle: the caller owns spec and everything it points to (borrowed for
 * the call only). ntfs_jail_run() always initialises *ret, whatever it
 * returns; the caller releases it with ntfs_jail_result_release(), which
 * accepts a zeroed or already released result.
 */
#ifndef NTFS_EXEC_JAIL_H
#define NTFS_EXEC_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
        NTFS_JAIL_NET_NONE = 0,     /* new netns, no interface up */
        NTFS_JAIL_NET_LOOPBACK = 1, /* new netns, only lo up */
};

/* Bounds the library enforces on a spec. */
#define NTFS_JAIL_OUTPUT_LIMIT_MAX (64ULL * 1024 * 1024)
#define NTFS_JAIL_COMMAND_MAX (1024 * 1024)
#define NTFS_JAIL_ENV_MAX 256

/* A streaming run's fds (ntfsd's streaming exec): the caller's own, which
 * the helper gets as its fds 3, 4 and 5; the caller keeps them and closes
 * its copies after ntfs_jail_run() returns (a pipe then reads EOF, a pty
 * master EIO). Each one -1 when unused. Create them O_CLOEXEC: other
 * threads spawn too. */
struct ntfs_jail_io {
        int stdout_fd, stderr_fd; /* write ends: every byte the command writes
                                   * there, as it comes (the result still keeps
                                   * output_limit bytes of each); both or neither */
        int stdin_fd;             /* read end: the command's stdin (else /dev/null) */
        int tty_fd;               /* a terminal (a pty's slave): the command's
                                   * stdin, stdout, stderr and controlling
                                   * terminal; then the three above are -1 and
                                   * the result's stdout and stderr are empty */
};

struct ntfs_jail_spec {
        const char *jail_binary; /* path of ntfs-jail (required) */
        const char *workspace;   /* host directory bound at /workspace (required) */
        bool workspace_ro;       /* bind it read-only (bash_read) */
        int net;                 /* NTFS_JAIL_NET_* */
        const char *command;     /* bash source, run as bash -c, or exec'd directly
                                  * with the same result when it needs no shell
                                  * (docs/jail.md, "Direct exec") (required) */
        const char *state_in;    /* blob from a previous result's state_out, or NULL */
        uint64_t timeout_ms;     /* wall clock; 0 = helper default (60 s) */
        size_t output_limit;     /* per stream; 0 = helper default (1 MiB) */
        uint64_t memory_bytes;   /* cgroup memory limit; 0 = helper default (2 GiB) */
        uint64_t pids;           /* cgroup pids limit; 0 = helper default (512) */
        unsigned cpu_percent;    /* cgroup cpu quota, 100 = one core; 0 = none */
        uint64_t tmp_bytes;      /* size of the private /tmp; 0 = default (64 MiB) */
        /* A group of runs sharing limits (ntfsd: one per session): each
         * run's cgroup is made under the group's, whose limits count every
         * concurrent run of the group together. NULL: none. The name: 1-100
         * of A-Z a-z 0-9 . _ -. 0 = no group limit for that resource. */
        const char *group;
        uint64_t group_memory;
        uint64_t group_pids;
        unsigned group_cpu;      /* 100 = one core */
        const char *const *env;  /* extra "K=V", NULL-terminated, or NULL */
        /* Egress proxy (ntfsd's, docs/gateway.md): when proxy_socket is set
         * (an absolute path of a listening Unix stream socket on the host),
         * the jail brings lo up, relays 127.0.0.1:proxy_port inside its
         * network namespace to that socket, and sets HTTP_PROXY, HTTPS_PROXY,
         * http_proxy, https_proxy (and NO_PROXY for loopback) for the
         * command. proxy_port: 1..65535 (0 = 3128). */
        const char *proxy_socket;
        unsigned proxy_port;
        /* Cancellation (ntfsd's POST /v1/sessions/NAME/exec/cancel): when
         * cancel is set and *cancel becomes nonzero (read atomically, checked
         * at least every 100 ms), the helper gets SIGTERM and ends the jail as
         * on its timeout; the result comes back as usual. NULL: not
         * cancellable. */
        const int *cancel;
        /* With watch_hangup, hangup_fd reporting POLLHUP or POLLERR (the
         * caller's client connection closing: on a Unix stream socket, a
         * close, not a shutdown of one direction) ends the jail as *cancel
         * does. The fd is only polled. */
        bool watch_hangup;
        int hangup_fd;
        /* Streaming: NULL, or the fds above (borrowed for the call). */
        const struct ntfs_jail_io *io;
};

struct ntfs_jail_result {
        int exit_code;       /* the command's exit code, or 128+signal, 124 on timeout */
        int term_signal;     /* signal that ended the command, or 0 */
        bool timed_out;      /* killed by the wall-clock timeout */
        bool oom;            /* the memory cgroup OOM-killed a process */
        char *out;           /* stdout, NUL-terminated, out_len bytes (may hold NULs) */
        size_t out_len;
        bool out_truncated;  /* more than output_limit bytes were written */
        char *err;
        size_t err_len;
        bool err_truncated;
        int64_t duration_ns; /* jail set-up to teardown, as the helper measured it */
        char *state_out;     /* new shell state blob, or NULL if the shell did not save it */
        char *reason;        /* why the jail failed (ntfs_jail_run returned < 0), or NULL */
        bool limit_memory, limit_pids, limit_cpu; /* cgroup limits in force for this run */
        bool limit_group_memory, limit_group_pids, limit_group_cpu; /* the group's, in force */
        int64_t cpu_ns;      /* CPU time the run's processes used (cgroup counter), -1: unknown */
        /* Processes the seccomp filter killed (a foreign syscall ABI: the
         * helper names the syscall and kills the caller with SIGKILL), and
         * who: "pid 3, which called x32 getpid; ..." or NULL. Each kill is
         * also logged (log_warn) and appended as a line "ntfs-jail: seccomp
         * killed ..." to err, so the effect's result records it. */
        unsigned seccomp_killed;
        char *seccomp_kills;
        bool cancelled;      /* ended by *cancel or a hang-up on hangup_fd */
};

struct ntfs_jail_caps {
        int cgroup_version;  /* 0 none, 1, 2 */
        bool cgroup_memory;  /* memory limit can be enforced */
        bool cgroup_pids;
        bool cgroup_cpu;
        bool userns;         /* the kernel allows user namespaces (unused by default) */
        bool seccomp;        /* the kernel supports seccomp filters */
};

/* Runs spec->command in a fresh jail and waits for it.
 * Returns 0 when the command ran, whatever its outcome (see exit_code,
 * timed_out, oom). Errors: -EINVAL bad spec (missing field, env entry not
 * K=V, command too long), -ENOENT/-EACCES the helper cannot be executed,
 * -EIO the jail could not be set up (ret->reason says why), -ETIMEDOUT the
 * helper itself hung past timeout + 30 s and was killed, -EPROTO the
 * helper's answer was malformed, -ENOMEM. */
int ntfs_jail_run(const struct ntfs_jail_spec *spec, struct ntfs_jail_result *ret);
void ntfs_jail_result_release(struct ntfs_jail_result *r);

/* Reports which limits the host lets the jail enforce. Never fails short of
 * -ENOMEM; a missing facility is a false flag. */
int ntfs_jail_probe(struct ntfs_jail_caps *ret);

#endif
