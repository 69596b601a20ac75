/* SPDX-License-Identifier: MIT
 * http.h — the control plane's HTTP/1.1 server on a Unix stream socket.
 *
 * Request parsing is nodejs/http-parser, JSON is jansson (docs/dependencies.md
 * says why). One thread accepts; each connection gets its own thread (at most
 * max_connections of them), so a slow request on one connection never blocks
 * another. Keep-alive, Content-Length and chunked request bodies, and
 * `Expect: 100-continue` are supported.
 *
 * Lifecycle:
 *   ntfs_http_server_new()   validates the config, copies it; nothing is bound.
 *   ntfs_http_server_start() binds and listens (mode 0600, or 0660 + chgrp when
 *                            a group is configured), returns once listening;
 *                            serves from its own threads from then on.
 *   ntfs_http_server_stop()  stops accepting, shuts every connection down, joins
 *                            every thread, removes the socket file it created.
 *                            Waits for handlers that are running to return.
 *   ntfs_http_server_free()  stops if needed and frees. Accepts NULL.
 *
 * Dispatch: with cfg->router set, the server looks the route up (404/405 on its
 * own), parses the JSON body unless the route has NTFS_ROUTE_RAW_BODY, and calls
 * the route's handler with the server's userdata. Without a router, `handler`
 * gets every request (JSON parsed unless cfg->raw_body).
 *
 * Every error the server itself produces has the shape
 *     {"error": {"code": "payload_too_large", "message": "..."}}
 * with these stable codes: bad_request (400), not_found (404),
 * method_not_allowed (405), request_timeout (408), length_required (411),
 * payload_too_large (413), expectation_failed (417),
 * upgrade_required (426), request_header_fields_too_large (431), internal (500),
 * too_many_connections (503).
 *
 * The sans-IO part (ntfs_http_conn) drives one connection's bytes through the
 * parser, the router and the handler and writes the responses to a sink; the
 * server wraps it around a socket, tests and the fuzzer drive it directly.
 */
#ifndef NTFS_CTL_HTTP_H
#define NTFS_CTL_HTTP_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ntfs_http_server ntfs_http_server;
typedef struct ntfs_http_request ntfs_http_request;
typedef struct ntfs_http_response ntfs_http_response;
typedef struct ntfs_http_stream ntfs_http_stream;
typedef struct ntfs_http_conn ntfs_http_conn;
typedef struct ntfs_router ntfs_router;

#define NTFS_HTTP_DEFAULT_MAX_HEADER (16u * 1024)
#define NTFS_HTTP_DEFAULT_MAX_BODY (8u * 1024 * 1024)
#define NTFS_HTTP_DEFAULT_MAX_CONNECTIONS 64u
#define NTFS_HTTP_DEFAULT_HEADER_TIMEOUT_MS 10000u
#define NTFS_HTTP_DEFAULT_BODY_TIMEOUT_MS 30000u
#define NTFS_HTTP_DEFAULT_IDLE_TIMEOUT_MS 60000u
#define NTFS_HTTP_DEFAULT_WRITE_TIMEOUT_MS 30000u
#define NTFS_HTTP_MAX_HEADERS 64

/* Handler: fill resp (ntfs_http_respond_*, ntfs_http_error) and return 0; or
 * return a negative error without touching resp and the server answers
 * ntfs_http_error(resp, err, ntfs_strerror(err)). Returning 0 with nothing set
 * answers 204. Runs on the connection's thread; handlers for different
 * connections run concurrently. */
typedef int (*ntfs_http_handler)(void *userdata, const ntfs_http_request *req, ntfs_http_response *resp);

