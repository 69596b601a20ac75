/* SPDX-License-Identifier: MIT */
#include "ctl/client/client.h"

#include <errno.h>
#include <http_parser.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "common/banned.h"

struct ntfs_client {
        int fd;            /* the kept-alive connection, or -1 */
        char *socket_path;
        unsigned timeout_ms;
        size_t max_response;
};

/* Why not libcurl: the client only ever speaks HTTP/1.1 to ntfsd over a
 * Unix socket, and linking libcurl (with its TLS, Kerberos, LDAP, ...
 * libraries) cost every ntfs-ctl start ~15 ms of loading under load, more
 * than the jailed command it asks for (docs/jail.md, "Speed"). The
 * response is parsed by http-parser, as the server parses requests. */

int ntfs_client_new(const char *socket_path, ntfs_client **ret) {
        if (!socket_path || !*socket_path)
                return -EINVAL;
        ntfs_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->fd = -1;
        c->socket_path = strdup(socket_path);
        if (!c->socket_path) {
                ntfs_client_free(c);
                return -ENOMEM;
        }
        c->timeout_ms = NTFS_CLIENT_DEFAULT_TIMEOUT_MS;
        c->max_response = NTFS_CLIENT_DEFAULT_MAX_RESPONSE;
        *ret = c;
        return 0;
}

static void drop_connection(ntfs_client *c) {
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
}

void ntfs_client_free(ntfs_client *c) {
        if (!c)
                return;
        drop_connection(c);
        free(c->socket_path);
        free(c);
}

void ntfs_client_set_timeout(ntfs_client *c, unsigned ms) {
        c->timeout_ms = ms;
}

void ntfs_client_set_max_response(ntfs_client *c, size_t bytes) {
        c->max_response = bytes;
}

void ntfs_client_response_release(struct ntfs_client_response *r) {
        if (!r)
                return;
        json_decref(r->json);
        free(r->body);
        memset(r, 0, sizeof *r);
}

struct sink {
        ntfs_client *c;
        char *buf;
        size_t len, cap;
        int fd;        /* download: >= 0 */
        bool to_fd;    /* decided at the head: 2xx and fd given */
        bool head_only; /* HEAD: no body follows */
        bool done;     /* the whole response is in */
        int err;
        long status;
        char field[16]; /* the header name being read (enough for Content-Type) */
        size_t field_len;
        bool in_value;
        char ctype[128];
        size_t ctype_len;
};

static int on_field(http_parser *p, const char *at, size_t n) {
        struct sink *s = p->data;
        if (s->in_value) {
                s->field_len = 0;
                s->in_value = false;
        }
        size_t k = NTFS_MIN(n, sizeof s->field - s->field_len);
        memcpy(s->field + s->field_len, at, k);
        s->field_len += k;
        return 0;
}

static int on_value(http_parser *p, const char *at, size_t n) {
        struct sink *s = p->data;
        s->in_value = true;
        if (s->field_len != 12 || strncasecmp(s->field, "content-type", 12) != 0)
                return 0;
        size_t k = NTFS_MIN(n, sizeof s->ctype - 1 - s->ctype_len);
        memcpy(s->ctype + s->ctype_len, at, k);
        s->ctype_len += k;
        s->ctype[s->ctype_len] = 0;
        return 0;
}

static int on_headers(http_parser *p) {
        struct sink *s = p->data;
        s->status = p->status_code;
        s->to_fd = s->fd >= 0 && s->status >= 200 && s->status < 300;
        return s->head_only ? 1 : 0; /* 1: no body */
}

static int on_body(http_parser *p, const char *ptr, size_t n) {
        struct sink *s = p->data;
        if (s->to_fd) {
                const char *q = ptr;
                size_t left = n;
                while (left > 0) {
                        ssize_t w = write(s->fd, q, left);
                        if (w < 0) {
                                if (errno == EINTR)
                                        continue;
                                s->err = -errno;
                                return -1;
                        }
                        q += w;
                        left -= (size_t)w;
                }
                return 0;
        }
        if (n > s->c->max_response - s->len) {
                s->err = -E2BIG;
                return -1;
        }
        if (s->len + n + 1 > s->cap) {
                size_t ncap = s->cap ? s->cap : 4096;
                while (ncap < s->len + n + 1)
                        ncap *= 2;
                char *nb = realloc(s->buf, ncap);
                if (!nb) {
                        s->err = -ENOMEM;
                        return -1;
                }
                s->buf = nb;
                s->cap = ncap;
        }
        memcpy(s->buf + s->len, ptr, n);
        s->len += n;
        return 0;
}

