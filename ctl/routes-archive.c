/* SPDX-License-Identifier: MIT
 * routes-archive.c — export a commit as a tar stream, import an archive as a
 * new session, follow their progress; and the seed's snapshot records.
 *
 *   GET  /v1/sessions/{name}/export?at=REF&format=tar|tar.gz|tgz|tar.zst&progress=ID
 *   POST /v1/sessions/{name}/import            body: the archive itself (up to the
 *        server's body limit), options in the query; or Content-Type
 *        application/json {path, message?, max_entries?, max_bytes?, progress?}
 *        naming a file (or a pipe) that ntfsd opens with the caller's
 *        credentials (docs/archive.md says why and how the path is checked)
 *   GET  /v1/archive/progress/{id}
 *   POST /snapshot/take {session_id?}, GET /snapshot/list ?session_id=
 *   POST|GET /v1/sessions/{name}/snapshots
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/sync/tarball.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

/* The daemon's import limits (env NTFS_IMPORT_MAX_ENTRIES, NTFS_IMPORT_MAX_BYTES);
 * a request may only lower them. */
static struct ntfs_archive_limits dlimits;

/* ---- progress of running exports and imports -------------------------------------------- */

#define FIFO_WAIT_MS 30000 /* an import from a pipe waits this long for its writer */

D_OPTABLE(ops, 64);

static json_t *render_progress(const void *prog) {
        struct ntfs_archive_progress p;
        ntfs_archive_progress_get(prog, &p);
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "entries", (json_int_t)p.entries, "bytes",
                         (json_int_t)p.bytes, "stream_bytes", (json_int_t)p.stream_bytes, "total_entries",
                         (json_int_t)p.total_entries, "total_bytes", (json_int_t)p.total_bytes,
                         "total_stream_bytes", (json_int_t)p.total_stream_bytes);
}

static int h_progress(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *id = d_param(req, "id");
        bool found;
        json_t *o = d_op_progress(&ops, id, &found);
        if (!found)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no running export or import with id '%.64s'", id);
        return d_reply(resp, 200, o);
}

/* ---- refs: commits, tags, sessions, snapshots -------------------------------------------- */

/* Resolves a ref (snapshot id first, then anything ntfs_resolve takes). */
static int resolve_ref(const char *ref, ntfs_hash *ret, char *why, size_t whylen) {
        struct ntfs_snapshot snap = { 0 };
        if (strlen(ref) <= NTFS_JOURNAL_MAX_KEY && ntfs_journal_snapshot_get(D.j, ref, &snap) == 0) {
                int r = snap.commit ? ntfs_resolve(D.st, snap.commit, ret, NULL, 0) : -NTFS_ENOREF;
                if (r < 0)
                        snprintf(why, whylen, "snapshot '%s': its commit is gone: %s", ref, ntfs_strerror(r));
                ntfs_snapshot_release(&snap);
                return r;
        }
        char ambig[256] = "";
        int r = ntfs_resolve(D.st, ref, ret, ambig, sizeof ambig);
        if (r == -NTFS_EAMBIGUOUS)
                snprintf(why, whylen, "'%s' is ambiguous: %s", ref, ambig);
        else if (r < 0)
                snprintf(why, whylen, "'%s': %s", ref, ntfs_strerror(r));
        return r;
}

/* ---- export ------------------------------------------------------------------------------- */

struct export_ctx {
        ntfs_hash commit;
        /* A read-only view of the commit, held only as a gc root while the
         * export streams (nothing is read through it: the export walks the
         * commit's objects, ntfs_tree_walk). */
        ntfs_ws *view;
        enum ntfs_archive_format fmt;
        unsigned flags; /* NTFS_ARCHIVE_KEEP_SETID */
        struct d_op *op;
        struct ntfs_archive_progress prog;
        char label[NTFS_NAME_MAX + 80];
};

static void export_ctx_free(void *p) {
        struct export_ctx *c = p;
        if (!c)
                return;
        if (c->view)
                ntfs_ws_close(c->view);
        d_op_end(&ops, c->op);
        free(c);
}

