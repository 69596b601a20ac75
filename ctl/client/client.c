/* SPDX-License-Identifier: MIT */
#include "ctl/client/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
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
#include "common/banned.h"

struct ntfs_client {
        CURL *curl;
        char *socket_path;
        unsigned timeout_ms;
        size_t max_response;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void) {
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int ntfs_client_new(const char *socket_path, ntfs_client **ret) {
        if (!socket_path || !*socket_path)
                return -EINVAL;
        pthread_once(&curl_once, curl_init_once);
        if (curl_init_rc != CURLE_OK)
                return -ENOMEM;
        ntfs_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->socket_path = strdup(socket_path);
        c->curl = curl_easy_init();
        if (!c->socket_path || !c->curl) {
                ntfs_client_free(c);
                return -ENOMEM;
        }
        c->timeout_ms = NTFS_CLIENT_DEFAULT_TIMEOUT_MS;
        c->max_response = NTFS_CLIENT_DEFAULT_MAX_RESPONSE;
        *ret = c;
        return 0;
}

void ntfs_client_free(ntfs_client *c) {
        if (!c)
                return;
        if (c->curl)
                curl_easy_cleanup(c->curl);
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
        bool to_fd;    /* decided at the first byte: 2xx and fd given */
        bool decided;
        int err;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
        struct sink *s = ud;
        size_t n = size * nmemb;
        if (!s->decided) {
                long status = 0;
                curl_easy_getinfo(s->c->curl, CURLINFO_RESPONSE_CODE, &status);
                s->to_fd = s->fd >= 0 && status >= 200 && status < 300;
                s->decided = true;
        }
        if (s->to_fd) {
                const char *p = ptr;
                size_t left = n;
                while (left > 0) {
                        ssize_t w = write(s->fd, p, left);
                        if (w < 0) {
                                if (errno == EINTR)
                                        continue;
                                s->err = -errno;
                                return 0;
                        }
                        p += w;
                        left -= (size_t)w;
                }
                return n;
        }
        if (n > s->c->max_response - s->len) {
                s->err = -E2BIG;
                return 0;
        }
        if (s->len + n + 1 > s->cap) {
                size_t ncap = s->cap ? s->cap : 4096;
                while (ncap < s->len + n + 1)
                        ncap *= 2;
                char *nb = realloc(s->buf, ncap);
                if (!nb) {
                        s->err = -ENOMEM;
                        return 0;
                }
                s->buf = nb;
                s->cap = ncap;
        }
        memcpy(s->buf + s->len, ptr, n);
        s->len += n;
        return n;
}

static int map_curl(ntfs_client *c, CURLcode rc, const struct sink *s) {
        long oserr = 0;
        switch (rc) {
        case CURLE_OK:
                return 0;
        case CURLE_COULDNT_CONNECT:
                curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &oserr);
                if (oserr == ENOENT || oserr == EACCES || oserr == ECONNREFUSED || oserr == ENOTDIR ||
                    oserr == EAGAIN)
                        return -(int)oserr;
                return -ECONNREFUSED;
        case CURLE_OPERATION_TIMEDOUT:
                return -NTFS_ETIMEOUT;
        case CURLE_WRITE_ERROR:
                return s->err < 0 ? s->err : -EIO;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_BAD_CONTENT_ENCODING:
                return -EPROTO;
        default:
                return -EIO;
        }
}

static int perform_once(ntfs_client *c, const char *method, const char *path, const char *content_type,
                        const void *body, size_t body_len, bool has_body, int fd, struct ntfs_client_response *ret) {
        if (!method || !path || path[0] != '/' || strpbrk(path, " \r\n"))
                return -EINVAL;
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "http://localhost%s", path) < 0)
                return -ENOMEM;
        CURL *h = c->curl;
        curl_easy_reset(h);
        struct sink s = { .c = c, .fd = fd };
        struct curl_slist *hdrs = NULL, *tmp;
        char ct[160];
        int r = 0;

        tmp = curl_slist_append(hdrs, "Expect:"); /* never wait for 100-continue */
        if (!tmp)
                return -ENOMEM;
        hdrs = tmp;
        if (has_body) {
                snprintf(ct, sizeof ct, "Content-Type: %s", content_type ? content_type : "application/json");
                tmp = curl_slist_append(hdrs, ct);
                if (!tmp) {
                        curl_slist_free_all(hdrs);
                        return -ENOMEM;
                }
                hdrs = tmp;
        }
        if (curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->socket_path) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_URL, url) != CURLE_OK) {
                curl_slist_free_all(hdrs);
                return -ENOMEM;
        }
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms ? (long)c->timeout_ms : 0L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        /* big reads: a streamed response (archive export) arrives in far
         * fewer wake-ups than with curl's 16 KiB default */
        curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
        if (strcmp(method, "HEAD") == 0)
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        if (has_body) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body_len ? body : "");
        }
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hdrs);
        r = map_curl(c, rc, &s);
        if (r < 0) {
                free(s.buf);
                return r;
        }
        memset(ret, 0, sizeof *ret);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        char *rct = NULL;
        if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &rct) == CURLE_OK && rct)
                snprintf(ret->content_type, sizeof ret->content_type, "%s", rct);
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

/* ---- protocol upgrade (a raw connection, not libcurl's) ---------------------------------- */

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
