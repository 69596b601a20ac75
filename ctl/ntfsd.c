/* SPDX-License-Identifier: MIT
 * ntfsd — the one daemon per store: the store, its FUSE mounts, the
 * journal, the policy engine, the jail and the control socket.
 *
 * Threads: the HTTP server's connection threads run the handlers (the route
 * modules ctl/routes-*.c); the auto-checkpoint thread polls mounts; the main
 * thread waits for SIGTERM or SIGINT, then stops the server, unmounts every
 * mount, closes the journal and flushes the store.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/tcp-peer.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

struct daemon D;

/* ---- helpers ------------------------------------------------------------------ */

json_t *d_commit_json(const ntfs_hash *h, const char *key) {
        char hex[NTFS_HEX_LEN + 1], sid[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(h, hex);
        if (ntfs_short_id(D.st, h, sid) < 0)
                snprintf(sid, sizeof sid, "%.12s", hex);
        return json_pack("{s:s, s:s}", key, hex, "short", sid);
}

int d_fail(ntfs_http_response *resp, int err, const char *what) {
        return ntfs_http_error(resp, err, "%s: %s", what, ntfs_strerror(err));
}

const char *d_param(const ntfs_http_request *req, const char *name) {
        return ntfs_http_request_param(req, name);
}

int d_reply(ntfs_http_response *resp, int status, json_t *body) {
        if (!body)
                return ntfs_http_error(resp, -ENOMEM, "out of memory");
        return ntfs_http_respond_json(resp, status, body);
}

const char *d_jstr(const json_t *o, const char *k) {
        const json_t *v = o ? json_object_get(o, k) : NULL;
        return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Rejects unknown fields and wrong types; returns 0 or answers 400. */
int d_check_keys(const ntfs_http_request *req, ntfs_http_response *resp, const char *const *allowed) {
        if (!req->json)
                return 0;
        char err[256];
        int r = ntfs_json_check_keys(req->json, allowed, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "%s", err);
        return 0;
}

int d_want_string(const ntfs_http_request *req, ntfs_http_response *resp, const char *key, bool required,
                       const char **ret) {
        char err[256];
        *ret = NULL;
        if (!req->json) {
                if (required)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "missing body with field '%s'", key);
                return 0;
        }
        int r = ntfs_json_get_str(req->json, key, required, ret, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "%s", err);
        return 0;
}

int d_want_key(const ntfs_http_request *req, ntfs_http_response *resp, const char **ret) {
        int r = d_want_string(req, resp, "idempotency_key", false, ret);
        if (r < 0 || !*ret)
                return r;
        size_t n = strnlen(*ret, NTFS_JOURNAL_MAX_KEY + 1);
        if (n == 0 || n > NTFS_JOURNAL_MAX_KEY)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "field 'idempotency_key' must be 1 to %d bytes",
                                       NTFS_JOURNAL_MAX_KEY);
        return 0;
}

int d_session_info_json(const struct ntfs_session_info *si, json_t **ret) {
        json_t *o = d_commit_json(&si->head, "head");
        if (!o)
                return -ENOMEM;
        char floor[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&si->floor, floor);
        json_object_set_new(o, "name", json_string(si->name));
        json_object_set_new(o, "floor", json_string(floor));
        json_object_set_new(o, "dirty", json_boolean(si->dirty));
        json_object_set_new(o, "bytes", json_integer((json_int_t)si->bytes));
        json_object_set_new(o, "inodes", json_integer((json_int_t)si->inodes));
        json_object_set_new(o, "quota_bytes", json_integer((json_int_t)si->quota_bytes));
        json_object_set_new(o, "quota_inodes", json_integer((json_int_t)si->quota_inodes));
        json_object_set_new(o, "created", json_integer(si->created_ns));
        json_object_set_new(o, "mounts", json_integer(si->mounts));
        *ret = o;
        return 0;
}

json_t *d_mounts_json(void) {
        json_t *arr = json_array();
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (!atomic_load(&m->exited))
                        json_array_append_new(arr, json_pack("{s:s, s:s?, s:b, s:s?, s:f, s:b, s:b}", "mountpoint",
                                                     m->mountpoint, "session", m->session, "ro", m->ro, "at", m->at,
                                                     "autocheckpoint", m->auto_idle, "internal", m->internal,
                                                     "relatime", m->relatime));
        pthread_mutex_unlock(&D.lock);
        return arr;
}

/* ---- mounts ------------------------------------------------------------------------ */

/* STORE/mounts.json: the mounts made for clients (not the jail's internal
 * ones), rewritten durably at each change while the daemon runs and removed
 * by a clean shutdown. Found at start, it is what a crashed daemon had
 * mounted: mounts_restore() makes each mount again at its mountpoint (the
 * dead one detached first), so the mount list after a crash equals the one
 * before (docs/mount.md, "Mount lifecycle"). */
static pthread_mutex_t mounts_file_lock = PTHREAD_MUTEX_INITIALIZER;

