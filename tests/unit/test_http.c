/* SPDX-License-Identifier: MIT
 * test_http.c — the HTTP server on a real Unix socket, driven with raw
 * sockets: what curl, a buggy client and a hostile client would send.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/http.h"
#include "ctl/jsonutil.h"
#include "ctl/router.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char tmpdir[40];
static char sock_path[100];
static ntfs_router *router;
static ntfs_http_server *srv;
static atomic_int conn_data_freed;
static struct ntfs_http_peer last_peer;
static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- demo routes */

static int h_health(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        pthread_mutex_lock(&peer_lock);
        last_peer = req->peer;
        pthread_mutex_unlock(&peer_lock);
        return ntfs_http_respond_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

struct new_args {
        const char *name;
        int64_t steps;
};

static int h_new(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const struct ntfs_json_field fields[] = {
                NTFS_JSON_FIELD(struct new_args, name, "name", NTFS_JSON_NAME, NTFS_JSON_REQUIRED),
                NTFS_JSON_RANGE(struct new_args, steps, "steps", 0, 1, 100),
                NTFS_JSON_END,
        };
        struct new_args a = { .steps = 1 };
        int r = ntfs_http_validate(req, resp, fields, &a);
        if (r < 0)
                return r;
        return ntfs_http_respond_json(resp, 201, json_pack("{s:s,s:I,s:I}", "name", a.name, "steps",
                                                           (json_int_t)a.steps, "bytes",
                                                           (json_int_t)req->body_len));
}

static int h_checkpoint(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = ntfs_http_request_param(req, "name");
        if (strcmp(name, "missing") == 0)
                return -NTFS_ENOSESSION;
        return ntfs_http_respond_json(resp, 200, json_pack("{s:s,s:s}", "session", name, "route", req->route));
}

static int h_slow(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        usleep(1000 * 1000);
        return ntfs_http_respond_json(resp, 200, json_pack("{s:b}", "slow", 1));
}

static int h_start(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        free(*req->conn_data);
        *req->conn_data = strdup(ntfs_http_request_header(req, "X-Session") ?: "none");
        return ntfs_http_respond_json(resp, 200, NULL);
}

static int h_whoami(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *s = *req->conn_data;
        return ntfs_http_respond_json(resp, 200, json_pack("{s:s?}", "session", s));
}

static int big_stream(void *ctx, ntfs_http_stream *out) {
        char buf[4096];
        memset(buf, 'x', sizeof buf);
        size_t n = (size_t)(uintptr_t)ctx;
        for (size_t i = 0; i < n; i++)
                if (ntfs_http_stream_write(out, buf, sizeof buf) < 0)
                        return -EIO;
        return 0;
}

static int h_export(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        char q[32];
        uint64_t blocks = 3;
        if (ntfs_http_request_query(req, "blocks", q, sizeof q) >= 0 && ntfs_parse_u64(q, 100000, &blocks) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "bad blocks");
        return ntfs_http_respond_stream(resp, 200, "application/octet-stream", big_stream,
                                        (void *)(uintptr_t)blocks, NULL);
}

static int h_raw(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_raw(resp, 200, "text/plain", req->body, req->body_len);
}

/* The upgraded protocol: echoes every byte (the early ones first) until EOF. */
static int echo_upgraded(void *ctx, int fd, const void *pre, size_t pre_len) {
        if (pre_len && send(fd, pre, pre_len, MSG_NOSIGNAL) != (ssize_t)pre_len)
                return -EIO;
        char buf[4096];
        for (;;) {
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                if (poll(&pf, 1, 10000) <= 0)
                        return -ETIMEDOUT;
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n <= 0)
                        return 0;
                if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
                        return -EIO;
        }
}

static int h_upgrade(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_upgrade(resp, "echo/1", echo_upgraded, NULL, NULL);
}

static void free_conn_data(void *ud, void *data) {
        free(data);
        atomic_fetch_add(&conn_data_freed, 1);
}

static void make_router(void) {
        if (router)
                return;
        ASSERT_OK(ntfs_router_new(&router));
        ASSERT_OK(ntfs_router_add(router, "GET /v1/health", h_health, 0));
        ASSERT_OK(ntfs_router_add(router, "POST /v1/sessions", h_new, 0));
        ASSERT_OK(ntfs_router_add(router, "POST /v1/sessions/{name}/checkpoint", h_checkpoint, 0));
        ASSERT_OK(ntfs_router_add(router, "GET /v1/slow", h_slow, 0));
        ASSERT_OK(ntfs_router_add(router, "POST /session/start", h_start, 0));
        ASSERT_OK(ntfs_router_add(router, "GET /v1/whoami", h_whoami, 0));
        ASSERT_OK(ntfs_router_add(router, "GET /v1/export", h_export, 0));
        ASSERT_OK(ntfs_router_add(router, "POST /v1/raw", h_raw, NTFS_ROUTE_RAW_BODY));
        ASSERT_OK(ntfs_router_add(router, "POST /v1/echo", h_upgrade, 0));
}