static int on_complete(http_parser *p) {
        struct sink *s = p->data;
        s->done = true;
        http_parser_pause(p, 1); /* nothing past the response is ours */
        return 0;
}

static int connect_socket(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int e = errno;
                close(fd);
                if (e == ENOENT || e == EACCES || e == ECONNREFUSED || e == ENOTDIR || e == EAGAIN)
                        return -e;
                return -ECONNREFUSED;
        }
        return fd;
}

/* Milliseconds left before deadline (0 = none: -1, poll's "forever"). */
static int wait_ms(int64_t deadline) {
        if (!deadline)
                return -1;
        int64_t left = deadline - ntfs_mono_ns() / 1000000;
        return left <= 0 ? 0 : (int)NTFS_MIN(left, (int64_t)INT32_MAX);
}

enum { GOT_NOTHING = 1 }; /* perform_exchange: a kept connection closed before any byte */

/* One request on c->fd and its response into s. Returns 0, GOT_NOTHING, or
 * a negative error. */
static int perform_exchange(ntfs_client *c, const char *head, size_t head_len, const void *body, size_t body_len,
                            int64_t deadline, struct sink *s) {
        /* Send head and body; stop early if the server answers first (a
         * 413 for a body over its limit comes before the body is read). */
        const char *parts[2] = { head, body };
        size_t lens[2] = { head_len, body_len };
        bool answered = false;
        for (int i = 0; i < 2 && !answered; i++) {
                const char *p = parts[i];
                size_t left = lens[i];
                while (left > 0) {
                        struct pollfd pf = { .fd = c->fd, .events = POLLOUT | POLLIN };
                        int pr = poll(&pf, 1, wait_ms(deadline));
                        if (pr < 0 && errno == EINTR)
                                continue;
                        if (pr < 0)
                                return -EIO;
                        if (pr == 0)
                                return -NTFS_ETIMEOUT;
                        if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
                                answered = true;
                                break;
                        }
                        ssize_t w = send(c->fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (w < 0) {
                                answered = true; /* EPIPE, ECONNRESET: read what the server said */
                                break;
                        }
                        p += w;
                        left -= (size_t)w;
                }
        }
        http_parser parser;
        http_parser_init(&parser, HTTP_RESPONSE);
        parser.data = s;
        http_parser_settings st = { .on_header_field = on_field, .on_header_value = on_value,
                                    .on_headers_complete = on_headers, .on_body = on_body,
                                    .on_message_complete = on_complete };
        size_t got = 0, cap = 64 * 1024;
        _cleanup_free_ char *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        while (!s->done) {
                struct pollfd pf = { .fd = c->fd, .events = POLLIN };
                int pr = poll(&pf, 1, wait_ms(deadline));
                if (pr < 0 && errno == EINTR)
                        continue;
                if (pr < 0)
                        return -EIO;
                if (pr == 0)
                        return -NTFS_ETIMEOUT;
                ssize_t n = recv(c->fd, buf, cap, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && got == 0)
                        return GOT_NOTHING; /* ECONNRESET on a stale connection */
                if (n < 0)
                        return -EIO;
                if (n == 0 && got == 0)
                        return GOT_NOTHING;
                got += (size_t)n;
                (void)http_parser_execute(&parser, &st, buf, (size_t)n);
                if (s->err < 0)
                        return s->err;
                if (HTTP_PARSER_ERRNO(&parser) != HPE_OK && HTTP_PARSER_ERRNO(&parser) != HPE_PAUSED)
                        return -EPROTO;
                if (n == 0 && !s->done)
                        return -EPROTO; /* closed mid-response */
        }
        /* An answer that came before the whole request was sent leaves the
         * rest unsent: the connection cannot carry another request. */
        if (answered || !http_should_keep_alive(&parser))
                drop_connection(c);
        return 0;
}

