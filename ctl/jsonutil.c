/* SPDX-License-Identifier: MIT */
#include "ctl/jsonutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/util.h"
#include "common/banned.h"

static int fail(int r, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(int r, char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return r;
}

static const char *kind_name(enum ntfs_json_kind k) {
        switch (k) {
        case NTFS_JSON_STR:
        case NTFS_JSON_NAME: return "a string";
        case NTFS_JSON_INT: return "an integer";
        case NTFS_JSON_BOOL: return "a boolean";
        case NTFS_JSON_NUMBER: return "a number";
        case NTFS_JSON_OBJECT: return "an object";
        case NTFS_JSON_ARRAY: return "an array";
        case NTFS_JSON_STR_ARRAY: return "an array of strings";
        case NTFS_JSON_ANY: return "a value";
        }
        return "a value";
}

/* Keys are shown bounded and without control characters. */
static void safe_key(const char *key, char *buf, size_t len) {
        size_t o = 0;
        for (size_t i = 0; key[i] && o + 1 < len; i++)
                buf[o++] = ((unsigned char)key[i] < 0x20 || key[i] == 0x7f) ? '?' : key[i];
        buf[o] = 0;
        if (strlen(key) > o && o >= 4)
                memcpy(buf + o - 3, "...", 3);
}

static int store(const json_t *v, const struct ntfs_json_field *f, void *out, char *err, size_t errlen) {
        char *dst = (char *)out + f->offset;
        switch (f->kind) {
        case NTFS_JSON_STR:
        case NTFS_JSON_NAME: {
                if (!json_is_string(v))
                        break;
                const char *s = json_string_value(v);
                size_t len = json_string_length(v);
                if (strlen(s) != len)
                        return fail(-NTFS_EBADREQ, err, errlen, "field \"%s\" contains a NUL character", f->key);
                if (f->max > 0 && len > (uint64_t)f->max)
                        return fail(-NTFS_EBADREQ, err, errlen, "field \"%s\" is longer than %" PRId64 " bytes",
                                    f->key, f->max);
                if (f->kind == NTFS_JSON_NAME && !ntfs_name_valid(s))
                        return fail(-NTFS_EINVALNAME, err, errlen,
                                    "field \"%s\": invalid name (1-255 bytes, no '/', not \".\" or \"..\", "
                                    "no control characters, no leading '-' or surrounding spaces)",
                                    f->key);
                memcpy(dst, &s, sizeof s);
                return 0;
        }
        case NTFS_JSON_INT: {
                if (!json_is_integer(v))
                        break;
                int64_t x = (int64_t)json_integer_value(v);
                if (f->min < f->max && (x < f->min || x > f->max))
                        return fail(-NTFS_EBADREQ, err, errlen,
                                    "field \"%s\" must be between %" PRId64 " and %" PRId64, f->key, f->min,
                                    f->max);
                memcpy(dst, &x, sizeof x);
                return 0;
        }
        case NTFS_JSON_BOOL: {
                if (!json_is_boolean(v))
                        break;
                bool b = json_is_true(v);
                memcpy(dst, &b, sizeof b);
                return 0;
        }
        case NTFS_JSON_NUMBER: {
                if (!json_is_number(v))
                        break;
                double d = json_number_value(v);
                memcpy(dst, &d, sizeof d);
                return 0;
        }
        case NTFS_JSON_OBJECT:
        case NTFS_JSON_ARRAY:
        case NTFS_JSON_STR_ARRAY:
        case NTFS_JSON_ANY: {
                if (f->kind == NTFS_JSON_OBJECT && !json_is_object(v))
                        break;
                if (f->kind != NTFS_JSON_OBJECT && f->kind != NTFS_JSON_ANY) {
                        if (!json_is_array(v))
                                break;
                        if (f->max > 0 && json_array_size(v) > (uint64_t)f->max)
                                return fail(-NTFS_EBADREQ, err, errlen,
                                            "field \"%s\" has more than %" PRId64 " elements", f->key, f->max);
                        if (f->kind == NTFS_JSON_STR_ARRAY) {
                                size_t i;
                                json_t *e;
                                json_array_foreach(v, i, e) if (!json_is_string(e)) return fail(
                                        -NTFS_EBADREQ, err, errlen, "field \"%s\" element %zu must be a string",
                                        f->key, i);
                        }
                }
                json_t *j = (json_t *)v;
                memcpy(dst, &j, sizeof j);
                return 0;
        }
        }
        return fail(-NTFS_EBADREQ, err, errlen, "field \"%s\" must be %s", f->key, kind_name(f->kind));
}

int ntfs_json_validate(const json_t *obj, const struct ntfs_json_field *fields, void *out, char *err,
                       size_t errlen) {
        if (err && errlen)
                err[0] = 0;
        if (obj && !json_is_object(obj))
                return fail(-NTFS_EBADREQ, err, errlen, "the request body must be a JSON object");
        if (obj) {
                const char *key;
                json_t *v;
                json_object_foreach((json_t *)obj, key, v) {
                        const struct ntfs_json_field *f = fields;
                        while (f->key && strcmp(f->key, key) != 0)
                                f++;
                        if (!f->key) {
                                char k[80];
                                safe_key(key, k, sizeof k);
                                return fail(-NTFS_EBADREQ, err, errlen, "unknown field \"%s\"", k);
                        }
                }
        }
        for (const struct ntfs_json_field *f = fields; f->key; f++) {
                json_t *v = obj ? json_object_get(obj, f->key) : NULL;
                if (v && json_is_null(v) && (f->flags & NTFS_JSON_NULLABLE) && !(f->flags & NTFS_JSON_REQUIRED))
                        v = NULL;
                if (!v) {
                        if (f->flags & NTFS_JSON_REQUIRED)
                                return fail(-NTFS_EBADREQ, err, errlen, "missing required field \"%s\" (%s)",
                                            f->key, kind_name(f->kind));
                        continue;
                }
                int r = store(v, f, out, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

int ntfs_http_validate(const ntfs_http_request *req, ntfs_http_response *resp,
                       const struct ntfs_json_field *fields, void *out) {
        char err[256];
        int r = ntfs_json_validate(req->json, fields, out, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", err);
        return 0;
}

static int get_one(const json_t *obj, const char *key, bool required, enum ntfs_json_kind kind, void *ret,
                   char *err, size_t errlen) {
        struct ntfs_json_field f = { key, kind, required ? NTFS_JSON_REQUIRED : 0, 0, 0, 0 };
        if (obj && !json_is_object(obj))
                return fail(-NTFS_EBADREQ, err, errlen, "the request body must be a JSON object");
        json_t *v = obj ? json_object_get(obj, key) : NULL;
        if (!v) {
                if (required)
                        return fail(-NTFS_EBADREQ, err, errlen, "missing required field \"%s\" (%s)", key,
                                    kind_name(kind));
                return 0;
        }
        return store(v, &f, ret, err, errlen);
}

int ntfs_json_get_str(const json_t *obj, const char *key, bool required, const char **ret, char *err,
                      size_t errlen) {
        return get_one(obj, key, required, NTFS_JSON_STR, ret, err, errlen);
}

int ntfs_json_get_int(const json_t *obj, const char *key, bool required, int64_t *ret, char *err,
                      size_t errlen) {
        return get_one(obj, key, required, NTFS_JSON_INT, ret, err, errlen);
}

int ntfs_json_get_bool(const json_t *obj, const char *key, bool required, bool *ret, char *err,
                       size_t errlen) {
        return get_one(obj, key, required, NTFS_JSON_BOOL, ret, err, errlen);
}

int ntfs_json_check_keys(const json_t *obj, const char *const *allowed, char *err, size_t errlen) {
        if (!obj)
                return 0;
        if (!json_is_object(obj))
                return fail(-NTFS_EBADREQ, err, errlen, "the request body must be a JSON object");
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
                size_t i = 0;
                while (allowed[i] && strcmp(allowed[i], key) != 0)
                        i++;
                if (!allowed[i]) {
                        char k[80];
                        safe_key(key, k, sizeof k);
                        return fail(-NTFS_EBADREQ, err, errlen, "unknown field \"%s\"", k);
                }
        }
        return 0;
}
