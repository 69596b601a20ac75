/* SPDX-License-Identifier: MIT
 * ntfs-jail — run one shell command in a throw-away jail (docs/jail.md).
 *
 *   ntfs-jail --workspace DIR [--ro] [--net none|loopback] [--timeout SEC]
 *             [--output-limit BYTES] [--memory BYTES] [--pids N] [--cpu PERCENT]
 *             [--tmp-size BYTES] [--as BYTES] [--env K=V]... [--state-in FILE|-]
 *             [--state-out FILE] [--proxy-socket PATH [--proxy-port N]] [--json] [--no-direct]
 *             -- COMMAND...
 *   ntfs-jail --probe
 *
 * Three processes:
 *   P0 (this one, host side): pipes; while P1 builds the root, the cgroup
 *      (P1 moved into it) and the seccomp filter as BPF, sent to P1 as its
 *      "go"; then timeout, output capture, the filter's notifications
 *      (a foreign-ABI syscall: name it, kill the caller), report.
 *   P1 (pid 1 of the new pid namespace): blanks its argv (host paths),
 *      builds the root, waits for the go, drops every privilege, loads the
 *      filter and hands its listener to P0, forks P2, reaps orphans,
 *      forwards signals, and sends P2's status and the saved shell state
 *      back to P0.
 *   P2: setsid, fds, environment, caps, no_new_privs, seccomp checked, then exec of
 *      the command's program when it needs no shell (plain_words), else bash.
 * NTFS_JAIL_TRACE=1 in the environment prints each phase's time (trace()).
 *   P3 (only with --proxy-socket): the egress forwarder, forked by P1 after
 *      the caps are gone: accepts on 127.0.0.1:PORT of the jail's network
 *      namespace and relays each connection (one child each) to the host's
 *      proxy socket, reached through an O_PATH fd of its directory opened
 *      before the pivot (the socket itself is never visible in the jail).
 * Killing P1 tears down the whole pid namespace, so a timeout reaches every
 * process of the command, whatever it did with sessions or double forks.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "exec/jail-internal.h"
#include "exec/jail-helper.h"
#include "common/banned.h"

/* ------------------------------------------------------------------------ */
/* P1 and P2: failures go to the status pipe ('E' + message), then _exit.   */

int report_fd = -1;

/* NTFS_JAIL_TRACE=1: each phase's CLOCK_MONOTONIC offset from the helper's
 * start, one line each on the helper's stderr (P0, P1, P2 until its fds are
 * closed). For measuring; off by default and never in the daemon's runs
 * (ntfsd spawns the helper with an empty environment). */
int trace_fd = -1;
static int64_t trace_t0;

void trace(const char *what) {
        if (trace_fd < 0)
                return;
        char line[128];
        int n = snprintf(line, sizeof line, "ntfs-jail trace: %-6d %-28s %8.3f ms\n", (int)getpid(), what,
                         (double)(ntfs_mono_ns() - trace_t0) / 1e6);
        if (n > 0) {
                ssize_t w = write(trace_fd, line, NTFS_MIN((size_t)n, sizeof line - 1));
                (void)w;
        }
}

void write_all(int fd, const void *p, size_t n) {
        const char *c = p;
        while (n > 0) {
                ssize_t w = write(fd, c, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                c += w;
                n -= (size_t)w;
        }
}

/* P0 shares the filter builder with the children: when it fails there,
 * p0_fail ends the jail and reports like any P0 error. */
static void (*p0_fail)(const char *msg);

_Noreturn __attribute__((format(printf, 1, 2))) void die_child(const char *fmt, ...) {
        int e = errno;
        char msg[1024];
        msg[0] = 'E';
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg + 1, sizeof msg - 1, fmt, ap);
        va_end(ap);
        if (n < 0)
                n = 0;
        size_t l = NTFS_MIN((size_t)n + 1, sizeof msg - 1);
        if (e)
                l += (size_t)snprintf(msg + l, sizeof msg - l, ": %s", strerror(e));
        l = NTFS_MIN(l, sizeof msg - 1);
        if (p0_fail) {
                msg[l] = 0;
                p0_fail(msg + 1);
        }
        if (report_fd >= 0)
                write_all(report_fd, msg, l);
        _exit(EXIT_SETUP);
}

/* ------------------------------------------------------------------------ */
/* P0                                                                        */

