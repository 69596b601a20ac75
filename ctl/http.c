/* SPDX-License-Identifier: MIT
 * http.c — sans-IO connection (parser + dispatch + response writer) and the
 * threaded Unix-socket server around it. See http.h for the contract.
 */
#include "ctl/http.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/router.h"
#include "ctl/tcp-peer.h"
#include "common/banned.h"

#define MAX_EXTRA_HEADERS 16
#define INLINE_BODY_MAX (64u * 1024)

/* ---------------------------------------------------------------- response */

enum resp_kind { RESP_NONE, RESP_JSON, RESP_RAW, RESP_STREAM, RESP_UPGRADE };

struct ntfs_http_response {
        int status;
        enum resp_kind kind;
        json_t *json;
        char *raw;
        size_t raw_len;
        char content_type[128];
        ntfs_http_stream_fn stream_fn;
        ntfs_http_upgrade_fn upgrade_fn;
        char protocol[64]; /* RESP_UPGRADE */
        void *stream_ctx;
        void (*stream_ctx_free)(void *ctx);
        size_t n_extra;
        char *extra[MAX_EXTRA_HEADERS]; /* "Name: value" */
};

struct ntfs_http_stream {
        struct ntfs_http_conn *c;
        bool chunked;
        int err;
};

static void resp_clear_body(ntfs_http_response *r) {
        json_decref(r->json);
        r->json = NULL;
        free(r->raw);
        r->raw = NULL;
        r->raw_len = 0;
        if (r->stream_ctx_free)
                r->stream_ctx_free(r->stream_ctx);
        r->stream_fn = NULL;
        r->upgrade_fn = NULL;
        r->stream_ctx = NULL;
        r->stream_ctx_free = NULL;
        r->kind = RESP_NONE;
}

static void resp_release(ntfs_http_response *r) {
        resp_clear_body(r);
        for (size_t i = 0; i < r->n_extra; i++)
                free(r->extra[i]);
        r->n_extra = 0;
}

static bool status_valid(int status) {
        return status >= 200 && status <= 599;
}

static int set_content_type(ntfs_http_response *r, const char *ct) {
        if (!ct)
                ct = "application/octet-stream";
        if (strpbrk(ct, "\r\n") || strlen(ct) >= sizeof r->content_type)
                return -EINVAL;
        snprintf(r->content_type, sizeof r->content_type, "%s", ct);
        return 0;
}

int ntfs_http_respond_json(ntfs_http_response *resp, int status, json_t *body) {
        if (!status_valid(status)) {
                json_decref(body);
                return -EINVAL;
        }
        resp_clear_body(resp);
        resp->status = status;
        resp->kind = RESP_JSON;
        resp->json = body;
        snprintf(resp->content_type, sizeof resp->content_type, "application/json");
        return 0;
}

int ntfs_http_respond_raw(ntfs_http_response *resp, int status, const char *content_type, const void *buf,
                          size_t len) {
        if (!status_valid(status))
                return -EINVAL;
        char *copy = malloc(len ? len : 1);
        if (!copy)
                return -ENOMEM;
        if (len)
                memcpy(copy, buf, len);
        resp_clear_body(resp);
        int r = set_content_type(resp, content_type);
        if (r < 0) {
                free(copy);
                return r;
        }
        resp->status = status;
        resp->kind = RESP_RAW;
        resp->raw = copy;
        resp->raw_len = len;
        return 0;
}

int ntfs_http_respond_stream(ntfs_http_response *resp, int status, const char *content_type,
                             ntfs_http_stream_fn fn, void *ctx, void (*ctx_free)(void *ctx)) {
        if (!status_valid(status) || !fn) {
                if (ctx_free)
                        ctx_free(ctx);
                return -EINVAL;
        }
        resp_clear_body(resp);
        int r = set_content_type(resp, content_type);
        if (r < 0) {
                if (ctx_free)
                        ctx_free(ctx);
                return r;
        }
        resp->status = status;
        resp->kind = RESP_STREAM;
        resp->stream_fn = fn;
        resp->stream_ctx = ctx;
        resp->stream_ctx_free = ctx_free;
        return 0;
}

int ntfs_http_respond_upgrade(ntfs_http_response *resp, const char *protocol, ntfs_http_upgrade_fn fn, void *ctx,
                              void (*ctx_free)(void *ctx)) {
        if (!fn || !protocol || !*protocol || strlen(protocol) >= sizeof resp->protocol ||
            strpbrk(protocol, "\r\n,; ")) {
                if (ctx_free)
                        ctx_free(ctx);
                return -EINVAL;
        }
        resp_clear_body(resp);
        resp->status = 101;
        resp->kind = RESP_UPGRADE;
        snprintf(resp->protocol, sizeof resp->protocol, "%s", protocol);
        resp->upgrade_fn = fn;
        resp->stream_ctx = ctx;
        resp->stream_ctx_free = ctx_free;
        return 0;
}

int ntfs_http_response_header(ntfs_http_response *resp, const char *name, const char *value) {
        if (!name || !value || !*name || strpbrk(name, "\r\n: ") || strpbrk(value, "\r\n"))
                return -EINVAL;
        if (resp->n_extra >= MAX_EXTRA_HEADERS)
                return -E2BIG;
        char *h = NULL;
        if (asprintf(&h, "%s: %s", name, value) < 0)
                return -ENOMEM;
        resp->extra[resp->n_extra++] = h;
        return 0;
}

static json_t *error_body(const char *code, const char *msg) {
        return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
}

static int verror_code(ntfs_http_response *resp, int status, const char *code, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));
static int verror_code(ntfs_http_response *resp, int status, const char *code, const char *fmt, va_list ap) {
        char msg[512];
        vsnprintf(msg, sizeof msg, fmt, ap);
        json_t *j = error_body(code, msg);
        if (!j)
                return -ENOMEM;
        return ntfs_http_respond_json(resp, status, j);
}

int ntfs_http_error(ntfs_http_response *resp, int err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        (void)verror_code(resp, ntfs_http_status(err), ntfs_errcode(err), fmt, ap);
        va_end(ap);
        return err < 0 ? err : -err;
}

