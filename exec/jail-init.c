/* SPDX-License-Identifier: MIT
 * jail-init.c — the processes inside the jail: P1, pid 1 of the new pid
 * namespace (namespaces, the root, the network, the go from P0, dropping
 * every privilege, reaping, the report to P0), and P2, which it forks to
 * run the command (fds, environment, rlimits, no_new_privs, seccomp, exec).
 * The processes are described at the top of exec/ntfs-jail.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "exec/jail-internal.h"
#include "exec/jail-helper.h"
#include "common/banned.h"

static void loopback_up(void) {
        _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                die_child("socket for lo");
        struct ifreq ifr = { 0 };
        memcpy(ifr.ifr_name, "lo", 3);
        CHECK(ioctl(s, SIOCGIFFLAGS, &ifr), "SIOCGIFFLAGS lo");
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        CHECK(ioctl(s, SIOCSIFFLAGS, &ifr), "SIOCSIFFLAGS lo");
}

/* Empties the bounding, ambient, inheritable, permitted and effective sets
 * and locks root's special treatment off, so exec cannot regain any. */
static void drop_caps(void) {
        CHECK(prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                               SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED),
              "securebits");
        for (int cap = 0; cap < 64; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        die_child("drop bounding cap %d", cap);
        CHECK(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps");
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
        struct __user_cap_data_struct d[2] = { { 0 } };
        CHECK(syscall(SYS_capset, &h, d), "capset");
}

static void verify_no_caps(void) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
        struct __user_cap_data_struct d[2];
        CHECK(syscall(SYS_capget, &h, d), "capget");
        for (int i = 0; i < 2; i++)
                if (d[i].effective || d[i].permitted || d[i].inheritable) {
                        errno = 0;
                        die_child("capabilities still held");
                }
        for (int cap = 0; cap < 64; cap++)
                if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) {
                        errno = 0;
                        die_child("bounding capability %d still held", cap);
                }
}

static volatile sig_atomic_t main_pid;
char **g_argv;
int g_argc;

/* The helper's argv holds host paths (--workspace, --proxy-socket: the
 * store's, the socket's) and the command, and /proc/PID/cmdline of init,
 * of P3 and of P2 until its exec would show them in the jail: init blanks
 * its argument area, and the environment's, first thing (its own copy of
 * the memory, inherited blank by every process it forks). The options were
 * parsed from a heap copy (main), so nothing points there. */
static void hide_cmdline(void) {
        if (g_argc < 1)
                return;
        char *start = g_argv[0], *end = g_argv[g_argc - 1] + strlen(g_argv[g_argc - 1]);
        memset(start, 0, (size_t)(end - start));
        static const char name[] = "ntfs-jail-init";
        if ((size_t)(end - start) >= sizeof name)
                memcpy(start, name, sizeof name);
        for (char **e = environ; e && *e; e++)
                explicit_bzero(*e, strlen(*e));
}