static _Noreturn __attribute__((format(printf, 2, 3))) void die(const struct opts *o, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (o && o->json) {
                struct jbuf b = { 0 };
                if (jbuf_puts(&b, "{\"error\":") >= 0 && jbuf_json_string(&b, msg, strlen(msg)) >= 0 &&
                    jbuf_puts(&b, "}\n") >= 0)
                        write_all(1, b.p, b.len);
                free(b.p);
        }
        fprintf(stderr, "ntfs-jail: %s\n", msg);
        exit(EXIT_SETUP);
}

static void usage(void) {
        fputs("usage: ntfs-jail --workspace DIR [--ro] [--net none|loopback] [--timeout SEC]\n"
              "                 [--output-limit BYTES] [--memory BYTES] [--pids N] [--cpu PERCENT]\n"
              "                 [--tmp-size BYTES] [--as BYTES] [--fsize BYTES] [--env K=V]...\n"
              "                 [--state-in FILE|-] [--state-out FILE] [--json] [--die-with-parent]\n"
              "                 [--no-direct] [--stream] [--stdin | --tty]\n"
              "                 [--proxy-socket PATH [--proxy-port N]]\n"
              "                 [--group NAME [--group-memory BYTES] [--group-pids N] [--group-cpu PERCENT]]\n"
              "                 -- COMMAND...\n"
              "       ntfs-jail --probe\n",
              stderr);
        exit(2);
}

static uint64_t num(const struct opts *o, const char *flag, const char *v, uint64_t max) {
        uint64_t x;
        if (!v || ntfs_parse_u64(v, max, &x) < 0)
                die(o, "%s: expected a number up to %llu", flag, (unsigned long long)max);
        return x;
}

static uint64_t parse_timeout(const struct opts *o, const char *v) {
        if (!v)
                die(o, "--timeout: missing value");
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || *end || end == v || !(d > 0) || d > 86400.0 * 7)
                die(o, "--timeout: expected seconds (0 < SEC <= 604800)");
        return (uint64_t)(d * 1000.0 + 0.5);
}

/* A cgroup directory name: no path, nothing a shell or the kernel reads
 * specially. */
static bool group_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 100 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
                        return false;
        return true;
}