int ntfs_http_error_code(ntfs_http_response *resp, int status, const char *code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        (void)verror_code(resp, status, code, fmt, ap);
        va_end(ap);
        return status < 500 ? -NTFS_EBADREQ : -EIO;
}

int ntfs_http_response_status(const ntfs_http_response *resp) {
        return resp->kind == RESP_NONE ? 0 : resp->status;
}

const char *ntfs_http_reason(int status) {
        switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 201: return "Created";
        case 202: return "Accepted";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 413: return "Payload Too Large";
        case 417: return "Expectation Failed";
        case 422: return "Unprocessable Entity";
        case 426: return "Upgrade Required";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 507: return "Insufficient Storage";
        default: return "Unknown";
        }
}

/* ---------------------------------------------------------------- conn */

struct hdr {
        size_t name_off, val_off;
};

enum { CB_NONE, CB_FIELD, CB_VALUE };

struct ntfs_http_conn {
        struct ntfs_http_config cfg;
        ntfs_http_handler handler;
        void *userdata;
        struct ntfs_http_peer peer;
        ntfs_http_write_fn write;
        void *write_ctx;

        http_parser parser;
        /* request head: URL, names and values, each NUL-terminated */
        char *hbuf;
        size_t hlen, hcap;
        size_t url_off;
        bool url_done;
        struct hdr hdrs[NTFS_HTTP_MAX_HEADERS];
        size_t n_hdrs;
        int last_cb;
        char *body;
        size_t body_len, body_cap;

        enum ntfs_http_phase phase;
        unsigned phase_gen; /* bumped on each phase change (server timing) */
        bool complete;
        bool closing;
        bool write_failed;

        /* error found by a parser callback */
        int err_status;
        const char *err_code;
        char err_msg[160];

        void *conn_data;

        /* the socket (server connections; -1 in the sans-IO use) and the
         * bytes read past the request being dispatched, for an upgrade */
        int fd;
        const char *rest;
        size_t rest_len;
        int64_t t_begin; /* the request's first byte (monotonic ns) */
};

static void set_phase(ntfs_http_conn *c, enum ntfs_http_phase p) {
        if (c->phase != p) {
                c->phase = p;
                c->phase_gen++;
        }
}

static void cb_error(ntfs_http_conn *c, int status, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void cb_error(ntfs_http_conn *c, int status, const char *code, const char *fmt, ...) {
        if (c->err_status)
                return;
        c->err_status = status;
        c->err_code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err_msg, sizeof c->err_msg, fmt, ap);
        va_end(ap);
}

static int conn_write(ntfs_http_conn *c, const void *buf, size_t len) {
        if (c->write_failed)
                return -EPIPE;
        if (len == 0)
                return 0;
        int r = c->write(c->write_ctx, buf, len);
        if (r < 0) {
                c->write_failed = true;
                c->closing = true;
        }
        return r;
}

static int hb_append(ntfs_http_conn *c, const char *at, size_t len) {
        /* keep room for the terminating NULs of every piece */
        if (c->hlen + len + 2 > c->hcap) {
                cb_error(c, 431, "request_header_fields_too_large",
                         "request line and headers exceed %zu bytes", c->cfg.max_header_bytes);
                return -1;
        }
        memcpy(c->hbuf + c->hlen, at, len);
        c->hlen += len;
        return 0;
}

static int hb_term(ntfs_http_conn *c) {
        if (c->hlen + 1 > c->hcap) {
                cb_error(c, 431, "request_header_fields_too_large",
                         "request line and headers exceed %zu bytes", c->cfg.max_header_bytes);
                return -1;
        }
        c->hbuf[c->hlen++] = 0;
        return 0;
}

static void request_reset(ntfs_http_conn *c) {
        c->hlen = 0;
        c->url_off = 0;
        c->url_done = false;
        c->n_hdrs = 0;
        c->last_cb = CB_NONE;
        c->body_len = 0;
        c->complete = false;
}

