/* SPDX-License-Identifier: MIT
 * jail.c — libntfs-exec: runs the ntfs-jail helper and collects its result.
 * See exec/jail.h for the contract and docs/jail.md for the jail itself.
 */
#include "exec/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "exec/jail-internal.h"
#include "common/banned.h"

#define HELPER_GRACE_NS (30LL * 1000000000) /* past the command's timeout */
#define DIAG_MAX (64 * 1024)                /* the helper's own stderr */
#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_OUTPUT_LIMIT (1024 * 1024)

void ntfs_jail_result_release(struct ntfs_jail_result *r) {
        if (!r)
                return;
        free(r->out);
        free(r->err);
        free(r->state_out);
        free(r->reason);
        free(r->seccomp_kills);
        *r = (struct ntfs_jail_result){ 0 };
}

static int write_all_fd(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* stdin of the helper: the state blob in a sealed-size memfd (never blocks),
 * or /dev/null. */
static int state_fd(const char *state) {
        if (!state || !*state) {
                int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                return fd < 0 ? -errno : fd;
        }
        size_t n = strlen(state);
        if (n > JAIL_STATE_MAX)
                return -E2BIG;
        _cleanup_close_ int fd = memfd_create("ntfs-jail-state", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = write_all_fd(fd, state, n);
        if (r < 0)
                return r;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;
        return TAKE_FD(fd);
}

struct argv_buf {
        char *argv[32 + 2 * NTFS_JAIL_ENV_MAX];
        size_t n;
        char nums[8][32];
        size_t n_nums;
};

static void arg(struct argv_buf *a, const char *s) {
        if (a->n < ARRAY_SIZE(a->argv) - 1)
                a->argv[a->n++] = (char *)s;
}

static void arg_num(struct argv_buf *a, const char *flag, uint64_t v) {
        if (a->n_nums >= ARRAY_SIZE(a->nums))
                return;
        char *s = a->nums[a->n_nums++];
        snprintf(s, 32, "%" PRIu64, v);
        arg(a, flag);
        arg(a, s);
}

static int validate(const struct ntfs_jail_spec *s) {
        if (!s->jail_binary || !s->workspace || !s->command)
                return -EINVAL;
        if (s->workspace[0] != '/' || strnlen(s->command, NTFS_JAIL_COMMAND_MAX + 1) > NTFS_JAIL_COMMAND_MAX)
                return -EINVAL;
        if (s->net != NTFS_JAIL_NET_NONE && s->net != NTFS_JAIL_NET_LOOPBACK)
                return -EINVAL;
        if (s->output_limit > NTFS_JAIL_OUTPUT_LIMIT_MAX)
                return -EINVAL;
        if (s->timeout_ms > 7ULL * 86400 * 1000)
                return -EINVAL;
        size_t n = 0;
        for (const char *const *e = s->env; e && *e; e++, n++) {
                const char *eq = strchr(*e, '=');
                if (n >= NTFS_JAIL_ENV_MAX || !eq || !jail_env_name_valid(*e, (size_t)(eq - *e)))
                        return -EINVAL;
        }
        if (s->state_in && strlen(s->state_in) > JAIL_STATE_MAX)
                return -EINVAL;
        if (s->group) { /* the helper's rule (ntfs-jail.c group_name_valid) */
                size_t gl = strlen(s->group);
                if (gl == 0 || gl > 100 || strspn(s->group, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                           "0123456789._-") != gl ||
                    strcmp(s->group, ".") == 0 || strcmp(s->group, "..") == 0)
                        return -EINVAL;
        }
        if (s->proxy_socket && (s->proxy_socket[0] != '/' || strlen(s->proxy_socket) >= 4096 ||
                                s->proxy_port > 65535))
                return -EINVAL;
        const struct ntfs_jail_io *io = s->io;
        if (io && ((io->stdout_fd < 0) != (io->stderr_fd < 0) ||
                   (io->tty_fd >= 0 && (io->stdout_fd >= 0 || io->stdin_fd >= 0))))
                return -EINVAL;
        return 0;
}

struct capture {
        int fd;
        size_t max;
        struct jbuf buf;
        bool overflow;
};

static bool capture_read(struct capture *c) {
        char tmp[65536];
        ssize_t n = read(c->fd, tmp, sizeof tmp);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN;
        if (n == 0)
                return false;
        size_t room = c->buf.len < c->max ? c->max - c->buf.len : 0;
        size_t take = NTFS_MIN((size_t)n, room);
        if (take < (size_t)n)
                c->overflow = true;
        if (take && jbuf_put(&c->buf, tmp, take) < 0)
                c->overflow = true;
        return true;
}

static int dup_json_string(json_t *o, const char *key, char **ret, size_t *ret_len) {
        json_t *v = json_object_get(o, key);
        if (!v || json_is_null(v)) {
                *ret = NULL;
                if (ret_len)
                        *ret_len = 0;
                return 0;
        }
        if (!json_is_string(v))
                return -EPROTO;
        size_t n = json_string_length(v);
        char *s = malloc(n + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, json_string_value(v), n);
        s[n] = 0;
        *ret = s;
        if (ret_len)
                *ret_len = n;
        return 0;
}

/* A stream of the command: key_b64 (the exact bytes) when the helper gave
 * it, else the text under key (exec/jail-internal.h, jbuf_json_output). */
static int output_bytes(json_t *o, const char *key, char **ret, size_t *ret_len) {
        char k[32];
        snprintf(k, sizeof k, "%s_b64", key);
        json_t *v = json_object_get(o, k);
        if (!v)
                return dup_json_string(o, key, ret, ret_len);
        if (!json_is_string(v))
                return -EPROTO;
        int r = ntfs_base64_decode(json_string_value(v), json_string_length(v), ret, ret_len);
        return r == -EINVAL ? -EPROTO : r;
}

static bool jbool(json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

/* "seccomp_killed": N, "seccomp_kills": [{pid, syscall}...] (the first few). */
static int parse_seccomp_kills(json_t *root, struct ntfs_jail_result *r) {
        json_t *n = json_object_get(root, "seccomp_killed");
        if (!n)
                return 0; /* a helper from before the listener */
        if (!json_is_integer(n) || json_integer_value(n) < 0)
                return -EPROTO;
        r->seccomp_killed = (unsigned)NTFS_MIN(json_integer_value(n), (json_int_t)UINT32_MAX);
        json_t *arr = json_object_get(root, "seccomp_kills"), *k;
        size_t i;
        if (!json_is_array(arr))
                return -EPROTO;
        struct jbuf b = { 0 };
        int e = 0;
        json_array_foreach(arr, i, k) {
                json_t *pid = json_object_get(k, "pid"), *sc = json_object_get(k, "syscall");
                if (!json_is_integer(pid) || !json_is_string(sc)) {
                        e = -EPROTO;
                        break;
                }
                if ((e = jbuf_printf(&b, "%spid %lld, which called %s", i ? "; " : "",
                                     (long long)json_integer_value(pid), json_string_value(sc))) < 0)
                        break;
        }
        if (e >= 0 && r->seccomp_killed > json_array_size(arr))
                e = jbuf_printf(&b, "%s%u in all", b.len ? "; " : "", r->seccomp_killed);
        if (e < 0) {
                free(b.p);
                return e == -EPROTO ? e : -ENOMEM;
        }
        r->seccomp_kills = b.p;
        return 0;
}

static int parse_result(const char *buf, size_t len, struct ntfs_jail_result *r) {
        json_error_t jerr;
        json_t *root = json_loadb(buf, len, 0, &jerr);
        if (!root || !json_is_object(root)) {
                json_decref(root);
                return -EPROTO;
        }
        int ret = 0;
        json_t *e = json_object_get(root, "error");
        if (e && json_is_string(e)) {
                ret = dup_json_string(root, "error", &r->reason, NULL);
                json_decref(root);
                return ret < 0 ? ret : -EIO;
        }
        json_t *ec = json_object_get(root, "exit_code");
        if (!json_is_integer(ec)) {
                json_decref(root);
                return -EPROTO;
        }
        r->exit_code = (int)json_integer_value(ec);
        r->term_signal = (int)json_integer_value(json_object_get(root, "signal"));
        r->timed_out = jbool(root, "timed_out");
        r->oom = jbool(root, "oom");
        r->out_truncated = jbool(root, "stdout_truncated");
        r->err_truncated = jbool(root, "stderr_truncated");
        r->duration_ns = (int64_t)json_integer_value(json_object_get(root, "duration_ns"));
        json_t *lim = json_object_get(root, "limits");
        r->limit_memory = jbool(lim, "memory");
        r->limit_pids = jbool(lim, "pids");
        r->limit_cpu = jbool(lim, "cpu");
        r->limit_group_memory = jbool(lim, "group_memory");
        r->limit_group_pids = jbool(lim, "group_pids");
        r->limit_group_cpu = jbool(lim, "group_cpu");
        json_t *cpu = json_object_get(root, "cpu_ns");
        r->cpu_ns = json_is_integer(cpu) ? (int64_t)json_integer_value(cpu) : -1;
        ret = output_bytes(root, "stdout", &r->out, &r->out_len);
        if (ret >= 0)
                ret = output_bytes(root, "stderr", &r->err, &r->err_len);
        if (ret >= 0)
                ret = dup_json_string(root, "state", &r->state_out, NULL);
        if (ret >= 0 && (!r->out || !r->err))
                ret = -EPROTO;
        if (ret >= 0)
                ret = parse_seccomp_kills(root, r);
        json_decref(root);
        return ret;
}

/* The processes the seccomp filter killed: ntfsd's log names each, and a
 * line on the result's stderr records it with the effect (the command's
 * own output is unchanged above it). */
static int report_seccomp_kills(const struct ntfs_jail_spec *spec, struct ntfs_jail_result *r) {
        if (!r->seccomp_killed)
                return 0;
        log_warn("jail: the seccomp filter killed %u process(es) of a command in %s: %s", r->seccomp_killed,
                 spec->workspace, r->seccomp_kills ? r->seccomp_kills : "?");
        struct jbuf b = { 0 };
        int e = 0;
        if (r->err_len && r->err[r->err_len - 1] != '\n')
                e = jbuf_puts(&b, "\n");
        if (e >= 0)
                e = jbuf_printf(&b, "ntfs-jail: seccomp killed %s (a syscall ABI the jail refuses)\n",
                                r->seccomp_kills ? r->seccomp_kills : "a process");
        if (e >= 0) {
                char *n = realloc(r->err, r->err_len + b.len + 1);
                if (!n)
                        e = -ENOMEM;
                else {
                        memcpy(n + r->err_len, b.p, b.len);
                        r->err = n;
                        r->err_len += b.len;
                        n[r->err_len] = 0;
                }
        }
        free(b.p);
        return e < 0 ? -ENOMEM : 0;
}

int ntfs_jail_run(const struct ntfs_jail_spec *spec, struct ntfs_jail_result *ret) {
        *ret = (struct ntfs_jail_result){ 0 };
        int r = validate(spec);
        if (r < 0)
                return r;
        uint64_t timeout_ms = spec->timeout_ms ? spec->timeout_ms : DEFAULT_TIMEOUT_MS;
        size_t limit = spec->output_limit ? spec->output_limit : DEFAULT_OUTPUT_LIMIT;

        struct argv_buf a = { .n = 0 };
        arg(&a, "ntfs-jail");
        arg(&a, "--json");
        arg(&a, "--die-with-parent");
        arg(&a, "--workspace");
        arg(&a, spec->workspace);
        if (spec->workspace_ro)
                arg(&a, "--ro");
        arg(&a, "--net");
        arg(&a, spec->net == NTFS_JAIL_NET_LOOPBACK ? "loopback" : "none");
        arg_num(&a, "--timeout-ms", timeout_ms);
        arg_num(&a, "--output-limit", limit);
        if (spec->memory_bytes)
                arg_num(&a, "--memory", spec->memory_bytes);
        if (spec->pids)
                arg_num(&a, "--pids", spec->pids);
        if (spec->group) {
                arg(&a, "--group");
                arg(&a, spec->group);
                if (spec->group_memory)
                        arg_num(&a, "--group-memory", spec->group_memory);
                if (spec->group_pids)
                        arg_num(&a, "--group-pids", spec->group_pids);
                if (spec->group_cpu)
                        arg_num(&a, "--group-cpu", spec->group_cpu);
        }
        if (spec->cpu_percent)
                arg_num(&a, "--cpu", spec->cpu_percent);
        if (spec->tmp_bytes)
                arg_num(&a, "--tmp-size", spec->tmp_bytes);
        for (const char *const *e = spec->env; e && *e; e++) {
                arg(&a, "--env");
                arg(&a, *e);
        }
        if (spec->proxy_socket) {
                arg(&a, "--proxy-socket");
                arg(&a, spec->proxy_socket);
                arg_num(&a, "--proxy-port", spec->proxy_port ? spec->proxy_port : 3128);
        }
        if (spec->state_in && *spec->state_in) {
                arg(&a, "--state-in");
                arg(&a, "-");
        }
        const struct ntfs_jail_io *io = spec->io;
        if (io && io->stdout_fd >= 0)
                arg(&a, "--stream");
        if (io && io->stdin_fd >= 0)
                arg(&a, "--stdin");
        if (io && io->tty_fd >= 0)
                arg(&a, "--tty");
        arg(&a, "--");
        arg(&a, spec->command);
        a.argv[a.n] = NULL;

        _cleanup_close_ int in = state_fd(spec->state_in);
        if (in < 0)
                return in;
        int outp[2] = { -1, -1 }, errp[2] = { -1, -1 };
        if (pipe2(outp, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(errp, O_CLOEXEC) < 0) {
                r = -errno;
                close(outp[0]);
                close(outp[1]);
                return r;
        }
        _cleanup_close_ int out_r = outp[0], err_r = errp[0];

        /* posix_spawn (vfork-like): cheap from a big multi-threaded daemon,
         * and nothing but the three dup2'd fds survive the exec (every other
         * fd of the process is O_CLOEXEC, and the helper closes the rest). */
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        posix_spawn_file_actions_init(&fa);
        posix_spawnattr_init(&at);
        posix_spawn_file_actions_adddup2(&fa, in, 0);
        posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
        posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
        /* The streaming fds go to 3, 4 and 5 from copies above them, so
         * that no dup2 overwrites a source still to be copied. */
        int hi[3] = { -1, -1, -1 };
        const int src[3] = { io ? io->stdout_fd : -1, io ? io->stderr_fd : -1,
                             io ? (io->tty_fd >= 0 ? io->tty_fd : io->stdin_fd) : -1 };
        for (int i = 0; i < 3 && r >= 0; i++)
                if (src[i] >= 0 && (hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0)
                        r = -errno;
        for (int i = 0; i < 3; i++)
                if (hi[i] >= 0)
                        posix_spawn_file_actions_adddup2(&fa, hi[i], 3 + i);
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&at, &none);
        posix_spawnattr_setsigdefault(&at, &all);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        char *envp[] = { NULL };
        pid_t pid;
        int sr = r < 0 ? 0 : posix_spawn(&pid, spec->jail_binary, &fa, &at, a.argv, envp);
        if (r < 0)
                sr = -r;
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        close(outp[1]);
        close(errp[1]);
        for (int i = 0; i < 3; i++)
                if (hi[i] >= 0)
                        close(hi[i]);
        if (sr != 0)
                return -sr;

        /* JSON escaping grows bytes at most 6x, and output that is not
         * clean text comes twice (its text and its base64, 4/3); the state
         * blob rides along. */
        struct capture out = { .fd = out_r, .max = 2 * 8 * limit + 2 * JAIL_STATE_MAX + 65536 };
        struct capture diag = { .fd = err_r, .max = DIAG_MAX };
        bool out_open = true, err_open = true, killed = false, cancel_sent = false, hung_up = false;
        int64_t deadline = ntfs_mono_ns() + (int64_t)timeout_ms * 1000000 + HELPER_GRACE_NS;
        while (out_open || err_open) {
                int64_t left = deadline - ntfs_mono_ns();
                if (left <= 0) {
                        kill(pid, killed ? SIGKILL : SIGTERM);
                        if (killed)
                                break;
                        killed = true;
                        deadline = ntfs_mono_ns() + 5LL * 1000000000;
                        continue;
                }
                if (!cancel_sent && (hung_up || (spec->cancel && __atomic_load_n(spec->cancel, __ATOMIC_ACQUIRE)))) {
                        kill(pid, SIGTERM); /* the helper ends the jail and still answers */
                        cancel_sent = true;
                }
                /* events 0: POLLHUP and POLLERR are reported anyway */
                struct pollfd pf[3] = { { out_open ? out.fd : -1, POLLIN, 0 },
                                        { err_open ? diag.fd : -1, POLLIN, 0 },
                                        { spec->watch_hangup && !hung_up ? spec->hangup_fd : -1, 0, 0 } };
                int n = poll(pf, 3, (int)NTFS_MIN(left / 1000000 + 1,
                                                  (int64_t)(spec->cancel && !cancel_sent ? 100 : 60000)));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                if (pf[0].revents && !capture_read(&out))
                        out_open = false;
                if (pf[1].revents && !capture_read(&diag))
                        err_open = false;
                if (pf[2].revents & (POLLHUP | POLLERR | POLLNVAL))
                        hung_up = true;
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        ret->cancelled = cancel_sent;

        if (r >= 0) {
                if (killed) {
                        r = -ETIMEDOUT;
                        ret->reason = strdup("ntfs-jail did not finish and was killed");
                } else if (out.overflow) {
                        r = -EPROTO;
                } else if (out.buf.len > 0) {
                        r = parse_result(out.buf.p, out.buf.len, ret);
                        if (r >= 0)
                                r = report_seccomp_kills(spec, ret);
                } else {
                        r = WIFEXITED(status) && WEXITSTATUS(status) == 127 ? -ENOENT : -EIO;
                }
                if (r < 0 && !ret->reason && diag.buf.len > 0)
                        ret->reason = strndup(diag.buf.p, diag.buf.len);
        }
        free(out.buf.p);
        free(diag.buf.p);
        if (r < 0) {
                char *reason = TAKE_PTR(ret->reason);
                ntfs_jail_result_release(ret);
                ret->reason = reason;
                ret->cancelled = cancel_sent;
                log_debug("jail: run failed: %d %s", r, reason ? reason : "");
        }
        return r;
}

int ntfs_jail_probe(struct ntfs_jail_caps *ret) {
        struct ntfs_jail_caps c = { 0 };
        int r = jail_cgroup_probe(&c);
        if (r < 0)
                return r;
        _cleanup_free_ char *s = NULL;
        if (ntfs_read_file("/proc/sys/user/max_user_namespaces", 64, &s, NULL) == 0)
                c.userns = strtoull(s, NULL, 10) > 0;
        c.seccomp = access("/proc/sys/kernel/seccomp/actions_avail", R_OK) == 0;
        *ret = c;
        return 0;
}