static void parse_args(int argc, char **argv, struct opts *o) {
        *o = (struct opts){ .net = NTFS_JAIL_NET_NONE, .timeout_ms = 60000, .output_limit = 1 << 20,
                            .memory = 2ULL << 30, .pids = 512, .tmp_bytes = 64ULL << 20, .fsize = 4ULL << 30 };
        int i;
        for (i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (strcmp(a, "--") == 0) {
                        i++;
                        break;
                }
                if (strcmp(a, "--ro") == 0)
                        o->ro = true;
                else if (strcmp(a, "--json") == 0)
                        o->json = true;
                else if (strcmp(a, "--probe") == 0)
                        o->probe = true;
                else if (strcmp(a, "--die-with-parent") == 0)
                        o->die_with_parent = true;
                else if (strcmp(a, "--no-direct") == 0)
                        o->no_direct = true;
                else if (strcmp(a, "--stream") == 0)
                        o->stream = true;
                else if (strcmp(a, "--stdin") == 0)
                        o->pass_stdin = true;
                else if (strcmp(a, "--tty") == 0)
                        o->tty = true;
                else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
                        usage();
                else {
                        if (!v)
                                usage();
                        i++;
                        if (strcmp(a, "--workspace") == 0)
                                o->workspace = v;
                        else if (strcmp(a, "--net") == 0) {
                                if (strcmp(v, "none") == 0)
                                        o->net = NTFS_JAIL_NET_NONE;
                                else if (strcmp(v, "loopback") == 0)
                                        o->net = NTFS_JAIL_NET_LOOPBACK;
                                else
                                        die(o, "--net: none or loopback");
                        } else if (strcmp(a, "--timeout") == 0)
                                o->timeout_ms = parse_timeout(o, v);
                        else if (strcmp(a, "--timeout-ms") == 0)
                                o->timeout_ms = num(o, a, v, 7ULL * 86400 * 1000);
                        else if (strcmp(a, "--output-limit") == 0)
                                o->output_limit = num(o, a, v, NTFS_JAIL_OUTPUT_LIMIT_MAX);
                        else if (strcmp(a, "--memory") == 0)
                                o->memory = num(o, a, v, 1ULL << 50);
                        else if (strcmp(a, "--pids") == 0)
                                o->pids = num(o, a, v, 1 << 22);
                        else if (strcmp(a, "--cpu") == 0)
                                o->cpu = (unsigned)num(o, a, v, 100000);
                        else if (strcmp(a, "--group") == 0) {
                                if (!group_name_valid(v))
                                        die(o, "--group: 1-100 of A-Z a-z 0-9 . _ -, not . or ..");
                                o->group = v;
                        } else if (strcmp(a, "--group-memory") == 0)
                                o->group_memory = num(o, a, v, 1ULL << 50);
                        else if (strcmp(a, "--group-pids") == 0)
                                o->group_pids = num(o, a, v, 1 << 22);
                        else if (strcmp(a, "--group-cpu") == 0)
                                o->group_cpu = (unsigned)num(o, a, v, 100000);
                        else if (strcmp(a, "--tmp-size") == 0)
                                o->tmp_bytes = num(o, a, v, 1ULL << 40);
                        else if (strcmp(a, "--as") == 0)
                                o->as_bytes = num(o, a, v, 1ULL << 50);
                        else if (strcmp(a, "--fsize") == 0)
                                o->fsize = num(o, a, v, 1ULL << 50);
                        else if (strcmp(a, "--env") == 0) {
                                const char *eq = strchr(v, '=');
                                if (!eq || !jail_env_name_valid(v, (size_t)(eq - v)))
                                        die(o, "--env: expected NAME=VALUE");
                                if (o->n_env >= NTFS_JAIL_ENV_MAX)
                                        die(o, "--env: too many");
                                o->env[o->n_env++] = v;
                        } else if (strcmp(a, "--state-in") == 0)
                                o->state_in = v;
                        else if (strcmp(a, "--proxy-socket") == 0) {
                                if (v[0] != '/')
                                        die(o, "--proxy-socket: expected an absolute path");
                                o->proxy_socket = v;
                        } else if (strcmp(a, "--proxy-port") == 0) {
                                o->proxy_port = (unsigned)num(o, a, v, 65535);
                                if (o->proxy_port == 0)
                                        die(o, "--proxy-port: expected 1..65535");
                        }
                        else if (strcmp(a, "--state-out") == 0)
                                o->state_out = v;
                        else
                                usage();
                }
        }
        if (o->probe)
                return;
        if (o->pass_stdin && o->tty)
                die(o, "--stdin and --tty both want fd 5");
        if (!o->workspace)
                die(o, "--workspace is required");
        if (i >= argc)
                die(o, "no command (give it after --)");
        if (o->pids == 0)
                o->pids = 512;
        if (o->tmp_bytes == 0)
                o->tmp_bytes = 64ULL << 20;
        if (o->proxy_socket && o->proxy_port == 0)
                o->proxy_port = 3128;
        /* COMMAND... is joined with spaces, as ssh does. */
        struct jbuf b = { 0 };
        for (int j = i; j < argc; j++)
                if ((j > i && jbuf_puts(&b, " ") < 0) || jbuf_puts(&b, argv[j]) < 0)
                        die(o, "out of memory");
        if (b.len > NTFS_JAIL_COMMAND_MAX || memchr(b.p, 0, b.len))
                die(o, "command too long");
        o->command = b.p;
        if (!o->no_direct)
                o->direct = plain_words(o->command);
}

static int probe(void) {
        struct ntfs_jail_caps c = { 0 };
        if (ntfs_jail_probe(&c) < 0)
                return 1;
        printf("{\"cgroup_version\":%d,\"memory\":%s,\"pids\":%s,\"cpu\":%s,\"userns\":%s,\"seccomp\":%s}\n",
               c.cgroup_version, c.cgroup_memory ? "true" : "false", c.cgroup_pids ? "true" : "false",
               c.cgroup_cpu ? "true" : "false", c.userns ? "true" : "false", c.seccomp ? "true" : "false");
        return 0;
}

struct stream {
        int fd;
        int pass_fd; /* passthrough target, or -1 */
        uint64_t limit;
        struct jbuf buf;
        uint64_t total;
        bool keep; /* store in buf (JSON mode) */
        bool pass_all; /* pass every byte through, also past the limit (--stream) */
};

/* Reads what is there; returns false on EOF. Past the limit it drains. */
static bool stream_read(struct stream *s) {
        char tmp[65536];
        ssize_t n = read(s->fd, tmp, sizeof tmp);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN;
        if (n == 0)
                return false;
        uint64_t room = s->total < s->limit ? s->limit - s->total : 0;
        size_t take = (size_t)NTFS_MIN((uint64_t)n, room);
        if (s->pass_all)
                write_all(s->pass_fd, tmp, (size_t)n);
        if (take) {
                if (s->keep && jbuf_put(&s->buf, tmp, take) < 0)
                        take = 0;
                if (s->pass_fd >= 0 && !s->pass_all)
                        write_all(s->pass_fd, tmp, take);
        }
        s->total += (uint64_t)n;
        return true;
}