struct ntfs_http_config {
        const char *socket_path;   /* copied; required unless has_tcp_fd (then NULL: TCP only) */
        gid_t group;               /* with has_group: mode 0660 and this group */
        bool has_group;
        size_t max_header_bytes;   /* request line + headers; 0 = 16 KiB */
        size_t max_body_bytes;     /* 0 = 8 MiB */
        unsigned max_connections;  /* 0 = 64; one more gets 503 and is closed */
        unsigned header_timeout_ms; /* first byte of a request to end of its head; 0 = 10 s */
        unsigned body_timeout_ms;   /* end of head to end of body; 0 = 30 s */
        unsigned idle_timeout_ms;   /* keep-alive wait for the next request; 0 = 60 s */
        unsigned write_timeout_ms;  /* a client that does not read its answer; 0 = 30 s */
        ntfs_router *router;        /* borrowed; must outlive the server; see above */
        bool raw_body;              /* without a router: never parse JSON */
        /* Also listen on this loopback TCP address ("127.0.0.1:7878",
         * "[::1]:7878"; NULL: no TCP). A connection is served only when the
         * uid owning its client socket (tcp-peer.h) is 0, the server's own,
         * or, with has_group, a member of group: who may open the Unix
         * socket. Others get 403 forbidden. The peer's pid is 0. */
        const char *tcp_listen;
        /* Or serve this listening loopback TCP socket (bound by the caller,
         * e.g. to port 0; the server owns it from ntfs_http_server_new() on,
         * also on failure), with the same uid check as tcp_listen. Not with
         * tcp_listen. (ntfs-ctl web: docs/web.md.) */
        bool has_tcp_fd;
        int tcp_fd;
        /* Called on the connection's thread when the connection ends and its
         * conn_data slot is non-NULL. */
        void (*conn_data_free)(void *userdata, void *conn_data);
};

struct ntfs_http_peer {
        pid_t pid;
        uid_t uid;
        gid_t gid;
};

struct ntfs_http_param {
        const char *name;
        const char *value; /* percent-decoded, NUL-terminated */
};

/* Everything here is borrowed and valid until the handler returns. */
struct ntfs_http_request {
        const char *method;   /* "GET", "POST", ... */
        const char *path;     /* percent-decoded, without query; starts with '/' */
        const char *raw_path; /* as sent, without query */
        const char *query;    /* raw query string without '?', "" when none */
        const char *body;     /* NUL-terminated copy; "" when empty */
        size_t body_len;
        json_t *json;         /* parsed object; NULL when the body is empty or raw */
        struct ntfs_http_peer peer;
        void **conn_data;     /* per-connection slot, starts NULL (see conn_data_free) */
        const char *route;    /* the matched pattern, or NULL */
        const struct ntfs_http_param *params; /* route captures */
        size_t n_params;
        int http_minor;       /* 0 or 1 */
        bool upgrade;         /* 'Connection: Upgrade' with an 'Upgrade' header */
        int fd;               /* the connection's socket, -1 without one (sans-IO): only
                               * to poll(2) for the client hanging up; never read or write it */
        const void *priv;
};

/* Header value by case-insensitive name (first occurrence), or NULL. */
const char *ntfs_http_request_header(const ntfs_http_request *req, const char *name);
/* Route capture by name, or NULL. */
const char *ntfs_http_request_param(const ntfs_http_request *req, const char *name);
/* Query parameter `key`, percent-decoded ('+' is a space) into buf.
 * Returns its length, -ENOENT when absent, -EINVAL on bad encoding,
 * -ENAMETOOLONG when it does not fit. "?flag" gives "". */
int ntfs_http_request_query(const ntfs_http_request *req, const char *key, char *buf, size_t len);

/* Response. Each respond call replaces what an earlier one set. */
/* Steals body (may be NULL: empty body). */
int ntfs_http_respond_json(ntfs_http_response *resp, int status, json_t *body);
/* Copies buf. */
int ntfs_http_respond_raw(ntfs_http_response *resp, int status, const char *content_type, const void *buf,
                          size_t len);
/* Streaming body with chunked transfer-encoding: after the head is sent, fn is
 * called once on the connection's thread and writes with
 * ntfs_http_stream_write(); returning < 0 cuts the connection (the client
 * sees an unterminated chunked body). ctx_free (may be NULL) runs afterwards
 * in every case, also when fn never runs. */