static int on_message_begin(http_parser *p) {
        ntfs_http_conn *c = p->data;
        request_reset(c);
        set_phase(c, NTFS_HTTP_HEAD);
        c->t_begin = ntfs_mono_ns();
        return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
        ntfs_http_conn *c = p->data;
        return hb_append(c, at, len);
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
        ntfs_http_conn *c = p->data;
        if (c->last_cb != CB_FIELD) {
                if (!c->url_done) {
                        if (hb_term(c) < 0)
                                return -1;
                        c->url_done = true;
                } else if (hb_term(c) < 0) /* end of the previous value */
                        return -1;
                if (c->n_hdrs >= NTFS_HTTP_MAX_HEADERS) {
                        cb_error(c, 431, "request_header_fields_too_large", "more than %d header fields",
                                 NTFS_HTTP_MAX_HEADERS);
                        return -1;
                }
                c->hdrs[c->n_hdrs].name_off = c->hlen;
                c->hdrs[c->n_hdrs].val_off = SIZE_MAX;
                c->n_hdrs++;
                c->last_cb = CB_FIELD;
        }
        return hb_append(c, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
        ntfs_http_conn *c = p->data;
        if (c->last_cb != CB_VALUE) {
                if (c->last_cb != CB_FIELD || hb_term(c) < 0) /* end of the name */
                        return -1;
                c->hdrs[c->n_hdrs - 1].val_off = c->hlen;
                c->last_cb = CB_VALUE;
        }
        return hb_append(c, at, len);
}

static const char *conn_header(const ntfs_http_conn *c, const char *name) {
        for (size_t i = 0; i < c->n_hdrs; i++)
                if (c->hdrs[i].val_off != SIZE_MAX && strcasecmp(c->hbuf + c->hdrs[i].name_off, name) == 0)
                        return c->hbuf + c->hdrs[i].val_off;
        return NULL;
}

static int on_headers_complete(http_parser *p) {
        ntfs_http_conn *c = p->data;
        if (!c->url_done) {
                if (hb_term(c) < 0)
                        return -1;
                c->url_done = true;
        } else if (c->last_cb != CB_NONE && hb_term(c) < 0)
                return -1;
        /* a field without a value (http-parser allows "Name:\r\n") */
        for (size_t i = 0; i < c->n_hdrs; i++)
                if (c->hdrs[i].val_off == SIZE_MAX) {
                        if (hb_term(c) < 0)
                                return -1;
                        c->hdrs[i].val_off = c->hlen - 1;
                }
        set_phase(c, NTFS_HTTP_BODY);

        if (p->http_major != 1) {
                cb_error(c, 400, "bad_request", "unsupported HTTP version %u.%u", p->http_major,
                         p->http_minor);
                return -1;
        }
        if (p->method == HTTP_CONNECT) {
                cb_error(c, 400, "bad_request", "CONNECT is not supported");
                return -1;
        }
        bool has_body = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
        if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->cfg.max_body_bytes) {
                cb_error(c, 413, "payload_too_large", "request body of %llu bytes exceeds the limit of %zu",
                         (unsigned long long)p->content_length, c->cfg.max_body_bytes);
                return -1;
        }
        if (p->flags & F_CONTENTLENGTH && p->content_length > 0 && p->content_length > c->body_cap) {
                char *nb = realloc(c->body, (size_t)p->content_length + 1);
                if (!nb) {
                        cb_error(c, 503, "out_of_memory", "out of memory");
                        return -1;
                }
                c->body = nb;
                c->body_cap = (size_t)p->content_length + 1;
        }
        const char *expect = conn_header(c, "Expect");
        if (expect) {
                if (strcasecmp(expect, "100-continue") != 0) {
                        cb_error(c, 417, "expectation_failed", "unsupported Expect: %.64s", expect);
                        return -1;
                }
                if (has_body && p->http_minor >= 1) {
                        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                        if (conn_write(c, cont, sizeof cont - 1) < 0)
                                return -1;
                }
        }
        return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
        ntfs_http_conn *c = p->data;
        if (len > c->cfg.max_body_bytes - c->body_len) {
                cb_error(c, 413, "payload_too_large", "request body exceeds the limit of %zu bytes",
                         c->cfg.max_body_bytes);
                return -1;
        }
        if (c->body_len + len + 1 > c->body_cap) {
                size_t ncap = c->body_cap ? c->body_cap : 4096;
                while (ncap < c->body_len + len + 1)
                        ncap *= 2;
                ncap = NTFS_MIN(ncap, c->cfg.max_body_bytes + 1);
                char *nb = realloc(c->body, ncap);
                if (!nb) {
                        cb_error(c, 503, "out_of_memory", "out of memory");
                        return -1;
                }
                c->body = nb;
                c->body_cap = ncap;
        }
        memcpy(c->body + c->body_len, at, len);
        c->body_len += len;
        return 0;
}

static int on_message_complete(http_parser *p) {
        ntfs_http_conn *c = p->data;
        c->complete = true;
        http_parser_pause(p, 1);
        return 0;
}

static const http_parser_settings parser_settings = {
        .on_message_begin = on_message_begin,
        .on_url = on_url,
        .on_header_field = on_header_field,
        .on_header_value = on_header_value,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
};

static void config_defaults(struct ntfs_http_config *cfg) {
        if (!cfg->max_header_bytes)
                cfg->max_header_bytes = NTFS_HTTP_DEFAULT_MAX_HEADER;
        if (!cfg->max_body_bytes)
                cfg->max_body_bytes = NTFS_HTTP_DEFAULT_MAX_BODY;
        if (!cfg->max_connections)
                cfg->max_connections = NTFS_HTTP_DEFAULT_MAX_CONNECTIONS;
        if (!cfg->header_timeout_ms)
                cfg->header_timeout_ms = NTFS_HTTP_DEFAULT_HEADER_TIMEOUT_MS;
        if (!cfg->body_timeout_ms)
                cfg->body_timeout_ms = NTFS_HTTP_DEFAULT_BODY_TIMEOUT_MS;
        if (!cfg->idle_timeout_ms)
                cfg->idle_timeout_ms = NTFS_HTTP_DEFAULT_IDLE_TIMEOUT_MS;
        if (!cfg->write_timeout_ms)
                cfg->write_timeout_ms = NTFS_HTTP_DEFAULT_WRITE_TIMEOUT_MS;
}

int ntfs_http_conn_new(const struct ntfs_http_config *cfg, ntfs_http_handler handler, void *userdata,
                       const struct ntfs_http_peer *peer, ntfs_http_write_fn write, void *write_ctx,
                       ntfs_http_conn **ret) {
        if (!cfg || !write || (!handler && !cfg->router) || (handler && cfg->router))
                return -EINVAL;
        ntfs_http_conn *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->cfg = *cfg;
        c->cfg.socket_path = NULL; /* not ours to keep */
        config_defaults(&c->cfg);
        c->handler = handler;
        c->userdata = userdata;
        if (peer)
                c->peer = *peer;
        c->write = write;
        c->write_ctx = write_ctx;
        c->fd = -1;
        c->hcap = c->cfg.max_header_bytes + 2 * NTFS_HTTP_MAX_HEADERS + 4;
        c->hbuf = malloc(c->hcap);
        if (!c->hbuf) {
                free(c);
                return -ENOMEM;
        }
        http_parser_init(&c->parser, HTTP_REQUEST);
        c->parser.data = c;
        *ret = c;
        return 0;
}

void ntfs_http_conn_free(ntfs_http_conn *c) {
        if (!c)
                return;
        if (c->conn_data && c->cfg.conn_data_free)
                c->cfg.conn_data_free(c->userdata, c->conn_data);
        free(c->hbuf);
        free(c->body);
        free(c);
}

enum ntfs_http_phase ntfs_http_conn_phase(const ntfs_http_conn *c) {
        return c->phase;
}

/* 101, then the handler's function owns the socket; the connection ends
 * when it returns. */
static int send_upgrade(ntfs_http_conn *c, ntfs_http_response *resp) {
        char head[256];
        int n = snprintf(head, sizeof head, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                                            "Upgrade: %s\r\n\r\n", resp->protocol);
        c->closing = true;
        int r = conn_write(c, head, (size_t)n);
        if (r < 0)
                return r;
        r = resp->upgrade_fn(resp->stream_ctx, c->fd, c->rest, c->rest_len);
        c->rest_len = 0;
        return r;
}

