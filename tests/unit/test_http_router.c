/* SPDX-License-Identifier: MIT
 * test_http_router.c — route table: patterns, captures, 404 vs 405, bounds.
 */
#include <errno.h>
#include <string.h>

#include "common/err.h"
#include "ctl/router.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static int h1(void *u, const ntfs_http_request *q, ntfs_http_response *r) { return 1; }
static int h2(void *u, const ntfs_http_request *q, ntfs_http_response *r) { return 2; }
static int h3(void *u, const ntfs_http_request *q, ntfs_http_response *r) { return 3; }
static int h4(void *u, const ntfs_http_request *q, ntfs_http_response *r) { return 4; }

static ntfs_router *r;
static struct ntfs_route_match m;

static const char *param(const char *name) {
        for (size_t i = 0; i < m.n_params; i++)
                if (strcmp(m.params[i].name, name) == 0)
                        return m.params[i].value;
        return NULL;
}

TEST(patterns_rejected) {
        ntfs_router *x;
        ASSERT_OK(ntfs_router_new(&x));
        ASSERT_ERR(ntfs_router_add(x, "GET", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "get /a", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET a", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a//b", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/{}", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/{x", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/{x}/{x}", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/{x*}/b", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/b{x}", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a/", h1, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_add(x, "GET /a", NULL, 0), -EINVAL);
        ASSERT_OK(ntfs_router_add(x, "GET /a/{x}", h1, 0));
        ASSERT_ERR(ntfs_router_add(x, "GET /a/{y}", h2, 0), -EEXIST);
        ASSERT_OK(ntfs_router_add(x, "POST /a/{y}", h2, 0));
        ASSERT_OK(ntfs_router_add(x, "GET /", h3, 0));
        ntfs_router_free(x);
        ntfs_router_free(NULL);
}

TEST(tables) {
        ntfs_router *x;
        ASSERT_OK(ntfs_router_new(&x));
        static const struct ntfs_route good[] = {
                { "GET /t/{a}", h1, 0 },
                { "POST /t/{a}", h2, NTFS_ROUTE_RAW_BODY },
        };
        ASSERT_OK(ntfs_router_add_table(x, good, 2));
        struct ntfs_route_match tm;
        ASSERT_OK(ntfs_router_lookup(x, "POST", "/t/z", &tm, NULL, 0));
        ASSERT(tm.handler == h2 && tm.flags == NTFS_ROUTE_RAW_BODY);
        /* the first bad row stops the table: the rows after it are not added */
        static const struct ntfs_route bad[] = {
                { "GET /u", h1, 0 },
                { "GET /t/{b}", h3, 0 }, /* same shape as GET /t/{a} */
                { "GET /v", h1, 0 },
        };
        ASSERT_ERR(ntfs_router_add_table(x, bad, 3), -EEXIST);
        ASSERT_OK(ntfs_router_lookup(x, "GET", "/u", &tm, NULL, 0));
        ASSERT_ERR(ntfs_router_lookup(x, "GET", "/v", &tm, NULL, 0), -NTFS_ENOTFOUND);
        ASSERT_OK(ntfs_router_add_table(x, NULL, 0));
        ntfs_router_free(x);
}

TEST(lookup) {
        char allow[64];
        ASSERT_OK(ntfs_router_lookup(r, "POST", "/v1/sessions/main/checkpoint", &m, allow, sizeof allow));
        ASSERT(m.handler == h1);
        ASSERT_STREQ(m.pattern, "POST /v1/sessions/{name}/checkpoint");
        ASSERT_EQ(m.n_params, 1);
        ASSERT_STREQ(param("name"), "main");
        /* trailing slash ignored, percent-decoding per segment */
        ASSERT_OK(ntfs_router_lookup(r, "POST", "/v1/sessions/a%2Fb%20c/checkpoint/", &m, NULL, 0));
        ASSERT_STREQ(param("name"), "a/b c");
        /* specificity: literal beats {param} */
        ASSERT_OK(ntfs_router_lookup(r, "GET", "/v1/sessions/new", &m, NULL, 0));
        ASSERT(m.handler == h3);
        ASSERT_OK(ntfs_router_lookup(r, "GET", "/v1/sessions/other", &m, NULL, 0));
        ASSERT(m.handler == h2);
        ASSERT_STREQ(param("name"), "other");
        /* wildcard */
        ASSERT_OK(ntfs_router_lookup(r, "GET", "/v1/sessions/s/files/a/b/c.txt", &m, NULL, 0));
        ASSERT(m.handler == h4);
        ASSERT_STREQ(param("name"), "s");
        ASSERT_STREQ(param("path"), "a/b/c.txt");
        ASSERT_OK(ntfs_router_lookup(r, "GET", "/v1/sessions/s/files", &m, NULL, 0));
        ASSERT_STREQ(param("path"), "");
        ASSERT_OK(ntfs_router_lookup(r, "GET", "/", &m, NULL, 0));
}

TEST(not_found_vs_not_allowed) {
        char allow[64];
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/nothing", &m, allow, sizeof allow), -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/sessions//checkpoint", &m, allow, sizeof allow),
                   -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/sessions/x/checkpoint", &m, allow, sizeof allow),
                   -EOPNOTSUPP);
        ASSERT_STREQ(allow, "POST");
        ASSERT_ERR(ntfs_router_lookup(r, "PUT", "/v1/sessions/x", &m, allow, sizeof allow), -EOPNOTSUPP);
        ASSERT_STREQ(allow, "GET, DELETE");
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "relative", &m, allow, sizeof allow), -EINVAL);
}