static void mounts_file_path(char *buf, size_t len) {
        snprintf(buf, len, "%s/mounts.json", D.store_dir);
}

static void mounts_save(void) {
        pthread_mutex_lock(&mounts_file_lock);
        json_t *arr = json_array();
        pthread_mutex_lock(&D.lock);
        bool stopping = D.stopping;
        for (struct dmount *m = D.mounts; arr && m; m = m->next)
                if (!m->internal && !atomic_load(&m->exited))
                        json_array_append_new(arr, json_pack("{s:s, s:s?, s:b, s:s?, s:f, s:f, s:b}", "mountpoint",
                                                             m->mountpoint, "session", m->session, "ro", m->ro, "at",
                                                             m->at, "autocheckpoint", m->auto_idle,
                                                             "autocheckpoint_max", m->auto_max, "relatime",
                                                             m->relatime));
        pthread_mutex_unlock(&D.lock);
        _cleanup_free_ char *s = arr && !stopping ? json_dumps(arr, JSON_COMPACT) : NULL;
        json_decref(arr);
        char path[PATH_MAX];
        mounts_file_path(path, sizeof path);
        int r = s ? ntfs_write_file_durable(path, s, strlen(s), 0600) : 0;
        if (r < 0)
                log_warn("cannot record the mounts in %s: %s", path, ntfs_strerror(r));
        pthread_mutex_unlock(&mounts_file_lock);
}

/* At start: the mounts a crashed daemon left, made again. */
static void mounts_restore(void) {
        char path[PATH_MAX];
        mounts_file_path(path, sizeof path);
        _cleanup_free_ char *text = NULL;
        size_t len;
        if (ntfs_read_file(path, 1 << 20, &text, &len) < 0)
                return;
        json_t *arr = json_loadb(text, len, 0, NULL);
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
                const char *mp = d_jstr(e, "mountpoint"), *session = d_jstr(e, "session"), *at = d_jstr(e, "at");
                if (!mp || (!session && !at))
                        continue;
                int r = d_mount_add(session ? session : at, at, mp, json_is_true(json_object_get(e, "ro")), false,
                                    json_number_value(json_object_get(e, "autocheckpoint")),
                                    json_number_value(json_object_get(e, "autocheckpoint_max")),
                                    json_is_true(json_object_get(e, "relatime")), NULL);
                if (r < 0)
                        log_warn("after a crash: cannot mount %s at %s again: %s", session ? session : at, mp,
                                 ntfs_strerror(r));
                else
                        log_info("after a crash: %s mounted again at %s", session ? session : at, mp);
        }
        json_decref(arr);
        mounts_save();
}

void d_mount_free(struct dmount *m) {
        if (!m)
                return;
        free(m->mountpoint);
        free(m->session);
        free(m->at);
        free(m);
}

/* Stops and frees m; m must already be unlinked from D.mounts. */
int d_mount_stop(struct dmount *m) {
        int r = ntfs_mount_stop(m->m);
        ntfs_ws_close(m->ws);
        bool internal = m->internal;
        if (internal)
                rmdir(m->mountpoint);
        d_mount_free(m);
        if (!internal)
                mounts_save();
        return r;
}

/* ---- claims: mount and session end serialized per mountpoint and session --- */
/* Every function here is called with D.lock held. */

/* The claim of a mount in the making at mountpoint. */
static struct dclaim *claim_at(const char *mountpoint) {
        for (struct dclaim *c = D.claims; c; c = c->next)
                if (c->mountpoint && strcmp(c->mountpoint, mountpoint) == 0)
                        return c;
        return NULL;
}

/* The claim of session's end. */
static struct dclaim *claim_ending(const char *session) {
        for (struct dclaim *c = D.claims; c; c = c->next)
                if (!c->mountpoint && strcmp(c->session, session) == 0)
                        return c;
        return NULL;
}

static bool claim_mounting(const char *session) {
        for (struct dclaim *c = D.claims; c; c = c->next)
                if (c->mountpoint && c->session && strcmp(c->session, session) == 0)
                        return true;
        return false;
}

static int claim_add(const char *mountpoint, const char *session, struct dclaim **ret) {
        struct dclaim *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        if ((mountpoint && !(c->mountpoint = strdup(mountpoint))) || (session && !(c->session = strdup(session)))) {
                free(c->mountpoint);
                free(c);
                return -ENOMEM;
        }
        c->next = D.claims;
        D.claims = c;
        *ret = c;
        return 0;
}

static void claim_drop(struct dclaim *gone) {
        for (struct dclaim **p = &D.claims; *p; p = &(*p)->next)
                if (*p == gone) {
                        *p = gone->next;
                        free(gone->mountpoint);
                        free(gone->session);
                        free(gone);
                        break;
                }
        pthread_cond_broadcast(&D.claims_cv);
}

