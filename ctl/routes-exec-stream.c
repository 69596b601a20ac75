/* SPDX-License-Identifier: MIT
 * routes-exec-stream.c — POST /v1/sessions/{name}/exec/stream: a jailed
 * call whose output reaches the client as it is written, with the client's
 * stdin, optionally on a pseudo-terminal, cancelled when the client asks or
 * goes away. The call itself (policy, journal, jail, checkpoint) is
 * routes-exec.c's run_tool; this file is the connection's side: the
 * upgrade to frames (docs/protocol.md, "Streaming exec") and one relay
 * thread between the socket and the jail's fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "common/banned.h"

#define XS_PROTOCOL "ntfs-exec/1"
#define XS_FRAME_MAX (64u * 1024)     /* a client frame's payload */
#define XS_HEAD 5                      /* type, 32-bit big-endian length */
#define XS_TTY_KEEP (1024u * 1024)     /* a terminal's output kept for the journal */
#define XS_WRITE_TIMEOUT_MS 30000      /* a client that does not read is gone */

/* One streaming call. The relay thread owns the socket until it is joined;
 * then the connection's thread sends the end frame. */
struct xs {
        int sock;
        bool tty, pass_stdin;
        unsigned short rows, cols;
        /* the daemon's ends */
        int out_r, err_r, in_w, master;
        /* the jail's ends, closed once the jail has run (jail_ends_close) */
        int out_w, err_w, in_r, slave;
        struct ntfs_jail_io io;
        /* client bytes: frames being parsed, and stdin waiting for the command */
        char *rx;
        size_t rx_len;
        char *pend;
        size_t pend_len, pend_off;
        bool stdin_eof;
        /* a terminal's output, for the journal */
        char *keep;
        size_t keep_len;
        bool keep_truncated;
        int cancel;           /* run_tool's flag (atomic) */
        int signal;           /* what the client sent, 0 when it went away */
        bool gone;            /* the client's socket is unusable */
        pthread_t relay;
        bool relay_running;
        char why[256];        /* a protocol error of the client's */
};

static void close_fd(int *fd) {
        if (*fd >= 0) {
                close(*fd);
                *fd = -1;
        }
}

static void xs_cancel(struct xs *x) {
        __atomic_store_n(&x->cancel, 1, __ATOMIC_RELEASE);
}

/* Writes all of buf to the client, bounded by XS_WRITE_TIMEOUT_MS of no
 * progress; failure marks the client gone and cancels the command. */
static int client_write(struct xs *x, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0 && !x->gone) {
                ssize_t n = send(x->sock, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        struct pollfd pf = { .fd = x->sock, .events = POLLOUT };
                        int pr = poll(&pf, 1, XS_WRITE_TIMEOUT_MS);
                        if (pr > 0 || (pr < 0 && errno == EINTR))
                                continue;
                }
                x->gone = true;
                xs_cancel(x);
        }
        return x->gone ? -EPIPE : 0;
}

static int send_frame(struct xs *x, char type, const void *p, size_t n) {
        char head[XS_HEAD];
        head[0] = type;
        ntfs_put_be32((uint8_t *)head + 1, (uint32_t)n);
        int r = client_write(x, head, sizeof head);
        return r < 0 ? r : client_write(x, p, n);
}

static int pend_add(struct xs *x, const char *p, size_t n) {
        if (x->pend_off == x->pend_len)
                x->pend_off = x->pend_len = 0;
        char *np = realloc(x->pend, x->pend_len + n);
        if (!np)
                return -ENOMEM;
        memcpy(np + x->pend_len, p, n);
        x->pend = np;
        x->pend_len += n;
        return 0;
}

static void protocol_error(struct xs *x, const char *why) {
        if (!x->why[0])
                snprintf(x->why, sizeof x->why, "%s", why);
        x->gone = true;
        xs_cancel(x);
}

/* The stdin side's fd: the pipe, or the terminal. */
static int stdin_target(const struct xs *x) {
        return x->tty ? x->master : x->in_w;
}