static void server_start_cfg(struct ntfs_http_config *cfg) {
        if (srv) { /* left over by a failed test */
                ntfs_http_server_free(srv);
                srv = NULL;
        }
        make_router();
        cfg->socket_path = sock_path;
        cfg->router = router;
        cfg->conn_data_free = free_conn_data;
        ASSERT_OK(ntfs_http_server_new(cfg, NULL, NULL, &srv));
        ASSERT_OK(ntfs_http_server_start(srv));
}

static void server_start(void) {
        struct ntfs_http_config cfg = { 0 };
        server_start_cfg(&cfg);
}

static void server_stop(void) {
        ntfs_http_server_free(srv);
        srv = NULL;
}

/* ---------------------------------------------------------------- raw client */

static int64_t now_ms(void) {
        return ntfs_mono_ns() / 1000000;
}

static int xconnect(void) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                FAIL("socket: %s", strerror(errno));
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int e = errno;
                close(fd);
                FAIL("connect: %s", strerror(e));
        }
        struct timeval tv = { .tv_sec = 10 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        return fd;
}

static void xsend(int fd, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        FAIL("send: %s", strerror(errno));
                p += n;
                len -= (size_t)n;
        }
}

static void xsends(int fd, const char *s) {
        xsend(fd, s, strlen(s));
}

struct resp {
        int status;
        char head[4096];
        char body[65536];
        size_t body_len;
        json_t *json;
};

static void resp_release(struct resp *r) {
        json_decref(r->json);
        r->json = NULL;
}

/* Reads one Content-Length response (or, with no length, until EOF).
 * Returns 0, or -1 on EOF before any byte. Thread-safe (no ASSERTs). */
static int read_resp_nofail(int fd, struct resp *r) {
        char buf[sizeof r->head + sizeof r->body];
        size_t len = 0;
        char *eoh = NULL;
        memset(r, 0, offsetof(struct resp, body));
        r->json = NULL;
        r->body_len = 0;
        while (!eoh) {
                ssize_t n = recv(fd, buf + len, 1, 0); /* byte by byte: never read past the response */
                if (n <= 0)
                        return -1;
                len += (size_t)n;
                buf[len] = 0;
                if (len >= 4 && memcmp(buf + len - 4, "\r\n\r\n", 4) == 0)
                        eoh = buf + len;
                if (len >= sizeof r->head - 1)
                        return -2;
        }
        memcpy(r->head, buf, len);
        r->head[len] = 0;
        if (sscanf(r->head, "HTTP/1.1 %d", &r->status) != 1)
                return -3;
        if (r->status == 100)
                return 0;
        const char *cl = strcasestr(r->head, "\r\nContent-Length:");
        if (cl) {
                size_t want = strtoul(cl + 17, NULL, 10);
                if (want >= sizeof r->body)
                        return -4;
                while (r->body_len < want) {
                        ssize_t n = recv(fd, r->body + r->body_len, want - r->body_len, 0);
                        if (n <= 0)
                                return -5;
                        r->body_len += (size_t)n;
                }
        } else if (!strcasestr(r->head, "Transfer-Encoding: chunked") && r->status != 204) {
                for (;;) {
                        ssize_t n = recv(fd, r->body + r->body_len, sizeof r->body - 1 - r->body_len, 0);
                        if (n <= 0)
                                break;
                        r->body_len += (size_t)n;
                }
        }
        r->body[r->body_len] = 0;
        if (strcasestr(r->head, "application/json") && r->body_len)
                r->json = json_loadb(r->body, r->body_len, 0, NULL);
        return 0;
}

static void read_resp(int fd, struct resp *r) {
        int e = read_resp_nofail(fd, r);
        if (e < 0)
                FAIL("reading a response failed (%d)", e);
}

static const char *err_code(const struct resp *r) {
        return json_string_value(json_object_get(json_object_get(r->json, "error"), "code"));
}
static const char *err_msg(const struct resp *r) {
        return json_string_value(json_object_get(json_object_get(r->json, "error"), "message"));
}

static bool at_eof(int fd) {
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        return n == 0;
}

static void roundtrip(const char *req, struct resp *r) {
        _cleanup_close_ int fd = xconnect();
        xsends(fd, req);
        read_resp(fd, r);
}