typedef int (*ntfs_http_stream_fn)(void *ctx, ntfs_http_stream *out);
int ntfs_http_respond_stream(ntfs_http_response *resp, int status, const char *content_type,
                             ntfs_http_stream_fn fn, void *ctx, void (*ctx_free)(void *ctx));
int ntfs_http_stream_write(ntfs_http_stream *out, const void *buf, size_t len);
/* Protocol upgrade: for a request with req->upgrade, the server answers
 * `101 Switching Protocols` with `Upgrade: protocol`, then calls fn once on
 * the connection's thread with the socket, which fn then owns both ways
 * (not closing it; it may be non-blocking: poll before reading and
 * writing) until it returns; pre/pre_len are bytes the client sent
 * after the request, already read. The connection ends when fn returns
 * (its result is only logged). A request without req->upgrade gets 426
 * upgrade_required instead (and fn never runs); so does a HEAD. ctx_free
 * as for a stream. An upgrade asked for and answered otherwise ends the
 * connection after the answer. */
typedef int (*ntfs_http_upgrade_fn)(void *ctx, int fd, const void *pre, size_t pre_len);
int ntfs_http_respond_upgrade(ntfs_http_response *resp, const char *protocol, ntfs_http_upgrade_fn fn, void *ctx,
                              void (*ctx_free)(void *ctx));
/* Adds a response header (copied; at most 16). -EINVAL on CR/LF in either. */
int ntfs_http_response_header(ntfs_http_response *resp, const char *name, const char *value);
/* Error response {"error":{"code": ntfs_errcode(err), "message": ...}} with
 * status ntfs_http_status(err). Returns err, so `return ntfs_http_error(...)`
 * reads well (the server sees the response set and sends it). */
int ntfs_http_error(ntfs_http_response *resp, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Same with an explicit status and code. Returns -NTFS_EBADREQ for 4xx and
 * -EIO otherwise. */
int ntfs_http_error_code(ntfs_http_response *resp, int status, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
int ntfs_http_response_status(const ntfs_http_response *resp);
/* "Not Found" for 404 etc.; "Unknown" for others. */
const char *ntfs_http_reason(int status);

/* The server. */
int ntfs_http_server_new(const struct ntfs_http_config *cfg, ntfs_http_handler handler, void *userdata,
                         ntfs_http_server **ret);
/* -NTFS_ESTOREBUSY when a live server listens on the path; -EEXIST when the
 * path exists and is not a socket; -ENAMETOOLONG; -errno. */
int ntfs_http_server_start(ntfs_http_server *srv);
void ntfs_http_server_stop(ntfs_http_server *srv);
void ntfs_http_server_free(ntfs_http_server *srv);
/* Connections being served now (for status endpoints and tests). */
unsigned ntfs_http_server_connections(ntfs_http_server *srv);

/* Sans-IO connection: feed bytes, responses go to write(). write() returns
 * 0 or a negative error (the connection is then dropped). Not thread-safe. */
typedef int (*ntfs_http_write_fn)(void *ctx, const void *buf, size_t len);
int ntfs_http_conn_new(const struct ntfs_http_config *cfg, ntfs_http_handler handler, void *userdata,
                       const struct ntfs_http_peer *peer, ntfs_http_write_fn write, void *write_ctx,
                       ntfs_http_conn **ret);
/* Returns 0 to go on reading, 1 when the connection must be closed (after
 * `Connection: close`, an error answered, or a failed write). */
int ntfs_http_conn_feed(ntfs_http_conn *c, const void *buf, size_t len);
enum ntfs_http_phase { NTFS_HTTP_IDLE, NTFS_HTTP_HEAD, NTFS_HTTP_BODY };
enum ntfs_http_phase ntfs_http_conn_phase(const ntfs_http_conn *c);
/* Answers the timeout of the current phase (408 in HEAD/BODY, nothing when
 * IDLE); the connection must then be closed. */
void ntfs_http_conn_timeout(ntfs_http_conn *c);
/* Calls conn_data_free if the slot is set. Accepts NULL. */
void ntfs_http_conn_free(ntfs_http_conn *c);

#endif
