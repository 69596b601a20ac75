/* SPDX-License-Identifier: MIT
 * routes-persession.c — per-session sockets.
 *
 * POST /v1/sessions/{name}/socket {path?} opens a second control socket
 * that answers for that one session and only for checkpoint, tag, log,
 * diff and status — never exec, fetch, another session, policy or
 * credentials — so it can be handed to a program (or bound into a jail)
 * that may version its own workspace and nothing else. It is closed with
 * DELETE /v1/sessions/{name}/socket, when the session ends, and at
 * shutdown.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

struct psock {
        char *session;
        char *path;
        ntfs_router *router;
        ntfs_http_server *srv;
        struct psock *next;
};

static pthread_mutex_t plock = PTHREAD_MUTEX_INITIALIZER;
static struct psock *socks;

/* The operations a per-session socket serves, with the main router's
 * handler doing the work once the session is checked. */
static const char *const allowed[] = {
        "GET /v1/sessions/{name}",
        "POST /v1/sessions/{name}/checkpoint",
        "POST /v1/sessions/{name}/tags",
        "GET /v1/sessions/{name}/log",
        "GET /v1/sessions/{name}/diff",
};

static int h_scoped(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const struct psock *p = ud;
        const char *name = d_param(req, "name");
        if (!name || strcmp(name, p->session) != 0)
                return ntfs_http_error(resp, -NTFS_EDENIED,
                                       "this socket answers only for session '%s', not '%s'", p->session,
                                       name ? name : "");
        struct ntfs_route_match m;
        char allow[128];
        int r = ntfs_router_lookup(D.router, req->method, req->raw_path, &m, allow, sizeof allow);
        if (r < 0)
                return ntfs_http_error(resp, r, "no such operation");
        return m.handler(&D, req, resp);
}

static int h_status(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const struct psock *p = ud;
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, p->session, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", p->session, ntfs_strerror(r));
        json_t *o;
        if ((r = d_session_info_json(&si, &o)) < 0)
                return d_fail(resp, r, "status");
        json_object_set_new(o, "scope", json_string("session"));
        json_object_set_new(o, "allowed", json_pack("[s,s,s,s,s,s]", "status", "session", "checkpoint", "tag",
                                                    "log", "diff"));
        return d_reply(resp, 200, o);
}

static int h_deny(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const struct psock *p = ud;
        return ntfs_http_error(resp, -NTFS_EDENIED,
                               "%s %s is not available on the socket of session '%s' "
                               "(it serves status, checkpoint, tag, log and diff only)",
                               req->method, req->path, p->session);
}

static void psock_free(struct psock *p) {
        if (!p)
                return;
        if (p->srv) {
                ntfs_http_server_stop(p->srv);
                ntfs_http_server_free(p->srv);
        }
        if (p->path)
                unlink(p->path);
        ntfs_router_free(p->router);
        free(p->session);
        free(p->path);
        free(p);
}

static int psock_new(const char *session, const char *path, struct psock **ret) {
        struct psock *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->session = strdup(session);
        p->path = strdup(path);
        int r = p->session && p->path ? ntfs_router_new(&p->router) : -ENOMEM;
        for (size_t i = 0; r == 0 && i < ARRAY_SIZE(allowed); i++)
                r = ntfs_router_add(p->router, allowed[i], h_scoped, 0);
        if (r == 0)
                r = ntfs_router_add(p->router, "GET /v1/status", h_status, 0);
        if (r == 0)
                r = ntfs_router_add(p->router, "GET /health", h_status, 0);
        static const char *const deny[] = { "GET /{path*}", "POST /{path*}", "PUT /{path*}", "DELETE /{path*}",
                                            "PATCH /{path*}", "HEAD /{path*}" };
        for (size_t i = 0; r == 0 && i < ARRAY_SIZE(deny); i++)
                r = ntfs_router_add(p->router, deny[i], h_deny, 0);
        if (r < 0) {
                psock_free(p);
                return r;
        }
        struct ntfs_http_config cfg = { .socket_path = path, .router = p->router, .max_connections = 16 };
        if ((r = ntfs_http_server_new(&cfg, NULL, p, &p->srv)) < 0 || (r = ntfs_http_server_start(p->srv)) < 0) {
                if (r == -NTFS_ESTOREBUSY) /* the path is in use */
                        r = -EEXIST;
                ntfs_http_server_free(p->srv);
                p->srv = NULL;
                free(p->path);
                p->path = NULL; /* never unlink what we did not create */
                psock_free(p);
                return r;
        }
        *ret = p;
        return 0;
}

static int h_open(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "path", NULL };
        const char *name = d_param(req, "name"), *path;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "path", false, &path)) < 0)
                return r;
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, name, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        char def[PATH_MAX];
        if (!path) {
                snprintf(def, sizeof def, "%s/sessions", D.store_dir);
                if (mkdir(def, 0700) < 0 && errno != EEXIST)
                        return d_fail(resp, -errno, "socket directory");
                if (snprintf(def, sizeof def, "%s/sessions/%s.sock", D.store_dir, name) >= (int)sizeof def)
                        return ntfs_http_error(resp, -ENAMETOOLONG, "socket path too long");
                path = def;
        } else if (path[0] != '/' || strlen(path) >= 108) {
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'path' must be an absolute path under 108 bytes");
        }
        pthread_mutex_lock(&plock);
        for (struct psock *p = socks; p; p = p->next)
                if (strcmp(p->session, name) == 0 || strcmp(p->path, path) == 0) {
                        pthread_mutex_unlock(&plock);
                        return ntfs_http_error(resp, -EEXIST, "session '%s' already has a socket at %s",
                                               p->session, p->path);
                }
        struct psock *p;
        r = psock_new(name, path, &p);
        if (r == 0) {
                p->next = socks;
                socks = p;
        }
        pthread_mutex_unlock(&plock);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot open a socket at %s: %s", path, ntfs_strerror(r));
        log_info("per-session socket for %s at %s", name, path);
        return d_reply(resp, 201, json_pack("{s:s, s:s}", "session", name, "socket", path));
}

static struct psock *take(const char *session) {
        struct psock *found = NULL;
        pthread_mutex_lock(&plock);
        for (struct psock **pp = &socks; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->session, session) == 0) {
                        found = *pp;
                        *pp = found->next;
                        break;
                }
        pthread_mutex_unlock(&plock);
        return found;
}

static int h_close(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        struct psock *p = take(name);
        if (!p)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "session '%s' has no socket", name);
        psock_free(p);
        return d_reply(resp, 200, json_pack("{s:s, s:b}", "session", name, "closed", 1));
}

void d_persession_close(const char *session) {
        if (!session) {
                for (;;) {
                        pthread_mutex_lock(&plock);
                        struct psock *p = socks;
                        if (p)
                                socks = p->next;
                        pthread_mutex_unlock(&plock);
                        if (!p)
                                return;
                        psock_free(p);
                }
        }
        psock_free(take(session));
}

int routes_persession_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /v1/sessions/{name}/socket", h_open, 0 },
                { "DELETE /v1/sessions/{name}/socket", h_close, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
