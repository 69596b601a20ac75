/* SPDX-License-Identifier: MIT
 * ntfs-ctl's commands about the daemon and the whole store: status, quota,
 * gc, compact, fsck, and api (a raw request).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

int cmd_status(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        int r = call(c, "GET", "/v1/status", NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        char b1[64], b2[64];
        json_int_t n;
        printf("ntfsd %s", jstr(j, "version", "?"));
        if (jint(j, "pid", &n))
                printf(" (pid %" JSON_INTEGER_FORMAT ")", n);
        printf("\n");
        struct table t = { .ncols = 2 };
        const char *rows[][2] = {
                { "store:", jstr(j, "store", "-") },
                { "sessions:", jscalar(json_object_get(j, "sessions"), b1, sizeof b1) },
                { "tags:", jscalar(json_object_get(j, "tags"), b2, sizeof b2) },
        };
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                table_add(&t, rows[i]);
        char objs[128], hb[64];
        if (jint(j, "objects", &n)) {
                json_int_t used = 0;
                if (jint(j, "used_bytes", &used))
                        snprintf(objs, sizeof objs, "%" JSON_INTEGER_FORMAT " (%s)", n,
                                 human_bytes((uint64_t)NTFS_MAX(used, 0), hb, sizeof hb));
                else
                        snprintf(objs, sizeof objs, "%" JSON_INTEGER_FORMAT, n);
                table_add(&t, (const char *[]){ "objects:", objs });
        }
        char wd[160];
        if (jint(j, "data_bytes", &n)) {
                human_bytes((uint64_t)NTFS_MAX(n, 0), wd, sizeof wd);
                json_int_t re;
                char rb[64];
                if (jint(j, "data_reusable_bytes", &re) && re > 0) {
                        size_t off = strlen(wd);
                        snprintf(wd + off, sizeof wd - off, " (%s of it freed, reusable)",
                                 human_bytes((uint64_t)re, rb, sizeof rb));
                }
                table_add(&t, (const char *[]){ "working data:", wd });
        }
        json_t *space = json_object_get(j, "space");
        if (json_is_object(space)) {
                json_int_t live = 0, fr = 0, rec = 0, disk = 0;
                jint(space, "live_bytes", &live);
                jint(space, "free_in_file_bytes", &fr);
                jint(space, "reclaimable_bytes", &rec);
                jint(space, "disk_bytes", &disk);
                char line[256], s1[64], s2[64], s3[64], s4[64];
                snprintf(line, sizeof line, "%s live, %s free in the file, %s reclaimable by compact; %s on disk",
                         human_bytes((uint64_t)NTFS_MAX(live, 0), s1, sizeof s1),
                         human_bytes((uint64_t)NTFS_MAX(fr, 0), s2, sizeof s2),
                         human_bytes((uint64_t)NTFS_MAX(rec, 0), s3, sizeof s3),
                         human_bytes((uint64_t)NTFS_MAX(disk, 0), s4, sizeof s4));
                table_add(&t, (const char *[]){ "store file:", line });
        }
        json_t *jail = json_object_get(j, "jail");
        if (json_is_object(jail)) {
                char line[512] = "";
                size_t off = 0;
                const char *k;
                json_t *v;
                json_object_foreach(jail, k, v) {
                        char vb[64];
                        int w = snprintf(line + off, sizeof line - off, "%s%s=%s", off ? " " : "", k,
                                         jscalar(v, vb, sizeof vb));
                        if (w < 0 || (size_t)w >= sizeof line - off)
                                break;
                        off += (size_t)w;
                }
                table_add(&t, (const char *[]){ "jail:", line });
        }
        table_print(&t);
        table_free(&t);
        json_t *mounts = json_object_get(j, "mounts");
        if (json_is_array(mounts)) {
                printf("mounts:%s\n", json_array_size(mounts) ? "" : " none");
                struct table mt = { .ncols = 4 };
                size_t i;
                json_t *m;
                json_array_foreach(mounts, i, m) {
                        if (json_is_string(m)) {
                                table_add(&mt, (const char *[]){ " ", json_string_value(m), "", "" });
                                continue;
                        }
                        table_add(&mt, (const char *[]){ " ", jstr(m, "mountpoint", "-"), jstr(m, "session", "-"),
                                                         jtrue(m, "ro") ? "ro" : "rw" });
                }
                table_print(&mt);
                table_free(&mt);
        }
        json_decref(j);
        return 0;
}

int cmd_quota(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *bs = flag(cmd, a, "bytes"), *is = flag(cmd, a, "inodes");
        if (!bs || !is)
                return usage_error(cmd, "quota needs both --bytes and --inodes");
        uint64_t b, n;
        if (parse_size(bs, &b) < 0)
                return usage_error(cmd, "--bytes needs a size such as 1048576, 512K, 10M or 2G, not '%s'", bs);
        if (parse_num_flag(cmd, "inodes", is, INT64_MAX, &n))
                return EXIT_USAGE;
        _cleanup_free_ char *path = session_path(a->pos[0], "/quota");
        json_t *body = json_pack("{s:I,s:I}", "bytes", (json_int_t)b, "inodes", (json_int_t)n);
        if (!path || !body) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = call(c, "PUT", path, body, &j);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else {
                char b1[64], b2[64];
                printf("quota of %s: %s bytes, %s inodes\n", jstr(j, "name", a->pos[0]),
                       jscalar(json_object_get(j, "quota_bytes"), b1, sizeof b1),
                       jscalar(json_object_get(j, "quota_inodes"), b2, sizeof b2));
        }
        json_decref(j);
        return r;
}

int cmd_gc(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        int r = call_full(c, "POST", "/v1/gc", NULL, 0, &j, NULL, false);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else {
                char b1[64], b2[64], hb[64];
                json_int_t freed = 0;
                jint(j, "bytes_freed", &freed);
                printf("freed %s of %s objects (%s)\n", jscalar(json_object_get(j, "objects_freed"), b1, sizeof b1),
                       jscalar(json_object_get(j, "objects_before"), b2, sizeof b2),
                       human_bytes((uint64_t)NTFS_MAX(freed, 0), hb, sizeof hb));
        }
        json_decref(j);
        return r;
}

int cmd_compact(struct ctx *c, const struct cmd *cmd, struct args *a) {
        struct progress_bar pb;
        progress_start_at(&pb, c, "compacting", "/v1/compact/progress/", false, false,
                          has_flag(cmd, a, "quiet") || c->json);
        json_t *body = json_object();
        if (body && pb.id[0])
                json_object_set_new(body, "progress", json_string(pb.id));
        if (body && has_flag(cmd, a, "remount"))
                json_object_set_new(body, "remount", json_true());
        json_t *j = NULL;
        int r = call_full(c, "POST", "/v1/compact", body, 0, &j, NULL, false);
        progress_stop(&pb);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else {
                json_int_t before = 0, after = 0;
                jint(j, "disk_bytes_before", &before);
                jint(j, "disk_bytes_after", &after);
                char b1[64], b2[64], b3[64];
                printf("compacted data.mdb: %s -> %s on disk (%s freed)\n",
                       human_bytes((uint64_t)NTFS_MAX(before, 0), b1, sizeof b1),
                       human_bytes((uint64_t)NTFS_MAX(after, 0), b2, sizeof b2),
                       human_bytes((uint64_t)NTFS_MAX(before - after, 0), b3, sizeof b3));
                json_int_t nre = 0;
                if (jint(j, "remounted", &nre) && nre > 0)
                        printf("mounted again: %" JSON_INTEGER_FORMAT "\n", nre);
                json_t *failed = json_object_get(j, "remount_failed");
                size_t i;
                json_t *f;
                json_array_foreach(failed, i, f) fprintf(stderr, "ntfs-ctl: could not mount %s again: %s\n",
                                                          jstr(f, "mountpoint", "?"), jstr(f, "error", "?"));
                if (json_array_size(failed))
                        r = 1;
        }
        json_decref(j);
        return r;
}

int cmd_fsck(struct ctx *c, const struct cmd *cmd, struct args *a) {
        (void)cmd, (void)a;
        json_t *j = NULL;
        long status = 0;
        int r = call_full(c, "POST", "/v1/fsck", NULL, 0, &j, &status, true);
        if (r && !j)
                return r; /* transport failure, already reported */
        bool ok = r == 0 && jtrue(j, "ok");
        if (c->json)
                print_json(j);
        else {
                char b1[64], b2[64];
                printf("%s: %s objects, %s commits checked\n", ok ? "ok" : "CORRUPT",
                       jscalar(json_object_get(j, "objects_checked"), b1, sizeof b1),
                       jscalar(json_object_get(j, "commits"), b2, sizeof b2));
                size_t i;
                json_t *p;
                json_array_foreach(json_object_get(j, "problems"), i, p) {
                        char pb[1024];
                        const char *s = json_is_string(p) ? json_string_value(p) : NULL;
                        if (!s) {
                                char *d = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY);
                                snprintf(pb, sizeof pb, "%s", d ? d : "?");
                                free(d);
                                s = pb;
                        }
                        _cleanup_free_ char *sp = sanitize_dup(s, 1000);
                        printf("  %s\n", sp ? sp : "?");
                }
        }
        if (!ok) {
                const char *code = "corrupt_object", *msg = NULL;
                json_t *e = json_object_get(j, "error");
                if (json_is_object(e)) {
                        code = jstr(e, "code", code);
                        msg = jstr(e, "message", NULL);
                }
                fprintf(stderr, "ntfs-ctl: %s (%s)\n", msg ? msg : "the store has problems", code);
        }
        json_decref(j);
        return ok ? 0 : EXIT_FAIL;
}

int cmd_api(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *method = a->pos[0], *path = a->pos[1];
        static const char *methods[] = { "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD" };
        bool known = false;
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++)
                known |= strcmp(methods[i], method) == 0;
        if (!known)
                return usage_error(cmd, "unknown method '%s'", method);
        if (path[0] != '/')
                return usage_error(cmd, "the path must start with '/'");
        for (const char *p = path; *p; p++)
                if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                        return usage_error(cmd, "the path must be percent-encoded (no spaces or control characters)");
        json_t *body = NULL;
        if (a->npos > 2) {
                json_error_t err;
                body = json_loads(a->pos[2], JSON_REJECT_DUPLICATES, &err);
                if (!body)
                        return usage_error(cmd, "BODY is not JSON: %s", err.text);
        }
        json_t *j = NULL;
        int r = call_full(c, method, path, body, 0, &j, NULL, false);
        json_decref(body);
        if (r)
                return r;
        r = print_json(j);
        json_decref(j);
        return r;
}