static int sink_http(void *ud, const void *buf, size_t len) {
        return ntfs_http_stream_write(ud, buf, len);
}

static int export_stream(void *ctx, ntfs_http_stream *out) {
        struct export_ctx *c = ctx;
        char why[512] = "";
        int64_t t0 = ntfs_mono_ns();
        struct ntfs_archive_progress *p = &c->prog;
        int r = ntfs_archive_export_flags(D.st, &c->commit, c->fmt, c->flags, sink_http, out, p, why, sizeof why);
        if (r < 0)
                log_warn("export of %s failed: %s", c->label, why[0] ? why : ntfs_strerror(r));
        else
                log_info("exported %s: %" PRIu64 " entries, %" PRIu64 " bytes of data in %.2f s", c->label,
                         __atomic_load_n(&p->entries, __ATOMIC_RELAXED), __atomic_load_n(&p->bytes, __ATOMIC_RELAXED),
                         (double)(ntfs_mono_ns() - t0) / 1e9);
        return r;
}

static int h_export(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        char at[1024], fmts[32], pid[D_OP_ID_MAX + 2];
        int r;
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, name, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        enum ntfs_archive_format fmt = NTFS_ARCHIVE_TAR;
        r = ntfs_http_request_query(req, "format", fmts, sizeof fmts);
        if (r >= 0 && fmts[0] && ntfs_archive_format_parse(fmts, &fmt) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "unknown format '%s' (tar, tar.gz, tgz, tar.zst)", fmts);
        if (r == -EINVAL || r == -ENAMETOOLONG)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "bad 'format' parameter");
        ntfs_hash h = si.head;
        r = ntfs_http_request_query(req, "at", at, sizeof at);
        if (r == -EINVAL || r == -ENAMETOOLONG)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "bad 'at' parameter");
        if (r >= 0 && at[0]) {
                char why[512];
                if ((r = resolve_ref(at, &h, why, sizeof why)) < 0)
                        return ntfs_http_error(resp, r, "%s", why);
        }
        char keep[8];
        r = ntfs_http_request_query(req, "keep_setid", keep, sizeof keep);
        if (r == -EINVAL || r == -ENAMETOOLONG || (r >= 0 && strcmp(keep, "") != 0 && strcmp(keep, "1") != 0 &&
                                                   strcmp(keep, "true") != 0 && strcmp(keep, "0") != 0 &&
                                                   strcmp(keep, "false") != 0))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'keep_setid' is a flag: 1, true, 0 or false");
        bool keep_setid = r >= 0 && (keep[0] == 0 || strcmp(keep, "1") == 0 || strcmp(keep, "true") == 0);
        bool want_progress = ntfs_http_request_query(req, "progress", pid, sizeof pid) > 0;
        if (want_progress && !d_op_id_valid(pid))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'progress' must be 1..64 of [A-Za-z0-9_-]");

        char hex[NTFS_HEX_LEN + 1], sid[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&h, hex);
        if (ntfs_short_id(D.st, &h, sid) < 0)
                snprintf(sid, sizeof sid, "%.12s", hex);
        struct ntfs_commit_info ci;
        if ((r = ntfs_commit_get(D.st, &h, &ci)) < 0)
                return ntfs_http_error(resp, r, "commit %s: %s", sid, ntfs_strerror(r));
        struct export_ctx *c = calloc(1, sizeof *c);
        if (!c)
                return ntfs_http_error(resp, -ENOMEM, "out of memory");
        c->fmt = fmt;
        c->flags = keep_setid ? NTFS_ARCHIVE_KEEP_SETID : 0;
        c->commit = h;
        snprintf(c->label, sizeof c->label, "%s@%s (%s)", name, sid, ntfs_archive_format_name(fmt));
        if ((r = ntfs_ws_open_view(D.st, hex, &c->view)) < 0) {
                free(c);
                return ntfs_http_error(resp, r, "cannot open commit %s: %s", sid, ntfs_strerror(r));
        }
        __atomic_store_n(&c->prog.total_entries, ci.inodes, __ATOMIC_RELAXED);
        __atomic_store_n(&c->prog.total_bytes, ci.bytes, __ATOMIC_RELAXED);
        if (want_progress)
                c->op = d_op_start(&ops, pid, "export", name, &c->prog, render_progress);

        char disp[NTFS_NAME_MAX + NTFS_HEX_LEN + 64], fname[NTFS_NAME_MAX + 1];
        size_t k = 0;
        for (const char *q = name; *q && k < NTFS_NAME_MAX; q++) /* a safe file name */
                fname[k++] = (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20 || *q == 0x7f) ? '_' : *q;
        fname[k] = 0;
        snprintf(disp, sizeof disp, "attachment; filename=\"%s-%.16s.%s\"", fname, sid, ntfs_archive_format_name(fmt));
        (void)ntfs_http_response_header(resp, "Content-Disposition", disp);
        (void)ntfs_http_response_header(resp, "X-Ntfs-Commit", hex);
        char num[32];
        snprintf(num, sizeof num, "%" PRIu64, ci.bytes);
        (void)ntfs_http_response_header(resp, "X-Ntfs-Bytes", num);
        snprintf(num, sizeof num, "%" PRIu64, ci.inodes);
        (void)ntfs_http_response_header(resp, "X-Ntfs-Entries", num);
        return ntfs_http_respond_stream(resp, 200, ntfs_archive_content_type(fmt), export_stream, c, export_ctx_free);
}