/* Handles the complete frames in rx. */
static void client_frames(struct xs *x) {
        size_t o = 0;
        while (!x->gone && x->rx_len - o >= XS_HEAD) {
                uint32_t n = ntfs_get_be32((const uint8_t *)x->rx + o + 1);
                if (n > XS_FRAME_MAX) {
                        protocol_error(x, "a frame longer than 64 KiB");
                        break;
                }
                if (x->rx_len - o < XS_HEAD + n)
                        break;
                char type = x->rx[o];
                const char *p = x->rx + o + XS_HEAD;
                o += XS_HEAD + n;
                switch (type) {
                case 'I':
                        if (n == 0) {
                                /* a terminal reads its end as its EOF character */
                                if (x->tty && !x->stdin_eof && pend_add(x, "\x04", 1) < 0)
                                        protocol_error(x, "out of memory");
                                x->stdin_eof = true;
                        } else if (!x->stdin_eof && stdin_target(x) >= 0 && pend_add(x, p, n) < 0)
                                protocol_error(x, "out of memory");
                        break;
                case 'W':
                        if (n != 4) {
                                protocol_error(x, "a window frame is 4 bytes");
                                break;
                        }
                        if (x->tty) {
                                struct winsize ws = { .ws_row = (unsigned short)((uint8_t)p[0] << 8 | (uint8_t)p[1]),
                                                      .ws_col = (unsigned short)((uint8_t)p[2] << 8 | (uint8_t)p[3]) };
                                if (ioctl(x->master, TIOCSWINSZ, &ws) < 0)
                                        log_debug("exec stream: TIOCSWINSZ: %s", strerror(errno));
                        }
                        break;
                case 'S':
                        if (n != 1) {
                                protocol_error(x, "a signal frame is 1 byte");
                                break;
                        }
                        x->signal = (uint8_t)p[0];
                        xs_cancel(x);
                        break;
                default:
                        protocol_error(x, "unknown frame type");
                }
        }
        memmove(x->rx, x->rx + o, x->rx_len - o);
        x->rx_len -= o;
}