void d_session_end_begin(const char *session) {
        struct dclaim *c;
        pthread_mutex_lock(&D.lock);
        for (;;) {
                if (claim_ending(session)) { /* another end of the same session first */
                        pthread_cond_wait(&D.claims_cv, &D.lock);
                        continue;
                }
                if (claim_add(NULL, session, &c) == 0)
                        break;
                /* out of memory: the claim is never skipped; try again */
                pthread_mutex_unlock(&D.lock);
                usleep(10000);
                pthread_mutex_lock(&D.lock);
        }
        while (claim_mounting(session))
                pthread_cond_wait(&D.claims_cv, &D.lock);
        pthread_mutex_unlock(&D.lock);
}

void d_session_end_done(const char *session) {
        pthread_mutex_lock(&D.lock);
        claim_drop(claim_ending(session));
        pthread_mutex_unlock(&D.lock);
}

void d_mounts_close(void) {
        pthread_mutex_lock(&D.lock);
        D.stopping = true;
        while (D.claims)
                pthread_cond_wait(&D.claims_cv, &D.lock);
        pthread_mutex_unlock(&D.lock);
}

/* Claims real for a mount of session (NULL: a view of a ref): 0 with *ret,
 * or already_mounted (mounted or being mounted there), session_not_found
 * (the session is being ended), busy (the daemon is shutting down). */
static int mount_claim(const char *real, const char *session, struct dclaim **ret) {
        int r = 0;
        pthread_mutex_lock(&D.lock);
        for (struct dmount *o = D.mounts; o && r == 0; o = o->next)
                if (strcmp(o->mountpoint, real) == 0)
                        r = -NTFS_EMOUNTED;
        if (r == 0 && claim_at(real))
                r = -NTFS_EMOUNTED;
        else if (r == 0 && session && claim_ending(session))
                r = -NTFS_ENOSESSION;
        else if (r == 0 && D.stopping)
                r = -EBUSY;
        if (r == 0)
                r = claim_add(real, session, ret);
        pthread_mutex_unlock(&D.lock);
        return r;
}

/* The mount's loop ended without d_mount_stop (unmounted from outside). */
static void mount_exited(ntfs_mount *nm, void *ud) {
        struct dmount *m = ud;
        atomic_store(&m->exited, true);
        log_info("%s was unmounted from outside; it is no longer listed", m->mountpoint);
}

void d_mounts_reap(void) {
        struct dmount *gone = NULL;
        pthread_mutex_lock(&D.lock);
        for (struct dmount **p = &D.mounts; *p;) {
                struct dmount *m = *p;
                if (atomic_load(&m->exited)) {
                        *p = m->next;
                        m->next = gone;
                        gone = m;
                } else {
                        p = &m->next;
                }
        }
        pthread_mutex_unlock(&D.lock);
        while (gone) {
                struct dmount *m = gone;
                gone = m->next;
                (void)d_mount_stop(m);
        }
}

static char *mountpoint_key(const char *mp);

/* A mountpoint whose FUSE server died (a crashed daemon's mount: every call
 * on it is ENOTCONN) is detached lazily, so that it can be mounted again
 * instead of being stacked on. statfs, not stat: the kernel may answer a
 * stat from its attribute cache, a statfs always asks the server. Never on
 * one of our own mounts (listed or in the making): that statfs would be a
 * request to ourselves from a daemon thread (see mountpoint_key). */
static void detach_dead_mount(const char *mp) {
        _cleanup_free_ char *key = mountpoint_key(mp);
        if (!key)
                return;
        pthread_mutex_lock(&D.lock);
        bool ours = claim_at(key) != NULL;
        for (struct dmount *o = D.mounts; o && !ours; o = o->next)
                ours = strcmp(o->mountpoint, key) == 0;
        pthread_mutex_unlock(&D.lock);
        struct statfs sf;
        if (ours || statfs(mp, &sf) == 0 || errno != ENOTCONN)
                return;
        if (umount2(mp, MNT_DETACH) == 0)
                log_info("%s: a dead FUSE mount (its server is gone) was detached", mp);
        else
                log_warn("%s: cannot detach the dead FUSE mount there: %s", mp, strerror(errno));
}

