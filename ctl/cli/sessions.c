/* SPDX-License-Identifier: MIT
 * ntfs-ctl's session and mount commands: session new/ls/show/end, mount,
 * mounts, umount.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

static const char *mounts_text(const json_t *v, char *buf, size_t len) {
        if (json_is_array(v)) {
                size_t off = 0, i;
                json_t *m;
                buf[0] = 0;
                json_array_foreach(v, i, m) {
                        const char *mp = json_is_string(m) ? json_string_value(m) : jstr(m, "mountpoint", "?");
                        int w = snprintf(buf + off, len - off, "%s%s", off ? "," : "", mp);
                        if (w < 0 || (size_t)w >= len - off)
                                break;
                        off += (size_t)w;
                }
                return off ? buf : "-";
        }
        return jscalar(v, buf, len);
}

int cmd_session_new(struct ctx *c, const struct cmd *cmd, struct args *a) {
        json_t *body = json_pack("{s:s}", "name", a->pos[0]);
        const char *from = flag(cmd, a, "from");
        if (!body || (from && set_str(body, "from", from) < 0)) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = call(c, "POST", "/v1/sessions", body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("created session %s at %s\n", jstr(j, "name", a->pos[0]), jstr(j, "short", "-"));
        json_decref(j);
        return r;
}

int cmd_session_ls(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        int r = call(c, "GET", "/v1/sessions", NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        struct table t = { .ncols = 7 };
        table_add(&t, (const char *[]){ "NAME", "HEAD", "DIRTY", "BYTES", "INODES", "CREATED", "MOUNTS" });
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(j, "sessions"), i, s) {
                char b1[64], b2[64], b3[64], b5[1024];
                json_int_t n;
                table_add(&t, (const char *[]){
                                      jstr(s, "name", "?"), jstr(s, "short", "-"), jtrue(s, "dirty") ? "yes" : "no",
                                      jint(s, "bytes", &n) ? human_bytes((uint64_t)NTFS_MAX(n, 0), b1, sizeof b1) : "-",
                                      jscalar(json_object_get(s, "inodes"), b2, sizeof b2),
                                      human_time(json_object_get(s, "created"), b3, sizeof b3),
                                      mounts_text(json_object_get(s, "mounts"), b5, sizeof b5) });
        }
        if (t.nrows == 1)
                printf("no sessions\n");
        else
                table_print(&t);
        table_free(&t);
        json_decref(j);
        return 0;
}

int cmd_session_show(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = session_path(a->pos[0], "");
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
        char b[8][1024];
        json_int_t n;
        char quota[256];
        json_int_t qb = 0, qi = 0;
        bool has_qb = jint(j, "quota_bytes", &qb), has_qi = jint(j, "quota_inodes", &qi);
        snprintf(quota, sizeof quota, "%s bytes, %s inodes",
                 has_qb && qb > 0 ? human_bytes((uint64_t)qb, b[6], sizeof b[6]) : "unlimited",
                 has_qi && qi > 0 ? jscalar(json_object_get(j, "quota_inodes"), b[7], sizeof b[7]) : "unlimited");
        const char *floor = jstr(j, "floor", NULL);
        struct table t = { .ncols = 2 };
        const char *rows[][2] = {
                { "name:", jstr(j, "name", a->pos[0]) },
                { "head:", jstr(j, "head", "-") },
                { "floor:", floor ? floor : jscalar(json_object_get(j, "floor"), b[0], sizeof b[0]) },
                { "dirty:", jtrue(j, "dirty") ? "yes" : "no" },
                { "bytes:", jint(j, "bytes", &n) ? human_bytes((uint64_t)NTFS_MAX(n, 0), b[1], sizeof b[1]) : "-" },
                { "inodes:", jscalar(json_object_get(j, "inodes"), b[2], sizeof b[2]) },
                { "quota:", quota },
                { "created:", human_time(json_object_get(j, "created"), b[3], sizeof b[3]) },
                { "mounts:", mounts_text(json_object_get(j, "mounts"), b[4], sizeof b[4]) },
        };
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                table_add(&t, rows[i]);
        table_print(&t);
        table_free(&t);
        json_decref(j);
        return 0;
}

int cmd_session_end(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *path = session_path(a->pos[0], "");
        if (!path)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "DELETE", path, NULL, &j);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("ended session %s\n", a->pos[0]);
        json_decref(j);
        return r;
}

/* realpath() of the parent plus the last component: absolute, symlinks in
 * the parent resolved, and never a stat of the mountpoint itself (which a
 * stuck FUSE mount would hang). Falls back to a lexical join with the cwd. */
