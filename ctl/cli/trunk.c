/* SPDX-License-Identifier: MIT
 * ntfs-ctl's trunk commands: trunk init, fork, commit, abort, status.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

/* ---- trunk: trunks and forks (docs/trunk.md) -------------------------------------------- */

static char *trunk_seg_path(const char *prefix, const char *name, const char *suffix) {
        _cleanup_free_ char *e = esc(name);
        char *p = NULL;
        if (!e || asprintf(&p, "%s%s%s", prefix, e, suffix) < 0)
                return NULL;
        return p;
}

int cmd_trunk_init(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *from = flag(cmd, a, "from");
        if (!from)
                return usage_error(cmd, "--from SESSION is required");
        json_t *body = json_pack("{s:s, s:s}", "name", a->pos[0], "from", from);
        if (!body)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "POST", "/v1/trunks", body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("created trunk %s version %" JSON_INTEGER_FORMAT " at %s\n", a->pos[0],
                       json_integer_value(json_object_get(j, "version")), jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

int cmd_trunk_fork(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = trunk_seg_path("/v1/trunks/", a->pos[0], "/forks");
        json_t *body = json_pack("{s:s}", "session", a->pos[1]);
        const char *ver = flag(cmd, a, "version");
        uint64_t v = 0;
        if (ver && ntfs_parse_u64(ver, INT64_MAX, &v) < 0) {
                json_decref(body);
                return usage_error(cmd, "--version wants a number, not '%s'", ver);
        }
        if (!path || !body || (ver && json_object_set_new(body, "version", json_integer((json_int_t)v)) < 0)) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = call(c, "POST", path, body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("forked %s from trunk %s version %" JSON_INTEGER_FORMAT " at %s\n", a->pos[1], a->pos[0],
                       json_integer_value(json_object_get(j, "base_version")), jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

static void print_conflict_side(const char *label, const json_t *s) {
        char mode[32];
        if (!json_is_true(json_object_get(s, "present"))) {
                printf("    %-6s absent (commit %s)\n", label, jstr(s, "commit", "-"));
                return;
        }
        snprintf(mode, sizeof mode, "%s", jstr(s, "mode", "-"));
        json_int_t size = 0;
        jint(s, "size", &size);
        const char *sha = jstr(s, "sha256", NULL), *target = jstr(s, "target", NULL);
        _cleanup_free_ char *t = target ? sanitize_dup(target, 200) : NULL;
        printf("    %-6s %s mode %s size %" JSON_INTEGER_FORMAT "%s%.12s%s%s (commit %s)\n", label,
               jstr(s, "type", "-"), mode, size, sha ? " sha256 " : "", sha ? sha : "", t ? " -> " : "",
               t ? t : "", jstr(s, "commit", "-"));
}

int cmd_trunk_commit(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = trunk_seg_path("/v1/forks/", a->pos[0], "/commit");
        if (!path)
                return oom(c);
        json_t *j = NULL;
        long status = 0;
        int r = call_full(c, "POST", path, NULL, DEFAULT_TIMEOUT_MS, &j, &status, true);
        if (r && status == 409 && jtrue(j, "conflict")) {
                json_t *cs = json_object_get(j, "conflicts");
                fprintf(stderr, "ntfs-ctl: fork %s conflicts with trunk %s (now %s) on %zu path%s (conflict)\n",
                        a->pos[0], jstr(j, "trunk", "-"), jstr(j, "current_trunk_id", "-"), json_array_size(cs),
                        json_array_size(cs) == 1 ? "" : "s");
                if (c->json)
                        print_json(j);
                else {
                        size_t i;
                        json_t *x;
                        json_array_foreach(cs, i, x) {
                                printf("CONFLICT (%s): ", jstr(x, "reason", "-"));
                                print_path(jstr(x, "path", "?"));
                                putchar('\n');
                                print_conflict_side("fork", json_object_get(x, "fork"));
                                print_conflict_side("trunk", json_object_get(x, "trunk"));
                        }
                        printf("abort it (ntfs-ctl trunk abort %s) or re-fork it from the trunk's head\n"
                               "(ntfs-ctl trunk fork %s %s), redo the change and commit again\n",
                               a->pos[0], jstr(j, "trunk", "TRUNK"), a->pos[0]);
                }
                json_decref(j);
                return EXIT_FAIL;
        }
        if (r) {
                if (!status)
                        return r; /* not reached: already reported */
                if (j) {
                        const char *code = jstr(json_object_get(j, "error"), "code", "error");
                        const char *msg = jstr(json_object_get(j, "error"), "message", "the commit failed");
                        _cleanup_free_ char *m = sanitize_dup(msg, 1024);
                        r = fail(c, j, code, "%s", m ? m : code);
                        json_decref(j);
                        return r;
                }
                return fail(c, NULL, "error", "the commit failed (HTTP %ld)", status);
        }
        if (c->json)
                r = print_json(j);
        else {
                const char *how = jtrue(j, "noop") ? "nothing to merge" : jtrue(j, "fast_forward") ? "fast-forward"
                                                                                                 : "merged";
                printf("committed %s to trunk %s: version %" JSON_INTEGER_FORMAT " at %s (%s)\n", a->pos[0],
                       jstr(j, "trunk", "-"), json_integer_value(json_object_get(j, "version")), jstr(j, "short", "-"),
                       how);
        }
        json_decref(j);
        return r;
}

int cmd_trunk_abort(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = trunk_seg_path("/v1/forks/", a->pos[0], "/abort");
        if (!path)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "POST", path, NULL, &j);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("aborted fork %s of trunk %s\n", a->pos[0], jstr(j, "trunk", "-"));
        json_decref(j);
        return r;
}

int cmd_trunk_status(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = trunk_seg_path("/v1/trunks/", a->pos[0], "");
        if (!path)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "GET", path, NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        printf("trunk %s: version %" JSON_INTEGER_FORMAT " at %s, %" JSON_INTEGER_FORMAT " active fork(s)\n",
               a->pos[0], json_integer_value(json_object_get(j, "version")), jstr(j, "short", "-"),
               json_integer_value(json_object_get(j, "active_forks")));
        size_t i;
        json_t *x;
        printf("versions:\n");
        json_array_foreach(json_object_get(j, "versions"), i, x) {
                char tb[64];
                printf("  %4" JSON_INTEGER_FORMAT "  %s  %s%s%s\n", json_integer_value(json_object_get(x, "version")),
                       jstr(x, "short", "-"), human_time(json_object_get(x, "created_at"), tb, sizeof tb),
                       jstr(x, "merged_from", NULL) ? "  from " : "", jstr(x, "merged_from", ""));
        }
        printf("forks:\n");
        json_array_foreach(json_object_get(j, "forks"), i, x) {
                printf("  %-24s %-10s base %" JSON_INTEGER_FORMAT "\n", jstr(x, "session", "-"),
                       jstr(x, "status", "-"), json_integer_value(json_object_get(x, "base_version")));
        }
        json_decref(j);
        return 0;
}