static void client_read(struct xs *x) {
        ssize_t n = recv(x->sock, x->rx + x->rx_len, XS_HEAD + XS_FRAME_MAX - x->rx_len, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                return;
        if (n <= 0) { /* the client went away: the command goes too */
                x->gone = true;
                xs_cancel(x);
                return;
        }
        x->rx_len += (size_t)n;
        client_frames(x);
}

/* Writes what stdin holds for the command. */
static void stdin_write(struct xs *x) {
        int fd = stdin_target(x);
        while (fd >= 0 && x->pend_off < x->pend_len) {
                ssize_t n = write(fd, x->pend + x->pend_off, x->pend_len - x->pend_off);
                if (n > 0) {
                        x->pend_off += (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                /* the command closed its stdin (EPIPE): the rest is dropped */
                x->pend_off = x->pend_len;
                if (!x->tty)
                        close_fd(&x->in_w);
                return;
        }
        if (x->pend_off == x->pend_len && x->stdin_eof && !x->tty)
                close_fd(&x->in_w);
}

/* Reads the jail's output on *fd and forwards it as type; false at its end. */
static bool output_read(struct xs *x, int *fd, char type) {
        char buf[XS_FRAME_MAX];
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return true;
        if (n <= 0) { /* EOF, or EIO from a master whose terminal is closed */
                close_fd(fd);
                return false;
        }
        if (x->tty) {
                size_t take = NTFS_MIN((size_t)n, XS_TTY_KEEP - x->keep_len);
                if (take < (size_t)n)
                        x->keep_truncated = true;
                if (take) {
                        memcpy(x->keep + x->keep_len, buf, take);
                        x->keep_len += take;
                }
        }
        if (!x->gone)
                (void)send_frame(x, type, buf, (size_t)n);
        return true;
}

/* The relay: until the jail's output ends, client frames in, output out.
 * A client gone keeps the relay draining the output (the helper must never
 * block on it) with the command cancelled. */
static void *relay_main(void *arg) {
        struct xs *x = arg;
        while (x->out_r >= 0 || x->err_r >= 0 || x->master >= 0) {
                bool pending = x->pend_off < x->pend_len;
                struct pollfd pf[5] = {
                        { x->gone || pending ? -1 : x->sock, POLLIN, 0 },
                        { x->out_r, POLLIN, 0 },
                        { x->err_r, POLLIN, 0 },
                        { x->master, (short)(POLLIN | (pending ? POLLOUT : 0)), 0 },
                        { pending && !x->tty ? x->in_w : -1, POLLOUT, 0 },
                };
                int n = poll(pf, 5, -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("exec stream: poll: %s", strerror(errno));
                        xs_cancel(x);
                        break;
                }
                if (pf[1].revents)
                        (void)output_read(x, &x->out_r, 'O');
                if (pf[2].revents)
                        (void)output_read(x, &x->err_r, 'E');
                if (pf[3].revents & (POLLIN | POLLHUP | POLLERR))
                        (void)output_read(x, &x->master, 'O');
                if ((pf[3].revents & POLLOUT) || (pf[4].revents & (POLLOUT | POLLERR | POLLHUP)))
                        stdin_write(x);
                if (pf[0].revents)
                        client_read(x);
                if (!pending && x->pend_off < x->pend_len)
                        stdin_write(x);
                else if (x->stdin_eof && x->pend_off == x->pend_len && !x->tty)
                        close_fd(&x->in_w);
        }
        return NULL;
}

static void jail_ends_close(struct xs *x) {
        close_fd(&x->out_w);
        close_fd(&x->err_w);
        close_fd(&x->in_r);
        close_fd(&x->slave);
}

static void relay_join(struct xs *x) {
        jail_ends_close(x);
        if (x->relay_running) {
                pthread_join(x->relay, NULL);
                x->relay_running = false;
        }
}

/* run_tool's hook once the jail has run: the output is complete when the
 * relay has drained it; a terminal's goes into the result. */
static void on_ended(void *ud, struct ntfs_jail_result *jr) {
        struct xs *x = ud;
        relay_join(x);
        if (x->tty && x->keep_len) {
                char *out = malloc(x->keep_len + 1);
                if (!out) {
                        log_warn("exec stream: out of memory keeping a terminal's output for the journal");
                        return;
                }
                memcpy(out, x->keep, x->keep_len);
                out[x->keep_len] = 0;
                free(jr->out);
                jr->out = out;
                jr->out_len = x->keep_len;
                jr->out_truncated = x->keep_truncated;
        }
}

static void xs_free(void *p) {
        struct xs *x = p;
        if (!x)
                return;
        relay_join(x);
        close_fd(&x->out_r);
        close_fd(&x->err_r);
        close_fd(&x->in_w);
        close_fd(&x->master);
        free(x->rx);
        free(x->pend);
        free(x->keep);
        free(x);
}

/* The jail's fds: pipes, or a terminal. Every fd O_CLOEXEC (other threads
 * spawn jails too); the daemon's stdin and terminal ends non-blocking. */
static int xs_open(struct xs *x) {
        int p[2];
        if (x->tty) {
                x->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (x->master < 0 || grantpt(x->master) < 0 || unlockpt(x->master) < 0)
                        return -errno;
                x->slave = ioctl(x->master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (x->slave < 0)
                        return -errno;
                struct winsize ws = { .ws_row = x->rows, .ws_col = x->cols };
                if (ioctl(x->master, TIOCSWINSZ, &ws) < 0 ||
                    fcntl(x->master, F_SETFL, fcntl(x->master, F_GETFL) | O_NONBLOCK) < 0)
                        return -errno;
                if (!(x->keep = malloc(XS_TTY_KEEP)))
                        return -ENOMEM;
                x->io = (struct ntfs_jail_io){ .stdout_fd = -1, .stderr_fd = -1, .stdin_fd = -1, .tty_fd = x->slave };
                return 0;
        }
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        x->out_r = p[0], x->out_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        x->err_r = p[0], x->err_w = p[1];
        if (x->pass_stdin) {
                if (pipe2(p, O_CLOEXEC) < 0)
                        return -errno;
                x->in_r = p[0], x->in_w = p[1];
                if (fcntl(x->in_w, F_SETFL, O_NONBLOCK) < 0)
                        return -errno;
        }
        x->io = (struct ntfs_jail_io){ .stdout_fd = x->out_w, .stderr_fd = x->err_w, .stdin_fd = x->in_r,
                                       .tty_fd = -1 };
        return 0;
}

struct xs_call {
        struct xs *x;
        char *session, *tool, *command, *key;
        double timeout;
};

static void call_free(void *p) {
        struct xs_call *c = p;
        if (!c)
                return;
        xs_free(c->x);
        free(c->session);
        free(c->tool);
        free(c->command);
        free(c->key);
        free(c);
}

/* A replayed call's recorded output, sent as if it had just been written. */
static void send_recorded(struct xs *x, json_t *res, const char *key, char type) {
        char k[32];
        snprintf(k, sizeof k, "%s_b64", key);
        json_t *b = json_object_get(res, k), *t = json_object_get(res, key);
        _cleanup_free_ char *raw = NULL;
        size_t n = 0;
        if (json_is_string(b) && ntfs_base64_decode(json_string_value(b), json_string_length(b), &raw, &n) == 0) {
                for (size_t o = 0; o < n; o += XS_FRAME_MAX)
                        (void)send_frame(x, type, raw + o, NTFS_MIN(n - o, (size_t)XS_FRAME_MAX));
        } else if (json_is_string(t)) {
                const char *s = json_string_value(t);
                size_t l = json_string_length(t);
                for (size_t o = 0; o < l; o += XS_FRAME_MAX)
                        (void)send_frame(x, type, s + o, NTFS_MIN(l - o, (size_t)XS_FRAME_MAX));
        }
}

static int stream_main(void *ctx, int fd, const void *pre, size_t pre_len) {
        struct xs_call *c = ctx;
        struct xs *x = c->x;
        x->sock = fd;
        char why[512] = "";
        json_t *res = NULL;
        int r = xs_open(x);
        if (r < 0)
                snprintf(why, sizeof why, "cannot set up the streams: %s", strerror(-r));
        if (r >= 0 && pre_len) { /* frames the client sent before the 101 */
                memcpy(x->rx, pre, NTFS_MIN(pre_len, (size_t)(XS_HEAD + XS_FRAME_MAX)));
                x->rx_len = NTFS_MIN(pre_len, (size_t)(XS_HEAD + XS_FRAME_MAX));
                client_frames(x);
        }
        if (r >= 0) {
                if ((r = -pthread_create(&x->relay, NULL, relay_main, x)) < 0)
                        snprintf(why, sizeof why, "cannot start the relay: %s", strerror(-r));
                else
                        x->relay_running = true;
        }
        if (r >= 0) {
                /* the relay watches the socket (and reads it: no hang-up poll here) */
                struct d_exec_io io = { .jail = &x->io, .hangup_fd = -1, .ended = on_ended, .ud = x };
                r = d_run_tool_io(c->session, c->tool, c->command, c->key, c->timeout, &x->cancel, &io, &res, why,
                                  sizeof why);
        }
        relay_join(x); /* when run_tool failed before the jail */
        json_t *end;
        if (r < 0) {
                end = json_pack("{s:{s:s, s:s}}", "error", "code", ntfs_errcode(r), "message",
                                why[0] ? why : ntfs_strerror(r));
        } else {
                if (json_is_true(json_object_get(res, "replayed"))) {
                        send_recorded(x, res, "stdout", 'O');
                        send_recorded(x, res, "stderr", 'E');
                }
                static const char *const drop[] = { "stdout", "stdout_b64", "stderr", "stderr_b64" };
                for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
                        json_object_del(res, drop[i]);
                if (x->signal)
                        json_object_set_new(res, "signal_sent", json_integer(x->signal));
                end = res;
        }
        if (x->why[0])
                log_warn("exec stream of %s: %s", c->session, x->why);
        _cleanup_free_ char *s = end ? json_dumps(end, JSON_COMPACT) : NULL;
        json_decref(end);
        if (!x->gone && s)
                (void)send_frame(x, 'X', s, strlen(s));
        if (!x->gone)
                (void)shutdown(fd, SHUT_WR);
        return r < 0 ? r : 0;
}

int d_h_exec_stream(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "command", "tool", "timeout", "idempotency_key", "stdin", "tty", NULL };
        const char *name = d_param(req, "name"), *cmd, *tool, *key;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "command", true, &cmd)) < 0 ||
            (r = d_want_string(req, resp, "tool", false, &tool)) < 0 || (r = d_want_key(req, resp, &key)) < 0)
                return r;
        json_t *t = json_object_get(req->json, "timeout"), *in = json_object_get(req->json, "stdin"),
               *tty = json_object_get(req->json, "tty");
        if (t && (!json_is_number(t) || json_number_value(t) <= 0 || json_number_value(t) > 86400))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'timeout' must be seconds in (0, 86400]");
        if (in && !json_is_boolean(in))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'stdin' must be true or false");
        json_t *rows = json_object_get(tty, "rows"), *cols = json_object_get(tty, "cols");
        if (tty && (!json_is_object(tty) || json_object_size(tty) != 2 || !json_is_integer(rows) ||
                    !json_is_integer(cols) || json_integer_value(rows) < 1 || json_integer_value(rows) > 65535 ||
                    json_integer_value(cols) < 1 || json_integer_value(cols) > 65535))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'tty' must be {\"rows\": 1..65535, \"cols\": 1..65535}");
        if (!tool)
                tool = "bash_write";
        const struct ntfs_tool_spec *spec = ntfs_policy_tool(D.pol, tool);
        if (!spec || spec->kind != NTFS_TOOL_KIND_EXEC)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "unknown or non-shell tool '%s'", tool);
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, name, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        if (!req->upgrade)
                return ntfs_http_error_code(resp, 426, "upgrade_required",
                                            "this route needs 'Connection: Upgrade' and 'Upgrade: " XS_PROTOCOL "'");
        const char *up = ntfs_http_request_header(req, "Upgrade");
        if (!up || strcmp(up, XS_PROTOCOL) != 0)
                return ntfs_http_error_code(resp, 426, "upgrade_required", "the protocol is '" XS_PROTOCOL "'");
        struct xs_call *c = calloc(1, sizeof *c);
        struct xs *x = calloc(1, sizeof *x);
        if (c)
                c->x = x;
        if (!c || !x || !(x->rx = malloc(XS_HEAD + XS_FRAME_MAX)) || !(c->session = strdup(name)) ||
            !(c->tool = strdup(tool)) || !(c->command = strdup(cmd)) || (key && !(c->key = strdup(key)))) {
                if (!c)
                        free(x);
                call_free(c);
                return -ENOMEM;
        }
        x->sock = x->out_r = x->err_r = x->in_w = x->master = -1;
        x->out_w = x->err_w = x->in_r = x->slave = -1;
        x->tty = tty != NULL;
        x->pass_stdin = json_is_true(in);
        if (x->tty) {
                x->rows = (unsigned short)json_integer_value(rows);
                x->cols = (unsigned short)json_integer_value(cols);
        }
        c->timeout = t ? json_number_value(t) : 0;
        return ntfs_http_respond_upgrade(resp, XS_PROTOCOL, stream_main, c, call_free);
}
