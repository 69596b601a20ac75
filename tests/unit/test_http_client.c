/* SPDX-License-Identifier: MIT
 * test_http_client.c — the libcurl client against an in-process server.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/client/client.h"
#include "ctl/http.h"
#include "ctl/jsonutil.h"
#include "ctl/router.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char tmpdir[40];
static char sock_path[100];
static ntfs_router *router;
static ntfs_http_server *srv;

static int h_echo(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        json_t *o = json_pack("{s:s,s:s,s:O?}", "method", req->method, "path", req->path, "body", req->json);
        return ntfs_http_respond_json(resp, 200, o);
}

static int h_fail(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_error(resp, -NTFS_ENOSESSION, "session \"%s\" does not exist",
                               ntfs_http_request_param(req, "name"));
}

static int h_slow(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        usleep(800 * 1000);
        return 0;
}

static int blocks(void *ctx, ntfs_http_stream *out) {
        char buf[8192];
        for (int i = 0; i < 128; i++) { /* 1 MiB */
                memset(buf, 'a' + i % 26, sizeof buf);
                if (ntfs_http_stream_write(out, buf, sizeof buf) < 0)
                        return -EIO;
        }
        return 0;
}

static int h_export(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_stream(resp, 200, "application/x-tar", blocks, NULL, NULL);
}

static int h_text(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return ntfs_http_respond_raw(resp, 200, "text/plain", "hello\n", 6);
}

TEST(request_json) {
        ntfs_client *c;
        ASSERT_OK(ntfs_client_new(sock_path, &c));
        json_t *body = json_pack("{s:s}", "name", "main");
        struct ntfs_client_response res = { 0 };
        for (int i = 0; i < 3; i++) { /* reuses the connection */
                ASSERT_OK(ntfs_client_request(c, "POST", "/v1/echo/a%20b", body, &res));
                ASSERT_EQ(res.status, 200);
                ASSERT(res.json);
                ASSERT_STREQ(json_string_value(json_object_get(res.json, "path")), "/v1/echo/a b");
                ASSERT_STREQ(json_string_value(json_object_get(json_object_get(res.json, "body"), "name")),
                             "main");
                ntfs_client_response_release(&res);
        }
        ASSERT_OK(ntfs_client_request(c, "GET", "/v1/text", NULL, &res));
        ASSERT_EQ(res.status, 200);
        ASSERT(!res.json);
        ASSERT_STREQ(res.body, "hello\n");
        ASSERT_STREQ(res.content_type, "text/plain");
        ntfs_client_response_release(&res);
        json_decref(body);
        ntfs_client_free(c);
}

TEST(errors) {
        ntfs_client *c;
        ASSERT_OK(ntfs_client_new(sock_path, &c));
        struct ntfs_client_response res = { 0 };
        ASSERT_OK(ntfs_client_request(c, "POST", "/v1/sessions/ghost/fail", NULL, &res));
        ASSERT_EQ(res.status, 404);
        const char *code, *msg;
        ASSERT_OK(ntfs_client_error(&res, &code, &msg));
        ASSERT_STREQ(code, "session_not_found");
        ASSERT_STREQ(msg, "session \"ghost\" does not exist");
        ntfs_client_response_release(&res);

        char err[256];
        json_t *out = NULL;
        ASSERT_ERR(ntfs_client_call(c, "POST", "/v1/sessions/ghost/fail", NULL, &out, err, sizeof err),
                   -NTFS_ENOSESSION);
        ASSERT_STREQ(err, "session_not_found: session \"ghost\" does not exist");
        ASSERT(!out);
        ASSERT_ERR(ntfs_client_call(c, "GET", "/nope", NULL, &out, err, sizeof err), -NTFS_ENOTFOUND);
        ASSERT_OK(ntfs_client_call(c, "GET", "/v1/echo/x", NULL, &out, err, sizeof err));
        ASSERT(json_is_object(out));
        json_decref(out);
        /* bad JSON sent raw gets the server's 400 */
        ASSERT_OK(ntfs_client_request_raw(c, "POST", "/v1/echo/x", "application/json", "{nope", 5, &res));
        ASSERT_EQ(res.status, 400);
        ASSERT_OK(ntfs_client_error(&res, &code, &msg));
        ASSERT_STREQ(code, "bad_request");
        ntfs_client_response_release(&res);

        /* a body over the server's limit is answered 413, not a broken pipe */
        _cleanup_free_ char *big = malloc(9u << 20);
        ASSERT(big);
        memset(big, ' ', 9u << 20);
        ASSERT_OK(ntfs_client_request_raw(c, "POST", "/v1/echo/x", "application/json", big, 9u << 20, &res));
        ASSERT_EQ(res.status, 413);
        ASSERT_OK(ntfs_client_error(&res, &code, &msg));
        ASSERT_STREQ(code, "payload_too_large");
        ntfs_client_response_release(&res);

        ASSERT_EQ(ntfs_client_errcode_parse("tag_exists"), -NTFS_ETAGEXISTS);
        ASSERT_EQ(ntfs_client_errcode_parse("no_space"), -ENOSPC);
        ASSERT_EQ(ntfs_client_errcode_parse("what"), -EIO);
        ntfs_client_free(c);
}

