/* SPDX-License-Identifier: MIT
 * test_http_json.c — jsonutil: the table-driven validator and the getters.
 */
#include <errno.h>
#include <string.h>

#include "common/err.h"
#include "ctl/jsonutil.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

struct args {
        const char *name;
        const char *msg;
        int64_t steps;
        bool ro;
        double ratio;
        json_t *opts;
        json_t *paths;
};

static const struct ntfs_json_field fields[] = {
        NTFS_JSON_FIELD(struct args, name, "name", NTFS_JSON_NAME, NTFS_JSON_REQUIRED),
        NTFS_JSON_MAXLEN(struct args, msg, "message", NTFS_JSON_STR, NTFS_JSON_NULLABLE, 10),
        NTFS_JSON_RANGE(struct args, steps, "steps", 0, 1, 50),
        NTFS_JSON_FIELD(struct args, ro, "ro", NTFS_JSON_BOOL, 0),
        NTFS_JSON_FIELD(struct args, ratio, "ratio", NTFS_JSON_NUMBER, 0),
        NTFS_JSON_FIELD(struct args, opts, "opts", NTFS_JSON_OBJECT, 0),
        NTFS_JSON_MAXLEN(struct args, paths, "paths", NTFS_JSON_STR_ARRAY, 0, 3),
        NTFS_JSON_END,
};

static char err[256];

static int check(const char *text, struct args *a) {
        json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
        if (!j)
                FAIL("bad test JSON %s", text);
        struct args tmp = { .steps = 1, .msg = "default" };
        int r = ntfs_json_validate(j, fields, &tmp, err, sizeof err);
        if (a) {
                *a = tmp;
                /* strings are borrowed: compare before decref */
                if (r == 0 && tmp.name && strcmp(tmp.name, "main") != 0 && strcmp(tmp.name, "x") != 0)
                        r = 99;
        }
        json_decref(j);
        return r;
}

TEST(valid) {
        json_t *j = json_loads("{\"name\":\"main\",\"steps\":5,\"ro\":true,\"ratio\":2,\"opts\":{},"
                               "\"paths\":[\"a\",\"b\"],\"message\":null}",
                               0, NULL);
        struct args a = { .steps = 1, .msg = "default" };
        ASSERT_OK(ntfs_json_validate(j, fields, &a, err, sizeof err));
        ASSERT_STREQ(a.name, "main");
        ASSERT_STREQ(a.msg, "default"); /* null on a nullable field keeps the default */
        ASSERT_EQ(a.steps, 5);
        ASSERT(a.ro);
        ASSERT(a.ratio == 2.0);
        ASSERT(json_is_object(a.opts));
        ASSERT_EQ(json_array_size(a.paths), 2);
        json_decref(j);
        /* defaults stay when optional fields are absent */
        j = json_loads("{\"name\":\"x\"}", 0, NULL);
        a = (struct args){ .steps = 1 };
        ASSERT_OK(ntfs_json_validate(j, fields, &a, err, sizeof err));
        ASSERT_EQ(a.steps, 1);
        ASSERT(!a.ro);
        json_decref(j);
}

TEST(errors_name_the_field) {
        ASSERT_ERR(check("{}", NULL), -NTFS_EBADREQ);
        ASSERT(strstr(err, "missing required field \"name\""));
        ASSERT_ERR(check("{\"name\":\"x\",\"stpes\":1}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "unknown field \"stpes\"");
        ASSERT_ERR(check("{\"name\":\"x\",\"steps\":\"2\"}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"steps\" must be an integer");
        ASSERT_ERR(check("{\"name\":\"x\",\"steps\":1.5}", NULL), -NTFS_EBADREQ);
        ASSERT_ERR(check("{\"name\":\"x\",\"steps\":51}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"steps\" must be between 1 and 50");
        ASSERT_ERR(check("{\"name\":\"x\",\"ro\":1}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"ro\" must be a boolean");
        ASSERT_ERR(check("{\"name\":7}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"name\" must be a string");
        ASSERT_ERR(check("{\"name\":null}", NULL), -NTFS_EBADREQ);
        ASSERT_ERR(check("{\"name\":\"a/b\"}", NULL), -NTFS_EINVALNAME);
        ASSERT(strstr(err, "field \"name\": invalid name"));
        ASSERT_ERR(check("{\"name\":\"x\",\"message\":\"01234567890\"}", NULL), -NTFS_EBADREQ);
        ASSERT(strstr(err, "longer than 10"));
        ASSERT_ERR(check("{\"name\":\"x\",\"paths\":[\"a\",1]}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"paths\" element 1 must be a string");
        ASSERT_ERR(check("{\"name\":\"x\",\"paths\":[\"a\",\"b\",\"c\",\"d\"]}", NULL), -NTFS_EBADREQ);
        ASSERT_ERR(check("{\"name\":\"x\",\"opts\":[]}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"opts\" must be an object");
        ASSERT_ERR(check("{\"name\":\"a\\u0000b\"}", NULL), -NTFS_EBADREQ);
        ASSERT(strstr(err, "NUL"));
        /* control characters in an unknown key are not echoed */
        ASSERT_ERR(check("{\"name\":\"x\",\"a\\nb\":1}", NULL), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "unknown field \"a?b\"");
        /* NULL object = {} */
        struct args a = { 0 };
        ASSERT_ERR(ntfs_json_validate(NULL, fields, &a, err, sizeof err), -NTFS_EBADREQ);
        static const struct ntfs_json_field none[] = { NTFS_JSON_END };
        ASSERT_OK(ntfs_json_validate(NULL, none, &a, err, sizeof err));
        json_t *arr = json_array();
        ASSERT_ERR(ntfs_json_validate(arr, none, &a, err, sizeof err), -NTFS_EBADREQ);
        json_decref(arr);
}

TEST(getters) {
        json_t *j = json_loads("{\"s\":\"v\",\"i\":-3,\"b\":false,\"x\":1}", 0, NULL);
        const char *s = NULL;
        int64_t i = 0;
        bool b = true;
        ASSERT_OK(ntfs_json_get_str(j, "s", true, &s, err, sizeof err));
        ASSERT_STREQ(s, "v");
        ASSERT_OK(ntfs_json_get_int(j, "i", true, &i, err, sizeof err));
        ASSERT_EQ(i, -3);
        ASSERT_OK(ntfs_json_get_bool(j, "b", true, &b, err, sizeof err));
        ASSERT(!b);
        s = "keep";
        ASSERT_OK(ntfs_json_get_str(j, "absent", false, &s, err, sizeof err));
        ASSERT_STREQ(s, "keep");
        ASSERT_ERR(ntfs_json_get_str(j, "absent", true, &s, err, sizeof err), -NTFS_EBADREQ);
        ASSERT_ERR(ntfs_json_get_int(j, "s", false, &i, err, sizeof err), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "field \"s\" must be an integer");
        static const char *const allowed[] = { "s", "i", "b", NULL };
        ASSERT_ERR(ntfs_json_check_keys(j, allowed, err, sizeof err), -NTFS_EBADREQ);
        ASSERT_STREQ(err, "unknown field \"x\"");
        ASSERT_OK(ntfs_json_check_keys(NULL, allowed, err, sizeof err));
        json_decref(j);
}

int main(void) {
        RUN(valid);
        RUN(errors_name_the_field);
        RUN(getters);
        return tap_done();
}