/* Hands the filter's listener to P0 (one byte with SCM_RIGHTS). */
static void send_listener(int sock, int fd) {
        char byte = 'L';
        struct iovec iov = { &byte, 1 };
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
        } cb;
        memset(&cb, 0, sizeof cb);
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b };
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
        ssize_t n;
        while ((n = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
                ;
        if (n != 1)
                die_child("hand the seccomp listener to the helper");
}

static void forward_signal(int sig) {
        if (main_pid > 0)
                kill(main_pid, sig);
}

/* A proxy variable as an egress run set it (and the shell state saved it):
 * meaningless, and misleading, in a run without the proxy. */
static bool is_stale_proxy_var(const char *kv) {
        static const char *const names[] = { "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=" };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (strncmp(kv, names[i], strlen(names[i])) == 0)
                        return strncmp(kv + strlen(names[i]), "http://127.0.0.1:", 17) == 0;
        return strcmp(kv, "NO_PROXY=localhost,127.0.0.1,::1") == 0 ||
               strcmp(kv, "no_proxy=localhost,127.0.0.1,::1") == 0;
}

/* envp: fixed base, then the saved state, then --env; later names win. */
static char **build_env(const struct opts *o, const struct jail_state *st) {
        size_t cap = 16 + 4 + st->n_vars + o->n_env, n = 0; /* 4: exec_direct's */
        char **env = calloc(cap + 1, sizeof *env);
        if (!env) {
                errno = ENOMEM;
                die_child("environment");
        }
        static const char *const base[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                            "HOME=/workspace", "TERM=xterm-256color", "LANG=C.UTF-8" };
        const char *all[16 + JAIL_STATE_VARS_MAX + NTFS_JAIL_ENV_MAX];
        size_t m = 0;
        for (size_t i = 0; i < ARRAY_SIZE(base); i++)
                all[m++] = base[i];
        /* The shell's logical working directory: /workspace/..., where P1
         * enters (docs/jail.md, "One path"). With /workspace a symlink to
         * the host path, getcwd() gives the host path while $PWD, pwd and
         * the saved state stay under /workspace; bash keeps a PWD that names
         * its working directory. */
        static char pwd[PATH_MAX + 8];
        int pn = snprintf(pwd, sizeof pwd, "PWD=/workspace%s%s", st->cwd[0] ? "/" : "", st->cwd);
        if (pn > 0 && (size_t)pn < sizeof pwd)
                all[m++] = pwd;
        for (size_t i = 0; i < st->n_vars; i++)
                if (o->proxy_socket || !is_stale_proxy_var(st->vars[i]))
                        all[m++] = st->vars[i];
        /* The egress proxy wins over a saved state (its port may differ);
         * --env still wins over it. Loopback stays direct. */
        static char proxy_vars[6][64];
        if (o->proxy_socket) {
                static const char *const names[] = { "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy" };
                for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                        snprintf(proxy_vars[i], sizeof proxy_vars[i], "%s=http://127.0.0.1:%u", names[i],
                                 o->proxy_port);
                        all[m++] = proxy_vars[i];
                }
                snprintf(proxy_vars[4], sizeof proxy_vars[4], "NO_PROXY=localhost,127.0.0.1,::1");
                snprintf(proxy_vars[5], sizeof proxy_vars[5], "no_proxy=localhost,127.0.0.1,::1");
                all[m++] = proxy_vars[4];
                all[m++] = proxy_vars[5];
        }
        for (size_t i = 0; i < o->n_env; i++)
                all[m++] = o->env[i];
        for (size_t i = 0; i < m; i++) {
                size_t kl = strcspn(all[i], "=");
                size_t j;
                for (j = 0; j < n; j++)
                        if (strncmp(env[j], all[i], kl + 1) == 0)
                                break;
                env[j] = (char *)all[i];
                if (j == n)
                        n++;
        }
        env[n] = NULL;
        return env;
}

/* The shell saves its cwd and exported variables on exit; one line, so
 * the command's own line numbers are unchanged. */
static const char save_prefix[] =
        "__ntfs_jail_save() { local __ntfs_rc=$? __ntfs_v; "
        "builtin compgen -e >" STATE_FILE ".names 2>/dev/null; "
        "{ builtin printf 'cwd=%s\\0' \"$PWD\"; "
        "while builtin read -r __ntfs_v; do builtin printf 'env=%s=%s\\0' \"$__ntfs_v\" \"${!__ntfs_v}\"; "
        "done <" STATE_FILE ".names; } >" STATE_FILE " 2>/dev/null; return $__ntfs_rc; }; "
        "trap __ntfs_jail_save EXIT; ";