static char *absolute_path(const char *p, bool resolve_leaf) {
        if (resolve_leaf) {
                char *r = realpath(p, NULL);
                if (r)
                        return r;
        }
        _cleanup_free_ char *copy = strdup(p);
        if (!copy)
                return NULL;
        size_t n = strlen(copy);
        while (n > 1 && copy[n - 1] == '/')
                copy[--n] = 0;
        char *slash = strrchr(copy, '/');
        const char *dir = ".", *leaf = copy;
        if (slash == copy) {
                dir = "/";
                leaf = copy + 1;
        } else if (slash) {
                *slash = 0;
                dir = copy;
                leaf = slash + 1;
        }
        _cleanup_free_ char *rdir = realpath(dir, NULL);
        char *out = NULL;
        if (strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0 || leaf[0] == 0) {
                char *r = realpath(p, NULL);
                return r;
        }
        if (rdir) {
                if (asprintf(&out, "%s%s%s", rdir, strcmp(rdir, "/") == 0 ? "" : "/", leaf) < 0)
                        return NULL;
                return out;
        }
        if (p[0] == '/')
                return strdup(p);
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
                return NULL;
        if (asprintf(&out, "%s/%s", cwd, p) < 0)
                return NULL;
        return out;
}

int cmd_mount(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *at = flag(cmd, a, "at"), *idle = flag(cmd, a, "autocheckpoint"),
                   *maxs = flag(cmd, a, "autocheckpoint-max");
        uint64_t idle_s = 0, max_s = 0;
        if (idle && parse_num_flag(cmd, "autocheckpoint", idle, 86400, &idle_s))
                return EXIT_USAGE;
        if (maxs && parse_num_flag(cmd, "autocheckpoint-max", maxs, 86400, &max_s))
                return EXIT_USAGE;
        _cleanup_free_ char *mp = realpath(a->pos[1], NULL);
        if (!mp) {
                int e = errno;
                return fail(c, NULL, ntfs_errcode(-e), "mountpoint %s: %s", a->pos[1], strerror(e));
        }
        struct stat st;
        if (stat(mp, &st) < 0 || !S_ISDIR(st.st_mode))
                return fail(c, NULL, "not_a_directory", "mountpoint %s is not a directory", mp);
        json_t *body = json_pack("{s:s,s:s}", "session", a->pos[0], "mountpoint", mp);
        if (!body)
                return oom(c);
        if (has_flag(cmd, a, "ro"))
                json_object_set_new(body, "ro", json_true());
        if (at)
                set_str(body, "at", at);
        if (idle)
                json_object_set_new(body, "autocheckpoint", json_integer((json_int_t)idle_s));
        if (maxs)
                json_object_set_new(body, "autocheckpoint_max", json_integer((json_int_t)max_s));
        if (has_flag(cmd, a, "relatime"))
                json_object_set_new(body, "relatime", json_true());
        json_t *j = NULL;
        int r = call(c, "POST", "/v1/mounts", body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else {
                const char *mat = jstr(j, "at", NULL);
                printf("mounted %s%s%s at %s (%s", a->pos[0], mat ? "@" : "", mat ? mat : "",
                       jstr(j, "mountpoint", mp), jtrue(j, "ro") || has_flag(cmd, a, "ro") ? "ro" : "rw");
                if (idle)
                        printf(", autocheckpoint after %" PRIu64 " s idle", idle_s);
                if (jtrue(j, "relatime"))
                        printf(", relatime");
                printf(")\n");
        }
        json_decref(j);
        return r;
}

int cmd_mounts(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        int r = call(c, "GET", "/v1/mounts", NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        struct table t = { .ncols = 5 };
        table_add(&t, (const char *[]){ "MOUNTPOINT", "SESSION", "MODE", "AT", "AUTOCHECKPOINT" });
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(j, "mounts"), i, m) {
                char b1[64], b2[64];
                json_int_t ac = 0;
                const char *acs = "off";
                if (jint(m, "autocheckpoint", &ac) && ac > 0) {
                        snprintf(b2, sizeof b2, "%" JSON_INTEGER_FORMAT " s", ac);
                        acs = b2;
                }
                table_add(&t, (const char *[]){ jstr(m, "mountpoint", "?"), jstr(m, "session", "-"),
                                                jtrue(m, "ro") ? "ro" : "rw",
                                                jscalar(json_object_get(m, "at"), b1, sizeof b1), acs });
        }
        if (t.nrows == 1)
                printf("no mounts\n");
        else
                table_print(&t);
        table_free(&t);
        json_decref(j);
        return 0;
}

int cmd_umount(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd;
        _cleanup_free_ char *mp = absolute_path(a->pos[0], false);
        if (!mp)
                return fail(c, NULL, "invalid_argument", "cannot make %s absolute", a->pos[0]);
        json_t *body = json_pack("{s:s}", "mountpoint", mp);
        if (!body)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "POST", "/v1/mounts/unmount", body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else
                printf("unmounted %s\n", jstr(j, "mountpoint", mp));
        json_decref(j);
        return r;
}