/* "POST path" with body and a correct Content-Length, into buf. */
static const char *post(char *buf, size_t len, const char *path, const char *body) {
        snprintf(buf, len, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s", path, strlen(body), body);
        return buf;
}

static void health_ok(void) {
        struct resp r;
        roundtrip("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", &r);
        ASSERT_EQ(r.status, 200);
        resp_release(&r);
}

static void wait_connections(unsigned n) {
        for (int i = 0; i < 300 && ntfs_http_server_connections(srv) != n; i++)
                usleep(10 * 1000);
        ASSERT_EQ(ntfs_http_server_connections(srv), n);
}

/* ---------------------------------------------------------------- tests */

TEST(basic_get) {
        server_start();
        struct resp r;
        roundtrip("GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT(strcasestr(r.head, "Content-Type: application/json"));
        ASSERT(r.json && json_is_true(json_object_get(r.json, "ok")));
        ASSERT_EQ(r.body[r.body_len - 1], '\n');
        resp_release(&r);
        server_stop();
}

TEST(keepalive_and_pipelining) {
        server_start();
        _cleanup_close_ int fd = xconnect();
        struct resp r;
        for (int i = 0; i < 3; i++) {
                xsends(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
                read_resp(fd, &r);
                ASSERT_EQ(r.status, 200);
                ASSERT(!strcasestr(r.head, "Connection: close"));
                resp_release(&r);
        }
        /* two requests in one write, the second one with a body */
        xsends(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
                   "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"name\":\"p\"}\n");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        resp_release(&r);
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 201);
        ASSERT_STREQ(json_string_value(json_object_get(r.json, "name")), "p");
        resp_release(&r);
        /* Connection: close is honoured */
        xsends(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        read_resp(fd, &r);
        ASSERT(strcasestr(r.head, "Connection: close"));
        ASSERT(at_eof(fd));
        resp_release(&r);
        server_stop();
}

TEST(http10) {
        server_start();
        _cleanup_close_ int fd = xconnect();
        xsends(fd, "GET /v1/health HTTP/1.0\r\n\r\n");
        struct resp r;
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT(at_eof(fd));
        resp_release(&r);
        server_stop();
}

TEST(json_validation) {
        server_start();
        struct resp r;
        char b[512];
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"a\",\"steps\":\"x\"}"), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_STREQ(err_code(&r), "bad_request");
        ASSERT(strstr(err_msg(&r), "\"steps\" must be an integer"));
        resp_release(&r);
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"a\",\"nmae\":\"b\"}"), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT(strstr(err_msg(&r), "unknown field \"nmae\""));
        resp_release(&r);
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"..\"}"), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_STREQ(err_code(&r), "invalid_name");
        resp_release(&r);
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"a\",\"steps\":1000}"), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT(strstr(err_msg(&r), "between 1 and 100"));
        resp_release(&r);
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"ok\",\"steps\":7}"), &r);
        ASSERT_EQ(r.status, 201);
        ASSERT_EQ(json_integer_value(json_object_get(r.json, "steps")), 7);
        resp_release(&r);
        roundtrip(post(b, sizeof b, "/v1/sessions", "{\"name\":\"..\"}"), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_STREQ(err_code(&r), "invalid_name");
        resp_release(&r);
        roundtrip("POST /v1/sessions HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT(strstr(err_msg(&r), "missing required field \"name\""));
        resp_release(&r);
        server_stop();
}

TEST(malformed_request_line) {
        server_start();
        const char *bad[] = {
                "GARBAGE\r\n\r\n",
                "GET /v1/health HTTP/9.9\r\n\r\n",
                "GET  HTTP/1.1\r\n\r\n",
                "GET /v1/health HTTP/1.1\r\nBad Header\r\n\r\n",
                "GET /v1/%zz HTTP/1.1\r\n\r\n",
                "GET http://host/v1/health HTTP/1.1\r\n\r\n",
                "POST /v1/sessions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_close_ int fd = xconnect();
                xsends(fd, bad[i]);
                struct resp r;
                read_resp(fd, &r);
                if (r.status != 400)
                        FAIL("case %zu: status %d", i, r.status);
                ASSERT_STREQ(err_code(&r), "bad_request");
                ASSERT(err_msg(&r) && *err_msg(&r));
                ASSERT(at_eof(fd));
                resp_release(&r);
        }
        health_ok();
        server_stop();
}

