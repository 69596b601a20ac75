/* SPDX-License-Identifier: MIT
 * router.h — the control plane's route table.
 *
 *   ntfs_router *r;
 *   ntfs_router_new(&r);
 *   ntfs_router_add(r, "POST /v1/sessions/{name}/checkpoint", handle_checkpoint, 0);
 *   ntfs_router_add(r, "GET /v1/sessions/{name}/files/{path*}", handle_file, 0);
 *   cfg.router = r;   // ntfs_http_server dispatches through it
 *
 * A pattern is METHOD, one space, then '/'-separated segments: literals,
 * `{param}` (one non-empty segment), or a last `{param*}` (the rest of the
 * path, may contain '/', may be empty). Captures are percent-decoded per
 * segment, so "%2F" inside a name never splits it. When several routes match,
 * the most specific wins (literal before {param} before {param*}, segment by
 * segment from the left). One trailing '/' in a request path is ignored.
 *
 * Lifecycle: build the table before the server starts; lookups are then
 * read-only and thread-safe. ntfs_router_free() accepts NULL.
 */
#ifndef NTFS_CTL_ROUTER_H
#define NTFS_CTL_ROUTER_H

#include <stddef.h>

#include "ctl/http.h"

#define NTFS_ROUTE_MAX_PARAMS 8
#define NTFS_ROUTE_MAX_SEGMENTS 32
/* Total bytes of decoded captures (with NULs) one match can hold. */
#define NTFS_ROUTE_PARAM_BYTES 4096

enum {
        /* The body is not parsed as JSON (req->json stays NULL). */
        NTFS_ROUTE_RAW_BODY = 1u << 0,
};

struct ntfs_route_match {
        ntfs_http_handler handler;
        unsigned flags;
        const char *pattern; /* borrowed from the router */
        size_t n_params;
        struct ntfs_http_param params[NTFS_ROUTE_MAX_PARAMS];
        char storage[NTFS_ROUTE_PARAM_BYTES];
};

int ntfs_router_new(ntfs_router **ret);
void ntfs_router_free(ntfs_router *r);
/* -EINVAL for a malformed pattern (no method, no leading '/', empty or
 * unbalanced braces, duplicate or too many params, '*' not last), -EEXIST
 * when the same method and shape is already registered. */
int ntfs_router_add(ntfs_router *r, const char *pattern, ntfs_http_handler handler, unsigned flags);

/* One row of a route table: "METHOD /pattern", its handler, NTFS_ROUTE_*
 * flags. Each routes file keeps its routes in one such table, so the file's
 * interface can be read in one place. */
struct ntfs_route {
        const char *pattern;
        ntfs_http_handler handler;
        unsigned flags;
};
/* Adds the n routes in order; stops at the first error and returns it. */
int ntfs_router_add_table(ntfs_router *r, const struct ntfs_route *routes, size_t n);

/* The path parameter that names the request's session, for the logs:
 * "name" in /v1/sessions/{name}..., else "session" (absent in most). */
const char *ntfs_router_session_param(const char *pattern);

/* Looks up method + raw_path (percent-encoded, no query).
 *   0                 match filled in
 *   -NTFS_ENOTFOUND   no route has this path (404)
 *   -EOPNOTSUPP       the path exists for other methods (405); they are
 *                     written, comma separated, to allow (if non-NULL)
 *   -EINVAL           bad percent-encoding or a NUL in a capture (400)
 *   -ENAMETOOLONG     captures do not fit NTFS_ROUTE_PARAM_BYTES, or too
 *                     many segments (400) */
int ntfs_router_lookup(const ntfs_router *r, const char *method, const char *raw_path,
                       struct ntfs_route_match *m, char *allow, size_t allow_len);

/* Percent-decodes src[0..len) into dst (dstlen bytes with the NUL).
 * plus_is_space for query strings. Returns the decoded length, -EINVAL on
 * a bad escape or a decoded NUL, -ENAMETOOLONG when it does not fit. */
int ntfs_http_percent_decode(const char *src, size_t len, char *dst, size_t dstlen, bool plus_is_space);

#endif
