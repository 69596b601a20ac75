/* SPDX-License-Identifier: MIT
 * ntfs-ctl's remote commands: remote add/ls/rm/tags/prune, push, pull,
 * clone.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

/* ---- remotes: S3 buckets, push / pull / clone (ctl/routes-remote.c, docs/remote.md) ---- */

#define REMOTE_TIMEOUT_MS (3600u * 1000)

static void print_transfer(const json_t *j) {
        const json_t *t = json_object_get(j, "transfer");
        if (!t)
                return;
        printf("  %lld objects in %lld packs, %lld requests, %lld bytes sent, %lld received\n",
               (long long)json_integer_value(json_object_get(t, "objects")),
               (long long)json_integer_value(json_object_get(t, "packs")),
               (long long)json_integer_value(json_object_get(t, "requests")),
               (long long)json_integer_value(json_object_get(t, "bytes_sent")),
               (long long)json_integer_value(json_object_get(t, "bytes_received")));
}

int cmd_remote_add(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *ak = flag(cmd, a, "access-key"), *sk = flag(cmd, a, "secret-key"), *region = flag(cmd, a, "region");
        if (!sk)
                sk = getenv("NTFS_S3_SECRET_KEY");
        if (!ak)
                ak = getenv("NTFS_S3_ACCESS_KEY");
        if (!ak != !sk)
                return usage_error(cmd, "give both --access-key and --secret-key (or NTFS_S3_ACCESS_KEY and NTFS_S3_SECRET_KEY)");
        json_t *body = json_pack("{s:s,s:s}", "name", a->pos[0], "url", a->pos[1]);
        if (!body || (ak && set_str(body, "access_key", ak) < 0) || (sk && set_str(body, "secret_key", sk) < 0) ||
            (region && set_str(body, "region", region) < 0)) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = call(c, "POST", "/v1/remotes", body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("added remote %s: %s\n", jstr(j, "name", a->pos[0]), jstr(j, "url", a->pos[1]));
        json_decref(j);
        return r;
}

int cmd_remote_ls(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        int r = call(c, "GET", "/v1/remotes", NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                size_t i;
                json_t *o;
                json_array_foreach(json_object_get(j, "remotes"), i, o)
                        printf("%s\t%s\t%s\t%s\n", jstr(o, "name", "-"), jstr(o, "url", "-"), jstr(o, "region", "-"),
                               json_is_true(json_object_get(o, "credentials")) ? "credentials" : "anonymous");
        }
        json_decref(j);
        return r;
}

int cmd_remote_rm(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *e = esc(a->pos[0]);
        _cleanup_free_ char *path = NULL;
        if (!e || asprintf(&path, "/v1/remotes/%s", e) < 0)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "DELETE", path, NULL, &j);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("removed remote %s\n", a->pos[0]);
        json_decref(j);
        return r;
}

/* A push/pull/clone: POST with a progress bar on a terminal (not with
 * --quiet or --json). body is consumed. */
static int remote_call(struct ctx *c, const struct cmd *cmd, struct args *a, const char *verb, const char *path,
                       json_t *body, json_t **ret) {
        struct progress_bar pb;
        progress_start_at(&pb, c, verb, "/v1/transfers/", false, true, has_flag(cmd, a, "quiet") || c->json);
        int r = 0;
        if (pb.id[0] && set_str(body, "progress", pb.id) < 0)
                r = oom(c);
        if (r == 0)
                r = call_full(c, "POST", path, body, REMOTE_TIMEOUT_MS, ret, NULL, false);
        progress_stop(&pb);
        json_decref(body);
        return r;
}

static void print_tags(const json_t *j, const char *what) {
        const json_t *t = json_object_get(j, "tags");
        if (!json_array_size(t))
                return;
        printf("  tags %s:", what);
        size_t i;
        json_t *o;
        json_array_foreach(t, i, o)
                printf(" %s", jstr(o, "name", "-"));
        printf("\n");
}