TEST(malformed_json) {
        char b[512];
        server_start();
        _cleanup_close_ int fd = xconnect();
        struct resp r;
        xsends(fd, post(b, sizeof b, "/v1/sessions", "{\"name\":"));
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_STREQ(err_code(&r), "bad_request");
        ASSERT(strstr(err_msg(&r), "invalid JSON"));
        resp_release(&r);
        /* same connection still usable */
        xsends(fd, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 5\r\n\r\n[1,2]");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 400);
        ASSERT(strstr(err_msg(&r), "must be an object"));
        resp_release(&r);
        xsends(fd, post(b, sizeof b, "/v1/sessions", "{\"a\":1,\"a\":2} "));
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 400);
        resp_release(&r);
        /* a raw route does not parse JSON */
        xsends(fd, "POST /v1/raw HTTP/1.1\r\nContent-Length: 4\r\n\r\n{bad");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(r.body, "{bad");
        ASSERT(strcasestr(r.head, "Content-Type: text/plain"));
        resp_release(&r);
        server_stop();
}

TEST(oversize_body) {
        struct ntfs_http_config cfg = { .max_body_bytes = 1024 };
        server_start_cfg(&cfg);
        struct resp r;
        /* declared too big: refused before the body is sent */
        roundtrip("POST /v1/sessions HTTP/1.1\r\nContent-Length: 9000000\r\n\r\n", &r);
        ASSERT_EQ(r.status, 413);
        ASSERT_STREQ(err_code(&r), "payload_too_large");
        resp_release(&r);
        /* a client that sends the refused body anyway (no Expect) still gets the answer */
        {
                _cleanup_close_ int fb = xconnect();
                xsends(fb, "POST /v1/raw HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n");
                _cleanup_free_ char *big = calloc(1, 2000000);
                ASSERT(big);
                xsend(fb, big, 2000000);
                read_resp(fb, &r);
                ASSERT_EQ(r.status, 413);
                resp_release(&r);
        }
        /* chunked, growing past the limit */
        _cleanup_close_ int fd = xconnect();
        xsends(fd, "POST /v1/raw HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        char chunk[600];
        memset(chunk, 'a', sizeof chunk);
        int sent_err = 0;
        for (int i = 0; i < 3 && !sent_err; i++) {
                char hdr[16];
                snprintf(hdr, sizeof hdr, "%zx\r\n", sizeof chunk);
                if (send(fd, hdr, strlen(hdr), MSG_NOSIGNAL) < 0 ||
                    send(fd, chunk, sizeof chunk, MSG_NOSIGNAL) < 0 || send(fd, "\r\n", 2, MSG_NOSIGNAL) < 0)
                        sent_err = 1;
        }
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 413);
        resp_release(&r);
        /* a chunked body under the limit works */
        _cleanup_close_ int fd2 = xconnect();
        xsends(fd2, "POST /v1/raw HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
        read_resp(fd2, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(r.body, "hello world");
        resp_release(&r);
        server_stop();
        /* the default limit is 8 MiB */
        server_start();
        roundtrip("POST /v1/raw HTTP/1.1\r\nContent-Length: 8388609\r\n\r\n", &r);
        ASSERT_EQ(r.status, 413);
        resp_release(&r);
        server_stop();
}

TEST(oversize_headers) {
        server_start();
        size_t n = 20 * 1024;
        _cleanup_free_ char *req = malloc(n + 100);
        int off = snprintf(req, n + 100, "GET /v1/health HTTP/1.1\r\nX-Big: ");
        memset(req + off, 'h', n);
        memcpy(req + off + n, "\r\n\r\n", 5);
        struct resp r;
        _cleanup_close_ int fd = xconnect();
        (void)send(fd, req, strlen(req), MSG_NOSIGNAL);
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 431);
        ASSERT_STREQ(err_code(&r), "request_header_fields_too_large");
        resp_release(&r);
        /* too many header fields */
        char many[8192];
        int o = snprintf(many, sizeof many, "GET /v1/health HTTP/1.1\r\n");
        for (int i = 0; i < 70; i++)
                o += snprintf(many + o, sizeof many - o, "X-%d: v\r\n", i);
        snprintf(many + o, sizeof many - o, "\r\n");
        roundtrip(many, &r);
        ASSERT_EQ(r.status, 431);
        resp_release(&r);
        health_ok();
        server_stop();
}

struct loris {
        int fd;
        int64_t cut_after_ms;
        int status;
};

static void *loris_thread(void *arg) {
        struct loris *l = arg;
        const char *req = "GET /v1/health HTTP/1.1\r\nHost: slowloris\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        int64_t t0 = now_ms();
        for (size_t i = 0; req[i]; i++) {
                if (send(l->fd, req + i, 1, MSG_NOSIGNAL) < 0)
                        break;
                usleep(250 * 1000);
                if (now_ms() - t0 > 8000)
                        break;
        }
        struct resp r;
        if (read_resp_nofail(l->fd, &r) == 0) {
                l->status = r.status;
                resp_release(&r);
        }
        l->cut_after_ms = now_ms() - t0;
        return NULL;
}

TEST(slowloris) {
        struct ntfs_http_config cfg = { .header_timeout_ms = 1500 };
        server_start_cfg(&cfg);
        struct loris l = { .fd = xconnect() };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, loris_thread, &l), 0);
        /* meanwhile others are served promptly, including a slow handler */
        int64_t worst = 0;
        for (int i = 0; i < 10; i++) {
                int64_t t0 = now_ms();
                health_ok();
                worst = NTFS_MAX(worst, now_ms() - t0);
                usleep(100 * 1000);
        }
        pthread_join(t, NULL);
        close(l.fd);
        printf("# slowloris cut after %lld ms (limit 1500), worst other request %lld ms\n",
               (long long)l.cut_after_ms, (long long)worst);
        ASSERT_EQ(l.status, 408);
        ASSERT(l.cut_after_ms >= 1400 && l.cut_after_ms < 3500);
        ASSERT(worst < 500);
        server_stop();
}