/* Serializes and writes resp. keep_alive false adds Connection: close. */
static int send_response(ntfs_http_conn *c, ntfs_http_response *resp, bool keep_alive, bool head_only) {
        _cleanup_free_ char *jbuf = NULL;
        const char *body = NULL;
        size_t body_len = 0;
        int status = resp->status;
        bool http10 = c->parser.http_minor == 0;

        if (resp->kind == RESP_JSON && resp->json) {
                jbuf = json_dumps(resp->json, JSON_COMPACT);
                if (!jbuf) {
                        resp_clear_body(resp);
                        status = 500;
                        jbuf = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"cannot serialize response\"}}");
                        if (!jbuf)
                                return -ENOMEM;
                }
                size_t l = strlen(jbuf);
                char *nb = realloc(jbuf, l + 2);
                if (!nb)
                        return -ENOMEM;
                jbuf = nb;
                jbuf[l] = '\n';
                jbuf[l + 1] = 0;
                body = jbuf;
                body_len = l + 1;
        } else if (resp->kind == RESP_RAW) {
                body = resp->raw;
                body_len = resp->raw_len;
        }
        bool stream = resp->kind == RESP_STREAM;
        if (stream && http10) {
                keep_alive = false; /* no chunked for 1.0: the close ends the body */
                c->closing = true;
        }

        char head[4096];
        size_t hl = 0;
        int w = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n", status, ntfs_http_reason(status));
        hl += (size_t)w;
        if (status != 204 && (resp->kind != RESP_JSON || resp->json || jbuf)) {
                w = snprintf(head + hl, sizeof head - hl, "Content-Type: %s\r\n", resp->content_type);
                hl += (size_t)w;
        }
        if (stream) {
                if (!http10) {
                        w = snprintf(head + hl, sizeof head - hl, "Transfer-Encoding: chunked\r\n");
                        hl += (size_t)w;
                }
        } else if (status != 204) {
                w = snprintf(head + hl, sizeof head - hl, "Content-Length: %zu\r\n", body_len);
                hl += (size_t)w;
        }
        if (!keep_alive)
                w = snprintf(head + hl, sizeof head - hl, "Connection: close\r\n");
        else if (http10)
                w = snprintf(head + hl, sizeof head - hl, "Connection: keep-alive\r\n");
        else
                w = 0;
        hl += (size_t)w;
        for (size_t i = 0; i < resp->n_extra; i++) {
                w = snprintf(head + hl, sizeof head - hl, "%s\r\n", resp->extra[i]);
                if (w < 0 || (size_t)w >= sizeof head - hl - 3)
                        break;
                hl += (size_t)w;
        }
        hl += (size_t)snprintf(head + hl, sizeof head - hl, "\r\n");

        if (head_only || status == 204) {
                body = NULL;
                body_len = 0;
        }
        int r;
        if (body_len > 0 && body_len <= INLINE_BODY_MAX) {
                _cleanup_free_ char *all = malloc(hl + body_len);
                if (!all)
                        return -ENOMEM;
                memcpy(all, head, hl);
                memcpy(all + hl, body, body_len);
                r = conn_write(c, all, hl + body_len);
        } else {
                r = conn_write(c, head, hl);
                if (r >= 0 && body_len > 0)
                        r = conn_write(c, body, body_len);
        }
        if (r < 0)
                return r;
        if (stream && !head_only) {
                struct ntfs_http_stream out = { .c = c, .chunked = !http10 };
                r = resp->stream_fn(resp->stream_ctx, &out);
                if (r < 0 || out.err < 0) {
                        c->closing = true;
                        return r < 0 ? r : out.err;
                }
                if (!http10)
                        r = conn_write(c, "0\r\n\r\n", 5);
        }
        return r;
}

int ntfs_http_stream_write(ntfs_http_stream *out, const void *buf, size_t len) {
        if (out->err < 0)
                return out->err;
        if (len == 0)
                return 0;
        int r;
        if (out->chunked) {
                char hdr[32];
                int n = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
                r = conn_write(out->c, hdr, (size_t)n);
                if (r >= 0)
                        r = conn_write(out->c, buf, len);
                if (r >= 0)
                        r = conn_write(out->c, "\r\n", 2);
        } else
                r = conn_write(out->c, buf, len);
        if (r < 0)
                out->err = r;
        return r < 0 ? r : 0;
}

/* Every %XX of the query is two hex digits and none is %00. */
static bool query_encoding_valid(const char *q) {
        for (; *q; q++) {
                if (*q != '%')
                        continue;
                int hi = ntfs_hexval(q[1]), lo = hi < 0 ? -1 : ntfs_hexval(q[2]);
                if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                        return false;
                q += 2;
        }
        return true;
}

static void send_error(ntfs_http_conn *c, int status, const char *code, const char *msg) {
        ntfs_http_response resp = { 0 };
        json_t *j = error_body(code, msg);
        if (j && ntfs_http_respond_json(&resp, status, j) == 0)
                (void)send_response(c, &resp, false, false);
        resp_release(&resp);
        c->closing = true;
        if (c->t_begin) /* its one line, too (a refused head, a timeout) */
                ntfs_log_request(true, http_method_str((enum http_method)c->parser.method),
                                 c->hbuf && c->url_done ? c->hbuf + c->url_off : "-", status, c->t_begin);
}

void ntfs_http_conn_timeout(ntfs_http_conn *c) {
        if (c->phase == NTFS_HTTP_HEAD)
                send_error(c, 408, "request_timeout", "request head not received in time");
        else if (c->phase == NTFS_HTTP_BODY)
                send_error(c, 408, "request_timeout", "request body not received in time");
        c->closing = true;
}

static bool all_space(const char *s, size_t len) {
        for (size_t i = 0; i < len; i++)
                if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
                        return false;
        return true;
}

