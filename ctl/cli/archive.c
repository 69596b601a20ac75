/* SPDX-License-Identifier: MIT
 * ntfs-ctl's archive commands: export (a commit as a tar archive) and
 * import (a session from an archive).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

/* ---- export / import (archives; docs/archive.md) ------------------------------ */

static int archive_format_of(const struct cmd *cmd, const char *fmt_flag, const char *file, const char **ret) {
        static const char *const known[] = { "tar", "tar.gz", "tgz", "tar.zst" };
        if (fmt_flag) {
                for (size_t i = 0; i < ARRAY_SIZE(known); i++)
                        if (strcmp(fmt_flag, known[i]) == 0) {
                                *ret = strcmp(fmt_flag, "tgz") == 0 ? "tar.gz" : fmt_flag;
                                return 0;
                        }
                return usage_error(cmd, "unknown --format '%s' (tar, tar.gz, tgz, tar.zst)", fmt_flag);
        }
        static const struct {
                const char *suffix, *fmt;
        } sfx[] = { { ".tar", "tar" }, { ".tar.gz", "tar.gz" }, { ".tgz", "tar.gz" }, { ".tar.zst", "tar.zst" },
                    { ".tzst", "tar.zst" } };
        size_t n = strlen(file);
        for (size_t i = 0; i < ARRAY_SIZE(sfx); i++) {
                size_t m = strlen(sfx[i].suffix);
                if (n > m && strcmp(file + n - m, sfx[i].suffix) == 0) {
                        *ret = sfx[i].fmt;
                        return 0;
                }
        }
        if (strcmp(file, "-") == 0) {
                *ret = "tar";
                return 0;
        }
        return usage_error(cmd, "cannot tell the format of '%s' from its name: use .tar, .tar.gz, .tgz, .tar.zst "
                                "or --format", file);
}

/* The part file an export is writing: a signal that ends ntfs-ctl (Ctrl-C,
 * SIGTERM, SIGHUP, a closed pipe) removes it first, so that no partial
 * archive is ever left (docs/cli.md). unlink() is async-signal-safe. */
static const char *volatile part_path;
static const int part_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
static struct sigaction part_saved[ARRAY_SIZE(part_signals)];

static void part_on_signal(int sig) {
        const char *p = part_path;
        if (p)
                unlink(p);
        signal(sig, SIG_DFL);
        raise(sig);
}

static void part_guard(const char *path) {
        part_path = path;
        struct sigaction sa = { .sa_handler = part_on_signal };
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < ARRAY_SIZE(part_signals); i++)
                sigaction(part_signals[i], &sa, &part_saved[i]);
}

static void part_unguard(void) {
        for (size_t i = 0; i < ARRAY_SIZE(part_signals); i++)
                sigaction(part_signals[i], &part_saved[i], NULL);
        part_path = NULL;
}

int cmd_export(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *spec = a->pos[0], *file = a->pos[1], *fmt = NULL;
        const char *at_flag = flag(cmd, a, "at");
        int r = archive_format_of(cmd, flag(cmd, a, "format"), file, &fmt);
        if (r)
                return r;
        /* NAME@REF: the first '@' splits (use --at for a session name with '@') */
        _cleanup_free_ char *name = strdup(spec);
        if (!name)
                return oom(c);
        const char *at = at_flag;
        char *sep = at_flag ? NULL : strchr(name, '@');
        if (sep) {
                *sep = 0;
                at = sep + 1;
                if (!*at)
                        return usage_error(cmd, "nothing after '@' in '%s'", spec);
        }
        if (!*name)
                return usage_error(cmd, "no session name in '%s'", spec);
        bool to_stdout = strcmp(file, "-") == 0;
        if (to_stdout && isatty(STDOUT_FILENO))
                return usage_error(cmd, "refusing to write an archive to a terminal; redirect stdout or name a file");

        _cleanup_free_ char *base = session_path(name, "/export");
        _cleanup_free_ char *eat = at ? esc(at) : NULL;
        if (!base || (at && !eat))
                return oom(c);
        struct progress_bar pb;
        progress_start(&pb, c, "exporting", false, has_flag(cmd, a, "quiet") || c->json);
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s?format=%s%s%s%s%s%s", base, fmt, at ? "&at=" : "", at ? eat : "",
                     pb.id[0] ? "&progress=" : "", pb.id, has_flag(cmd, a, "keep-setid") ? "&keep_setid=1" : "") < 0) {
                progress_stop(&pb);
                return oom(c);
        }
        /* Into a temporary file next to FILE, renamed over it on success: a
         * failed export leaves no partial archive behind. */
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -1;
        if (to_stdout)
                fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
        else if (asprintf(&tmp, "%s.part-%d", file, (int)getpid()) >= 0)
                fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
        if (fd < 0) {
                int e = errno;
                progress_stop(&pb);
                return fail(c, NULL, "io_error", "cannot write %s: %s", to_stdout ? "stdout" : file, strerror(e));
        }
        ntfs_client *cl;
        long status = 0;
        struct ntfs_client_response res = { 0 };
        if (tmp)
                part_guard(tmp);
        r = client_get(c, 0, &cl);
        if (r == 0)
                r = ntfs_client_download(cl, "GET", path, NULL, fd, &status, &res);
        progress_stop(&pb);
        struct stat sb;
        off_t size = !to_stdout && fstat(fd, &sb) == 0 ? sb.st_size : -1;
        int cr = 0;
        /* fsync before the rename, so that after a system crash FILE is the
         * whole archive or its previous content; --no-sync skips it, as tar
         * does (a crash soon after may leave FILE empty or short). */
        bool sync_file = !has_flag(cmd, a, "no-sync");
        if (r == 0 && status >= 200 && status < 300 && !to_stdout &&
            ((sync_file && fsync(fd) < 0) || (cr = close(TAKE_FD(fd))) < 0))
                r = -errno;
        if (r < 0 || status < 200 || status >= 300) {
                if (tmp)
                        unlink(tmp);
                part_unguard();
                if (r == -EIO || r == -EPROTO)
                        return fail(c, NULL, "export_failed",
                                    "the export stopped before the end of the archive (ntfsd's log says why)");
                if (r < 0 && r != -ENOENT && r != -ECONNREFUSED && r != -EACCES && r != -NTFS_ETIMEOUT)
                        return fail(c, NULL, "io_error", "export failed: %s", ntfs_strerror(r));
                if (r < 0)
                        return transport_fail(c, r);
                const char *code, *msg;
                ntfs_client_error(&res, &code, &msg);
                _cleanup_free_ char *m = sanitize_dup(msg, 1024);
                r = fail(c, res.json, code, "%s", m ? m : code);
                ntfs_client_response_release(&res);
                return r;
        }
        ntfs_client_response_release(&res);
        if (!to_stdout && rename(tmp, file) < 0) {
                int e = errno;
                unlink(tmp);
                part_unguard();
                return fail(c, NULL, "io_error", "cannot rename %s to %s: %s", tmp, file, strerror(e));
        }
        part_unguard();
        if (c->json) {
                json_t *o = json_pack("{s:s, s:s, s:s?, s:s, s:I}", "session", name, "file", file, "at", at, "format",
                                      fmt, "bytes", (json_int_t)size);
                r = print_json(o);
                json_decref(o);
                return r;
        }
        if (!to_stdout) {
                char hb[32];
                human_bytes((uint64_t)(size > 0 ? size : 0), hb, sizeof hb);
                printf("exported %s%s%s to %s (%s, %s)\n", name, at ? "@" : "", at ? at : "", file, fmt, hb);
        }
        return 0;
}