TEST(bounds) {
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/sessions/%zz", &m, NULL, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/sessions/a%00b", &m, NULL, 0), -EINVAL);
        ASSERT_ERR(ntfs_router_lookup(r, "GET", "/v1/sessions/%4", &m, NULL, 0), -EINVAL);
        char big[NTFS_ROUTE_PARAM_BYTES + 64];
        int o = snprintf(big, sizeof big, "/v1/sessions/");
        memset(big + o, 'a', NTFS_ROUTE_PARAM_BYTES + 10);
        big[o + NTFS_ROUTE_PARAM_BYTES + 10] = 0;
        ASSERT_ERR(ntfs_router_lookup(r, "GET", big, &m, NULL, 0), -ENAMETOOLONG);
        char deep[4096] = "";
        for (int i = 0; i < 100; i++)
                strncat(deep, "/x", sizeof deep - strlen(deep) - 1); /* NOLINT */
        ASSERT_ERR(ntfs_router_lookup(r, "GET", deep, &m, NULL, 0), -ENAMETOOLONG);
}

TEST(percent_decode) {
        char out[16];
        ASSERT_EQ(ntfs_http_percent_decode("a%41+b", 6, out, sizeof out, false), 4);
        ASSERT_STREQ(out, "aA+b");
        ASSERT_EQ(ntfs_http_percent_decode("a%41+b", 6, out, sizeof out, true), 4);
        ASSERT_STREQ(out, "aA b");
        ASSERT_ERR(ntfs_http_percent_decode("abc", 3, out, 3, false), -ENAMETOOLONG);
        ASSERT_EQ(ntfs_http_percent_decode("abc", 3, out, 4, false), 3);
        ASSERT_ERR(ntfs_http_percent_decode("%g0", 3, out, sizeof out, false), -EINVAL);
}

int main(void) {
        if (ntfs_router_new(&r) < 0 ||
            ntfs_router_add(r, "POST /v1/sessions/{name}/checkpoint", h1, 0) < 0 ||
            ntfs_router_add(r, "GET /v1/sessions/{name}", h2, 0) < 0 ||
            ntfs_router_add(r, "DELETE /v1/sessions/{name}", h2, 0) < 0 ||
            ntfs_router_add(r, "GET /v1/sessions/new", h3, 0) < 0 ||
            ntfs_router_add(r, "GET /v1/sessions/{name}/files/{path*}", h4, 0) < 0 ||
            ntfs_router_add(r, "GET /", h3, 0) < 0)
                return 1;
        RUN(patterns_rejected);
        RUN(tables);
        RUN(lookup);
        RUN(not_found_vs_not_allowed);
        RUN(bounds);
        RUN(percent_decode);
        ntfs_router_free(r);
        return tap_done();
}
