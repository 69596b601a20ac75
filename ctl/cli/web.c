/* SPDX-License-Identifier: MIT
 * ntfs-ctl web: a local web interface for one store (docs/web.md).
 *
 * Serves on 127.0.0.1 only, through the project's HTTP server (ctl/http.c)
 * on a loopback TCP socket bound here (--port, default an ephemeral port),
 * whose connections are served only to this user and root (the uid check
 * of ctl/tcp-peer.c). Every request must also carry the random token of
 * the printed URL, in the query or in the cookie the first page sets.
 * The pages are embedded (ctl/web/, generated headers); /api/... is
 * forwarded to ntfsd's /v1/... over the control socket for a short list of
 * read-only routes and three safe POSTs (tag, fork, rollback). Each browser
 * connection has its own client of the control socket (a client is not
 * thread-safe; the server runs one thread per connection).
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "ctl/cli/cli.h"
#include "ctl/http.h"
#include "web-app-css.h"
#include "web-app-js.h"
#include "web-index-html.h"
#include "common/banned.h"

#define TOKEN_BYTES 16 /* 128 bits */
#define COOKIE_NAME "ntfs_web_token"
#define WEB_TIMEOUT_MS (60u * 1000)
#define MAX_API_PATH 4096

struct web {
        const char *socket;
        char token[TOKEN_BYTES * 2 + 1];
        char host_ip[32];        /* "127.0.0.1:PORT" */
        char host_name[32];      /* "localhost:PORT" */
};

/* ---- the token ---------------------------------------------------------- */

static int token_make(char *out, size_t len) {
        unsigned char b[TOKEN_BYTES];
        size_t got = 0;
        while (got < sizeof b) {
                ssize_t n = getrandom(b + got, sizeof b - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)n;
        }
        static const char hex[] = "0123456789abcdef";
        if (len < sizeof b * 2 + 1)
                return -ENAMETOOLONG;
        for (size_t i = 0; i < sizeof b; i++) {
                out[2 * i] = hex[b[i] >> 4];
                out[2 * i + 1] = hex[b[i] & 15];
        }
        out[sizeof b * 2] = '\0';
        return 0;
}

/* Compares in time independent of where the strings differ. */
static bool token_equal(const char *want, const char *got, size_t got_len) {
        size_t n = strlen(want);
        unsigned char d = got_len != n;
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)want[i] ^ (unsigned char)(i < got_len ? got[i] : 0);
        return d == 0;
}

/* The cookie's value from a Cookie header ("a=1; ntfs_web_token=..."). */
static bool cookie_token(const struct web *w, const char *cookies) {
        const char *p = cookies;
        while (p && *p) {
                while (*p == ' ' || *p == ';')
                        p++;
                const char *end = strchr(p, ';');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                size_t nl = strlen(COOKIE_NAME);
                if (len > nl && strncmp(p, COOKIE_NAME, nl) == 0 && p[nl] == '=' &&
                    token_equal(w->token, p + nl + 1, len - nl - 1))
                        return true;
                p = end;
        }
        return false;
}

/* 1: by the query's token=, 2: by the cookie, 0: neither. */
static int authorized(const struct web *w, const ntfs_http_request *req) {
        char q[128];
        int n = ntfs_http_request_query(req, "token", q, sizeof q);
        if (n >= 0 && token_equal(w->token, q, (size_t)n))
                return 1;
        const char *ck = ntfs_http_request_header(req, "Cookie");
        return ck && cookie_token(w, ck) ? 2 : 0;
}

/* ---- the pages ------------------------------------------------------------ */