int d_mount_add(const char *session, const char *at, const char *mp, bool ro, bool internal, double idle,
                double maxi, bool relatime, char **ret_mp) {
        _cleanup_free_ struct dmount *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        d_mounts_reap();
        detach_dead_mount(mp);
        char *real = realpath(mp, NULL);
        if (!real)
                return -errno;
        m->mountpoint = real;
        struct dclaim *claim;
        int r = mount_claim(real, at ? NULL : session, &claim);
        if (r < 0) {
                free(real);
                return r;
        }
        if (at || (ro && !session))
                r = ntfs_ws_open_view(D.st, at ? at : session, &m->ws);
        else
                r = ntfs_ws_open(D.st, session, &m->ws);
        if (r == 0 && session && !at && !(m->session = strdup(session))) {
                ntfs_ws_close(m->ws);
                r = -ENOMEM;
        }
        struct ntfs_mount_opts o;
        ntfs_mount_opts_init(&o);
        o.mountpoint = real;
        o.read_only = ro || at;
        o.relatime = relatime && !o.read_only;
        if (!internal && !o.read_only && m->session) {
                /* another writer beside the jail's internal mount */
                o.on_fsync = d_ext_fsync;
                o.on_fsync_ud = m;
        }
        o.on_exit = mount_exited;
        o.on_exit_ud = m;
        if (r == 0 && (r = ntfs_mount_start(m->ws, &o, &m->m)) < 0) {
                ntfs_ws_close(m->ws);
                free(m->session);
        }
        if (r == 0) {
                m->at = at ? strdup(at) : NULL;
                m->ro = o.read_only;
                m->internal = internal;
                m->relatime = o.relatime;
                m->auto_idle = idle;
                m->auto_max = maxi;
                m->last_change_ns = m->last_ckpt_ns = ntfs_mono_ns();
        }
        char *copy = NULL;
        if (r == 0 && ret_mp && !(copy = strdup(real))) {
                (void)ntfs_mount_stop(m->m);
                ntfs_ws_close(m->ws);
                free(m->session);
                free(m->at);
                r = -ENOMEM;
        }
        if (r == 0)
                log_info("mounted %s%s%s at %s%s", session ? session : "", at ? "@" : "", at ? at : "", real,
                         m->ro ? " (read-only)" : "");
        /* the claim ends as the mount enters the list: no moment where
         * neither holds the mountpoint */
        pthread_mutex_lock(&D.lock);
        claim_drop(claim);
        if (r == 0) {
                m->next = D.mounts;
                D.mounts = TAKE_PTR(m);
        }
        pthread_mutex_unlock(&D.lock);
        if (r < 0) {
                free(real);
                return r;
        }
        if (!internal)
                mounts_save();
        if (ret_mp)
                *ret_mp = copy;
        return 0;
}



/* The canonical form of a mountpoint path without looking up the mountpoint
 * itself: realpath() would stat it, and a stat of one of our own mounts made
 * by a daemon thread is a FUSE request to ourselves (a kill -9 then can
 * leave a zombie that never closes /dev/fuse; fs/mount.c). Only the parent
 * is resolved; "." and ".." endings fall back to realpath(). */
static char *mountpoint_key(const char *mp) {
        size_t n = strnlen(mp, PATH_MAX);
        while (n > 1 && mp[n - 1] == '/')
                n--;
        const char *slash = memrchr(mp, '/', n);
        const char *base = slash ? slash + 1 : mp;
        size_t blen = n - (size_t)(base - mp);
        if (n == 0 || n >= PATH_MAX || blen == 0 || (blen == 1 && base[0] == '.') ||
            (blen == 2 && base[0] == '.' && base[1] == '.'))
                return realpath(mp, NULL);
        char parent[PATH_MAX];
        size_t plen = slash ? (size_t)(slash - mp) : 0;
        if (slash && plen == 0)
                plen = 1; /* "/name" */
        if (!slash)
                snprintf(parent, sizeof parent, ".");
        else
                snprintf(parent, sizeof parent, "%.*s", (int)plen, mp);
        _cleanup_free_ char *rp = realpath(parent, NULL);
        if (!rp)
                return NULL;
        char *key = NULL;
        if (asprintf(&key, "%s/%.*s", strcmp(rp, "/") == 0 ? "" : rp, (int)blen, base) < 0)
                return NULL;
        return key;
}

struct dmount *d_mount_take(const char *mp) {
        d_mounts_reap(); /* one unmounted from outside is not there any more */
        char *real = mountpoint_key(mp);
        const char *key = real ? real : mp;
        struct dmount *found = NULL;
        pthread_mutex_lock(&D.lock);
        for (struct dmount **p = &D.mounts; *p; p = &(*p)->next)
                if (strcmp((*p)->mountpoint, key) == 0) {
                        found = *p;
                        *p = found->next;
                        break;
                }
        pthread_mutex_unlock(&D.lock);
        free(real);
        return found;
}


/* Unmounts every mount of a session (before it ends). */
void d_unmount_session(const char *session) {
        for (;;) {
                struct dmount *found = NULL;
                pthread_mutex_lock(&D.lock);
                for (struct dmount **p = &D.mounts; *p; p = &(*p)->next)
                        if ((*p)->session && strcmp((*p)->session, session) == 0) {
                                found = *p;
                                *p = found->next;
                                break;
                        }
                pthread_mutex_unlock(&D.lock);
                if (!found)
                        return;
                d_mount_stop(found);
        }
}


/* The path a session is mounted at for the jail: any read-write mount of
 * it, else an internal one under the store. Caller frees. */
