/* SPDX-License-Identifier: MIT
 * ntfs-ctl exec, streaming: POST /v1/sessions/NAME/exec/stream upgraded to
 * frames (docs/protocol.md, "Streaming exec"). The command's output is
 * written as it arrives, stdin is passed on, -t runs it on a terminal in
 * the jail (this side in raw mode, the window size passed on), and
 * SIGINT/SIGTERM/SIGHUP cancel it.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

#define XS_PROTOCOL "ntfs-exec/1"
#define XS_HEAD 5
#define XS_FRAME_MAX (64u * 1024)
#define XS_END_MAX (64u * 1024 * 1024) /* the end frame's JSON */
#define CANCEL_GRACE_MS 5000           /* after a signal, wait this long for the end */

static volatile sig_atomic_t got_signal, got_winch;

static void on_signal(int sig) {
        got_signal = sig;
}

static void on_winch(int sig) {
        (void)sig;
        got_winch = 1;
}

static int64_t now_ms(void) {
        return ntfs_mono_ns() / 1000000;
}

static int write_all(int fd, const void *buf, size_t n) {
        const char *p = buf;
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

static int frame(int fd, char type, const void *p, size_t n) {
        char head[XS_HEAD];
        head[0] = type;
        ntfs_put_be32((uint8_t *)head + 1, (uint32_t)n);
        int r = write_all(fd, head, sizeof head);
        return r < 0 || n == 0 ? r : write_all(fd, p, n);
}

static void window_size(unsigned short *rows, unsigned short *cols) {
        struct winsize ws = { 0 };
        if ((ioctl(0, TIOCGWINSZ, &ws) < 0 && ioctl(1, TIOCGWINSZ, &ws) < 0) || !ws.ws_row || !ws.ws_col)
                ws = (struct winsize){ .ws_row = 24, .ws_col = 80 };
        *rows = ws.ws_row;
        *cols = ws.ws_col;
}

static int send_window(int fd) {
        unsigned short rows, cols;
        window_size(&rows, &cols);
        unsigned char w[4] = { (unsigned char)(rows >> 8), (unsigned char)rows, (unsigned char)(cols >> 8),
                               (unsigned char)cols };
        return frame(fd, 'W', w, sizeof w);
}

/* The terminal's mode before raw mode, restored at the end. */
struct tty_saved {
        bool raw;
        struct termios t;
};

static void tty_restore(struct tty_saved *s) {
        if (s->raw)
                (void)tcsetattr(0, TCSADRAIN, &s->t);
        s->raw = false;
}

/* Exit code from the end frame's result (as cmd_exec's), with its notes. */
static int result_code(const json_t *j) {
        json_int_t code = 0;
        bool has_code = jint(j, "exit_code", &code), timed_out = jtrue(j, "timed_out");
        json_int_t sig = 0;
        if (jint(j, "signal_sent", &sig) && sig > 0 && sig < 64) {
                fprintf(stderr, "ntfs-ctl: the command was cancelled by signal %d (cancelled)\n", (int)sig);
                return 128 + (int)sig;
        }
        if (jtrue(j, "cancelled"))
                fprintf(stderr, "ntfs-ctl: the command was cancelled (cancelled)\n");
        if (timed_out)
                fprintf(stderr, "ntfs-ctl: the command timed out (timeout)\n");
        if (has_code && code >= 0 && code <= 255 && !(timed_out && code == 0))
                return (int)code;
        if (timed_out)
                return 124;
        return has_code ? EXIT_FAIL : 0;
}

struct rx {
        char *buf;
        size_t len, cap;
};

/* Handles the complete frames in rx; *end gets the end frame's JSON. */
static int server_frames(struct ctx *c, struct rx *x, json_t **end) {
        size_t o = 0;
        int r = 0;
        while (r == 0 && !*end && x->len - o >= XS_HEAD) {
                uint32_t n = ntfs_get_be32((const uint8_t *)x->buf + o + 1);
                char type = x->buf[o];
                if ((type != 'X' && n > XS_FRAME_MAX) || n > XS_END_MAX) {
                        r = fail(c, NULL, "bad_response", "ntfsd sent a frame of %u bytes", n);
                        break;
                }
                if (x->len - o < XS_HEAD + (size_t)n) {
                        if (x->cap < XS_HEAD + (size_t)n) { /* an end frame bigger than the buffer */
                                char *nb = realloc(x->buf, XS_HEAD + (size_t)n);
                                if (!nb)
                                        return oom(c);
                                x->buf = nb;
                                x->cap = XS_HEAD + (size_t)n;
                        }
                        break;
                }
                const char *p = x->buf + o + XS_HEAD;
                o += XS_HEAD + n;
                if (type == 'O' || type == 'E') {
                        (void)write_all(type == 'O' ? 1 : 2, p, n);
                } else if (type == 'X') {
                        json_error_t jerr;
                        *end = json_loadb(p, n, 0, &jerr);
                        if (!*end)
                                r = fail(c, NULL, "bad_response", "ntfsd's end frame is not JSON: %s", jerr.text);
                } else
                        r = fail(c, NULL, "bad_response", "ntfsd sent a frame of unknown type 0x%02x",
                                 (unsigned char)type);
        }
        memmove(x->buf, x->buf + o, x->len - o);
        x->len -= o;
        return r;
}

/* The frames both ways until the end frame. */
static int relay(struct ctx *c, int fd, bool tty, bool pass_stdin, struct rx *x, json_t **end) {
        bool in_open = true, sig_sent = false;
        int64_t sig_at = 0;
        int r = server_frames(c, x, end);
        if (!tty && !pass_stdin) {
                in_open = false;
                if ((r = frame(fd, 'I', NULL, 0)) < 0)
                        return fail(c, NULL, "io_error", "writing to ntfsd: %s", strerror(-r));
        }
        while (r == 0 && !*end) {
                if (got_signal && !sig_sent) {
                        unsigned char s = (unsigned char)got_signal;
                        sig_sent = true;
                        sig_at = now_ms();
                        (void)frame(fd, 'S', &s, 1);
                }
                if (sig_sent && now_ms() - sig_at > CANCEL_GRACE_MS)
                        return fail(c, NULL, "timeout", "ntfsd did not end the command after signal %d",
                                    (int)got_signal);
                if (got_winch) {
                        got_winch = 0;
                        if (tty)
                                (void)send_window(fd);
                }
                struct pollfd pf[2] = { { fd, POLLIN, 0 }, { in_open && !sig_sent ? 0 : -1, POLLIN, 0 } };
                int n = poll(pf, 2, 200);
                if (n < 0 && errno != EINTR)
                        return fail(c, NULL, "io_error", "poll: %s", strerror(errno));
                if (n <= 0)
                        continue;
                if (pf[1].revents) {
                        char buf[XS_FRAME_MAX];
                        ssize_t k = read(0, buf, sizeof buf);
                        if (k < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (k <= 0)
                                in_open = false;
                        if (frame(fd, 'I', buf, k > 0 ? (size_t)k : 0) < 0)
                                pf[0].revents = POLLHUP; /* the server's answer says why */
                }
                if (pf[0].revents) {
                        if (x->cap - x->len < XS_FRAME_MAX) {
                                size_t ncap = x->cap * 2;
                                char *nb = realloc(x->buf, ncap);
                                if (!nb)
                                        return oom(c);
                                x->buf = nb;
                                x->cap = ncap;
                        }
                        ssize_t k = read(fd, x->buf + x->len, x->cap - x->len);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return fail(c, NULL, "bad_response",
                                            "the connection to ntfsd ended before the command's end");
                        x->len += (size_t)k;
                        r = server_frames(c, x, end);
                }
        }
        return r;
}

int exec_stream(struct ctx *c, const char *session, json_t *body, bool tty, bool pass_stdin) {
        _cleanup_free_ char *path = session_path(session, "/exec/stream");
        if (!path)
                return oom(c);
        if (tty) {
                unsigned short rows, cols;
                window_size(&rows, &cols);
                json_object_set_new(body, "tty", json_pack("{s:i, s:i}", "rows", rows, "cols", cols));
        } else if (pass_stdin)
                json_object_set_new(body, "stdin", json_true());
        ntfs_client *cl;
        int r = client_get(c, DEFAULT_TIMEOUT_MS, &cl);
        if (r < 0)
                return fail(c, NULL, ntfs_errcode(r), "cannot create a client: %s", ntfs_strerror(r));
        struct ntfs_client_response res = { 0 };
        int fd = -1;
        void *pre = NULL;
        size_t pre_len = 0;
        r = ntfs_client_upgrade(cl, path, body, XS_PROTOCOL, &fd, &pre, &pre_len, &res);
        if (r < 0)
                return transport_fail(c, r);
        if (res.status != 101) {
                const char *code, *msg;
                ntfs_client_error(&res, &code, &msg);
                _cleanup_free_ char *m = sanitize_dup(msg, 1024);
                r = fail(c, res.json, code, "%s", m ? m : code);
                ntfs_client_response_release(&res);
                return r;
        }
        struct rx x = { .cap = 4 * XS_FRAME_MAX };
        if (!(x.buf = malloc(x.cap))) {
                free(pre);
                close(fd);
                return oom(c);
        }
        x.len = NTFS_MIN(pre_len, x.cap);
        if (x.len)
                memcpy(x.buf, pre, x.len);
        free(pre);

        struct sigaction sa = { .sa_handler = on_signal }, sw = { .sa_handler = on_winch }, old[4];
        sigemptyset(&sa.sa_mask);
        sigemptyset(&sw.sa_mask);
        static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
        for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
                sigaction(sigs[i], &sa, &old[i]);
        sigaction(SIGWINCH, &sw, &old[3]);
        struct tty_saved saved = { 0 };
        if (tty && isatty(0) && tcgetattr(0, &saved.t) == 0) {
                struct termios raw = saved.t;
                cfmakeraw(&raw);
                saved.raw = tcsetattr(0, TCSADRAIN, &raw) == 0;
        }
        json_t *end = NULL;
        r = relay(c, fd, tty, pass_stdin, &x, &end);
        tty_restore(&saved);
        for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
                sigaction(sigs[i], &old[i], NULL);
        sigaction(SIGWINCH, &old[3], NULL);
        close(fd);
        free(x.buf);
        if (r)
                return r;
        json_t *e = json_object_get(end, "error");
        if (e) {
                const char *code = jstr(e, "code", "internal");
                _cleanup_free_ char *m = sanitize_dup(jstr(e, "message", code), 1024);
                r = fail(c, end, code, "%s", m ? m : code);
        } else
                r = result_code(end);
        json_decref(end);
        return r;
}