static int perform_once(ntfs_client *c, const char *method, const char *path, const char *content_type,
                        const void *body, size_t body_len, bool has_body, int fd, struct ntfs_client_response *ret) {
        if (!method || !path || path[0] != '/' || strpbrk(path, " \r\n") || strpbrk(method, " \r\n") ||
            (content_type && strpbrk(content_type, "\r\n")))
                return -EINVAL;
        _cleanup_free_ char *head = NULL;
        int hl;
        if (has_body)
                hl = asprintf(&head, "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: %.128s\r\n"
                              "Content-Length: %zu\r\n\r\n", method, path,
                              content_type ? content_type : "application/json", body_len);
        else
                hl = asprintf(&head, "%s %s HTTP/1.1\r\nHost: localhost\r\n\r\n", method, path);
        if (hl < 0)
                return -ENOMEM;
        int64_t deadline = c->timeout_ms ? ntfs_mono_ns() / 1000000 + c->timeout_ms : 0;
        struct sink s;
        int r;
        for (int attempt = 0;; attempt++) {
                bool kept = c->fd >= 0;
                if (!kept) {
                        int cfd = connect_socket(c->socket_path);
                        if (cfd < 0)
                                return cfd;
                        c->fd = cfd;
                }
                s = (struct sink){ .c = c, .fd = fd, .head_only = strcmp(method, "HEAD") == 0 };
                r = perform_exchange(c, head, (size_t)hl, has_body ? body : NULL, has_body ? body_len : 0,
                                     deadline, &s);
                if (r == 0)
                        break;
                drop_connection(c);
                free(s.buf);
                if (r == GOT_NOTHING && kept && attempt == 0)
                        continue; /* the server had closed the idle connection: a new one */
                return r == GOT_NOTHING ? -EIO : r;
        }
        memset(ret, 0, sizeof *ret);
        ret->status = s.status;
        snprintf(ret->content_type, sizeof ret->content_type, "%s", s.ctype);
        if (!s.buf) {
                s.buf = strdup("");
                if (!s.buf)
                        return -ENOMEM;
        }
        s.buf[s.len] = 0;
        ret->body = s.buf;
        ret->body_len = s.len;
        if (s.len > 0 && strncmp(ret->content_type, "application/json", 16) == 0)
                ret->json = json_loadb(s.buf, s.len, 0, NULL);
        return 0;
}

/* A request the daemon did not take: a refused connect (no listener, as
 * while ntfsd restarts, or a full listen backlog, which curl also reports
 * as refused), or 503 too_many_connections, which the daemon answers at
 * accept, before it reads the request. Neither reached a handler, so any
 * method, idempotent or not, may be sent again: up to CLIENT_RETRIES times,
 * after a jittered exponential wait (10 ms doubling to 640 ms, each taken
 * between half and all of it; 2.5 s at most in all). A socket file that is
 * not there (ENOENT) is not retried: no daemon was started. */
#define CLIENT_RETRIES 8
#define CLIENT_RETRY_BASE_MS 10
#define CLIENT_RETRY_CAP_MS 640

static bool not_taken(int r, const struct ntfs_client_response *res) {
        if (r == -EAGAIN || r == -ECONNREFUSED)
                return true;
        if (r < 0 || res->status != 503)
                return false;
        const char *code = NULL;
        return ntfs_client_error(res, &code, NULL) == 0 && strcmp(code, "too_many_connections") == 0;
}