int d_session_mountpoint(const char *session, char **ret) {
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->session && !m->ro && !atomic_load(&m->exited) && strcmp(m->session, session) == 0) {
                        *ret = strdup(m->mountpoint);
                        pthread_mutex_unlock(&D.lock);
                        return *ret ? 0 : -ENOMEM;
                }
        pthread_mutex_unlock(&D.lock);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/mnt", D.store_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (snprintf(dir, sizeof dir, "%s/mnt/%s", D.store_dir, session) >= (int)sizeof dir)
                return -ENAMETOOLONG;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        int r = d_mount_add(session, NULL, dir, false, true, 0, 0, false, NULL);
        if (r == -NTFS_EMOUNTED) /* raced with another request */
                r = 0;
        if (r < 0)
                return r;
        *ret = strdup(dir);
        return *ret ? 0 : -ENOMEM;
}

/* Flushes the kernel's view of every mount of session before a checkpoint. */
void d_flush_session_mounts(const char *session) {
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->session && !atomic_load(&m->exited) && strcmp(m->session, session) == 0)
                        (void)ntfs_mount_flush_kernel(m->m);
        pthread_mutex_unlock(&D.lock);
}

/* Flushes every mount of session and holds their WRITEs off
 * (ntfs_mount_hold_writes: no write(2) halfway in) until
 * d_release_session_mounts, for a checkpoint or fork in between. D.lock is
 * held from one to the other, so no mount goes away meanwhile; the
 * snapshot in between takes the store's lock (order: D.lock, then the
 * store's) and must not wait for a mount's requests. */
void d_hold_session_mounts(const char *session) {
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->session && !m->ro && !atomic_load(&m->exited) && strcmp(m->session, session) == 0) {
                        (void)ntfs_mount_hold_writes(m->m);
                        m->held = true;
                }
}

void d_release_session_mounts(const char *session) {
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->held) {
                        ntfs_mount_release_writes(m->m);
                        m->held = false;
                }
        pthread_mutex_unlock(&D.lock);
}

int d_checkpoint_always(const char *name, const char *msg, const char *effect, bool always, ntfs_hash *h,
                        bool *changed) {
        d_hold_session_mounts(name);
        int r = always ? ntfs_checkpoint_always(D.st, name, msg, effect, h, changed)
                       : ntfs_checkpoint(D.st, name, msg, effect, h, changed);
        d_release_session_mounts(name);
        return r;
}

int d_checkpoint(const char *name, const char *msg, const char *effect, ntfs_hash *h, bool *changed) {
        return d_checkpoint_always(name, msg, effect, false, h, changed);
}

void d_journal_session_created(const char *name, int64_t uid) {
        int r = ntfs_journal_session_create(D.j, name, uid, NULL);
        if (r < 0 && r != -EEXIST && r != -NTFS_ESESSEXISTS)
                log_warn("journal: recording session %s: %s", name, ntfs_strerror(r));
}

void d_journal_session_ended(const char *name) {
        int r = ntfs_journal_session_end(D.j, name);
        if (r < 0 && r != -NTFS_ENOSESSION)
                log_warn("journal: recording the end of session %s: %s", name, ntfs_strerror(r));
}

void d_conn_free(void *ud, void *data) { free(data); }

/* ---- auto-checkpoint ----------------------------------------------------------------- */

