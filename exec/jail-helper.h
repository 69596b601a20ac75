/* SPDX-License-Identifier: MIT
 * jail-helper.h — what the source files of the ntfs-jail helper program
 * share; each part names the file that defines it. Not used by
 * libntfs-exec (exec/jail-internal.h is what the two share). The helper's
 * processes are described at the top of exec/ntfs-jail.c.
 */
#ifndef NTFS_EXEC_JAIL_HELPER_H
#define NTFS_EXEC_JAIL_HELPER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/filter.h>

#include "exec/jail.h"

#define EXIT_SETUP 125
#define EXIT_TIMEOUT 124
#define STATE_FILE "/run/ntfs-state"

struct opts {
        const char *workspace;
        bool ro, json, probe, die_with_parent;
        int net;
        uint64_t timeout_ms, output_limit, memory, pids, tmp_bytes, as_bytes, fsize;
        unsigned cpu;
        const char *group; /* --group: the runs sharing group_* limits (cgroup.c) */
        uint64_t group_memory, group_pids;
        unsigned group_cpu;
        const char *env[NTFS_JAIL_ENV_MAX];
        size_t n_env;
        const char *state_in, *state_out;
        const char *proxy_socket; /* host path of the egress proxy's Unix socket */
        unsigned proxy_port;
        char *command;
        char **direct; /* the command's words when it needs no shell (plain_words), else NULL */
        bool no_direct; /* --no-direct: always through bash */
        /* Streaming (exec/jail.h, struct ntfs_jail_io): --stream copies the
         * command's stdout and stderr, as read, to fds 3 and 4; --stdin makes
         * fd 5 its stdin; --tty makes fd 5 (a terminal) its stdin, stdout,
         * stderr and controlling terminal. */
        bool stream, pass_stdin, tty;
};

/* ---- reporting (ntfs-jail.c) ---------------------------------------------
 * P1 and P2: failures go to the status pipe ('E' + message), then _exit. */
extern int report_fd;
/* NTFS_JAIL_TRACE=1: the fd trace() writes to, else -1. */
extern int trace_fd;
void trace(const char *what);
void write_all(int fd, const void *p, size_t n);
_Noreturn __attribute__((format(printf, 1, 2))) void die_child(const char *fmt, ...);

#define CHECK(expr, ...)                       \
        do {                                   \
                errno = 0;                     \
                if ((expr) < 0)                \
                        die_child(__VA_ARGS__); \
        } while (0)

/* ---- the new root (jail-root.c) ------------------------------------------ */
void build_root(const struct opts *o, int ws_fd);

/* ---- the seccomp filter (jail-seccomp.c) --------------------------------- */
/* P0: the filter as a raw BPF program (struct sock_filter[]), built while
 * P1 builds the root and sent to it; P1 loads it with seccomp(2) (P3, P2 and
 * the command inherit it),
 * which is what seccomp_load() does with the same program. */
#define FILTER_MAX (64 * 1024)

struct filter {
        struct sock_filter insns[FILTER_MAX / sizeof(struct sock_filter)];
        unsigned short len;
};

struct jbuf;
/* P0: builds the filter and appends the go ('G', the length, the program) to ret. */
void export_filter(struct jbuf *ret);
void receive_filter(int fd, struct filter *f);
/* seccomp(2) with the program and a new user-notification listener (the
 * filter's action for a foreign ABI): *ret_listener is its fd, or -1 where
 * the kernel has none. 0 or -1 with errno. */
int load_filter(const struct filter *f, int *ret_listener);
/* P0: "ARCH NAME" of a syscall a notification names (e.g. "x32 getpid",
 * "i386 syscall 999" when libseccomp does not know it). 0 or -EINVAL. */
int seccomp_syscall_name(uint32_t audit_arch, uint32_t nr, char *buf, size_t len);

/* ---- commands run without bash (jail-direct.c) --------------------------- */
/* The command's words when it needs no shell, else NULL. */
char **plain_words(const char *cmd);
void plain_words_free(char **w);
/* P2: execve the program; returns when bash should run the command. */
void exec_direct(char *const *words, char **env, const char *cwd, volatile int *direct_ran);
size_t env_count(char *const *env);
/* The raw state record of a command that ran without the shell. */
int direct_state_raw(const char *cwd, char **env, struct jbuf *b);

/* ---- P3, the egress forwarder (jail-egress.c) ---------------------------- */
/* It runs under P1's seccomp filter, inherited. */
_Noreturn void run_forwarder(int lfd, int dirfd, const char *name);

/* ---- P1 and P2 (jail-init.c) --------------------------------------------- */
struct jail_state;
struct child_args {
        const struct opts *o;
        const struct jail_state *state;
        int out_w, err_w;
        int notify_w;             /* P1 -> P0: the seccomp filter's listener fd */
        int in_fd;               /* --stdin / --tty: the fd for P2 (5), else -1 */
        char cwd[PATH_MAX];      /* P1 -> P2: the absolute cwd P1 entered for it */
        volatile int *direct_ran; /* shared page: P2 exec'd the command without bash */
};

/* main's arguments, which P1 blanks (hide_cmdline). */
extern char **g_argv;
extern int g_argc;
/* P1; go_r: P0 sends 'G' and the filter once P1 is in the run's cgroup. */
_Noreturn void run_p1(struct child_args *a, int status_w, int go_r);

#endif