int cmd_push(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = session_path(a->pos[0], "/push");
        json_t *body = json_object();
        if (!path || !body || (a->npos > 1 && set_str(body, "remote", a->pos[1]) < 0) ||
            (has_flag(cmd, a, "tags") && json_object_set_new(body, "tags", json_true()) < 0)) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = remote_call(c, cmd, a, "pushing", path, body, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                if (json_is_true(json_object_get(j, "up_to_date")))
                        printf("%s: remote %s is up to date at %s\n", a->pos[0], jstr(j, "remote", "-"),
                               jstr(j, "short", "-"));
                else
                        printf("pushed %s to %s at %s\n", a->pos[0], jstr(j, "remote", "-"), jstr(j, "short", "-"));
                print_tags(j, "at the remote");
                print_transfer(j);
        }
        json_decref(j);
        return r;
}

int cmd_pull(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = session_path(a->pos[0], "/pull");
        json_t *body = json_object();
        if (!path || !body || (a->npos > 1 && set_str(body, "remote", a->pos[1]) < 0) ||
            (has_flag(cmd, a, "merge") && json_object_set_new(body, "merge", json_true()) < 0)) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = remote_call(c, cmd, a, "pulling", path, body, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                printf("%s: %s from %s, head %s\n", a->pos[0], jstr(j, "result", "-"), jstr(j, "remote", "-"),
                       jstr(j, "short", "-"));
                print_tags(j, "from the remote");
                print_transfer(j);
        }
        json_decref(j);
        return r;
}

int cmd_clone(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *slash = strchr(a->pos[0], '/');
        if (!slash || slash == a->pos[0] || !slash[1])
                return usage_error(cmd, "want REMOTE/SESSION, not '%s'", a->pos[0]);
        _cleanup_free_ char *rname = strndup(a->pos[0], (size_t)(slash - a->pos[0]));
        json_t *body = rname ? json_pack("{s:s,s:s,s:s}", "remote", rname, "session", slash + 1, "name", a->pos[1])
                             : NULL;
        if (!body)
                return oom(c);
        json_t *j = NULL;
        int r = remote_call(c, cmd, a, "cloning", "/v1/clone", body, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                printf("cloned %s to %s at %s\n", a->pos[0], jstr(j, "name", a->pos[1]), jstr(j, "short", "-"));
                print_tags(j, "from the remote");
                print_transfer(j);
        }
        json_decref(j);
        return r;
}

int cmd_remote_prune(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *g = flag(cmd, a, "grace");
        uint64_t grace = 3600;
        if (g && ntfs_parse_u64(g, 365u * 86400, &grace) < 0)
                return usage_error(cmd, "--grace wants seconds (0..31536000), not '%s'", g);
        _cleanup_free_ char *e = esc(a->pos[0]);
        _cleanup_free_ char *path = NULL;
        if (!e || asprintf(&path, "/v1/remotes/%s/prune", e) < 0)
                return oom(c);
        json_t *body = json_pack("{s:I,s:b}", "grace", (json_int_t)grace, "dry_run", has_flag(cmd, a, "dry-run"));
        if (!body)
                return oom(c);
        json_t *j = NULL;
        int r = call_full(c, "POST", path, body, REMOTE_TIMEOUT_MS, &j, NULL, false);
        json_decref(body);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                printf("%s %lld unindexed packs from %s (%lld younger than %llds kept)\n",
                       json_is_true(json_object_get(j, "dry_run")) ? "would delete" : "deleted",
                       (long long)json_integer_value(json_object_get(j, "deleted")), a->pos[0],
                       (long long)json_integer_value(json_object_get(j, "young")), (long long)grace);
        }
        json_decref(j);
        return r;
}

int cmd_remote_tags(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *e = esc(a->pos[0]);
        _cleanup_free_ char *s = esc(a->pos[1]);
        _cleanup_free_ char *path = NULL;
        if (!e || !s || asprintf(&path, "/v1/remotes/%s/tags?session=%s", e, s) < 0)
                return oom(c);
        json_t *j = NULL;
        int r = call_full(c, "GET", path, NULL, REMOTE_TIMEOUT_MS, &j, NULL, false);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
        } else {
                size_t i;
                json_t *o;
                json_array_foreach(json_object_get(j, "tags"), i, o)
                        printf("%s\t%.12s\t%s\n", jstr(o, "name", "-"), jstr(o, "commit", "-"), jstr(o, "scope", "-"));
        }
        json_decref(j);
        return r;
}