static void *auto_main(void *arg) {
        for (;;) {
                struct timespec ts = { 0, 200 * 1000000L };
                nanosleep(&ts, NULL);
                d_mounts_reap();
                pthread_mutex_lock(&D.lock);
                if (D.stopping) {
                        pthread_mutex_unlock(&D.lock);
                        return NULL;
                }
                char *due = NULL;
                int64_t now = ntfs_mono_ns();
                for (struct dmount *m = D.mounts; m && !due; m = m->next) {
                        if (!m->session || m->ro || (m->auto_idle <= 0 && m->auto_max <= 0))
                                continue;
                        uint64_t c = ntfs_ws_changes(m->ws);
                        if (c != m->last_changes) {
                                m->last_changes = c;
                                m->last_change_ns = now;
                                if (!m->pending_changes)
                                        m->last_ckpt_ns = now; /* burst starts */
                                m->pending_changes = true;
                        }
                        if (!m->pending_changes)
                                continue;
                        bool idle = m->auto_idle > 0 && now - m->last_change_ns >= (int64_t)(m->auto_idle * 1e9);
                        bool maxed = m->auto_max > 0 && now - m->last_ckpt_ns >= (int64_t)(m->auto_max * 1e9);
                        if (idle || maxed) {
                                m->pending_changes = false;
                                m->last_ckpt_ns = now;
                                due = strdup(m->session);
                        }
                }
                pthread_mutex_unlock(&D.lock);
                if (due) {
                        ntfs_hash h;
                        bool changed;
                        int r = ntfs_checkpoint(D.st, due, "auto-checkpoint", NULL, &h, &changed);
                        if (r < 0)
                                log_warn("auto-checkpoint of %s failed: %s", due, ntfs_strerror(r));
                        else if (changed)
                                log_debug("auto-checkpoint of %s", due);
                        free(due);
                }
        }
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *f) {
        fprintf(f, "Usage: ntfsd [--store DIR] [--socket PATH] [--socket-group GROUP] [-f|--foreground]\n"
                   "             [--log-level LEVEL] [--policy FILE] [--env-file FILE] [--jail PATH]\n"
                   "             [--listen ADDR:PORT] [--log-file PATH] [--log-target TARGET]\n"
                   "\n"
                   "The ntfs daemon: owns one store, serves its control socket and its mounts.\n"
                   "  --store DIR       store folder (default: $NTFS_STORE, else ./.store)\n"
                   "  --socket PATH     control socket (default: $NTFS_SOCKET, else STORE/ntfsd.sock)\n"
                   "  --socket-group G  the socket is mode 0660 and group G (a name or a number),\n"
                   "                    so G's members may drive the daemon; default: mode 0600\n"
                   "  -f, --foreground  stay in the foreground (the only mode in this version)\n"
                   "  --log-level L     error, warn, info (default) or debug; info has one line per\n"
                   "                    API request: method, path, status, duration, session\n"
                   "  --log-file PATH   also append every log line to PATH (reopened on SIGHUP,\n"
                   "                    for logrotate)\n"
                   "  --log-target T    stderr, or journald: the systemd journal's native protocol,\n"
                   "                    with fields SESSION, REQUEST_ID and EFFECT_ID (socket:\n"
                   "                    $NTFS_JOURNAL_SOCKET, for tests, else\n"
                   "                    /run/systemd/journal/socket); default: journald when\n"
                   "                    $JOURNAL_STREAM says stderr is the journal, else stderr\n"
                   "  --policy FILE     policy file (docs/policy.md); default: the built-in registry\n"
                   "  --env-file FILE   .env-style file with ANTHROPIC_API_KEY etc. (gateway credentials)\n"
                   "  --jail PATH       the ntfs-jail helper (default: $NTFS_JAIL, else next to ntfsd,\n"
                   "                    else " NTFS_LIBEXECDIR "/ntfs-jail)\n"
                   "  --listen A:P      also serve the API on loopback TCP (127.0.0.1:7878, [::1]:7878;\n"
                   "                    off by default): only for the users who may open the socket,\n"
                   "                    checked through the kernel's socket table (docs/protocol.md)\n"
                   "  -h, --help        this text\n"
                   "Under systemd (Type=notify) it sends READY=1 once the socket listens.\n"
                   "SIGTERM or SIGINT: unmount everything, flush the store, exit 0.\n"
                   "SIGHUP: reopen the --log-file.\n");
}

static char *find_jail(const char *argv0) {
        const char *e = getenv("NTFS_JAIL");
        if (e)
                return strdup(e);
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
                self[n] = 0;
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        /* beside ntfsd, or in the build tree (ctl/ntfsd, exec/ntfs-jail) */
                        const char *cands[] = { "ntfs-jail", "../exec/ntfs-jail" };
                        for (size_t i = 0; i < ARRAY_SIZE(cands); i++) {
                                char p[PATH_MAX + 32];
                                snprintf(p, sizeof p, "%s/%s", self, cands[i]);
                                if (access(p, X_OK) == 0)
                                        return realpath(p, NULL);
                        }
                }
        }
        /* installed: meson's libexecdir (docs/install.md) */
        if (access(NTFS_LIBEXECDIR "/ntfs-jail", X_OK) == 0)
                return strdup(NTFS_LIBEXECDIR "/ntfs-jail");
        return strdup("ntfs-jail");
}

/* --socket-group: a group name, else a number. */
static int parse_group(const char *s, gid_t *ret) {
        struct group gr, *res = NULL;
        char buf[16384];
        int r = getgrnam_r(s, &gr, buf, sizeof buf, &res);
        if (r == 0 && res) {
                *ret = res->gr_gid;
                return 0;
        }
        uint64_t n;
        if (ntfs_parse_u64(s, UINT32_MAX - 1, &n) == 0) {
                *ret = (gid_t)n;
                return 0;
        }
        return r > 0 ? -r : -ENOENT;
}