static void *slow_req(void *arg) {
        struct resp *r = arg;
        int fd = xconnect();
        xsends(fd, "GET /v1/slow HTTP/1.1\r\n\r\n");
        read_resp_nofail(fd, r);
        close(fd);
        return NULL;
}

TEST(slow_handler_does_not_block_others) {
        server_start();
        static struct resp slow;
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, slow_req, &slow), 0);
        usleep(100 * 1000);
        int64_t t0 = now_ms();
        health_ok();
        ASSERT(now_ms() - t0 < 500);
        pthread_join(t, NULL);
        ASSERT_EQ(slow.status, 200);
        resp_release(&slow);
        server_stop();
}

TEST(idle_timeout) {
        struct ntfs_http_config cfg = { .idle_timeout_ms = 500, .body_timeout_ms = 800 };
        server_start_cfg(&cfg);
        _cleanup_close_ int fd = xconnect();
        int64_t t0 = now_ms();
        ASSERT(at_eof(fd)); /* closed without a response */
        ASSERT(now_ms() - t0 < 2500);
        /* a stalled body gets 408 */
        _cleanup_close_ int fd2 = xconnect();
        xsends(fd2, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"na");
        struct resp r;
        read_resp(fd2, &r);
        ASSERT_EQ(r.status, 408);
        ASSERT_STREQ(err_code(&r), "request_timeout");
        resp_release(&r);
        server_stop();
}

TEST(too_many_connections) {
        struct ntfs_http_config cfg = { .max_connections = 4 };
        server_start_cfg(&cfg);
        int fds[4];
        for (int i = 0; i < 4; i++)
                fds[i] = xconnect();
        wait_connections(4);
        _cleanup_close_ int extra = xconnect();
        struct resp r;
        read_resp(extra, &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_STREQ(err_code(&r), "too_many_connections");
        ASSERT(at_eof(extra));
        resp_release(&r);
        /* the four are still served */
        xsends(fds[0], "GET /v1/health HTTP/1.1\r\n\r\n");
        read_resp(fds[0], &r);
        ASSERT_EQ(r.status, 200);
        resp_release(&r);
        for (int i = 0; i < 4; i++)
                close(fds[i]);
        wait_connections(0);
        health_ok();
        server_stop();
}

TEST(client_disconnects_mid_request) {
        server_start();
        for (int i = 0; i < 20; i++) {
                int fd = xconnect();
                if (i % 3 == 0)
                        xsends(fd, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"name\":");
                else if (i % 3 == 1)
                        xsends(fd, "GET /v1/hea");
                else /* asks for a big answer and leaves without reading it (SIGPIPE) */
                        xsends(fd, "GET /v1/export?blocks=2000 HTTP/1.1\r\n\r\n");
                close(fd);
        }
        wait_connections(0);
        health_ok();
        server_stop();
}

struct worker {
        int id;
        int ok;
        int failures;
};

static void *worker_thread(void *arg) {
        struct worker *w = arg;
        int fd = -1;
        for (int i = 0; i < 200; i++) {
                if (fd < 0 || i % 50 == 0) { /* new connection now and then */
                        if (fd >= 0)
                                close(fd);
                        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                        struct sockaddr_un sa = { .sun_family = AF_UNIX };
                        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
                        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                                w->failures++;
                                close(fd);
                                fd = -1;
                                continue;
                        }
                }
                char req[256];
                char body[64];
                int bl = snprintf(body, sizeof body, "{\"name\":\"w%d-%d\"}", w->id, i);
                snprintf(req, sizeof req, "POST /v1/sessions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", bl, body);
                struct resp r;
                if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0 || read_resp_nofail(fd, &r) < 0) {
                        w->failures++;
                        close(fd);
                        fd = -1;
                        continue;
                }
                char want[32];
                snprintf(want, sizeof want, "w%d-%d", w->id, i);
                const char *got = json_string_value(json_object_get(r.json, "name"));
                if (r.status == 201 && got && strcmp(got, want) == 0)
                        w->ok++;
                else
                        w->failures++;
                resp_release(&r);
        }
        if (fd >= 0)
                close(fd);
        return NULL;
}