static _Noreturn void run_p2(const struct child_args *a, char **env, const char *script,
                             int err_w, int devnull) {
        report_fd = err_w;
        trace("p2 start");
        /* 1. A new session: no controlling terminal to inject into. */
        CHECK(setsid(), "setsid");
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* 2. Exactly three fds (plus the exec-error pipe, close-on-exec):
         * with --tty all three are the terminal, which becomes the new
         * session's controlling terminal. */
        if (a->o->tty) {
                for (int fd = 0; fd < 3; fd++)
                        CHECK(dup2(a->in_fd, fd), "terminal as fd %d", fd);
                CHECK(ioctl(0, TIOCSCTTY, 0), "controlling terminal");
        } else {
                CHECK(dup2(a->in_fd >= 0 ? a->in_fd : devnull, 0), "stdin");
                CHECK(dup2(a->out_w, 1), "stdout");
                CHECK(dup2(a->err_w, 2), "stderr");
        }
        CHECK(dup2(err_w, 3), "error pipe");
        CHECK(fcntl(3, F_SETFD, FD_CLOEXEC), "error pipe cloexec");
        report_fd = 3;
        trace("p2 fds");
        if (trace_fd >= 5) { /* close-on-exec: the command never sees it */
                CHECK(close_range(4, (unsigned)trace_fd - 1, 0), "close fds");
                CHECK(close_range((unsigned)trace_fd + 1, ~0U, 0), "close fds");
        } else
                CHECK(close_range(4, ~0U, 0), "close fds");
        /* 3. The working directory from the saved state: P1 entered it. */
        /* rlimits (lowering needs no capability). */
        struct rlimit rl;
        rl = (struct rlimit){ 0, 0 };
        CHECK(setrlimit(RLIMIT_CORE, &rl), "RLIMIT_CORE");
        rl.rlim_cur = rl.rlim_max = a->o->pids;
        CHECK(setrlimit(RLIMIT_NPROC, &rl), "RLIMIT_NPROC");
        struct rlimit cur;
        CHECK(getrlimit(RLIMIT_NOFILE, &cur), "RLIMIT_NOFILE");
        rl.rlim_cur = rl.rlim_max = NTFS_MIN(cur.rlim_max, (rlim_t)4096);
        CHECK(setrlimit(RLIMIT_NOFILE, &rl), "RLIMIT_NOFILE");
        rl.rlim_cur = rl.rlim_max = a->o->fsize;
        CHECK(setrlimit(RLIMIT_FSIZE, &rl), "RLIMIT_FSIZE");
        if (a->o->as_bytes) {
                rl.rlim_cur = rl.rlim_max = a->o->as_bytes;
                CHECK(setrlimit(RLIMIT_AS, &rl), "RLIMIT_AS");
        }
        trace("p2 rlimits");
        /* 4. Capabilities: P1 dropped them before the fork; make sure. */
        verify_no_caps();
        /* 5. no_new_privs: fatal if it does not stick. */
        CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs");
        if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
                errno = 0;
                die_child("no_new_privs did not stick");
        }
        trace("p2 caps checked, nnp");
        /* 6. seccomp: P1 loaded the filter before forking, so it is in
         * force here already (and for init); make sure. */
        if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2) {
                errno = 0;
                die_child("the seccomp filter is not in force");
        }
        trace("p2 seccomp checked");
        if (a->o->direct)
                exec_direct(a->o->direct, env, a->cwd, a->direct_ran);
        char *argv[] = { (char *)"bash", (char *)"--noprofile", (char *)"--norc", (char *)"-c", (char *)script, NULL };
        execve("/bin/bash", argv, env);
        die_child("execve /bin/bash");
}

static struct filter g_filter; /* P0's program, received and loaded by P1 */

