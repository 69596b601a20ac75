/* SPDX-License-Identifier: MIT
 * jsonutil.h — validating request objects for the control-plane handlers.
 *
 * Table-driven: describe the fields once, get typed values in a struct, and
 * a message naming the offending field otherwise.
 *
 *   struct args { const char *name; const char *from; int64_t steps; bool ro; };
 *   static const struct ntfs_json_field fields[] = {
 *           NTFS_JSON_FIELD(struct args, name, "name", NTFS_JSON_NAME, NTFS_JSON_REQUIRED),
 *           NTFS_JSON_FIELD(struct args, from, "from", NTFS_JSON_STR, 0),
 *           NTFS_JSON_RANGE(struct args, steps, "steps", 0, 1, 1000),
 *           NTFS_JSON_FIELD(struct args, ro, "ro", NTFS_JSON_BOOL, 0),
 *           NTFS_JSON_END,
 *   };
 *   struct args a = { .steps = 1 };          // defaults for optional fields
 *   int r = ntfs_http_validate(req, resp, fields, &a);
 *   if (r < 0)
 *           return r;                          // 400 already answered
 *
 * Strings and json_t values written to the struct are BORROWED from the
 * request object: valid while it lives (until the handler returns).
 * Unknown fields are rejected ("unknown field \"nmae\""), so are wrong types
 * ("field \"steps\" must be an integer") and missing required fields.
 * A JSON null counts as absent for an optional field with NTFS_JSON_NULLABLE
 * and as a wrong type otherwise.
 */
#ifndef NTFS_CTL_JSONUTIL_H
#define NTFS_CTL_JSONUTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl/http.h"

enum ntfs_json_kind {
        NTFS_JSON_STR,       /* const char *; max > 0 bounds its byte length */
        NTFS_JSON_NAME,      /* const char * that passes ntfs_name_valid(): else invalid_name */
        NTFS_JSON_INT,       /* int64_t; when min < max it must lie in [min, max] */
        NTFS_JSON_BOOL,      /* bool */
        NTFS_JSON_NUMBER,    /* double (integers accepted) */
        NTFS_JSON_OBJECT,    /* json_t * (borrowed) */
        NTFS_JSON_ARRAY,     /* json_t * (borrowed); max > 0 bounds its length */
        NTFS_JSON_STR_ARRAY, /* json_t * array of strings only; max > 0 bounds its length */
        NTFS_JSON_ANY,       /* json_t * (borrowed) */
};

#define NTFS_JSON_REQUIRED (1u << 0)
#define NTFS_JSON_NULLABLE (1u << 1)

struct ntfs_json_field {
        const char *key;
        enum ntfs_json_kind kind;
        unsigned flags;
        size_t offset; /* of the destination member in the caller's struct */
        int64_t min, max;
};

#define NTFS_JSON_FIELD(type, member, key, kind, flags) { (key), (kind), (flags), offsetof(type, member), 0, 0 }
#define NTFS_JSON_RANGE(type, member, key, flags, lo, hi) \
        { (key), NTFS_JSON_INT, (flags), offsetof(type, member), (lo), (hi) }
#define NTFS_JSON_MAXLEN(type, member, key, kind, flags, maxlen) \
        { (key), (kind), (flags), offsetof(type, member), 0, (maxlen) }
#define NTFS_JSON_END { NULL, 0, 0, 0, 0, 0 }

/* Validates obj (NULL is an empty object) against fields and stores the values
 * found into out. Returns 0; or -NTFS_EBADREQ / -NTFS_EINVALNAME with a
 * message in err (errlen bytes, always NUL-terminated). out is written only
 * for fields present, and possibly partially when validation fails. */
int ntfs_json_validate(const json_t *obj, const struct ntfs_json_field *fields, void *out, char *err,
                       size_t errlen);

/* The same, answering resp with the error (400 bad_request / invalid_name). */
int ntfs_http_validate(const ntfs_http_request *req, ntfs_http_response *resp,
                       const struct ntfs_json_field *fields, void *out);

/* Single getters for handlers with one or two fields. Return 0 when found or
 * when absent and optional (*ret untouched); -NTFS_EBADREQ with a message for
 * a missing required field or a wrong type. They do not reject unknown
 * fields: use ntfs_json_check_keys() for that. */
int ntfs_json_get_str(const json_t *obj, const char *key, bool required, const char **ret, char *err,
                      size_t errlen);
int ntfs_json_get_int(const json_t *obj, const char *key, bool required, int64_t *ret, char *err,
                      size_t errlen);
int ntfs_json_get_bool(const json_t *obj, const char *key, bool required, bool *ret, char *err,
                       size_t errlen);
/* -NTFS_EBADREQ naming the first key of obj not in the NULL-terminated allowed list. */
int ntfs_json_check_keys(const json_t *obj, const char *const *allowed, char *err, size_t errlen);

#endif