/* ---- import ------------------------------------------------------------------------------- */

/* Opens path for reading as the caller would: ntfsd and its caller are the
 * same user, or ntfsd is root and opens it with the caller's fsuid/fsgid
 * (per thread on Linux), so nobody reads through ntfsd what they could not
 * read themselves. Only regular files and pipes. */
static int open_for_peer(const ntfs_http_request *req, const char *path, int *ret, char *why, size_t whylen) {
        if (path[0] != '/') {
                snprintf(why, whylen, "'path' must be absolute");
                return -NTFS_EBADREQ;
        }
        if (strlen(path) >= PATH_MAX) {
                snprintf(why, whylen, "'path' is too long");
                return -NTFS_EBADREQ;
        }
        uid_t me = geteuid();
        gid_t mygid = getegid();
        bool switched = false;
        if (req->peer.uid != me) {
                if (me != 0) {
                        snprintf(why, whylen,
                                 "ntfsd runs as uid %u and reads files only for that user (caller uid %u): send "
                                 "the archive as the request body",
                                 (unsigned)me, (unsigned)req->peer.uid);
                        return -EACCES;
                }
                setfsgid(req->peer.gid);
                setfsuid(req->peer.uid);
                if ((uid_t)setfsuid((uid_t)-1) != req->peer.uid) {
                        setfsuid(me);
                        setfsgid(mygid);
                        snprintf(why, whylen, "cannot take the caller's credentials");
                        return -EACCES;
                }
                switched = true;
        }
        /* O_NONBLOCK: opening a fifo without a writer must not hang */
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        int e = errno;
        if (switched) {
                setfsuid(me);
                setfsgid(mygid);
        }
        if (fd < 0) {
                snprintf(why, whylen, "cannot open '%s': %s", path, strerror(e));
                return e == ENOENT ? -NTFS_ENOTFOUND : e == EACCES || e == EPERM ? -EACCES : -e;
        }
        _cleanup_close_ int cfd = fd;
        struct stat sb;
        if (fstat(fd, &sb) < 0) {
                snprintf(why, whylen, "cannot stat '%s': %s", path, strerror(errno));
                return -errno;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode)) {
                snprintf(why, whylen, "'%s' is not a regular file or a pipe", path);
                return -NTFS_EBADREQ;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
                snprintf(why, whylen, "cannot set up '%s': %s", path, strerror(errno));
                return -errno;
        }
        /* A pipe read before its writer opened it reads as empty (EOF): wait
         * (bounded) until the writer's first bytes or its close arrive. */
        if (S_ISFIFO(sb.st_mode)) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int64_t deadline = ntfs_mono_ns() + FIFO_WAIT_MS * 1000000LL;
                int pr;
                for (;;) {
                        int64_t left = (deadline - ntfs_mono_ns()) / 1000000LL;
                        if (left <= 0) {
                                pr = 0;
                                break;
                        }
                        pr = poll(&pfd, 1, (int)NTFS_MIN(left, 1000));
                        if (pr < 0 && errno == EINTR)
                                continue;
                        if (pr != 0)
                                break;
                }
                if (pr < 0) {
                        snprintf(why, whylen, "cannot wait for '%s': %s", path, strerror(errno));
                        return -errno;
                }
                if (pr == 0) {
                        snprintf(why, whylen, "nothing wrote to the pipe '%s' within %d s", path, FIFO_WAIT_MS / 1000);
                        return -NTFS_EBADREQ;
                }
        }
        *ret = TAKE_FD(cfd);
        return 0;
}