static int security_headers(ntfs_http_response *resp) {
        int r;
        if ((r = ntfs_http_response_header(resp, "Cache-Control", "no-store")) < 0 ||
            (r = ntfs_http_response_header(resp, "X-Content-Type-Options", "nosniff")) < 0 ||
            (r = ntfs_http_response_header(resp, "Referrer-Policy", "no-referrer")) < 0 ||
            (r = ntfs_http_response_header(resp, "X-Frame-Options", "DENY")) < 0 ||
            (r = ntfs_http_response_header(resp, "Content-Security-Policy",
                                           "default-src 'none'; script-src 'self'; style-src 'self'; "
                                           "img-src 'self' blob: data:; connect-src 'self'; "
                                           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")) < 0)
                return r;
        return 0;
}

static int serve_static(const ntfs_http_request *req, ntfs_http_response *resp) {
        static const struct {
                const char *path, *type, *body;
        } files[] = {
                { "/", "text/html; charset=utf-8", ntfs_web_index_html },
                { "/index.html", "text/html; charset=utf-8", ntfs_web_index_html },
                { "/app.js", "text/javascript; charset=utf-8", ntfs_web_app_js },
                { "/app.css", "text/css; charset=utf-8", ntfs_web_app_css },
        };
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
                if (strcmp(req->path, files[i].path) == 0) {
                        if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
                                return ntfs_http_error_code(resp, 405, "method_not_allowed", "GET only");
                        return ntfs_http_respond_raw(resp, 200, files[i].type, files[i].body,
                                                     strlen(files[i].body));
                }
        return ntfs_http_error_code(resp, 404, "not_found", "no such page");
}

/* ---- /api/... forwarded to ntfsd ------------------------------------------ */

/* The forwarded routes: ntfsd's path below /v1, one segment each ("*" is a
 * name); docs/web.md lists them. GET routes are read-only; the POSTs are
 * the safe operations (a tag, a fork, a rollback, which the page confirms
 * first). Nothing else of the API is reachable from the browser. */
static const struct {
        const char *method;
        const char *segs[4];
} api_routes[] = {
        { "GET", { "status" } },
        { "GET", { "sessions" } },
        { "GET", { "sessions", "*" } },
        { "GET", { "sessions", "*", "log" } },
        { "GET", { "sessions", "*", "diff" } },
        { "GET", { "sessions", "*", "effects" } },
        { "GET", { "sessions", "*", "export" } },
        { "GET", { "sessions", "*", "snapshots" } },
        { "GET", { "tags" } },
        { "GET", { "mounts" } },
        { "GET", { "trunks" } },
        { "GET", { "trunks", "*" } },
        { "POST", { "sessions", "*", "tags" } },
        { "POST", { "sessions", "*", "fork" } },
        { "POST", { "sessions", "*", "rollback" } },
};

/* rest: the raw path after "/api/" (percent-encoded as sent: a %2F stays
 * inside its segment here and ntfsd refuses the name). */
static bool api_allowed(const char *method, const char *rest) {
        const char *segs[5];
        size_t lens[5];
        size_t n = 0;
        const char *p = rest;
        for (;;) {
                const char *sl = strchr(p, '/');
                size_t len = sl ? (size_t)(sl - p) : strlen(p);
                if (len == 0 || n == 5)
                        return false;
                segs[n] = p;
                lens[n++] = len;
                if (!sl)
                        break;
                p = sl + 1;
        }
        for (size_t i = 0; i < sizeof api_routes / sizeof api_routes[0]; i++) {
                if (strcmp(api_routes[i].method, method) != 0)
                        continue;
                size_t k = 0;
                while (k < 4 && api_routes[i].segs[k])
                        k++;
                if (k != n)
                        continue;
                bool ok = true;
                for (size_t j = 0; j < n && ok; j++) {
                        const char *want = api_routes[i].segs[j];
                        if (strcmp(want, "*") == 0)
                                ok = !(lens[j] == 1 && segs[j][0] == '.') &&
                                     !(lens[j] == 2 && segs[j][0] == '.' && segs[j][1] == '.');
                        else
                                ok = strlen(want) == lens[j] && strncmp(want, segs[j], lens[j]) == 0;
                }
                if (ok)
                        return true;
        }
        return false;
}

static void conn_client_free(void *userdata, void *conn_data) {
        (void)userdata;
        ntfs_client_free(conn_data);
}

static int forward(const struct web *w, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *rest = req->raw_path + strlen("/api/");
        bool post = strcmp(req->method, "POST") == 0;
        if (!api_allowed(req->method, rest))
                return ntfs_http_error_code(resp, 403, "forbidden",
                                            "ntfs-ctl web does not forward %s %s (docs/web.md lists what it does)",
                                            req->method, req->path);
        if (post) {
                /* A cross-site form cannot send JSON without a preflight,
                 * which this server never answers. */
                const char *ct = ntfs_http_request_header(req, "Content-Type");
                if (!ct || strncmp(ct, "application/json", 16) != 0)
                        return ntfs_http_error_code(resp, 415, "unsupported_media_type",
                                                    "a POST must be application/json");
        }
        char path[MAX_API_PATH];
        int n = snprintf(path, sizeof path, "/v1/%s%s%s", rest, *req->query ? "?" : "", req->query);
        if (n < 0 || (size_t)n >= sizeof path)
                return ntfs_http_error_code(resp, 414, "uri_too_long", "path too long");
        ntfs_client *cl = *req->conn_data;
        if (!cl) {
                int r = ntfs_client_new(w->socket, &cl);
                if (r < 0)
                        return ntfs_http_error(resp, r, "cannot make a client of ntfsd: %s", ntfs_strerror(r));
                ntfs_client_set_timeout(cl, WEB_TIMEOUT_MS);
                *req->conn_data = cl;
        }
        struct ntfs_client_response res = { 0 };
        int r = post ? ntfs_client_request_raw(cl, "POST", path, "application/json", req->body, req->body_len, &res)
                     : ntfs_client_request(cl, "GET", path, NULL, &res);
        if (r < 0) {
                ntfs_client_response_release(&res);
                return ntfs_http_error_code(resp, 502, "unreachable", "ntfsd at %s: %s", w->socket,
                                            ntfs_strerror(r));
        }
        const char *type = res.content_type[0] ? res.content_type : "application/octet-stream";
        r = ntfs_http_respond_raw(resp, (int)res.status, type, res.body, res.body_len);
        ntfs_client_response_release(&res);
        return r;
}

/* ---- the handler ------------------------------------------------------------ */

static int web_handler(void *userdata, const ntfs_http_request *req, ntfs_http_response *resp) {
        const struct web *w = userdata;
        int r = security_headers(resp);
        if (r < 0)
                return r;
        /* DNS rebinding: a page of another origin that resolves to
         * 127.0.0.1 sends its own Host. */
        const char *host = ntfs_http_request_header(req, "Host");
        if (!host || (strcmp(host, w->host_ip) != 0 && strcmp(host, w->host_name) != 0))
                return ntfs_http_error_code(resp, 403, "forbidden", "wrong Host");
        int how = authorized(w, req);
        if (!how)
                return ntfs_http_error_code(resp, 403, "forbidden",
                                            "a token is required: open the URL ntfs-ctl web printed");
        if (strncmp(req->raw_path, "/api/", 5) == 0)
                return forward(w, req, resp);
        r = serve_static(req, resp);
        if (r >= 0 && how == 1) {
                char ck[160];
                int n = snprintf(ck, sizeof ck, "%s=%s; Path=/; HttpOnly; SameSite=Strict", COOKIE_NAME, w->token);
                if (n < 0 || (size_t)n >= sizeof ck)
                        return -ENAMETOOLONG;
                r = ntfs_http_response_header(resp, "Set-Cookie", ck);
        }
        return r;
}

/* ---- the command -------------------------------------------------------------- */

/* A listening socket on 127.0.0.1:port (0: any free port); its port. */
static int listen_loopback(uint16_t port, int *ret_fd, uint16_t *ret_port) {
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &al) < 0)
                return -errno;
        *ret_port = ntohs(a.sin_port);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int cmd_web(struct ctx *c, const struct cmd *cmd, struct args *a) {
        uint64_t port = 0;
        const char *pf = flag(cmd, a, "port");
        if (pf) {
                int e = parse_num_flag(cmd, "--port", pf, 65535, &port);
                if (e)
                        return e;
        }
        /* The daemon must be there: the page has nothing else to show. */
        json_t *st = NULL;
        int e = call(c, "GET", "/v1/status", NULL, &st);
        json_decref(st);
        if (e)
                return e;

        struct web w = { .socket = c->socket };
        int r = token_make(w.token, sizeof w.token);
        if (r < 0)
                return fail(c, NULL, ntfs_errcode(r), "cannot make a token: %s", ntfs_strerror(r));
        int fd = -1;
        uint16_t bound = 0;
        r = listen_loopback((uint16_t)port, &fd, &bound);
        if (r < 0)
                return fail(c, NULL, ntfs_errcode(r), "cannot listen on 127.0.0.1:%u: %s", (unsigned)port,
                            ntfs_strerror(r));
        (void)snprintf(w.host_ip, sizeof w.host_ip, "127.0.0.1:%u", (unsigned)bound);
        (void)snprintf(w.host_name, sizeof w.host_name, "localhost:%u", (unsigned)bound);

        /* SIGINT and SIGTERM are taken by sigwait below; blocked before the
         * server's threads start so that none of them takes one. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        if ((r = pthread_sigmask(SIG_BLOCK, &set, NULL)) != 0) {
                close(fd);
                return fail(c, NULL, "internal", "pthread_sigmask: %s", strerror(r));
        }
        struct ntfs_http_config cfg = {
                .has_tcp_fd = true,
                .tcp_fd = fd, /* the server's from here on */
                .max_body_bytes = 64u * 1024,
                .conn_data_free = conn_client_free,
        };
        ntfs_http_server *srv = NULL;
        r = ntfs_http_server_new(&cfg, web_handler, &w, &srv);
        if (r >= 0)
                r = ntfs_http_server_start(srv);
        if (r < 0) {
                ntfs_http_server_free(srv);
                return fail(c, NULL, ntfs_errcode(r), "cannot serve: %s", ntfs_strerror(r));
        }
        char url[128];
        (void)snprintf(url, sizeof url, "http://%s/?token=%s", w.host_ip, w.token);
        if (c->json) {
                json_t *o = json_pack("{s:s, s:i, s:s}", "url", url, "port", (json_int_t)bound, "token", w.token);
                if (o)
                        print_json(o);
                json_decref(o);
        } else {
                printf("%s\n", url);
                fprintf(stderr, "ntfs-ctl web: serving the store of %s; Ctrl-C stops\n", c->socket);
        }
        fflush(stdout);
        int sig = 0;
        while (sigwait(&set, &sig) != 0)
                ;
        ntfs_http_server_free(srv);
        fprintf(stderr, "ntfs-ctl web: stopped (%s)\n", strsignal(sig));
        return 0;
}