/* P0's state for p0_failed: a failure after the clone ends P1 first. */
static struct p0_ctx {
        const struct opts *o;
        pid_t p1;
        struct jail_cgroup *cg;
} g_p0;

static _Noreturn void p0_failed(const char *msg) {
        p0_fail = NULL;
        kill(g_p0.p1, SIGKILL);
        while (waitpid(g_p0.p1, NULL, 0) < 0 && errno == EINTR)
                ;
        jail_cgroup_destroy(g_p0.cg);
        die(g_p0.o, "%s", msg);
}

/* ---- seccomp kills: P0 is the filter's listener ------------------------- */

/* The processes the filter ended (a foreign-ABI syscall: the filter's
 * action is a user notification, so P0 learns the syscall, kills the
 * caller and reports it). The first few are named; all are counted. */
#define SECCOMP_KILLS_NAMED 8
static struct seccomp_kill {
        int pid; /* in the jail's pid namespace */
        char what[96];
} seccomp_kills[SECCOMP_KILLS_NAMED];
static unsigned n_seccomp_kills;

/* Tgid and innermost pid (the jail's) of host task tid, from /proc. */
static int task_ids(pid_t tid, pid_t *tgid, int *jail_pid) {
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        const char *t = strstr(buf, "\nTgid:"), *ns = strstr(buf, "\nNSpid:");
        if (!t)
                return -EIO;
        *tgid = (pid_t)strtol(t + 6, NULL, 10);
        *jail_pid = (int)tid;
        if (ns) {
                const char *e = strchr(ns + 1, '\n'), *last = NULL;
                for (const char *c = ns + 7; *c && (!e || c < e); c++)
                        if (*c >= '0' && *c <= '9' && (c[-1] == ' ' || c[-1] == '\t'))
                                last = c;
                if (last)
                        *jail_pid = (int)strtol(last, NULL, 10);
        }
        return *tgid > 0 ? 0 : -EIO;
}

/* One notification: name the syscall, kill the process that made it (its
 * whole thread group, through a pidfd checked against the notification, so
 * a reused pid is never hit), answer ENOSYS (the syscall never runs). */