static int parse_limit(const char *what, const json_t *jv, const char *qv, uint64_t dflt, uint64_t *ret,
                       ntfs_http_response *resp) {
        uint64_t v = 0;
        if (jv) {
                if (!json_is_integer(jv) || json_integer_value(jv) < 0)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'%s' must be a non-negative integer", what);
                v = (uint64_t)json_integer_value(jv);
        } else if (qv && qv[0]) {
                if (ntfs_parse_u64(qv, UINT64_MAX, &v) < 0)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'%s' must be a non-negative integer", what);
        }
        /* 0 or absent: the daemon's; a request may only lower it */
        *ret = v && v < dflt ? v : dflt;
        return 0;
}

static int h_import(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        const char *ct = ntfs_http_request_header(req, "Content-Type");
        bool by_path = ct && strncmp(ct, "application/json", 16) == 0;
        _cleanup_(json_decrefp) json_t *body = NULL;
        const char *path = NULL, *message = NULL, *prog_id = NULL;
        const json_t *jent = NULL, *jbytes = NULL;
        char qent[32] = "", qbytes[32] = "", qmsg[1024] = "", qprog[D_OP_ID_MAX + 2] = "";
        int r;
        if (by_path) {
                json_error_t je;
                body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
                if (!json_is_object(body))
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "the body must be a JSON object: %s", je.text);
                static const char *const keys[] = { "path", "message", "max_entries", "max_bytes", "progress", NULL };
                char err[256];
                if (ntfs_json_check_keys(body, keys, err, sizeof err) < 0)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "%s", err);
                path = d_jstr(body, "path");
                message = d_jstr(body, "message");
                prog_id = d_jstr(body, "progress");
                jent = json_object_get(body, "max_entries");
                jbytes = json_object_get(body, "max_bytes");
                if (!path)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'path' (a string) is required");
                if ((json_object_get(body, "message") && !message) || (json_object_get(body, "progress") && !prog_id))
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'message' and 'progress' must be strings");
        } else {
                if (ntfs_http_request_query(req, "max_entries", qent, sizeof qent) == -ENAMETOOLONG ||
                    ntfs_http_request_query(req, "max_bytes", qbytes, sizeof qbytes) == -ENAMETOOLONG ||
                    ntfs_http_request_query(req, "message", qmsg, sizeof qmsg) == -ENAMETOOLONG ||
                    ntfs_http_request_query(req, "progress", qprog, sizeof qprog) == -ENAMETOOLONG)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "a query parameter is too long");
                message = qmsg[0] ? qmsg : NULL;
                prog_id = qprog[0] ? qprog : NULL;
                if (req->body_len == 0)
                        return ntfs_http_error(resp, -NTFS_EBADREQ,
                                               "empty body: send the archive, or JSON {\"path\": ...}");
        }
        if (prog_id && !d_op_id_valid(prog_id))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'progress' must be 1..64 of [A-Za-z0-9_-]");
        struct ntfs_archive_limits lim;
        if ((r = parse_limit("max_entries", jent, qent, dlimits.max_entries, &lim.max_entries, resp)) < 0 ||
            (r = parse_limit("max_bytes", jbytes, qbytes, dlimits.max_bytes, &lim.max_bytes, resp)) < 0)
                return r;
        if (!ntfs_name_valid(name))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid session name");

        char why[1024] = "";
        _cleanup_close_ int fd = -1;
        if (by_path && (r = open_for_peer(req, path, &fd, why, sizeof why)) < 0)
                return ntfs_http_error(resp, r, "%s", why);
        struct ntfs_archive_source src = { .fd = fd, .mem = by_path ? NULL : req->body,
                                           .len = by_path ? 0 : req->body_len };
        struct ntfs_archive_progress prog = { 0 }, *p = &prog;
        struct d_op *op = d_op_start(&ops, prog_id, "import", name, p, render_progress);
        char msg[1100];
        if (!message) {
                snprintf(msg, sizeof msg, "import %s", by_path ? path : "(request body)");
                message = msg;
        }
        ntfs_hash h;
        int64_t t0 = ntfs_mono_ns();
        r = ntfs_archive_import(D.st, name, &src, &lim, message, p, &h, why, sizeof why);
        struct ntfs_archive_progress fin;
        ntfs_archive_progress_get(p, &fin);
        d_op_end(&ops, op);
        if (r < 0) {
                log_info("import into %s refused: %s", name, why[0] ? why : ntfs_strerror(r));
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        }
        d_journal_session_created(name, (int64_t)req->peer.uid);
        double secs = (double)(ntfs_mono_ns() - t0) / 1e9;
        log_info("imported %s: %" PRIu64 " entries, %" PRIu64 " bytes in %.2f s", name, fin.entries, fin.bytes, secs);
        json_t *o = d_commit_json(&h, "head");
        if (o) {
                json_object_set_new(o, "name", json_string(name));
                json_object_set_new(o, "entries", json_integer((json_int_t)fin.entries));
                json_object_set_new(o, "bytes", json_integer((json_int_t)fin.bytes));
                json_object_set_new(o, "archive_bytes", json_integer((json_int_t)fin.stream_bytes));
                json_object_set_new(o, "seconds", json_real(secs));
        }
        return d_reply(resp, 201, o);
}

