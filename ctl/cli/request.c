/* SPDX-License-Identifier: MIT
 * ntfs-ctl's requests to ntfsd: one client per run (ctl/client/client.h), transport
 * errors turned into messages and exit codes, request paths and bodies.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

/* ---- talking to the daemon ------------------------------------------------ */

int client_get(struct ctx *c, unsigned timeout_ms, ntfs_client **ret) {
        if (!c->client) {
                int r = ntfs_client_new(c->socket, &c->client);
                if (r < 0)
                        return r;
        }
        ntfs_client_set_timeout(c->client, timeout_ms);
        *ret = c->client;
        return 0;
}

int transport_fail(struct ctx *c, int r) {
        switch (r) {
        case -ENOENT:
                return fail(c, NULL, "unreachable", "cannot connect to ntfsd at %s: no such socket (is ntfsd running?)",
                            c->socket);
        case -ECONNREFUSED:
                return fail(c, NULL, "unreachable", "cannot connect to ntfsd at %s: connection refused", c->socket);
        case -EACCES:
                return fail(c, NULL, "permission_denied", "cannot connect to ntfsd at %s: permission denied",
                            c->socket);
        case -NTFS_ETIMEOUT:
                return fail(c, NULL, "timeout", "ntfsd at %s did not answer in time", c->socket);
        case -EPROTO:
                return fail(c, NULL, "bad_response", "%s does not speak HTTP", c->socket);
        default:
                return fail(c, NULL, ntfs_errcode(r), "request to ntfsd at %s failed: %s", c->socket,
                            ntfs_strerror(r));
        }
}

/* Sends the request. On a 2xx answer returns 0 and *ret gets the JSON
 * (owned, maybe NULL). Otherwise reports and returns EXIT_FAIL; with
 * keep_error the error body is handed back too (*ret_status set). */
int call_full(struct ctx *c, const char *method, const char *path, const json_t *body, unsigned timeout_ms,
                     json_t **ret, long *ret_status, bool quiet_error) {
        ntfs_client *cl;
        int r = client_get(c, timeout_ms, &cl);
        if (r < 0)
                return fail(c, NULL, ntfs_errcode(r), "cannot create a client: %s", ntfs_strerror(r));
        struct ntfs_client_response res = { 0 };
        r = ntfs_client_request(cl, method, path, body, &res);
        if (r < 0)
                return transport_fail(c, r);
        if (ret_status)
                *ret_status = res.status;
        if (res.status >= 200 && res.status < 300) {
                if (ret)
                        *ret = TAKE_PTR(res.json);
                ntfs_client_response_release(&res);
                return 0;
        }
        if (quiet_error && ret) {
                *ret = TAKE_PTR(res.json);
                ntfs_client_response_release(&res);
                return EXIT_FAIL;
        }
        const char *code, *msg;
        ntfs_client_error(&res, &code, &msg);
        _cleanup_free_ char *m = sanitize_dup(msg, 1024);
        r = fail(c, res.json, code, "%s", m ? m : code);
        ntfs_client_response_release(&res);
        return r;
}

int call(struct ctx *c, const char *method, const char *path, const json_t *body, json_t **ret) {
        return call_full(c, method, path, body, DEFAULT_TIMEOUT_MS, ret, NULL, false);
}

/* Percent-encodes one path segment or query value (malloc'd). */
char *esc(const char *s) {
        size_t len = strlen(s) * 3 + 1;
        char *b = malloc(len);
        if (b && ntfs_client_escape(s, b, len) < 0) {
                free(b);
                return NULL;
        }
        return b;
}

/* "/v1/sessions/<name><suffix>" with name escaped; NULL on OOM. */
char *session_path(const char *name, const char *suffix) {
        _cleanup_free_ char *e = esc(name);
        char *p = NULL;
        if (!e || asprintf(&p, "/v1/sessions/%s%s", e, suffix) < 0)
                return NULL;
        return p;
}

int oom(struct ctx *c) {
        return fail(c, NULL, "out_of_memory", "out of memory");
}

/* Sets o[key] to a string (copied). */
int set_str(json_t *o, const char *key, const char *v) {
        return json_object_set_new(o, key, json_string(v));
}