static void seccomp_notified(int nfd, void *req_buf, size_t req_size, size_t resp_size) {
        memset(req_buf, 0, req_size);
        if (ioctl(nfd, SECCOMP_IOCTL_NOTIF_RECV, req_buf) < 0)
                return; /* EINTR, or the caller is already gone (ENOENT) */
        const struct seccomp_notif *req = req_buf;
        char what[96];
        if (seccomp_syscall_name(req->data.arch, (uint32_t)req->data.nr, what, sizeof what) < 0)
                snprintf(what, sizeof what, "syscall %d", req->data.nr);
        pid_t tgid = 0;
        int jpid = (int)req->pid;
        uint64_t id = req->id;
        bool killed = false;
        if (task_ids((pid_t)req->pid, &tgid, &jpid) == 0) {
                _cleanup_close_ int pfd = pidfd_open(tgid, 0);
                if (pfd >= 0 && ioctl(nfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0)
                        killed = syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0;
        }
        char resp_buf[256];
        struct seccomp_notif_resp *resp = (struct seccomp_notif_resp *)resp_buf;
        memset(resp_buf, 0, sizeof resp_buf);
        resp->id = id;
        resp->error = -ENOSYS;
        if (resp_size <= sizeof resp_buf)
                (void)ioctl(nfd, SECCOMP_IOCTL_NOTIF_SEND, resp); /* ENOENT: it died first, as meant */
        if (!killed)
                return; /* gone before the kill (another signal): nothing of ours to report */
        if (n_seccomp_kills < SECCOMP_KILLS_NAMED) {
                seccomp_kills[n_seccomp_kills].pid = jpid;
                snprintf(seccomp_kills[n_seccomp_kills].what, sizeof seccomp_kills[0].what, "%s", what);
        }
        n_seccomp_kills++;
        trace("seccomp kill");
}

/* P1's listener fd, sent with one byte over the socket pair; -1 on EOF. */
static int recv_listener(int sock) {
        char byte;
        struct iovec iov = { &byte, 1 };
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
        } cb;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b };
        ssize_t n;
        while ((n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
                ;
        if (n <= 0)
                return -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
                return -1;
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        return fd;
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

int main(int argc, char **argv) {
        struct opts o;
        trace_t0 = ntfs_mono_ns();
        g_argv = argv;
        g_argc = argc;
        /* Options point into a copy: P1 blanks the original (hide_cmdline). */
        char **args = calloc((size_t)argc + 1, sizeof *args);
        for (int i = 0; args && i < argc; i++)
                if (!(args[i] = strdup(argv[i])))
                        die(NULL, "out of memory");
        if (!args)
                die(NULL, "out of memory");
        parse_args(argc, args, &o);
        if (o.probe) {
                for (int i = 0; i < argc; i++)
                        free(args[i]);
                free(args);
                return probe();
        }
        /* SIGTERM/SIGINT/SIGHUP end the jail cleanly: they are blocked here
         * and taken only inside ppoll(), which then kills the jail. */
        sigset_t block, orig;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGHUP);
        sigprocmask(SIG_BLOCK, &block, &orig);
        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        /* --die-with-parent: the daemon (or its thread) going away ends us. */
        if (o.die_with_parent && prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) < 0)
                die(&o, "PR_SET_PDEATHSIG: %s", strerror(errno));
        /* Nothing of the caller's but stdin/stdout/stderr (and the
         * streaming fds asked for) goes further. */
        if (o.stream || o.pass_stdin || o.tty) {
                close_range(6, ~0U, 0);
                if (!o.stream)
                        close_range(3, 4, 0);
                else if (fcntl(3, F_GETFD) < 0 || fcntl(4, F_GETFD) < 0)
                        die(&o, "--stream: fds 3 and 4 are not open");
                if (!o.pass_stdin && !o.tty)
                        close(5);
                else if (fcntl(5, F_GETFD) < 0)
                        die(&o, "--stdin/--tty: fd 5 is not open");
                else if (o.tty && !isatty(5))
                        die(&o, "--tty: fd 5 is not a terminal");
        } else
                close_range(3, ~0U, 0);
        if (getenv("NTFS_JAIL_TRACE"))
                trace_fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
        trace("args parsed");

        struct jail_state state = { 0 };
        struct jail_cgroup cg = { 0 };
        if (o.state_in) {
                _cleanup_free_ char *blob = NULL;
                size_t bl = 0;
                int r = strcmp(o.state_in, "-") == 0 ? ntfs_read_file("/dev/stdin", JAIL_STATE_MAX, &blob, &bl)
                                                     : ntfs_read_file(o.state_in, JAIL_STATE_MAX, &blob, &bl);
                if (r < 0)
                        die(&o, "--state-in %s: %s", o.state_in, strerror(-r));
                if (bl > 0 && (r = jail_state_parse(blob, bl, &state)) < 0)
                        die(&o, "--state-in: not a valid state blob (%s)", strerror(-r));
        }
        if (!state.cwd && !(state.cwd = strdup("")))
                die(&o, "out of memory");
        trace("state read");

        int outp[2], errp[2], stp[2], gop[2], np[2];
        if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(stp, O_CLOEXEC) < 0 ||
            pipe2(gop, O_CLOEXEC) < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, np) < 0)
                die(&o, "pipe: %s", strerror(errno));
        /* The sizes the kernel's notification structures have. */
        struct seccomp_notif_sizes nsz = { 0 };
        if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &nsz) < 0)
                nsz = (struct seccomp_notif_sizes){ sizeof(struct seccomp_notif), sizeof(struct seccomp_notif_resp), 0 };
        size_t notif_size = nsz.seccomp_notif > sizeof(struct seccomp_notif) ? nsz.seccomp_notif
                                                                             : sizeof(struct seccomp_notif);
        _cleanup_free_ void *notif_buf = calloc(1, notif_size);
        if (!notif_buf)
                die(&o, "out of memory");


        int64_t t0 = ntfs_mono_ns();
        /* A fork-like raw clone straight into a new pid namespace. Not
         * unshare(CLONE_NEWPID) + fork(): that would leave this process
         * unable to create threads (CLONE_VM across pid namespaces is
         * refused), which sanitizer runtimes need at exit. This process is
         * single-threaded, so glibc's fork bookkeeping is not needed. */
        pid_t p1 = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
        if (p1 < 0) {
                int e = errno;
                die(&o, "clone into a new pid namespace: %s%s", strerror(e),
                    e == EPERM ? " (ntfs-jail needs root)" : "");
        }
        if (p1 == 0) {
                sigprocmask(SIG_SETMASK, &orig, NULL);
                signal(SIGTERM, SIG_DFL);
                signal(SIGINT, SIG_DFL);
                signal(SIGHUP, SIG_DFL);
                signal(SIGPIPE, SIG_DFL);
                close(outp[0]);
                close(errp[0]);
                close(stp[0]);
                close(gop[1]);
                close(np[0]);
                if (o.stream)
                        close_range(3, 4, 0); /* P0's alone */
                struct child_args a = { .o = &o, .state = &state, .out_w = outp[1], .err_w = errp[1],
                                        .notify_w = np[1], .in_fd = o.pass_stdin || o.tty ? 5 : -1 };
                run_p1(&a, stp[1], gop[0]);
        }
        trace("p1 cloned");
        if (o.pass_stdin || o.tty)
                close(5); /* P1's alone */
        close(outp[1]);
        close(errp[1]);
        close(stp[1]);
        close(gop[0]);
        close(np[1]);
        /* While P1 builds the root: the run's cgroup, P1 moved into it,
         * and the seccomp filter; then P1 may go on. */
        g_p0 = (struct p0_ctx){ .o = &o, .p1 = p1, .cg = &cg };
        p0_fail = p0_failed;
        char cgname[96];
        snprintf(cgname, sizeof cgname, "ntfs-jail-%d-%lld", (int)getpid(), (long long)ntfs_mono_ns());
        struct jail_cgroup_group grp = { .name = o.group, .memory = o.group_memory, .pids = o.group_pids,
                                         .cpu = o.group_cpu };
        if (jail_cgroup_create(&cg, cgname, o.memory, o.pids, o.cpu, o.group ? &grp : NULL) < 0)
                p0_failed("cgroup setup failed");
        trace("cgroup created");
        /* v1: P1 moves itself (jail_cgroup_open_tasks says why), with the
         * `tasks` files P0 opens and hands it; v2: P0 moves it. */
        int cgfds[JAIL_CGROUP_DIRS];
        int ncg = jail_cgroup_open_tasks(&cg, cgfds);
        if (ncg <= 0) {
                ncg = 0;
                int cr = jail_cgroup_attach(&cg, p1);
                if (cr < 0) {
                        errno = -cr;
                        die_child("join cgroup");
                }
        }
        (void)jail_cgroup_send_fds(np[0], cgfds, ncg); /* P1 gone: EPIPE, and its report says why */
        for (int i = 0; i < ncg; i++)
                close(cgfds[i]);
        trace("p1 moved into the cgroup, or handed its tasks files");
        struct jbuf go = { 0 };
        export_filter(&go);
        trace("filter built");
        write_all(gop[1], go.p, go.len); /* P1 gone: EPIPE, and its report says why */
        free(go.p);
        close(gop[1]);
        p0_fail = NULL;
        int pidfd = pidfd_open(p1, 0);
        if (pidfd < 0) {
                kill(p1, SIGKILL);
                waitpid(p1, NULL, 0);
                jail_cgroup_destroy(&cg);
                die(&o, "pidfd_open: %s", strerror(errno));
        }

        struct stream out = { .fd = outp[0], .pass_fd = o.stream ? 3 : o.json ? -1 : 1, .pass_all = o.stream,
                              .limit = o.output_limit, .keep = o.json };
        struct stream err = { .fd = errp[0], .pass_fd = o.stream ? 4 : o.json ? -1 : 2, .pass_all = o.stream,
                              .limit = o.output_limit, .keep = o.json };
        struct stream stat = { .fd = stp[0], .pass_fd = -1, .limit = JAIL_STATE_MAX + 4096, .keep = true };
        bool out_open = true, err_open = true, st_open = true, p1_alive = true, killed = false;
        int nsock = np[0], nfd = -1; /* P1 sends the filter's listener on nsock */
        int64_t deadline = t0 + (int64_t)o.timeout_ms * 1000000;
        int64_t hard = deadline + 10LL * 1000000000;
        int p1_status = 0;
        while (p1_alive || out_open || err_open || st_open) {
                int64_t now = ntfs_mono_ns();
                if (!killed && (now >= deadline || got_signal)) {
                        kill(p1, SIGKILL);
                        jail_cgroup_kill(&cg);
                        killed = true;
                }
                if (now >= hard && !p1_alive)
                        break; /* pipes held open by nothing we know: give up on them */
                int64_t wait_ns = (killed ? hard : deadline) - now;
                struct timespec ts = { (time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000) };
                if (wait_ns < 0)
                        ts = (struct timespec){ 0, 0 };
                struct pollfd pf[6] = {
                        { out_open ? out.fd : -1, POLLIN, 0 },
                        { err_open ? err.fd : -1, POLLIN, 0 },
                        { st_open ? stat.fd : -1, POLLIN, 0 },
                        { p1_alive ? pidfd : -1, POLLIN, 0 },
                        { nsock, POLLIN, 0 },
                        { nfd, POLLIN, 0 },
                };
                int n = ppoll(pf, 6, &ts, &orig);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (pf[0].revents && !stream_read(&out))
                        out_open = false;
                if (pf[1].revents && !stream_read(&err))
                        err_open = false;
                if (pf[2].revents && !stream_read(&stat))
                        st_open = false;
                if (pf[3].revents) {
                        if (waitpid(p1, &p1_status, WNOHANG) == p1)
                                p1_alive = false;
                }
                if (pf[4].revents) {
                        nfd = recv_listener(nsock);
                        close(nsock);
                        nsock = -1;
                }
                if (pf[5].revents & POLLIN)
                        seccomp_notified(nfd, notif_buf, notif_size,
                                         nsz.seccomp_notif_resp);
                else if (pf[5].revents) { /* POLLHUP: no process holds the filter any more */
                        close(nfd);
                        nfd = -1;
                }
        }
        if (nsock >= 0)
                close(nsock);
        if (nfd >= 0)
                close(nfd);
        if (p1_alive) {
                kill(p1, SIGKILL);
                waitpid(p1, &p1_status, 0);
        }
        trace("p1 reaped, pipes drained");
        int64_t duration = ntfs_mono_ns() - t0;
        bool oom = jail_cgroup_oom(&cg);
        bool lim_mem = cg.memory, lim_pids = cg.pids, lim_cpu = cg.cpu;
        bool g_mem = cg.g_memory, g_pids = cg.g_pids, g_cpu = cg.g_cpu;
        int64_t cpu_ns = jail_cgroup_cpu_ns(&cg);
        int cg_version = cg.version;
        jail_cgroup_destroy(&cg);
        trace("cgroup destroyed");
        close(pidfd);
        close(out.fd);
        close(err.fd);
        close(stat.fd);

        /* Interpret P1's report. */
        const char *setup_error = NULL;
        char *state_blob = NULL;
        int exit_code = 0, term_signal = 0;
        bool timed_out = false;
        if (stat.buf.len >= 1 && stat.buf.p[0] == 'E') {
                setup_error = stat.buf.p + 1;
        } else if (stat.buf.len >= 6 && stat.buf.p[0] == 'R') {
                int ws;
                memcpy(&ws, stat.buf.p + 1, sizeof ws);
                if (WIFEXITED(ws))
                        exit_code = WEXITSTATUS(ws);
                else if (WIFSIGNALED(ws)) {
                        term_signal = WTERMSIG(ws);
                        exit_code = 128 + term_signal;
                }
                if (stat.buf.p[5] == 1)
                        (void)jail_state_from_raw(stat.buf.p + 6, stat.buf.len - 6, &state_blob, NULL);
        } else if (killed && !got_signal) {
                timed_out = true;
                exit_code = EXIT_TIMEOUT;
                term_signal = SIGKILL;
        } else if (killed) {
                term_signal = got_signal;
                exit_code = 128 + got_signal;
        } else if (oom) {
                term_signal = SIGKILL;
                exit_code = 128 + SIGKILL;
        } else {
                setup_error = "jail init ended without a report";
        }

        if (state_blob && o.state_out) {
                int r = ntfs_write_file_durable(o.state_out, state_blob, strlen(state_blob), 0600);
                if (r < 0)
                        fprintf(stderr, "ntfs-jail: --state-out %s: %s\n", o.state_out, strerror(-r));
        }

        int rc;
        if (o.json) {
                struct jbuf b = { 0 };
                int r = jbuf_printf(&b, "{\"exit_code\":%d,\"signal\":%d,\"timed_out\":%s,\"oom\":%s,", exit_code,
                                    term_signal, timed_out ? "true" : "false", oom ? "true" : "false");
                if (r >= 0)
                        r = jbuf_json_output(&b, "stdout", out.buf.p ? out.buf.p : "", out.buf.len);
                if (r >= 0)
                        r = jbuf_printf(&b, ",\"stdout_truncated\":%s,\"stdout_bytes\":%llu,",
                                        out.total > o.output_limit ? "true" : "false",
                                        (unsigned long long)out.total);
                if (r >= 0)
                        r = jbuf_json_output(&b, "stderr", err.buf.p ? err.buf.p : "", err.buf.len);
                if (r >= 0)
                        r = jbuf_printf(&b,
                                        ",\"stderr_truncated\":%s,\"stderr_bytes\":%llu,\"duration_ns\":%lld,"
                                        "\"limits\":{\"cgroup\":%d,\"memory\":%s,\"pids\":%s,\"cpu\":%s,"
                                        "\"group_memory\":%s,\"group_pids\":%s,\"group_cpu\":%s},\"cpu_ns\":%lld,"
                                        "\"state\":",
                                        err.total > o.output_limit ? "true" : "false", (unsigned long long)err.total,
                                        (long long)duration, cg_version, lim_mem ? "true" : "false",
                                        lim_pids ? "true" : "false", lim_cpu ? "true" : "false",
                                        g_mem ? "true" : "false", g_pids ? "true" : "false", g_cpu ? "true" : "false",
                                        (long long)cpu_ns);
                if (r >= 0)
                        r = state_blob ? jbuf_json_string(&b, state_blob, strlen(state_blob)) : jbuf_puts(&b, "null");
                if (r >= 0)
                        r = jbuf_printf(&b, ",\"seccomp_killed\":%u,\"seccomp_kills\":[", n_seccomp_kills);
                for (unsigned k = 0; r >= 0 && k < NTFS_MIN(n_seccomp_kills, SECCOMP_KILLS_NAMED); k++) {
                        r = jbuf_printf(&b, "%s{\"pid\":%d,\"syscall\":", k ? "," : "", seccomp_kills[k].pid);
                        if (r >= 0)
                                r = jbuf_json_string(&b, seccomp_kills[k].what, strlen(seccomp_kills[k].what));
                        if (r >= 0)
                                r = jbuf_puts(&b, "}");
                }
                if (r >= 0)
                        r = jbuf_puts(&b, "]");
                if (r >= 0)
                        r = jbuf_puts(&b, ",\"error\":");
                if (r >= 0)
                        r = setup_error ? jbuf_json_string(&b, setup_error, strlen(setup_error))
                                        : jbuf_puts(&b, "null");
                if (r >= 0)
                        r = jbuf_puts(&b, "}\n");
                if (r < 0) {
                        fprintf(stderr, "ntfs-jail: out of memory\n");
                        rc = EXIT_SETUP;
                } else {
                        write_all(1, b.p, b.len);
                        rc = setup_error ? EXIT_SETUP : 0;
                }
                free(b.p);
        } else {
                if (out.total > o.output_limit)
                        fprintf(stderr, "ntfs-jail: stdout truncated at %llu of %llu bytes\n",
                                (unsigned long long)o.output_limit, (unsigned long long)out.total);
                if (err.total > o.output_limit)
                        fprintf(stderr, "ntfs-jail: stderr truncated at %llu of %llu bytes\n",
                                (unsigned long long)o.output_limit, (unsigned long long)err.total);
                if (timed_out)
                        fprintf(stderr, "ntfs-jail: timed out after %.3f s\n", (double)o.timeout_ms / 1000.0);
                if (oom)
                        fprintf(stderr, "ntfs-jail: out of memory (cgroup OOM kill)\n");
                for (unsigned k = 0; k < NTFS_MIN(n_seccomp_kills, SECCOMP_KILLS_NAMED); k++)
                        fprintf(stderr, "ntfs-jail: seccomp killed pid %d: it called %s (a syscall ABI the jail refuses)\n",
                                seccomp_kills[k].pid, seccomp_kills[k].what);
                if (n_seccomp_kills > SECCOMP_KILLS_NAMED)
                        fprintf(stderr, "ntfs-jail: seccomp killed %u processes in all\n", n_seccomp_kills);
                if (setup_error)
                        fprintf(stderr, "ntfs-jail: %s\n", setup_error);
                rc = setup_error ? EXIT_SETUP : exit_code;
        }
        free(state_blob);
        free(out.buf.p);
        free(err.buf.p);
        free(stat.buf.p);
        trace("report written");
        free(o.command);
        plain_words_free(o.direct);
        jail_state_release(&state);
        for (int i = 0; i < argc; i++)
                free(args[i]);
        free(args);
        (void)p1_status;
        return rc;
}