/* ---- snapshots (the seed's records; a bash_build effect adds one too) --------------------- */

static json_t *snapshot_json(const struct ntfs_snapshot *s) {
        ntfs_hash h;
        json_t *o = NULL;
        if (s->commit && ntfs_resolve(D.st, s->commit, &h, NULL, 0) == 0)
                o = d_commit_json(&h, "commit");
        else
                o = json_pack("{s:s?}", "commit", s->commit);
        if (!o)
                return NULL;
        char when[64] = "";
        time_t t = (time_t)(s->created_ns / 1000000000);
        struct tm tm;
        if (gmtime_r(&t, &tm))
                strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_t *rest = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "snapshot_id", s->snapshot_id, "session_id",
                                 s->session ? s->session : "", "step", (json_int_t)s->step, "size_bytes",
                                 (json_int_t)s->size_bytes, "created", (json_int_t)s->created_ns, "created_at", when);
        if (!rest) {
                json_decref(o);
                return NULL;
        }
        json_object_update(o, rest);
        json_decref(rest);
        return o;
}

static int take_snapshot(const char *session, ntfs_http_response *resp) {
        ntfs_hash h;
        bool changed;
        int r = d_checkpoint(session, "snapshot", NULL, &h, &changed);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': cannot checkpoint: %s", session, ntfs_strerror(r));
        struct ntfs_commit_info ci;
        if ((r = ntfs_commit_get(D.st, &h, &ci)) < 0)
                return d_fail(resp, r, "snapshot");
        struct ntfs_effect *list = NULL;
        size_t n = 0;
        if (ntfs_journal_effect_list(D.j, session, 0, 0, 0, &list, &n) == 0)
                ntfs_effects_free(list, n);
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&h, hex);
        _cleanup_free_ char *id = NULL;
        if ((r = ntfs_journal_snapshot_add(D.j, NULL, session, n, hex, ci.bytes, &id)) < 0)
                return d_fail(resp, r, "snapshot");
        struct ntfs_snapshot s = { 0 };
        if ((r = ntfs_journal_snapshot_get(D.j, id, &s)) < 0)
                return d_fail(resp, r, "snapshot");
        json_t *o = snapshot_json(&s);
        ntfs_snapshot_release(&s);
        return d_reply(resp, 200, o);
}