/* Handles the complete request in c; returns 1 when the connection must close. */
static int conn_dispatch(ntfs_http_conn *c) {
        http_parser *p = &c->parser;
        bool keep_alive = http_should_keep_alive(p) != 0;
        const char *method = http_method_str((enum http_method)p->method);
        char *url = c->hbuf + c->url_off;
        ntfs_http_response resp = { 0 };
        struct ntfs_route_match *m = NULL;
        _cleanup_free_ char *path = NULL;
        json_t *json = NULL;
        int r;

        if (c->body)
                c->body[c->body_len] = 0;
        set_phase(c, NTFS_HTTP_IDLE);
        ntfs_log_ctx_request(ntfs_log_next_request_id());

        /* origin-form only: "/path?query#fragment" */
        if (url[0] != '/') {
                send_error(c, 400, "bad_request", "request target must start with '/'");
                return 1;
        }
        char *frag = strchr(url, '#');
        if (frag)
                *frag = 0;
        const char *query = "";
        char *q = strchr(url, '?');
        if (q) {
                *q = 0;
                query = q + 1;
        }
        size_t ulen = strlen(url);
        path = malloc(ulen + 1);
        if (!path) {
                send_error(c, 503, "out_of_memory", "out of memory");
                return 1;
        }
        if (ntfs_http_percent_decode(url, ulen, path, ulen + 1, false) < 0) {
                send_error(c, 400, "bad_request", "malformed percent-encoding in the path");
                return 1;
        }
        /* The query is checked whole, here, so that no handler can take a
         * parameter it cannot decode (%zz, %00) for an absent one. */
        if (!query_encoding_valid(query)) {
                send_error(c, 400, "bad_request", "malformed percent-encoding (or %00) in the query");
                return 1;
        }

        ntfs_http_request req = {
                .method = method,
                .path = path,
                .raw_path = url,
                .query = query,
                .body = c->body ? c->body : "",
                .body_len = c->body_len,
                .peer = c->peer,
                .conn_data = &c->conn_data,
                .http_minor = p->http_minor,
                .upgrade = p->upgrade != 0,
                .fd = c->fd,
                .priv = c,
        };
        ntfs_http_handler handler = c->handler;
        bool raw = c->cfg.raw_body;
        if (c->cfg.router) {
                m = malloc(sizeof *m);
                if (!m) {
                        send_error(c, 503, "out_of_memory", "out of memory");
                        return 1;
                }
                char allow[128];
                r = ntfs_router_lookup(c->cfg.router, method, url, m, allow, sizeof allow);
                if (r == -NTFS_ENOTFOUND) {
                        ntfs_http_error_code(&resp, 404, "not_found", "no route for %s %.200s", method, path);
                        goto send;
                } else if (r == -EOPNOTSUPP) {
                        ntfs_http_error_code(&resp, 405, "method_not_allowed", "%s is not allowed on %.200s; use %s",
                                             method, path, allow);
                        (void)ntfs_http_response_header(&resp, "Allow", allow);
                        goto send;
                } else if (r < 0) {
                        ntfs_http_error_code(&resp, 400, "bad_request", "malformed path parameter: %s",
                                             r == -ENAMETOOLONG ? "too long" : "bad percent-encoding");
                        goto send;
                }
                handler = m->handler;
                raw = (m->flags & NTFS_ROUTE_RAW_BODY) != 0;
                req.route = m->pattern;
                req.params = m->params;
                req.n_params = m->n_params;
                ntfs_log_ctx_session(ntfs_http_request_param(&req, ntfs_router_session_param(m->pattern)));
        }
        if (!raw && c->body_len > 0 && !all_space(c->body, c->body_len)) {
                json_error_t jerr;
                json = json_loadb(c->body, c->body_len, JSON_REJECT_DUPLICATES, &jerr);
                if (!json) {
                        ntfs_http_error_code(&resp, 400, "bad_request", "invalid JSON body: %s (line %d, column %d)",
                                             jerr.text, jerr.line, jerr.column);
                        goto send;
                }
                if (!json_is_object(json)) {
                        ntfs_http_error_code(&resp, 400, "bad_request", "the JSON body must be an object");
                        goto send;
                }
                req.json = json;
                if (json_is_string(json_object_get(json, "session")) && !ntfs_http_request_param(&req, "session"))
                        ntfs_log_ctx_session(json_string_value(json_object_get(json, "session")));
        }
        r = handler(c->userdata, &req, &resp);
        if (resp.kind == RESP_UPGRADE && (!req.upgrade || c->fd < 0 || p->method == HTTP_HEAD)) {
                resp_clear_body(&resp);
                if (!req.upgrade)
                        ntfs_http_error_code(&resp, 426, "upgrade_required",
                                             "this route needs 'Connection: Upgrade' and 'Upgrade: %s'",
                                             resp.protocol);
                else
                        ntfs_http_error_code(&resp, 501, "internal", "no socket to upgrade");
                (void)ntfs_http_response_header(&resp, "Upgrade", resp.protocol);
        }
        /* An upgrade asked for and not made: the connection's further bytes
         * may be of the other protocol, so it ends with this answer. */
        if (req.upgrade && resp.kind != RESP_UPGRADE)
                keep_alive = false;
        if (resp.kind == RESP_NONE) {
                if (r < 0)
                        ntfs_http_error(&resp, r, "%s", ntfs_strerror(r));
                else {
                        resp.status = 204;
                        resp.kind = RESP_RAW;
                }
        }
send:
        if (resp.kind == RESP_UPGRADE)
                r = send_upgrade(c, &resp);
        else
                r = send_response(c, &resp, keep_alive, p->method == HTTP_HEAD);
        ntfs_log_request(false, method, path, resp.kind == RESP_UPGRADE ? 101 : resp.status, c->t_begin);
        resp_release(&resp);
        json_decref(json);
        free(m);
        request_reset(c);
        if (r < 0 || !keep_alive || c->closing) {
                c->closing = true;
                return 1;
        }
        return 0;
}

