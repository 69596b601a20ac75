/* SPDX-License-Identifier: MIT
 * fuzz_http.c — libFuzzer target for the control plane's request path:
 * bytes -> http-parser -> path/percent decoding -> router -> JSON body
 * parsing -> jsonutil validation -> response serialization, all through the
 * sans-IO ntfs_http_conn (no sockets, no threads).
 *
 * Input: the first byte chooses how the rest is cut into feeds (0: all at
 * once; n: pieces of n bytes), so split points in the parser are exercised.
 * Built with -fsanitize=fuzzer when meson's `fuzz` option is true; the same
 * entry point replays tests/fuzz/http/ in the normal test run
 * (tests/unit/test_http_fuzz_replay.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ctl/http.h"
#include "ctl/jsonutil.h"
#include "ctl/router.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct out {
        size_t len;
        size_t n_writes;
        char first[16];
};

static int sink(void *ctx, const void *buf, size_t len) {
        struct out *o = ctx;
        if (o->len < sizeof o->first) {
                size_t n = len < sizeof o->first - o->len ? len : sizeof o->first - o->len;
                memcpy(o->first + o->len, buf, n);
        }
        o->len += len;
        o->n_writes++;
        return 0;
}

static int h_health(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

struct new_args {
        const char *name;
        const char *from;
        bool ro;
        int64_t steps;
        json_t *labels;
};

static int h_new(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const struct ntfs_json_field fields[] = {
                NTFS_JSON_FIELD(struct new_args, name, "name", NTFS_JSON_NAME, NTFS_JSON_REQUIRED),
                NTFS_JSON_MAXLEN(struct new_args, from, "from", NTFS_JSON_STR, NTFS_JSON_NULLABLE, 64),
                NTFS_JSON_FIELD(struct new_args, ro, "ro", NTFS_JSON_BOOL, 0),
                NTFS_JSON_RANGE(struct new_args, steps, "steps", 0, 1, 100),
                NTFS_JSON_MAXLEN(struct new_args, labels, "labels", NTFS_JSON_STR_ARRAY, 0, 8),
                NTFS_JSON_END,
        };
        struct new_args a = { .steps = 1 };
        int r = ntfs_http_validate(req, resp, fields, &a);
        if (r < 0)
                return r;
        return ntfs_http_respond_json(resp, 201, json_pack("{s:s,s:I}", "name", a.name, "steps", (json_int_t)a.steps));
}

static int h_checkpoint(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *msg = "";
        char err[128];
        int r = ntfs_json_get_str(req->json, "message", false, &msg, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", err);
        const char *name = ntfs_http_request_param(req, "name");
        if (!name)
                return -EIO;
        if (strcmp(name, "missing") == 0)
                return -NTFS_ENOSESSION;
        return ntfs_http_respond_json(resp, 200, json_pack("{s:s,s:s}", "session", name, "message", msg));
}

static int h_file(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *p = ntfs_http_request_param(req, "path");
        char q[64];
        if (ntfs_http_request_query(req, "x", q, sizeof q) < 0)
                q[0] = 0;
        (void)ntfs_http_response_header(resp, "X-Query", q);
        return ntfs_http_respond_raw(resp, 200, "text/plain", p, strlen(p));
}

static int h_raw(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_json(resp, 200, json_pack("{s:I}", "bytes", (json_int_t)req->body_len));
}

static int stream_fn(void *ctx, ntfs_http_stream *out) {
        for (int i = 0; i < 3; i++)
                if (ntfs_http_stream_write(out, "chunk\n", 6) < 0)
                        return -EIO;
        return 0;
}

static int h_stream(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_stream(resp, 200, "application/octet-stream", stream_fn, NULL, NULL);
}

static int h_delete(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return 0;
}

static ntfs_router *fuzz_router(void) {
        static ntfs_router *r;
        if (r)
                return r;
        if (ntfs_router_new(&r) < 0)
                abort();
        if (ntfs_router_add(r, "GET /v1/health", h_health, 0) < 0 ||
            ntfs_router_add(r, "POST /v1/sessions", h_new, 0) < 0 ||
            ntfs_router_add(r, "POST /v1/sessions/{name}/checkpoint", h_checkpoint, 0) < 0 ||
            ntfs_router_add(r, "DELETE /v1/sessions/{name}", h_delete, 0) < 0 ||
            ntfs_router_add(r, "GET /v1/files/{path*}", h_file, 0) < 0 ||
            ntfs_router_add(r, "POST /v1/raw", h_raw, NTFS_ROUTE_RAW_BODY) < 0 ||
            ntfs_router_add(r, "GET /v1/stream", h_stream, 0) < 0)
                abort();
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        size_t step = data[0];
        data++;
        size--;
        struct ntfs_http_config cfg = {
                .socket_path = "/nonexistent",
                .max_header_bytes = 1024,
                .max_body_bytes = 8192,
                .router = fuzz_router(),
        };
        struct ntfs_http_peer peer = { .pid = 1, .uid = 0, .gid = 0 };
        struct out o = { 0 };
        ntfs_http_conn *c = NULL;
        if (ntfs_http_conn_new(&cfg, NULL, NULL, &peer, sink, &o, &c) < 0)
                abort();
        size_t off = 0;
        while (off < size) {
                size_t n = step ? step : size - off;
                if (n > size - off)
                        n = size - off;
                if (ntfs_http_conn_feed(c, data + off, n))
                        break;
                off += n;
        }
        if (ntfs_http_conn_phase(c) != NTFS_HTTP_IDLE)
                ntfs_http_conn_timeout(c);
        ntfs_http_conn_free(c);
        /* every answer starts with a status line ("HTTP/1.1 100 Continue" included) */
        if (o.len > 0 && memcmp(o.first, "HTTP/1.1 ", o.len < 9 ? o.len : 9) != 0)
                abort();
        return 0;
}