TEST(concurrent_clients) {
        server_start();
        pthread_t t[8];
        struct worker w[8] = { 0 };
        int64_t t0 = now_ms();
        for (int i = 0; i < 8; i++) {
                w[i].id = i;
                ASSERT_EQ(pthread_create(&t[i], NULL, worker_thread, &w[i]), 0);
        }
        int ok = 0, failures = 0;
        for (int i = 0; i < 8; i++) {
                pthread_join(t[i], NULL);
                ok += w[i].ok;
                failures += w[i].failures;
        }
        int64_t ms = now_ms() - t0;
        printf("# 8 clients x 200 requests: %d ok, %d failed in %lld ms (%.0f req/s)\n", ok, failures,
               (long long)ms, ms ? ok * 1000.0 / (double)ms : 0.0);
        ASSERT_EQ(failures, 0);
        ASSERT_EQ(ok, 1600);
        server_stop();
}

TEST(not_found_and_method_not_allowed) {
        server_start();
        struct resp r;
        roundtrip("GET /v1/nope HTTP/1.1\r\n\r\n", &r);
        ASSERT_EQ(r.status, 404);
        ASSERT_STREQ(err_code(&r), "not_found");
        resp_release(&r);
        roundtrip("GET /v1/sessions HTTP/1.1\r\n\r\n", &r);
        ASSERT_EQ(r.status, 405);
        ASSERT_STREQ(err_code(&r), "method_not_allowed");
        ASSERT(strcasestr(r.head, "\r\nAllow: POST\r\n"));
        resp_release(&r);
        /* errors from handlers carry the project's codes */
        roundtrip("POST /v1/sessions/missing/checkpoint HTTP/1.1\r\n\r\n", &r);
        ASSERT_EQ(r.status, 404);
        ASSERT_STREQ(err_code(&r), "session_not_found");
        resp_release(&r);
        /* captures are percent-decoded */
        roundtrip("POST /v1/sessions/a%20b%2Fc/checkpoint?x=1 HTTP/1.1\r\n\r\n", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(json_string_value(json_object_get(r.json, "session")), "a b/c");
        ASSERT_STREQ(json_string_value(json_object_get(r.json, "route")), "POST /v1/sessions/{name}/checkpoint");
        resp_release(&r);
        server_stop();
}

TEST(peer_credentials) {
        server_start();
        health_ok();
        pthread_mutex_lock(&peer_lock);
        struct ntfs_http_peer p = last_peer;
        pthread_mutex_unlock(&peer_lock);
        ASSERT_EQ(p.uid, getuid());
        ASSERT_EQ(p.gid, getgid());
        ASSERT_EQ(p.pid, getpid());
        server_stop();
}

TEST(socket_mode) {
        server_start();
        struct stat st;
        ASSERT_EQ(lstat(sock_path, &st), 0);
        ASSERT(S_ISSOCK(st.st_mode));
        ASSERT_EQ(st.st_mode & 07777, 0600);
        server_stop();
        ASSERT(lstat(sock_path, &st) < 0 && errno == ENOENT); /* removed at stop */
        struct ntfs_http_config cfg = { .has_group = true, .group = 12345 };
        server_start_cfg(&cfg);
        ASSERT_EQ(lstat(sock_path, &st), 0);
        ASSERT_EQ(st.st_mode & 07777, 0660);
        if (getuid() == 0)
                ASSERT_EQ(st.st_gid, 12345);
        server_stop();
}

TEST(second_server_refused) {
        server_start();
        struct ntfs_http_config cfg = { .socket_path = sock_path, .router = router };
        ntfs_http_server *other = NULL;
        ASSERT_OK(ntfs_http_server_new(&cfg, NULL, NULL, &other));
        ASSERT_ERR(ntfs_http_server_start(other), -NTFS_ESTOREBUSY);
        ASSERT_STREQ(ntfs_errcode(-NTFS_ESTOREBUSY), "store_in_use");
        ntfs_http_server_free(other);
        health_ok(); /* the first one is untouched */
        server_stop();
}

TEST(stale_socket_replaced) {
        /* a socket file nobody listens on (a crashed daemon's) */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        close(fd);
        struct stat st;
        ASSERT_EQ(lstat(sock_path, &st), 0);
        server_start();
        health_ok();
        server_stop();
        /* a regular file is never removed */
        FILE *f = fopen(sock_path, "w");
        ASSERT(f);
        fclose(f);
        struct ntfs_http_config cfg = { .socket_path = sock_path, .router = router };
        ntfs_http_server *s2 = NULL;
        ASSERT_OK(ntfs_http_server_new(&cfg, NULL, NULL, &s2));
        ASSERT_ERR(ntfs_http_server_start(s2), -EEXIST);
        ntfs_http_server_free(s2);
        ASSERT_EQ(lstat(sock_path, &st), 0);
        ASSERT(S_ISREG(st.st_mode));
        unlink(sock_path);
}

TEST(expect_continue) {
        server_start();
        _cleanup_close_ int fd = xconnect();
        xsends(fd, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n");
        struct resp r;
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 100);
        xsends(fd, "{\"name\":\"e\"}");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 201);
        resp_release(&r);
        /* refused up front: no 100, a 413 instead */
        xsends(fd, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 99999999\r\nExpect: 100-continue\r\n\r\n");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 413);
        resp_release(&r);
        server_stop();
}

TEST(streaming_response) {
        server_start();
        _cleanup_close_ int fd = xconnect();
        xsends(fd, "GET /v1/export?blocks=3 HTTP/1.1\r\n\r\n");
        struct resp r;
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT(strcasestr(r.head, "Transfer-Encoding: chunked"));
        /* 3 chunks of 4096 then the terminator */
        size_t total = 0;
        for (;;) {
                char line[32];
                size_t l = 0;
                while (l < sizeof line - 1) {
                        ASSERT_EQ(recv(fd, line + l, 1, 0), 1);
                        if (l && line[l - 1] == '\r' && line[l] == '\n')
                                break;
                        l++;
                }
                line[l] = 0;
                size_t n = strtoul(line, NULL, 16);
                char buf[4096 + 2];
                size_t got = 0;
                while (got < n + 2) {
                        ssize_t k = recv(fd, buf + got, n + 2 - got, 0);
                        ASSERT(k > 0);
                        got += (size_t)k;
                }
                if (n == 0)
                        break;
                total += n;
        }
        ASSERT_EQ(total, 3 * 4096);
        /* the connection is still usable afterwards */
        xsends(fd, "GET /v1/health HTTP/1.1\r\n\r\n");
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        resp_release(&r);
        server_stop();
}

TEST(protocol_upgrade) {
        server_start();
        struct resp r;
        /* asked for: 101, then the socket is the handler's, early bytes included */
        {
                _cleanup_close_ int fd = xconnect();
                xsends(fd, "POST /v1/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo/1\r\n"
                           "Content-Length: 2\r\n\r\n{}early");
                char head[512] = "";
                size_t hl = 0;
                while (hl < 4 || memcmp(head + hl - 4, "\r\n\r\n", 4) != 0) { /* the head alone */
                        ASSERT(hl < sizeof head - 1);
                        ASSERT(recv(fd, head + hl, 1, 0) == 1);
                        hl++;
                }
                ASSERT(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
                ASSERT(strcasestr(head, "\r\nUpgrade: echo/1\r\n"));
                char buf[32] = "";
                size_t got = 0;
                while (got < 5) {
                        ssize_t n = recv(fd, buf + got, 5 - got, 0);
                        ASSERT(n > 0);
                        got += (size_t)n;
                }
                ASSERT(memcmp(buf, "early", 5) == 0);
                xsends(fd, "ping");
                got = 0;
                while (got < 4) {
                        ssize_t n = recv(fd, buf + got, 4 - got, 0);
                        ASSERT(n > 0);
                        got += (size_t)n;
                }
                ASSERT(memcmp(buf, "ping", 4) == 0);
                shutdown(fd, SHUT_WR);
                ASSERT(at_eof(fd));
        }
        /* not asked for: 426, and the handler's function never runs */
        roundtrip("POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", &r);
        ASSERT_EQ(r.status, 426);
        ASSERT_STREQ(err_code(&r), "upgrade_required");
        resp_release(&r);
        /* asked of a route that makes none: an answer, then the close */
        {
                _cleanup_close_ int fd = xconnect();
                xsends(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo/1\r\n\r\n"
                           "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
                read_resp(fd, &r);
                ASSERT_EQ(r.status, 200);
                ASSERT(strcasestr(r.head, "Connection: close"));
                ASSERT(at_eof(fd));
                resp_release(&r);
        }
        health_ok();
        server_stop();
}

TEST(conn_data) {
        server_start();
        atomic_store(&conn_data_freed, 0);
        {
                _cleanup_close_ int fd = xconnect();
                struct resp r;
                xsends(fd, "GET /v1/whoami HTTP/1.1\r\n\r\n");
                read_resp(fd, &r);
                ASSERT(json_is_null(json_object_get(r.json, "session")));
                resp_release(&r);
                xsends(fd, "POST /session/start HTTP/1.1\r\nX-Session: alpha\r\n\r\n");
                read_resp(fd, &r);
                ASSERT_EQ(r.status, 200);
                xsends(fd, "GET /v1/whoami HTTP/1.1\r\n\r\n");
                read_resp(fd, &r);
                ASSERT_STREQ(json_string_value(json_object_get(r.json, "session")), "alpha");
                resp_release(&r);
                /* another connection has its own slot */
                roundtrip("GET /v1/whoami HTTP/1.1\r\n\r\n", &r);
                ASSERT(json_is_null(json_object_get(r.json, "session")));
                resp_release(&r);
        }
        wait_connections(0);
        ASSERT_EQ(atomic_load(&conn_data_freed), 1);
        server_stop();
}

TEST(stop_with_open_connections) {
        server_start();
        int fds[5];
        for (int i = 0; i < 5; i++)
                fds[i] = xconnect();
        xsends(fds[0], "GET /v1/hea"); /* mid-head */
        wait_connections(5);
        int64_t t0 = now_ms();
        server_stop();
        ASSERT(now_ms() - t0 < 3000);
        for (int i = 0; i < 5; i++) {
                ASSERT(at_eof(fds[i]));
                close(fds[i]);
        }
}

/* A loopback TCP socket handed over (ntfs-ctl web): served with no Unix
 * socket at all, to this uid; closed by the server, also when never started. */
static int tcp_listener(uint16_t *port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof a;
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &al) < 0)
                FAIL("tcp listener: %s", strerror(errno));
        *port = ntohs(a.sin_port);
        return fd;
}

TEST(tcp_fd_handed_over) {
        make_router();
        uint16_t port;
        struct ntfs_http_config cfg = { .has_tcp_fd = true, .router = router };
        cfg.tcp_fd = tcp_listener(&port);
        ASSERT_OK(ntfs_http_server_new(&cfg, NULL, NULL, &srv));
        ASSERT_OK(ntfs_http_server_start(srv));
        struct stat st;
        ASSERT(lstat(sock_path, &st) < 0 && errno == ENOENT); /* no Unix socket made */
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a));
        struct timeval tv = { .tv_sec = 10 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        xsends(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
        struct resp r;
        read_resp(fd, &r);
        ASSERT_EQ(r.status, 200);
        resp_release(&r);
        pthread_mutex_lock(&peer_lock);
        ASSERT_EQ(last_peer.uid, getuid());
        pthread_mutex_unlock(&peer_lock);
        server_stop();
        _cleanup_close_ int again = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT(connect(again, (struct sockaddr *)&a, sizeof a) < 0); /* the listener is closed */
        /* with tcp_listen too, or a bad fd: refused, and the fd is the server's anyway */
        cfg.tcp_fd = tcp_listener(&port);
        cfg.tcp_listen = "127.0.0.1:1";
        ASSERT_EQ(ntfs_http_server_new(&cfg, NULL, NULL, &srv), -EINVAL);
        cfg.tcp_listen = NULL;
        cfg.tcp_fd = tcp_listener(&port);
        ASSERT_OK(ntfs_http_server_new(&cfg, NULL, NULL, &srv));
        server_stop(); /* never started: closes it */
        a.sin_port = htons(port);
        _cleanup_close_ int third = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT(connect(third, (struct sockaddr *)&a, sizeof a) < 0);
}

int main(void) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ntfs-http-XXXXXX");
        if (!mkdtemp(tmpdir))
                return 1;
        snprintf(sock_path, sizeof sock_path, "%.40s/ctl.sock", tmpdir);
        RUN(basic_get);
        RUN(keepalive_and_pipelining);
        RUN(http10);
        RUN(json_validation);
        RUN(malformed_request_line);
        RUN(malformed_json);
        RUN(oversize_body);
        RUN(oversize_headers);
        RUN(slowloris);
        RUN(slow_handler_does_not_block_others);
        RUN(idle_timeout);
        RUN(too_many_connections);
        RUN(client_disconnects_mid_request);
        RUN(concurrent_clients);
        RUN(not_found_and_method_not_allowed);
        RUN(peer_credentials);
        RUN(socket_mode);
        RUN(second_server_refused);
        RUN(stale_socket_replaced);
        RUN(expect_continue);
        RUN(streaming_response);
        RUN(protocol_upgrade);
        RUN(conn_data);
        RUN(stop_with_open_connections);
        RUN(tcp_fd_handed_over);
        ntfs_http_server_free(srv); /* a failed test may leave one running */
        ntfs_router_free(router);
        unlink(sock_path);
        rmdir(tmpdir);
        return tap_done();
}