static int list_snapshots(const char *session, ntfs_http_response *resp) {
        struct ntfs_snapshot *arr = NULL;
        size_t n = 0;
        int r = ntfs_journal_snapshot_list(D.j, session, &arr, &n);
        if (r == -NTFS_ENOSESSION)
                n = 0;
        else if (r < 0)
                return d_fail(resp, r, "snapshots");
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++) {
                json_t *o = snapshot_json(&arr[i]);
                if (!o || json_array_append_new(a, o) < 0) {
                        json_decref(a);
                        a = NULL;
                }
        }
        ntfs_snapshots_free(arr, n);
        return d_reply(resp, 200, a ? json_pack("{s:o}", "snapshots", a) : NULL);
}

static const char *seed_session(const ntfs_http_request *req, const char *given) {
        if (given)
                return given;
        return req->conn_data && *req->conn_data ? *req->conn_data : NULL;
}

static int h_seed_snapshot_take(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "session_id", NULL };
        const char *sid;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session_id", false, &sid)) < 0)
                return r;
        const char *s = seed_session(req, sid);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        return take_snapshot(s, resp);
}

static int h_seed_snapshot_list(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        char sid[NTFS_NAME_MAX + 2];
        int r = ntfs_http_request_query(req, "session_id", sid, sizeof sid);
        if (r == -EINVAL || r == -ENAMETOOLONG)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "bad 'session_id' parameter");
        return list_snapshots(seed_session(req, r > 0 ? sid : NULL), resp);
}

static int h_snapshot_take(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { NULL };
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0)
                return r;
        return take_snapshot(d_param(req, "name"), resp);
}

static int h_snapshot_list(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct ntfs_session_info si;
        const char *name = d_param(req, "name");
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        return list_snapshots(name, resp);
}

/* ---- registration ------------------------------------------------------------------------- */

static uint64_t env_limit(const char *var, uint64_t dflt) {
        const char *v = getenv(var);
        uint64_t n;
        if (!v || !*v)
                return dflt;
        if (ntfs_parse_u64(v, UINT64_MAX, &n) < 0 || n == 0) {
                log_warn("%s=%s is not a positive number; using %" PRIu64, var, v, dflt);
                return dflt;
        }
        return n;
}

int routes_archive_register(ntfs_router *rt) {
        dlimits.max_entries = env_limit("NTFS_IMPORT_MAX_ENTRIES", NTFS_ARCHIVE_DEFAULT_MAX_ENTRIES);
        dlimits.max_bytes = env_limit("NTFS_IMPORT_MAX_BYTES", NTFS_ARCHIVE_DEFAULT_MAX_BYTES);
        int r = ntfs_archive_cleanup(D.st);
        if (r > 0)
                log_info("ended %d interrupted import(s)", r);
        else if (r < 0)
                log_warn("cannot end interrupted imports: %s", ntfs_strerror(r));
        static const struct ntfs_route routes[] = {
                { "GET /v1/sessions/{name}/export", h_export, 0 },
                { "POST /v1/sessions/{name}/import", h_import, NTFS_ROUTE_RAW_BODY },
                { "GET /v1/archive/progress/{id}", h_progress, 0 },
                { "POST /v1/sessions/{name}/snapshots", h_snapshot_take, 0 },
                { "GET /v1/sessions/{name}/snapshots", h_snapshot_list, 0 },
                { "POST /snapshot/take", h_seed_snapshot_take, 0 },
                { "GET /snapshot/list", h_seed_snapshot_list, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