static int perform(ntfs_client *c, const char *method, const char *path, const char *content_type,
                   const void *body, size_t body_len, bool has_body, int fd, struct ntfs_client_response *ret) {
        unsigned seed = (unsigned)getpid() ^ (unsigned)(uintptr_t)c ^ (unsigned)time(NULL);
        for (unsigned attempt = 0;; attempt++) {
                struct ntfs_client_response res = { 0 };
                int r = perform_once(c, method, path, content_type, body, body_len, has_body, fd, &res);
                if (attempt == CLIENT_RETRIES || !not_taken(r, &res)) {
                        if (r == 0)
                                *ret = res;
                        return r == -EAGAIN ? -ECONNREFUSED : r;
                }
                ntfs_client_response_release(&res);
                unsigned wait_ms = CLIENT_RETRY_BASE_MS << attempt;
                if (wait_ms > CLIENT_RETRY_CAP_MS)
                        wait_ms = CLIENT_RETRY_CAP_MS;
                wait_ms = wait_ms / 2 + (unsigned)rand_r(&seed) % (wait_ms / 2 + 1);
                struct timespec ts = { wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
}

int ntfs_client_request(ntfs_client *c, const char *method, const char *path, const json_t *body,
                        struct ntfs_client_response *ret) {
        _cleanup_free_ char *buf = NULL;
        if (body) {
                buf = json_dumps(body, JSON_COMPACT);
                if (!buf)
                        return -EINVAL;
        }
        return perform(c, method, path, NULL, buf, buf ? strlen(buf) : 0, body != NULL, -1, ret);
}

int ntfs_client_request_raw(ntfs_client *c, const char *method, const char *path, const char *content_type,
                            const void *body, size_t len, struct ntfs_client_response *ret) {
        return perform(c, method, path, content_type, body, len, body != NULL, -1, ret);
}

int ntfs_client_download(ntfs_client *c, const char *method, const char *path, const json_t *body, int fd,
                         long *ret_status, struct ntfs_client_response *ret) {
        if (fd < 0)
                return -EBADF;
        _cleanup_free_ char *buf = NULL;
        if (body) {
                buf = json_dumps(body, JSON_COMPACT);
                if (!buf)
                        return -EINVAL;
        }
        struct ntfs_client_response res = { 0 };
        int r = perform(c, method, path, NULL, buf, buf ? strlen(buf) : 0, body != NULL, fd, &res);
        if (r < 0)
                return r;
        if (ret_status)
                *ret_status = res.status;
        if (ret)
                *ret = res;
        else
                ntfs_client_response_release(&res);
        return 0;
}

int ntfs_client_error(const struct ntfs_client_response *r, const char **code, const char **message) {
        json_t *e = r->json ? json_object_get(r->json, "error") : NULL;
        const char *cd = e ? json_string_value(json_object_get(e, "code")) : NULL;
        const char *msg = e ? json_string_value(json_object_get(e, "message")) : NULL;
        if (cd) {
                if (code)
                        *code = cd;
                if (message)
                        *message = msg ? msg : cd;
                return 0;
        }
        if (code)
                *code = r->status >= 500 ? "internal" : "bad_request";
        if (message)
                *message = r->body && r->body[0] ? r->body : "the server answered without an error object";
        return -ENOENT;
}

int ntfs_client_errcode_parse(const char *code) {
        static const int errnos[] = { ENOENT, EEXIST, EINVAL, ENOSPC, EDQUOT, ENOMEM, EBUSY, EROFS,
                                      EACCES, ENOTDIR, EISDIR, E2BIG, ETIMEDOUT, EIO };
        if (!code)
                return -EIO;
        for (int e = NTFS_EBASE + 1; e < NTFS_ELAST; e++)
                if (strcmp(ntfs_errcode(-e), code) == 0)
                        return -e;
        for (size_t i = 0; i < ARRAY_SIZE(errnos); i++)
                if (strcmp(ntfs_errcode(-errnos[i]), code) == 0)
                        return -errnos[i];
        return -EIO;
}

int ntfs_client_call(ntfs_client *c, const char *method, const char *path, const json_t *body,
                     json_t **ret_json, char *errbuf, size_t errlen) {
        struct ntfs_client_response res = { 0 };
        int r = ntfs_client_request(c, method, path, body, &res);
        if (r < 0) {
                if (errbuf && errlen)
                        snprintf(errbuf, errlen, "%s: %s", ntfs_errcode(r), ntfs_strerror(r));
                return r;
        }
        if (res.status >= 200 && res.status < 300) {
                if (ret_json)
                        *ret_json = TAKE_PTR(res.json);
                ntfs_client_response_release(&res);
                return 0;
        }
        const char *code, *msg;
        ntfs_client_error(&res, &code, &msg);
        r = ntfs_client_errcode_parse(code);
        if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s: %s", code, msg);
        ntfs_client_response_release(&res);
        return r;
}

int ntfs_client_escape(const char *segment, char *buf, size_t len) {
        static const char hex[] = "0123456789ABCDEF";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)segment; *p; p++) {
                bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                             *p == '-' || *p == '.' || *p == '_' || *p == '~';
                size_t need = plain ? 1 : 3;
                if (o + need + 1 > len)
                        return -ENAMETOOLONG;
                if (plain)
                        buf[o++] = (char)*p;
                else {
                        buf[o++] = '%';
                        buf[o++] = hex[*p >> 4];
                        buf[o++] = hex[*p & 15];
                }
        }
        if (len == 0)
                return -ENAMETOOLONG;
        buf[o] = 0;
        return (int)o;
}