int ntfs_http_conn_feed(ntfs_http_conn *c, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0 && !c->closing) {
                size_t n = http_parser_execute(&c->parser, &parser_settings, p, len);
                enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
                if (e == HPE_PAUSED) {
                        http_parser_pause(&c->parser, 0);
                        p += n;
                        len -= NTFS_MIN(n, len);
                        c->rest = p;
                        c->rest_len = len;
                        if (c->complete && conn_dispatch(c))
                                return 1;
                        continue;
                }
                if (e != HPE_OK) {
                        if (c->write_failed) {
                                c->closing = true;
                                return 1;
                        }
                        if (c->err_status) {
                                send_error(c, c->err_status, c->err_code, c->err_msg);
                        } else if (e == HPE_HEADER_OVERFLOW) {
                                send_error(c, 431, "request_header_fields_too_large",
                                           "request line and headers are too large");
                        } else {
                                char msg[160];
                                snprintf(msg, sizeof msg, "malformed request: %s",
                                         http_errno_description(e));
                                send_error(c, 400, "bad_request", msg);
                        }
                        return 1;
                }
                if (n == 0)
                        break;
                p += n;
                len -= NTFS_MIN(n, len);
        }
        return c->closing ? 1 : 0;
}

/* ---------------------------------------------------------------- request helpers */

const char *ntfs_http_request_header(const ntfs_http_request *req, const char *name) {
        return conn_header(req->priv, name);
}

const char *ntfs_http_request_param(const ntfs_http_request *req, const char *name) {
        for (size_t i = 0; i < req->n_params; i++)
                if (strcmp(req->params[i].name, name) == 0)
                        return req->params[i].value;
        return NULL;
}

int ntfs_http_request_query(const ntfs_http_request *req, const char *key, char *buf, size_t len) {
        size_t klen = strlen(key);
        const char *s = req->query;
        while (*s) {
                size_t l = strcspn(s, "&;");
                size_t kl = strcspn(s, "=&;");
                if (kl == klen && memcmp(s, key, klen) == 0) {
                        if (kl == l) {
                                if (len == 0)
                                        return -ENAMETOOLONG;
                                buf[0] = 0;
                                return 0;
                        }
                        return ntfs_http_percent_decode(s + kl + 1, l - kl - 1, buf, len, true);
                }
                s += l;
                if (*s)
                        s++;
        }
        return -ENOENT;
}

/* ---------------------------------------------------------------- server */

struct conn_rec {
        struct ntfs_http_server *srv;
        int fd;
        pthread_t thread;
        bool done;
        struct ntfs_http_peer peer;
        struct conn_rec *next;
};

struct ntfs_http_server {
        struct ntfs_http_config cfg;
        char *path;
        ntfs_http_handler handler;
        void *userdata;
        int listen_fd;
        int tcp_fd; /* cfg.tcp_listen, or -1 */
        int wake[2];
        pthread_t accept_thread;
        bool started;
        atomic_bool stopping;
        pthread_mutex_t lock;
        struct conn_rec *conns;
        unsigned n_active;
        dev_t dev;
        ino_t ino;
};