TEST(transport_errors) {
        ntfs_client *c;
        char path[160];
        snprintf(path, sizeof path, "%s/none.sock", tmpdir);
        ASSERT_OK(ntfs_client_new(path, &c));
        struct ntfs_client_response res = { 0 };
        int r = ntfs_client_request(c, "GET", "/v1/echo/x", NULL, &res);
        ASSERT(r == -ENOENT || r == -ECONNREFUSED);
        ntfs_client_free(c);

        ASSERT_OK(ntfs_client_new(sock_path, &c));
        ntfs_client_set_timeout(c, 200);
        ASSERT_ERR(ntfs_client_request(c, "GET", "/v1/slow", NULL, &res), -NTFS_ETIMEOUT);
        ntfs_client_set_timeout(c, 5000);
        ntfs_client_set_max_response(c, 1000);
        ASSERT_ERR(ntfs_client_request(c, "GET", "/v1/export", NULL, &res), -E2BIG);
        ASSERT_ERR(ntfs_client_request(c, "GET", "no-slash", NULL, &res), -EINVAL);
        ntfs_client_free(c);
}

TEST(download) {
        ntfs_client *c;
        ASSERT_OK(ntfs_client_new(sock_path, &c));
        ntfs_client_set_max_response(c, 1000); /* does not apply to the fd */
        char out[160];
        snprintf(out, sizeof out, "%s/export.tar", tmpdir);
        _cleanup_close_ int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT(fd >= 0);
        long status = 0;
        ASSERT_OK(ntfs_client_download(c, "GET", "/v1/export", NULL, fd, &status, NULL));
        ASSERT_EQ(status, 200);
        struct stat st;
        ASSERT_EQ(fstat(fd, &st), 0);
        ASSERT_EQ(st.st_size, 128 * 8192);
        /* an error answer is not written to the fd */
        struct ntfs_client_response res = { 0 };
        ASSERT_OK(ntfs_client_download(c, "POST", "/v1/sessions/x/fail", NULL, fd, &status, &res));
        ASSERT_EQ(status, 404);
        const char *code;
        ASSERT_OK(ntfs_client_error(&res, &code, NULL));
        ASSERT_STREQ(code, "session_not_found");
        ntfs_client_response_release(&res);
        ASSERT_EQ(fstat(fd, &st), 0);
        ASSERT_EQ(st.st_size, 128 * 8192);
        unlink(out);
        ntfs_client_free(c);
}

/* The kept connection closed by the server while idle (its keep-alive
 * timeout, a restart): the client connects again and sends the request
 * again, since not a byte of an answer came on the old one. */
TEST(reconnects_after_the_server_closed_an_idle_connection) {
        ntfs_client *c;
        ASSERT_OK(ntfs_client_new(sock_path, &c));
        struct ntfs_client_response res = { 0 };
        ASSERT_OK(ntfs_client_request(c, "GET", "/v1/text", NULL, &res));
        ASSERT_EQ(res.status, 200);
        ntfs_client_response_release(&res);
        ntfs_http_server_stop(srv); /* shuts every connection down */
        ntfs_http_server_free(srv);
        srv = NULL;
        struct ntfs_http_config cfg = { .socket_path = sock_path, .router = router };
        ASSERT_OK(ntfs_http_server_new(&cfg, NULL, NULL, &srv));
        ASSERT_OK(ntfs_http_server_start(srv));
        for (int i = 0; i < 2; i++) {
                ASSERT_OK(ntfs_client_request(c, "GET", "/v1/text", NULL, &res));
                ASSERT_EQ(res.status, 200);
                ASSERT_STREQ(res.body, "hello\n");
                ntfs_client_response_release(&res);
        }
        ntfs_client_free(c);
}

TEST(escape) {
        char buf[32];
        ASSERT_EQ(ntfs_client_escape("a b/c", buf, sizeof buf), 9);
        ASSERT_STREQ(buf, "a%20b%2Fc");
        ASSERT_ERR(ntfs_client_escape("abc", buf, 3), -ENAMETOOLONG);
        ASSERT_EQ(ntfs_client_escape("x-y_z.~", buf, sizeof buf), 7);
}

int main(void) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ntfs-client-XXXXXX");
        if (!mkdtemp(tmpdir))
                return 1;
        snprintf(sock_path, sizeof sock_path, "%.40s/ctl.sock", tmpdir);
        if (ntfs_router_new(&router) < 0 || ntfs_router_add(router, "POST /v1/echo/{x}", h_echo, 0) < 0 ||
            ntfs_router_add(router, "GET /v1/echo/{x}", h_echo, 0) < 0 ||
            ntfs_router_add(router, "POST /v1/sessions/{name}/fail", h_fail, 0) < 0 ||
            ntfs_router_add(router, "GET /v1/slow", h_slow, 0) < 0 ||
            ntfs_router_add(router, "GET /v1/text", h_text, 0) < 0 ||
            ntfs_router_add(router, "GET /v1/export", h_export, 0) < 0)
                return 1;
        struct ntfs_http_config cfg = { .socket_path = sock_path, .router = router };
        if (ntfs_http_server_new(&cfg, NULL, NULL, &srv) < 0 || ntfs_http_server_start(srv) < 0)
                return 1;
        RUN(request_json);
        RUN(reconnects_after_the_server_closed_an_idle_connection);
        RUN(errors);
        RUN(transport_errors);
        RUN(download);
        RUN(escape);
        ntfs_http_server_free(srv);
        ntfs_router_free(router);
        rmdir(tmpdir);
        return tap_done();
}