const char *ntfs_client_default_socket(char *buf, size_t len) {
        const char *s = getenv("NTFS_SOCKET");
        if (s && *s)
                return s;
        const char *store = getenv("NTFS_STORE");
        if (store && *store) {
                int n = snprintf(buf, len, "%s/ntfsd.sock", store);
                if (n > 0 && (size_t)n < len)
                        return buf;
        }
        return "./.store/ntfsd.sock";
}

/* ---- protocol upgrade (a connection of its own, not the kept one) ---------------------------------- */

static int upgrade_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int e = errno;
                close(fd);
                return e == ENOENT || e == ECONNREFUSED || e == EACCES ? -e : -EIO;
        }
        return fd;
}

static int send_all_fd(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -EIO;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Reads from fd into buf until the head's end; *ret_len is what was read
 * (the head and what followed it). */
static int read_head(int fd, char *buf, size_t cap, unsigned timeout_ms, size_t *ret_len, size_t *ret_head) {
        size_t len = 0;
        int64_t deadline = timeout_ms ? (int64_t)time(NULL) + (timeout_ms + 999) / 1000 : 0;
        for (;;) {
                buf[len] = 0;
                char *e = strstr(buf, "\r\n\r\n");
                if (e) {
                        *ret_head = (size_t)(e - buf) + 4;
                        *ret_len = len;
                        return 0;
                }
                if (len + 1 >= cap)
                        return -EPROTO;
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                int pr = poll(&pf, 1, 1000);
                if (pr < 0 && errno != EINTR)
                        return -EIO;
                if (deadline && (int64_t)time(NULL) > deadline)
                        return -NTFS_ETIMEOUT;
                if (pr <= 0)
                        continue;
                ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return len ? -EPROTO : -EIO;
                len += (size_t)n;
        }
}

int ntfs_client_upgrade(ntfs_client *c, const char *path, const json_t *body, const char *protocol, int *ret_fd,
                        void **ret_pre, size_t *ret_pre_len, struct ntfs_client_response *ret) {
        *ret_fd = -1;
        *ret_pre = NULL;
        *ret_pre_len = 0;
        memset(ret, 0, sizeof *ret);
        _cleanup_free_ char *b = body ? json_dumps(body, JSON_COMPACT) : strdup("");
        if (!b)
                return -ENOMEM;
        _cleanup_free_ char *req = NULL;
        int n = asprintf(&req,
                         "POST %s HTTP/1.1\r\nHost: ntfsd\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         path, protocol, strlen(b), b);
        if (n < 0)
                return -ENOMEM;
        int fd = upgrade_connect(c->socket_path);
        if (fd < 0)
                return fd;
        int r = send_all_fd(fd, req, (size_t)n);
        size_t cap = 1 << 20, len = 0, head = 0;
        _cleanup_free_ char *buf = r < 0 ? NULL : malloc(cap);
        if (r >= 0 && !buf)
                r = -ENOMEM;
        if (r >= 0)
                r = read_head(fd, buf, cap, c->timeout_ms, &len, &head);
        int status = 0;
        if (r >= 0 && sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                r = -EPROTO;
        if (r < 0) {
                close(fd);
                return r;
        }
        ret->status = status;
        if (status == 101) {
                if (len > head) {
                        char *pre = malloc(len - head);
                        if (!pre) {
                                close(fd);
                                return -ENOMEM;
                        }
                        memcpy(pre, buf + head, len - head);
                        *ret_pre = pre;
                        *ret_pre_len = len - head;
                }
                *ret_fd = fd;
                return 0;
        }
        /* An answer instead of the upgrade: its body by Content-Length. */
        size_t clen = 0;
        for (char *h = strcasestr(buf, "\r\ncontent-length:"); h && h < buf + head; h = NULL)
                clen = (size_t)strtoull(h + 17, NULL, 10);
        if (clen > cap - 1 - head)
                clen = cap - 1 - head;
        while (len < head + clen) {
                ssize_t k = recv(fd, buf + len, head + clen - len, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                len += (size_t)k;
        }
        close(fd);
        size_t bl = NTFS_MIN(len - head, clen);
        ret->body = malloc(bl + 1);
        if (!ret->body)
                return -ENOMEM;
        memcpy(ret->body, buf + head, bl);
        ret->body[bl] = 0;
        ret->body_len = bl;
        ret->json = json_loadb(ret->body, bl, 0, NULL);
        snprintf(ret->content_type, sizeof ret->content_type, "%s", ret->json ? "application/json" : "");
        return 0;
}