int ntfs_http_server_new(const struct ntfs_http_config *cfg, ntfs_http_handler handler, void *userdata,
                         ntfs_http_server **ret) {
        _cleanup_close_ int given_fd = cfg && cfg->has_tcp_fd ? cfg->tcp_fd : -1;
        if (!cfg || (cfg->has_tcp_fd ? given_fd < 0 || cfg->tcp_listen : !cfg->socket_path) ||
            (cfg->socket_path && !*cfg->socket_path) || (!handler && !cfg->router) || (handler && cfg->router))
                return -EINVAL;
        struct sockaddr_un sa;
        if (cfg->socket_path && strlen(cfg->socket_path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        ntfs_http_server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->cfg = *cfg;
        config_defaults(&s->cfg);
        s->path = cfg->socket_path ? strdup(cfg->socket_path) : NULL;
        if (cfg->socket_path && !s->path) {
                free(s);
                return -ENOMEM;
        }
        s->cfg.socket_path = s->path;
        if (cfg->tcp_listen) {
                struct sockaddr_storage a;
                socklen_t al;
                int r = ntfs_tcp_parse_listen(cfg->tcp_listen, &a, &al);
                if (r < 0 || !(s->cfg.tcp_listen = strdup(cfg->tcp_listen))) {
                        free(s->path);
                        free(s);
                        return r < 0 ? r : -ENOMEM;
                }
        }
        s->handler = handler;
        s->userdata = userdata;
        s->listen_fd = -1;
        s->tcp_fd = TAKE_FD(given_fd);
        s->wake[0] = s->wake[1] = -1;
        pthread_mutex_init(&s->lock, NULL);
        *ret = s;
        return 0;
}

static int64_t mono_ms(void) {
        return ntfs_mono_ns() / 1000000;
}

static void wake_acceptor(ntfs_http_server *s) {
        char b = 1;
        ssize_t n;
        do
                n = write(s->wake[1], &b, 1);
        while (n < 0 && errno == EINTR);
        /* EAGAIN: a wake-up is already pending, which is all we need */
}

struct sock_sink {
        int fd;
        unsigned timeout_ms;
        ntfs_http_server *srv;
};

static int sock_write(void *ctx, const void *buf, size_t len) {
        struct sock_sink *k = ctx;
        const char *p = buf;
        int64_t deadline = mono_ms() + k->timeout_ms;
        while (len > 0) {
                ssize_t n = send(k->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n >= 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                        return -errno;
                int64_t left = deadline - mono_ms();
                if (left <= 0 || atomic_load(&k->srv->stopping))
                        return -ETIMEDOUT;
                struct pollfd pfd = { .fd = k->fd, .events = POLLOUT };
                int pr = poll(&pfd, 1, (int)NTFS_MIN(left, 1000));
                if (pr < 0 && errno != EINTR)
                        return -errno;
        }
        return 0;
}

/* After an error answer, the client may still be sending the body we refused
 * (curl with a 20 MiB POST). Closing now would make its send() fail with
 * EPIPE before it reads our answer; so stop writing, and read and discard
 * for a bounded time and amount (a "lingering close", as web servers do). */
static void drain(ntfs_http_server *s, int fd, char *buf, size_t len) {
        (void)shutdown(fd, SHUT_WR);
        int64_t deadline = mono_ms() + 2000;
        size_t budget = NTFS_MAX(s->cfg.max_body_bytes, (size_t)64 << 20);
        while (budget > 0 && !atomic_load(&s->stopping)) {
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        break;
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int pr = poll(&pfd, 1, (int)NTFS_MIN(left, 500));
                if (pr < 0 && errno != EINTR)
                        break;
                if (pr <= 0)
                        continue;
                ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
                if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                        continue;
                if (n <= 0)
                        break;
                budget -= NTFS_MIN((size_t)n, budget);
        }
}

static void *conn_thread(void *arg) {
        struct conn_rec *rec = arg;
        ntfs_http_server *s = rec->srv;
        struct sock_sink sink = { .fd = rec->fd, .timeout_ms = s->cfg.write_timeout_ms, .srv = s };
        ntfs_http_conn *c = NULL;
        int r = ntfs_http_conn_new(&s->cfg, s->handler, s->userdata, &rec->peer, sock_write, &sink, &c);
        if (r == 0) {
                c->fd = rec->fd;
                char buf[16384];
                bool linger = false;
                unsigned gen = c->phase_gen;
                int64_t phase_start = mono_ms();
                for (;;) {
                        if (atomic_load(&s->stopping))
                                break;
                        if (c->phase_gen != gen) {
                                gen = c->phase_gen;
                                phase_start = mono_ms();
                        }
                        unsigned limit = c->phase == NTFS_HTTP_HEAD   ? s->cfg.header_timeout_ms
                                         : c->phase == NTFS_HTTP_BODY ? s->cfg.body_timeout_ms
                                                                      : s->cfg.idle_timeout_ms;
                        int64_t left = phase_start + limit - mono_ms();
                        if (left <= 0) {
                                ntfs_http_conn_timeout(c);
                                break;
                        }
                        struct pollfd pfd = { .fd = rec->fd, .events = POLLIN };
                        int pr = poll(&pfd, 1, (int)NTFS_MIN(left, 1000));
                        if (pr < 0 && errno != EINTR)
                                break;
                        if (pr <= 0)
                                continue;
                        ssize_t n = recv(rec->fd, buf, sizeof buf, MSG_DONTWAIT);
                        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                                continue;
                        if (n <= 0)
                                break; /* EOF or error: the client is gone */
                        if (c->phase == NTFS_HTTP_IDLE)
                                phase_start = mono_ms(); /* keep-alive idle restarts on activity */
                        if (ntfs_http_conn_feed(c, buf, (size_t)n)) {
                                linger = !c->write_failed;
                                break;
                        }
                }
                if (linger)
                        drain(s, rec->fd, buf, sizeof buf);
                ntfs_http_conn_free(c);
        }
        (void)shutdown(rec->fd, SHUT_RDWR);
        pthread_mutex_lock(&s->lock);
        rec->done = true;
        s->n_active--;
        pthread_mutex_unlock(&s->lock);
        wake_acceptor(s);
        return NULL;
}

static void reap(ntfs_http_server *s, bool all) {
        struct conn_rec *dead = NULL;
        pthread_mutex_lock(&s->lock);
        for (struct conn_rec **pp = &s->conns; *pp;) {
                struct conn_rec *rec = *pp;
                if (all || rec->done) {
                        *pp = rec->next;
                        rec->next = dead;
                        dead = rec;
                } else
                        pp = &rec->next;
        }
        pthread_mutex_unlock(&s->lock);
        while (dead) {
                struct conn_rec *rec = dead;
                dead = rec->next;
                pthread_join(rec->thread, NULL);
                close(rec->fd);
                free(rec);
        }
}

/* Answers an error on a connection we will not serve, without blocking. */
static void reject(int fd, int status, const char *code, const char *msg) {
        json_t *j = error_body(code, msg);
        char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (body) {
                char buf[512];
                int n = snprintf(buf, sizeof buf,
                                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                 "Connection: close\r\n\r\n%s\n",
                                 status, ntfs_http_reason(status), strlen(body) + 1, body);
                if (n > 0 && (size_t)n < sizeof buf) {
                        ssize_t w;
                        do
                                w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
                        while (w < 0 && errno == EINTR);
                }
                free(body);
        }
        (void)shutdown(fd, SHUT_WR);
        /* Read what the client sends: closing a Unix socket with unread
         * data resets the peer (ECONNRESET), and a send after the close
         * fails (EPIPE); either way the client would miss the answer above
         * and could not tell that its request was never taken. A client
         * sends at once after connecting: its request is waited for 10 ms
         * at most. */
        char sink[4096];
        struct pollfd pf = { fd, POLLIN, 0 };
        if (poll(&pf, 1, 10) > 0)
                for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
                        ;
        close(fd);
}

/* Takes an accepted connection: its peer's credentials, then a thread of
 * its own. Closes fd on every refusal. */
static void take_conn(ntfs_http_server *s, int fd, bool tcp) {
        /* Streamed responses (archive export) go out in 256 KiB writes:
         * a send buffer of several of them lets the handler run ahead of
         * the reader instead of waking up every ~100 KiB (capped by
         * net.core.wmem_max; failure is harmless). */
        int sndbuf = 4 << 20;
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        struct ntfs_http_peer peer = { 0 };
        if (tcp) {
                uid_t uid = 0;
                int r = ntfs_tcp_peer_uid(fd, &uid);
                if (r < 0 || !ntfs_tcp_uid_allowed(uid, s->cfg.has_group, s->cfg.group)) {
                        if (r < 0)
                                log_warn("http: the TCP client's user is unknown (%s): refused", ntfs_strerror(r));
                        reject(fd, 403, "forbidden",
                               "this listener serves only the users who may open the daemon's socket");
                        return;
                }
                peer = (struct ntfs_http_peer){ .pid = 0, .uid = uid, .gid = (gid_t)-1 };
                int one = 1;
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        } else {
                struct ucred uc;
                socklen_t ul = sizeof uc;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0) {
                        close(fd);
                        return;
                }
                peer = (struct ntfs_http_peer){ .pid = uc.pid, .uid = uc.uid, .gid = uc.gid };
        }
        pthread_mutex_lock(&s->lock);
        bool full = s->n_active >= s->cfg.max_connections;
        pthread_mutex_unlock(&s->lock);
        if (full) {
                reject(fd, 503, "too_many_connections", "too many connections; try again later");
                return;
        }
        struct conn_rec *rec = calloc(1, sizeof *rec);
        if (!rec) {
                reject(fd, 503, "out_of_memory", "out of memory");
                return;
        }
        rec->srv = s;
        rec->fd = fd;
        rec->peer = peer;
        pthread_mutex_lock(&s->lock);
        if (pthread_create(&rec->thread, NULL, conn_thread, rec) != 0) {
                pthread_mutex_unlock(&s->lock);
                free(rec);
                reject(fd, 503, "too_many_connections", "cannot start a connection thread");
                return;
        }
        s->n_active++;
        rec->next = s->conns;
        s->conns = rec;
        pthread_mutex_unlock(&s->lock);
}

static void *accept_thread(void *arg) {
        ntfs_http_server *s = arg;
        for (;;) {
                struct pollfd pfd[3] = {
                        { .fd = s->listen_fd, .events = POLLIN },
                        { .fd = s->wake[0], .events = POLLIN },
                        { .fd = s->tcp_fd, .events = POLLIN }, /* -1: ignored */
                };
                int pr = poll(pfd, 3, -1);
                if (pr < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (pfd[1].revents) {
                        char b[64];
                        while (read(s->wake[0], b, sizeof b) > 0)
                                ;
                        if (atomic_load(&s->stopping))
                                break;
                        reap(s, false);
                }
                for (int l = 0; l < 3; l += 2) {
                        if (!(pfd[l].revents & POLLIN))
                                continue;
                        int fd = accept4(pfd[l].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                        if (fd < 0) {
                                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                        reap(s, false);
                                        struct timespec ts = { 0, 20 * 1000 * 1000 };
                                        nanosleep(&ts, NULL);
                                }
                                continue;
                        }
                        take_conn(s, fd, l == 2);
                }
        }
        return NULL;
}

/* Removes a socket file nobody listens on; -NTFS_ESTOREBUSY when somebody does. */
static int clear_stale(const char *path) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -EEXIST;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int r;
        do
                r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return -NTFS_ESTOREBUSY;
        if (errno == EAGAIN)
                return -NTFS_ESTOREBUSY; /* listening, backlog full */
        if (errno != ECONNREFUSED)
                return -errno;
        if (unlink(path) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

static void close_reset(int *fd) {
        ntfs_closep(fd);
        *fd = -1;
}

/* Starts the accept thread; on failure closes the listeners and the wake pipe. */
static int start_acceptor(ntfs_http_server *s) {
        atomic_store(&s->stopping, false);
        int r = pthread_create(&s->accept_thread, NULL, accept_thread, s);
        if (r != 0) {
                close_reset(&s->listen_fd);
                close_reset(&s->tcp_fd);
                close_reset(&s->wake[0]);
                close_reset(&s->wake[1]);
                return -r;
        }
        s->started = true;
        return 0;
}

int ntfs_http_server_start(ntfs_http_server *s) {
        if (s->started)
                return -EALREADY;
        if (!s->path) { /* TCP only, on the socket handed over */
                if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0)
                        return -errno;
                return start_acceptor(s);
        }
        int r = clear_stale(s->path);
        if (r < 0)
                return r;
        mode_t mode = s->cfg.has_group ? 0660 : 0600;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* Linux creates the socket file with the socket inode's mode (minus
         * umask): narrow it before bind so the file is never wider. */
        (void)fchmod(fd, mode);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                return errno == EADDRINUSE ? -NTFS_ESTOREBUSY : -errno;
        struct stat st;
        if ((s->cfg.has_group && chown(s->path, (uid_t)-1, s->cfg.group) < 0) || chmod(s->path, mode) < 0 ||
            lstat(s->path, &st) < 0) {
                r = -errno;
                unlink(s->path);
                return r;
        }
        s->dev = st.st_dev;
        s->ino = st.st_ino;
        if (listen(fd, 128) < 0 || pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = -errno;
                unlink(s->path);
                return r;
        }
        if (s->cfg.tcp_listen && (r = ntfs_tcp_listen(s->cfg.tcp_listen, &s->tcp_fd)) < 0) {
                close_reset(&s->wake[0]);
                close_reset(&s->wake[1]);
                unlink(s->path);
                return r;
        }
        s->listen_fd = TAKE_FD(fd);
        r = start_acceptor(s);
        if (r < 0)
                unlink(s->path);
        return r;
}

void ntfs_http_server_stop(ntfs_http_server *s) {
        if (!s || !s->started)
                return;
        atomic_store(&s->stopping, true);
        wake_acceptor(s);
        pthread_join(s->accept_thread, NULL);
        close_reset(&s->listen_fd);
        close_reset(&s->tcp_fd);
        /* remove our socket file (not a successor's) */
        struct stat st;
        if (s->path && lstat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
                unlink(s->path);
        pthread_mutex_lock(&s->lock);
        for (struct conn_rec *rec = s->conns; rec; rec = rec->next)
                if (!rec->done)
                        (void)shutdown(rec->fd, SHUT_RDWR);
        pthread_mutex_unlock(&s->lock);
        reap(s, true);
        close_reset(&s->wake[0]);
        close_reset(&s->wake[1]);
        s->started = false;
}

void ntfs_http_server_free(ntfs_http_server *s) {
        if (!s)
                return;
        ntfs_http_server_stop(s);
        close_reset(&s->tcp_fd); /* handed over, never started */
        pthread_mutex_destroy(&s->lock);
        free(s->path);
        free((char *)s->cfg.tcp_listen);
        free(s);
}

unsigned ntfs_http_server_connections(ntfs_http_server *s) {
        pthread_mutex_lock(&s->lock);
        unsigned n = s->n_active;
        pthread_mutex_unlock(&s->lock);
        return n;
}