int cmd_import(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *name = a->pos[0], *file = a->pos[1];
        uint64_t max_entries = 0, max_bytes = 0;
        const char *s;
        int r;
        if ((s = flag(cmd, a, "max-entries")) && (r = parse_num_flag(cmd, "max-entries", s, INT64_MAX, &max_entries)))
                return r;
        if ((s = flag(cmd, a, "max-bytes")) && parse_size(s, &max_bytes) < 0)
                return usage_error(cmd, "--max-bytes needs a size (K, M, G, T suffixes), not '%s'", s);
        /* ntfsd reads the file itself (same host, same user: it opens it with
         * the caller's credentials), so there is no request size limit; stdin
         * is handed over as /proc/PID/fd/0 (a file or a pipe). */
        _cleanup_free_ char *path = NULL;
        if (strcmp(file, "-") == 0) {
                if (isatty(STDIN_FILENO))
                        return usage_error(cmd, "refusing to read an archive from a terminal; redirect stdin");
                if (asprintf(&path, "/proc/%d/fd/0", (int)getpid()) < 0)
                        return oom(c);
        } else {
                struct stat sb;
                if (stat(file, &sb) < 0)
                        return fail(c, NULL, "not_found", "cannot read %s: %s", file, strerror(errno));
                if (!S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode))
                        return fail(c, NULL, "bad_request", "%s is not a regular file or a pipe", file);
                path = realpath(file, NULL);
                if (!path)
                        return fail(c, NULL, "not_found", "cannot resolve %s: %s", file, strerror(errno));
        }
        json_t *body = json_object();
        if (!body || set_str(body, "path", path) < 0)
                return oom(c);
        if ((s = flag(cmd, a, "message")))
                set_str(body, "message", s);
        if (max_entries)
                json_object_set_new(body, "max_entries", json_integer((json_int_t)max_entries));
        if (max_bytes)
                json_object_set_new(body, "max_bytes", json_integer((json_int_t)max_bytes));
        struct progress_bar pb;
        progress_start(&pb, c, "importing", true, has_flag(cmd, a, "quiet") || c->json);
        if (pb.id[0])
                set_str(body, "progress", pb.id);
        _cleanup_free_ char *p = session_path(name, "/import");
        json_t *j = NULL;
        r = p ? call_full(c, "POST", p, body, 0, &j, NULL, false) : oom(c);
        progress_stop(&pb);
        json_decref(body);
        if (r)
                return r;
        if (c->json)
                r = print_json(j);
        else {
                json_int_t entries = 0, bytes = 0;
                jint(j, "entries", &entries);
                jint(j, "bytes", &bytes);
                char hb[32];
                human_bytes((uint64_t)bytes, hb, sizeof hb);
                printf("imported %s: head %s (%lld entries, %s)\n", name, jstr(j, "short", "?"), (long long)entries,
                       hb);
        }
        json_decref(j);
        return r;
}