int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "store", required_argument, NULL, 's' },    { "socket", required_argument, NULL, 'S' },
                { "foreground", no_argument, NULL, 'f' },     { "log-level", required_argument, NULL, 'l' },
                { "policy", required_argument, NULL, 'p' },   { "env-file", required_argument, NULL, 'e' },
                { "jail", required_argument, NULL, 'j' },     { "help", no_argument, NULL, 'h' },
                { "listen", required_argument, NULL, 'L' },
                { "socket-group", required_argument, NULL, 'g' },
                { "log-file", required_argument, NULL, 'F' }, { "log-target", required_argument, NULL, 'T' },
                { NULL, 0, NULL, 0 },
        };
        const char *store = getenv("NTFS_STORE"), *sock = getenv("NTFS_SOCKET"), *policy = NULL, *envf = NULL,
                   *jail = NULL, *listen_tcp = NULL, *log_file = NULL, *log_target = NULL;
        gid_t sock_group = 0;
        bool has_group = false;
        int c;
        while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
                switch (c) {
                case 's':
                        store = optarg;
                        break;
                case 'S':
                        sock = optarg;
                        break;
                case 'f':
                        break;
                case 'l': {
                        enum ntfs_log_level lvl;
                        if (ntfs_log_parse_level(optarg, &lvl) < 0) {
                                fprintf(stderr, "ntfsd: unknown log level '%s'\n", optarg);
                                return 2;
                        }
                        ntfs_log_set_level(lvl);
                        break;
                }
                case 'p':
                        policy = optarg;
                        break;
                case 'e':
                        envf = optarg;
                        break;
                case 'j':
                        jail = optarg;
                        break;
                case 'L': {
                        struct sockaddr_storage a;
                        socklen_t al;
                        int lr = ntfs_tcp_parse_listen(optarg, &a, &al);
                        if (lr == -EPERM) {
                                fprintf(stderr, "ntfsd: --listen %s: not a loopback address (127.0.0.0/8 or ::1): "
                                                "the API must not be reachable from another host\n", optarg);
                                return 2;
                        }
                        if (lr < 0) {
                                fprintf(stderr, "ntfsd: --listen %s: expected ADDRESS:PORT, e.g. 127.0.0.1:7878 "
                                                "or [::1]:7878\n", optarg);
                                return 2;
                        }
                        listen_tcp = optarg;
                        break;
                }
                case 'g':
                        if (parse_group(optarg, &sock_group) < 0) {
                                fprintf(stderr, "ntfsd: --socket-group: no group '%s'\n", optarg);
                                return 2;
                        }
                        has_group = true;
                        break;
                case 'F':
                        log_file = optarg;
                        break;
                case 'T':
                        if (strcmp(optarg, "stderr") != 0 && strcmp(optarg, "journald") != 0) {
                                fprintf(stderr, "ntfsd: --log-target: 'stderr' or 'journald', not '%s'\n", optarg);
                                return 2;
                        }
                        log_target = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        if (!store || !*store)
                store = ".store";
        if (log_file && (c = ntfs_log_open_file(log_file)) < 0) {
                fprintf(stderr, "ntfsd: --log-file %s: %s\n", log_file, ntfs_strerror(c));
                return 1;
        }
        if (log_target ? strcmp(log_target, "journald") == 0 : ntfs_log_stderr_is_journal()) {
                if ((c = ntfs_log_open_journal(NULL, "ntfsd")) < 0) {
                        if (log_target) {
                                fprintf(stderr, "ntfsd: --log-target journald: cannot reach the journal: %s\n",
                                        ntfs_strerror(c));
                                return 1;
                        }
                        log_warn("the journal's socket cannot be reached (%s): logging to stderr",
                                 ntfs_strerror(c));
                }
        }

        /* Signals are handled by the main thread only. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);

        if (!ntfs_malloc_tune())
                log_debug("ntfsd: the allocator kept its defaults");
        int r = ntfs_store_open(store, NULL, &D.st);
        if (r < 0) {
                fprintf(stderr, "ntfsd: cannot open store %s: %s\n", store, ntfs_strerror(r));
                return 1;
        }
        D.store_dir = strdup(ntfs_store_dir(D.st));
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/journal.db", D.store_dir);
        if ((r = ntfs_journal_open(path, &D.j)) < 0) {
                fprintf(stderr, "ntfsd: cannot open journal %s: %s\n", path, ntfs_strerror(r));
                ntfs_store_close(D.st);
                return 1;
        }
        char why[512] = "";
        r = policy ? ntfs_policy_load(policy, &D.pol, why, sizeof why) : ntfs_policy_new_default(&D.pol);
        if (r < 0) {
                fprintf(stderr, "ntfsd: policy %s: %s\n", policy ? policy : "(default)", why[0] ? why : ntfs_strerror(r));
                return 1;
        }
        /* [limits]: the store quota new sessions start with (docs/policy.md). */
        ntfs_store_set_default_quota(D.st, ntfs_policy_limits(D.pol)->workspace_bytes,
                                     ntfs_policy_limits(D.pol)->workspace_inodes);
        if ((r = ntfs_gateway_new(D.pol, envf, 0, &D.gw, why, sizeof why)) < 0) {
                fprintf(stderr, "ntfsd: gateway: %s\n", why[0] ? why : ntfs_strerror(r));
                return 1;
        }
        /* Redaction is not optional: without it a secret could reach the
         * journal's file in clear. */
        if ((r = ntfs_journal_set_secrets(D.j, ntfs_gateway_secrets(D.gw))) < 0) {
                fprintf(stderr, "ntfsd: cannot hand the gateway's secrets to the journal for redaction: %s "
                                "(each secret must be %d to %d bytes, at most %d of them); not starting\n",
                        ntfs_strerror(r), NTFS_JOURNAL_SECRET_MIN, NTFS_JOURNAL_SECRET_MAX, NTFS_JOURNAL_MAX_SECRETS);
                return 1;
        }
        D.jail_bin = jail ? strdup(jail) : find_jail(argv[0]);
        (void)ntfs_jail_probe(&D.caps);
        pthread_mutex_init(&D.lock, NULL);
        pthread_cond_init(&D.claims_cv, NULL);

        if (sock && *sock)
                D.socket_path = strdup(sock);
        else {
                snprintf(path, sizeof path, "%s/ntfsd.sock", D.store_dir);
                D.socket_path = strdup(path);
        }
        if ((r = ntfs_router_new(&D.router)) < 0)
                return 1;
        {
                int (*mods[])(ntfs_router *) = { routes_store_register, routes_exec_register, routes_seed_register,
                                                 routes_fetch_register, routes_agent_register, routes_replay_register,
                                                 routes_trunk_register, routes_archive_register,
                                                 routes_remote_register, routes_persession_register };
                for (size_t i = 0; i < ARRAY_SIZE(mods); i++)
                        if (mods[i] && (r = mods[i](D.router)) < 0) {
                                log_error("cannot register routes: %s", ntfs_strerror(r));
                                return 1;
                        }
        }
        if (d_recovery_run && (r = d_recovery_run()) < 0) {
                log_error("recovery failed: %s", ntfs_strerror(r));
                return 1;
        }
        if (d_extra_start && (r = d_extra_start()) < 0) {
                log_error("cannot start: %s", ntfs_strerror(r));
                return 1;
        }
        mounts_restore();

        struct ntfs_http_config cfg = { .socket_path = D.socket_path, .router = D.router,
                                        .conn_data_free = d_conn_free, .tcp_listen = listen_tcp,
                                        .group = sock_group, .has_group = has_group };
        if ((r = ntfs_http_server_new(&cfg, NULL, &D, &D.srv)) < 0 || (r = ntfs_http_server_start(D.srv)) < 0) {
                fprintf(stderr, "ntfsd: cannot serve %s%s%s: %s\n", D.socket_path, listen_tcp ? " and " : "",
                        listen_tcp ? listen_tcp : "", ntfs_strerror(r));
                return 1;
        }
        if (pthread_create(&D.auto_thread, NULL, auto_main, NULL) != 0) {
                fprintf(stderr, "ntfsd: cannot start the auto-checkpoint thread\n");
                return 1;
        }
        log_info("ntfsd %s: store %s, socket %s, jail %s", NTFSD_VERSION, D.store_dir, D.socket_path, D.jail_bin);
        if ((r = ntfs_sd_notify("READY=1")) < 0)
                log_warn("cannot tell systemd we are ready: %s", ntfs_strerror(r));

        int sig = 0;
        for (;;) {
                sigwait(&set, &sig);
                if (sig != SIGHUP)
                        break;
                /* logrotate moved the file: a new one at the same path */
                if ((r = ntfs_log_reopen()) < 0)
                        log_warn("SIGHUP: cannot reopen the log file: %s", ntfs_strerror(r));
                else
                        log_info("SIGHUP: log file reopened");
        }
        log_info("signal %d: shutting down", sig);
        (void)ntfs_sd_notify("STOPPING=1");

        ntfs_http_server_stop(D.srv);
        if (d_persession_close)
                d_persession_close(NULL);
        if (d_extra_stop)
                d_extra_stop();
        d_mounts_close(); /* no mount starts any more; those in the making are done */
        pthread_join(D.auto_thread, NULL);
        for (;;) {
                pthread_mutex_lock(&D.lock);
                struct dmount *m = D.mounts;
                if (m)
                        D.mounts = m->next;
                pthread_mutex_unlock(&D.lock);
                if (!m)
                        break;
                d_mount_stop(m);
        }
        { /* a clean stop: nothing to mount again at the next start */
                char mf[PATH_MAX];
                mounts_file_path(mf, sizeof mf);
                (void)unlink(mf);
        }
        ntfs_http_server_free(D.srv);
        ntfs_router_free(D.router);
        while (D.shells) {
                struct shell_state *s = D.shells;
                D.shells = s->next;
                free(s->session);
                free(s->state);
                free(s);
        }
        ntfs_gateway_free(D.gw);
        ntfs_policy_free(D.pol);
        ntfs_journal_close(D.j);
        ntfs_store_close(D.st);
        unlink(D.socket_path);
        free(D.socket_path);
        free(D.store_dir);
        free(D.jail_bin);
        pthread_mutex_destroy(&D.lock);
        pthread_cond_destroy(&D.claims_cv);
        log_info("stopped");
        ntfs_log_close();
        return 0;
}