/* go_r: P0 sends 'G' and the filter once P1 is in the run's cgroup. */
_Noreturn void run_p1(struct child_args *a, int status_w, int go_r) {
        report_fd = status_w;
        const struct opts *o = a->o;
        hide_cmdline();
        trace("p1 start");
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* The caller's stdio stays with P0: init reports through status_w. */
        int hostnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (hostnull < 0)
                die_child("open /dev/null");
        for (int fd = 0; fd < 3; fd++)
                CHECK(dup2(hostnull, fd), "stdio of init");
        close(hostnull);
        CHECK(unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare namespaces");
        trace("p1 unshared");
        /* Opened in the new mount namespace (a bind source must belong to
         * it) and before /tmp is covered by the new root. */
        _cleanup_close_ int ws = open(o->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (ws < 0)
                die_child("workspace %s", o->workspace);
        /* The proxy socket's directory, kept across the pivot. */
        _cleanup_close_ int proxy_dir = -1;
        const char *proxy_name = NULL;
        if (o->proxy_socket) {
                const char *slash = strrchr(o->proxy_socket, '/');
                char dir[PATH_MAX];
                size_t dl = (size_t)(slash - o->proxy_socket);
                proxy_name = slash + 1;
                if (dl >= sizeof dir || !*proxy_name) {
                        errno = EINVAL;
                        die_child("--proxy-socket %s", o->proxy_socket);
                }
                memcpy(dir, o->proxy_socket, dl);
                dir[dl] = 0;
                proxy_dir = open(dl ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (proxy_dir < 0)
                        die_child("proxy socket directory %s", dl ? dir : "/");
        }
        build_root(o, ws);
        trace("p1 root built");
        close(TAKE_FD(ws)); /* it pointed into the old, now detached, root */
        CHECK(sethostname("ntfs-jail", 9), "sethostname");
        if (o->net == NTFS_JAIL_NET_LOOPBACK || o->proxy_socket)
                loopback_up();
        /* Bound before the caps go (a port below 1024 needs one) and before
         * the command starts, so its first connection finds it. */
        _cleanup_close_ int proxy_l = -1;
        if (o->proxy_socket) {
                proxy_l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (proxy_l < 0)
                        die_child("proxy socket");
                int one = 1;
                CHECK(setsockopt(proxy_l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), "SO_REUSEADDR");
                struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->proxy_port),
                                           .sin_addr = { htonl(INADDR_LOOPBACK) } };
                CHECK(bind(proxy_l, (struct sockaddr *)&sin, sizeof sin), "bind 127.0.0.1:%u", o->proxy_port);
                CHECK(listen(proxy_l, 64), "listen on the proxy port");
        }
        _cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0)
                die_child("open /dev/null");

        trace("p1 net, devnull");
        char **env = build_env(o, a->state);
        size_t sl = sizeof save_prefix + strlen(o->command) + 1;
        char *script = malloc(sl);
        if (!script) {
                errno = ENOMEM;
                die_child("script");
        }
        snprintf(script, sl, "%s%s", save_prefix, o->command);

        /* Nothing is forked before this process is in the run's cgroup:
         * P0 makes it, and builds the filter, while this one builds the
         * root; then (v1) hands over the run's `tasks` files, to which
         * this process writes "0" itself (a single thread moving itself
         * takes no threadgroup lock: no RCU grace period to wait for), or
         * (v2) moves it, and sends an empty message. Every process of the
         * command is born there.
         * The cgroup namespace is made after the move, so the run's cgroup
         * is its root, as before. */
        int cgfds[JAIL_CGROUP_DIRS];
        int ncg = jail_cgroup_recv_fds(a->notify_w, cgfds);
        if (ncg < 0) {
                errno = -ncg;
                die_child("receive the run's cgroup from the helper");
        }
        int jr = jail_cgroup_join_self(cgfds, ncg);
        if (jr < 0) {
                errno = -jr;
                die_child("join the run's cgroup");
        }
        trace("p1 in the run's cgroup");
        receive_filter(go_r, &g_filter);
        close(go_r);
        CHECK(unshare(CLONE_NEWCGROUP), "unshare the cgroup namespace");
        trace("p1 go from p0");
        drop_caps();
        CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs (init)");
        CHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable");
        trace("p1 caps dropped");
        /* The filter, in force for init itself from here on, and so for P3,
         * P2 and everything the command starts (inherited across fork and
         * exec). Its listener goes to P0, which names and kills a process
         * the filter stops (a foreign syscall ABI). */
        int listener = -1;
        CHECK(load_filter(&g_filter, &listener), "seccomp filter");
        if (listener >= 0) {
                send_listener(a->notify_w, listener);
                close(listener);
        }
        close(a->notify_w);
        trace("p1 seccomp loaded");

        if (o->proxy_socket) {
                pid_t p3 = fork();
                if (p3 < 0)
                        die_child("fork the proxy forwarder");
                if (p3 == 0)
                        run_forwarder(proxy_l, proxy_dir, proxy_name);
                close(TAKE_FD(proxy_l));
                close(TAKE_FD(proxy_dir));
        }

        /* The working directory from the saved state, entered with P2's
         * credentials (the caps are gone): P2 inherits it. */
        int cn = snprintf(a->cwd, sizeof a->cwd, "/workspace%s%s", a->state->cwd[0] ? "/" : "", a->state->cwd);
        if (cn < 0 || (size_t)cn >= sizeof a->cwd || chdir(a->cwd) < 0) {
                snprintf(a->cwd, sizeof a->cwd, "/workspace");
                CHECK(chdir("/workspace"), "chdir /workspace");
        }
        /* What to report as the state if P2 runs the command without bash. */
        struct jbuf direct_raw = { 0 };
        if (o->direct) {
                a->direct_ran = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
                if (a->direct_ran == MAP_FAILED)
                        die_child("mmap");
                char **copy = calloc(env_count(env) + 1, sizeof *copy);
                if (!copy) {
                        errno = ENOMEM;
                        die_child("state");
                }
                memcpy(copy, env, env_count(env) * sizeof *copy);
                if (direct_state_raw(a->cwd, copy, &direct_raw) < 0) {
                        errno = ENOMEM;
                        die_child("state");
                }
                free(copy);
        }
        int ep[2];
        CHECK(pipe2(ep, O_CLOEXEC), "error pipe");
        pid_t p2 = fork();
        if (p2 < 0)
                die_child("fork");
        if (p2 == 0) {
                close(ep[0]);
                run_p2(a, env, script, ep[1], devnull);
        }
        main_pid = p2;
        close(ep[1]);
        close(TAKE_FD(devnull));
        close(a->out_w);
        close(a->err_w);
        if (a->in_fd >= 0)
                close(a->in_fd);
        free(env);
        free(script);

        struct sigaction sa = { .sa_handler = forward_signal };
        sigemptyset(&sa.sa_mask);
        static const int fwd[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
        for (size_t i = 0; i < ARRAY_SIZE(fwd); i++)
                sigaction(fwd[i], &sa, NULL);

        /* P2's exec-error pipe: EOF means bash is running. */
        char emsg[1024];
        size_t el = 0;
        for (;;) {
                ssize_t n = read(ep[0], emsg + el, sizeof emsg - 1 - el);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                el += (size_t)n;
                if (el == sizeof emsg - 1)
                        break;
        }
        close(ep[0]);
        trace("p1 p2 exec'd");
        if (el > 0) {
                kill(p2, SIGKILL);
                write_all(status_w, emsg, el); /* already 'E'-prefixed */
                _exit(EXIT_SETUP);
        }

        /* Reap everything; the command is over when P2 is. */
        int wstatus = 0;
        for (;;) {
                int st;
                pid_t w = waitpid(-1, &st, 0);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (w == p2) {
                        wstatus = st;
                        break;
                }
        }
        trace("p1 p2 exited");

        /* The saved shell state, if the epilogue ran. */
        char hdr[6] = { 'R' };
        memcpy(hdr + 1, &wstatus, sizeof wstatus);
        hdr[5] = 0;
        bool direct = a->direct_ran && *a->direct_ran;
        _cleanup_close_ int sf = direct ? -1 : open(STATE_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        char *raw = NULL;
        ssize_t rl = 0;
        if (sf >= 0 && fstat(sf, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= JAIL_STATE_MAX &&
            (raw = malloc((size_t)st.st_size + 1))) {
                size_t got = 0;
                while (got < (size_t)st.st_size) {
                        ssize_t n = read(sf, raw + got, (size_t)st.st_size - got);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                break;
                        got += (size_t)n;
                }
                rl = (ssize_t)got;
                hdr[5] = 1;
        }
        /* Without the shell the state is the one the command started with,
         * whatever it may have written to the state file itself. */
        if (direct) {
                raw = TAKE_PTR(direct_raw.p);
                rl = (ssize_t)direct_raw.len;
                hdr[5] = 1;
        }
        write_all(status_w, hdr, sizeof hdr);
        if (raw)
                write_all(status_w, raw, (size_t)rl);
        free(raw);
        free(direct_raw.p);
        _exit(0);
}
