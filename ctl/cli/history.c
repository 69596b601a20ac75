/* SPDX-License-Identifier: MIT
 * ntfs-ctl's history commands: checkpoint, fork, tag, tags, rollback, log,
 * diff.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

int cmd_checkpoint(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = session_path(a->pos[0], "/checkpoint");
        json_t *body = json_object();
        const char *m = flag(cmd, a, "message");
        if (!path || !body || (m && set_str(body, "message", m) < 0)) {
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
                printf("%s\n", jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

int cmd_fork(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = session_path(a->pos[0], "/fork");
        json_t *body = json_pack("{s:s}", "name", a->pos[1]);
        const char *at = flag(cmd, a, "at");
        if (!path || !body || (at && set_str(body, "at", at) < 0)) {
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
                printf("forked %s to %s at %s\n", a->pos[0], jstr(j, "name", a->pos[1]), jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

int cmd_tag(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *at = flag(cmd, a, "at"), *scope = flag(cmd, a, "scope");
        if (scope && strcmp(scope, "session") != 0 && strcmp(scope, "store") != 0)
                return usage_error(cmd, "--scope must be 'session' or 'store', not '%s'", scope);
        _cleanup_free_ char *path = session_path(a->pos[0], "/tags");
        json_t *body = json_pack("{s:s}", "tag", a->pos[1]);
        if (!path || !body || (at && set_str(body, "at", at) < 0) || (scope && set_str(body, "scope", scope) < 0)) {
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
                printf("tagged %s as %s (%s)\n", jstr(j, "short", "-"), jstr(j, "tag", a->pos[1]),
                       jstr(j, "scope", scope ? scope : "session"));
        json_decref(j);
        return r;
}

int cmd_tags(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = NULL;
        if (a->npos == 1) {
                _cleanup_free_ char *e = esc(a->pos[0]);
                if (!e || asprintf(&path, "/v1/tags?session=%s", e) < 0)
                        return oom(c);
        } else if (!(path = strdup("/v1/tags")))
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
        struct table t = { .ncols = 5 };
        table_add(&t, (const char *[]){ "TAG", "COMMIT", "SCOPE", "SESSION", "CREATED" });
        size_t i;
        json_t *tg;
        json_array_foreach(json_object_get(j, "tags"), i, tg) {
                char b1[64], b2[64];
                table_add(&t, (const char *[]){ jstr(tg, "tag", "?"), jstr(tg, "short", "-"), jstr(tg, "scope", "-"),
                                                jscalar(json_object_get(tg, "session"), b1, sizeof b1),
                                                human_time(json_object_get(tg, "created"), b2, sizeof b2) });
        }
        if (t.nrows == 1)
                printf("no tags\n");
        else
                table_print(&t);
        table_free(&t);
        json_decref(j);
        return 0;
}

int cmd_rollback(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *to = flag(cmd, a, "to"), *steps = flag(cmd, a, "steps");
        if (!!to == !!steps)
                return usage_error(cmd, "give exactly one of --to and --steps");
        uint64_t n = 0;
        if (steps && parse_num_flag_range(cmd, "steps", steps, 1, 1000000, &n))
                return EXIT_USAGE;
        _cleanup_free_ char *path = session_path(a->pos[0], "/rollback");
        json_t *body = to ? json_pack("{s:s}", "to", to) : json_pack("{s:I}", "steps", (json_int_t)n);
        if (!path || !body) {
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
                printf("%s is now at %s\n", a->pos[0], jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

int cmd_log(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *max = flag(cmd, a, "max-count");
        uint64_t n = 0;
        if (max && parse_num_flag(cmd, "max-count", max, 1000000, &n))
                return EXIT_USAGE;
        _cleanup_free_ char *base = session_path(a->pos[0], "/log");
        _cleanup_free_ char *path = NULL;
        if (!base || (max ? asprintf(&path, "%s?max=%" PRIu64, base, n) : asprintf(&path, "%s", base)) < 0)
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
        size_t i;
        json_t *cm;
        json_array_foreach(json_object_get(j, "commits"), i, cm) {
                const char *sh = jstr(cm, "short", NULL);
                char fallback[13];
                if (!sh) {
                        snprintf(fallback, sizeof fallback, "%s", jstr(cm, "commit", "?"));
                        sh = fallback;
                }
                printf("%s", sh);
                json_t *tags = json_object_get(cm, "tags");
                if (json_is_array(tags) && json_array_size(tags) > 0) {
                        size_t k;
                        json_t *tg;
                        printf(" (");
                        json_array_foreach(tags, k, tg) {
                                const char *name = json_is_string(tg) ? json_string_value(tg) : jstr(tg, "tag", "?");
                                _cleanup_free_ char *sn = sanitize_dup(name, 256);
                                printf("%stag: %s", k ? ", " : "", sn ? sn : "?");
                        }
                        printf(")");
                }
                const char *msg = jstr(cm, "message", "");
                /* The first line of the message, like --oneline. */
                size_t len = strcspn(msg, "\n");
                _cleanup_free_ char *line = strndup(msg, NTFS_MIN(len, (size_t)1000));
                _cleanup_free_ char *sl = line ? sanitize_dup(line, 1000) : NULL;
                if (sl && sl[0])
                        printf(" %s", sl);
                else {
                        json_t *eff = json_object_get(cm, "effect");
                        char eb[64];
                        if (eff && !json_is_null(eff) && !(json_is_string(eff) && !json_string_value(eff)[0]))
                                printf(" [effect %s]", jscalar(eff, eb, sizeof eb));
                        else
                                printf(" (no message)");
                }
                printf("\n");
        }
        json_decref(j);
        return 0;
}

static char diff_letter(const char *kind) {
        if (!kind)
                return '?';
        if (strcmp(kind, "added") == 0)
                return 'A';
        if (strcmp(kind, "deleted") == 0)
                return 'D';
        if (strcmp(kind, "modified") == 0)
                return 'M';
        if (strcmp(kind, "type") == 0)
                return 'T';
        if (strcmp(kind, "mode") == 0)
                return 'P';
        return '?';
}

int cmd_diff(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *base = session_path(a->pos[0], "/diff");
        _cleanup_free_ char *from = esc(a->pos[1]);
        _cleanup_free_ char *to = a->npos > 2 ? esc(a->pos[2]) : NULL;
        _cleanup_free_ char *path = NULL;
        if (!base || !from || (a->npos > 2 && !to) ||
            asprintf(&path, "%s?from=%s%s%s", base, from, to ? "&to=" : "", to ? to : "") < 0)
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
        size_t i;
        json_t *ch;
        json_array_foreach(json_object_get(j, "changes"), i, ch) {
                char l = diff_letter(jstr(ch, "kind", NULL));
                printf("%c\t", l);
                print_path(jstr(ch, "path", "?"));
                json_int_t om, nm;
                if (l == 'P' && jint(ch, "old_mode", &om) && jint(ch, "new_mode", &nm))
                        printf("\t%04o -> %04o", (unsigned)(om & 07777), (unsigned)(nm & 07777));
                printf("\n");
        }
        json_decref(j);
        return 0;
}
