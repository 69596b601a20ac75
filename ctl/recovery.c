/* SPDX-License-Identifier: MIT
 * recovery.c — startup reconciliation of the effect journal with the store
 * (docs/recovery.md). Runs once in ntfsd's main thread, after the store and
 * the journal are open and before the control socket accepts anything, so
 * nothing else touches a session while it is repaired.
 *
 * For every `pending` effect (an intent row whose effect may or may not have
 * run when the previous daemon died):
 *   1. If the session's history (from its head back to the effect's
 *      commit_before) holds a commit whose effect field is this effect's id,
 *      the effect ran to its checkpoint: the row becomes `done` with that
 *      commit as commit_after (its output was only in memory: the result says
 *      so). Nothing is rolled back.
 *   2. Otherwise the session is rolled back to commit_before (its working
 *      state, which may hold half of the effect's writes, is dropped) —
 *      except for no_side_effects tools, whose jail had a read-only workspace,
 *      so there is nothing of theirs to undo and a rollback could only drop
 *      other writers' unsaved changes; and except when the session's head is
 *      no longer commit_before: someone else checkpointed it while the
 *      command ran (a client, the auto-checkpoint), and a rollback would take
 *      an acknowledged checkpoint out of the session's history. Then the
 *      working state is kept as it is and the reason says so. Likewise
 *      when another mount of the session fsync'd while the command ran (the
 *      journal's D_EXT_FSYNC_KEY marker, written before that fsync
 *      returned): a rollback would drop what it made durable.
 *   3. An irreversible effect (bash_run, fetch_url) becomes `outcome_unknown`
 *      and is never re-run (a retry with its key is served that status);
 *      every other class becomes `failed` with the reason "interrupted by
 *      daemon crash" (the agent may run it again under a new key).
 * Before that, FUSE mounts the dead daemon left under STORE/mnt (its
 * internal jail mounts, now "transport endpoint is not connected") are
 * lazily unmounted so that the sessions can be mounted again.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "common/banned.h"

#define RECOVERY_REASON "interrupted by daemon crash"
#define RECOVERY_REASON_FSYNCED \
        "interrupted by daemon crash; not rolled back: another mount of the session fsync'd while it ran"
#define RECOVERY_REASON_MOVED \
        "interrupted by daemon crash; not rolled back: the session was checkpointed while it ran"
#define RECOVERY_REASON_IRREVERSIBLE \
        "interrupted by daemon crash: an irreversible effect is never re-run; whether it reached the outside world is unknown"
/* How far back from the head the effect's checkpoint is looked for (a
 * checkpoint of the effect is normally the head; later auto-checkpoints of a
 * user mount may sit on top). */
#define RECOVERY_HISTORY_MAX 256

extern char **environ;

struct recovery_stats {
        unsigned seen, completed, rolled_back, failed, unknown, errors;
        const char *fsynced; /* D_EXT_FSYNC_KEY's value: sessions, one per line (or NULL) */
};

/* Whether session is a line of the marker. */
static bool marked(const char *list, const char *session) {
        size_t n = strlen(session);
        for (const char *p = list; p && *p;) {
                const char *nl = strchr(p, '\n');
                size_t l = nl ? (size_t)(nl - p) : strlen(p);
                if (l == n && memcmp(p, session, n) == 0)
                        return true;
                p = nl ? nl + 1 : p + l;
        }
        return false;
}

/* ---- stale mounts ------------------------------------------------------------------------ */

static int spawn_fusermount_lazy(const char *mp) {
        char *argv[] = { (char *)"fusermount3", (char *)"-u", (char *)"-z", (char *)"--", (char *)mp, NULL };
        pid_t pid;
        int r = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
        if (r != 0)
                return -r;
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Lazily unmounts whatever is mounted on STORE/mnt/<entry> (the internal
 * mounts of a daemon that was killed) and removes the empty directories. */
static void clean_stale_mounts(void) {
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/mnt", D.store_dir) >= (int)sizeof dir)
                return;
        DIR *d = opendir(dir);
        if (!d)
                return;
        struct dirent *de;
        unsigned n = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                char p[PATH_MAX];
                if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p)
                        continue;
                bool was_mounted = false;
                if (umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                        was_mounted = true;
                else if (errno == EPERM && spawn_fusermount_lazy(p) == 0)
                        was_mounted = true;
                if (was_mounted) {
                        n++;
                        log_info("recovery: unmounted the stale mount %s", p);
                }
                (void)rmdir(p); /* empty once unmounted; a busy one stays */
        }
        closedir(d);
        if (n)
                log_info("recovery: %u stale mount(s) removed", n);
}

/* ---- one pending effect ---------------------------------------------------------------------- */

struct find_ctx {
        const char *effid;  /* decimal effect id */
        const char *before; /* hex, or NULL */
        ntfs_hash found;
        bool hit;
};

static int find_cb(const struct ntfs_commit_info *ci, void *ud) {
        struct find_ctx *f = ud;
        if (strcmp(ci->effect, f->effid) == 0) {
                f->found = ci->id;
                f->hit = true;
                return 1;
        }
        if (f->before) {
                char hex[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&ci->id, hex);
                if (strcmp(hex, f->before) == 0)
                        return 1; /* reached the state before the effect: not there */
        }
        return 0;
}

/* Finishes the row of an effect whose checkpoint commit exists. */
static int finish_completed(const struct ntfs_effect *e, const char *after) {
        json_t *res = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s}", "recovered", true, "note",
                                "completed before the daemon crashed; its output was not recorded", "checkpoint",
                                after, "tool", e->tool, "effect", e->effect_class, "status", "done");
        if (!res)
                return -ENOMEM;
        _cleanup_free_ char *s = json_dumps(res, JSON_COMPACT);
        json_decref(res);
        if (!s)
                return -ENOMEM;
        return ntfs_journal_effect_finish(D.j, e->id, NTFS_EFFECT_DONE, s, after, NULL);
}

static int recover_one(const struct ntfs_effect *e, void *ud) {
        struct recovery_stats *st = ud;
        st->seen++;
        char effid[32];
        snprintf(effid, sizeof effid, "%" PRId64, e->id);
        bool irreversible = strcmp(e->effect_class, "irreversible") == 0;
        bool readonly = strcmp(e->effect_class, "no_side_effects") == 0;
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, e->session, &si);
        bool have_session = r == 0;
        bool moved = false;   /* the head moved past commit_before: no rollback */
        bool fsynced = false; /* another mount fsync'd meanwhile: no rollback */
        if (!have_session)
                log_warn("recovery: effect %s (%s) of session %s: the session is gone (%s); only the row is closed",
                         effid, e->tool, e->session, ntfs_strerror(r));

        if (have_session) {
                struct find_ctx f = { .effid = effid, .before = e->commit_before };
                r = ntfs_history(D.st, e->session, RECOVERY_HISTORY_MAX, find_cb, &f);
                if (r < 0)
                        log_warn("recovery: history of %s: %s", e->session, ntfs_strerror(r));
                if (r >= 0 && f.hit) {
                        char after[NTFS_HEX_LEN + 1];
                        ntfs_hash_hex(&f.found, after);
                        r = finish_completed(e, after);
                        if (r < 0) {
                                log_error("recovery: cannot finish effect %s: %s", effid, ntfs_strerror(r));
                                st->errors++;
                                return 0;
                        }
                        st->completed++;
                        log_info("recovery: effect %s (%s, session %s, step %" PRIu64
                                 ") had reached its checkpoint %.12s: marked done",
                                 effid, e->tool, e->session, e->step, after);
                        return 0;
                }
                char head[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&si.head, head);
                if (e->commit_before && !readonly && marked(st->fsynced, e->session)) {
                        fsynced = true;
                        log_warn("recovery: another mount of session %s fsync'd while effect %s (%s) ran: "
                                 "not rolled back",
                                 e->session, effid, e->tool);
                } else if (e->commit_before && !readonly && strcmp(head, e->commit_before) != 0) {
                        moved = true;
                        log_warn("recovery: session %s was checkpointed (head %.12s) while effect %s (%s) ran "
                                 "from %.12s: not rolled back",
                                 e->session, head, effid, e->tool, e->commit_before);
                } else if (e->commit_before && !readonly) {
                        ntfs_hash h;
                        r = ntfs_rollback(D.st, e->session, e->commit_before, 0, &h);
                        if (r < 0) {
                                /* Left pending: the next start tries again. */
                                log_error("recovery: cannot roll session %s back to %.12s for effect %s: %s "
                                          "(left pending)",
                                          e->session, e->commit_before, effid, ntfs_strerror(r));
                                st->errors++;
                                return 0;
                        }
                        st->rolled_back++;
                        log_info("recovery: session %s rolled back to %.12s (before effect %s, %s, step %" PRIu64
                                 ")",
                                 e->session, e->commit_before, effid, e->tool, e->step);
                }
        }
        if (irreversible) {
                r = ntfs_journal_effect_mark_unknown(D.j, e->id, RECOVERY_REASON_IRREVERSIBLE);
                if (r == 0)
                        st->unknown++;
        } else {
                r = ntfs_journal_effect_finish(D.j, e->id, NTFS_EFFECT_FAILED, NULL, NULL,
                                               fsynced ? RECOVERY_REASON_FSYNCED
                                               : moved ? RECOVERY_REASON_MOVED
                                                       : RECOVERY_REASON);
                if (r == 0)
                        st->failed++;
        }
        if (r < 0) {
                log_error("recovery: cannot close effect %s: %s", effid, ntfs_strerror(r));
                st->errors++;
                return 0;
        }
        log_info("recovery: effect %s (%s, %s, session %s, step %" PRIu64 ") -> %s", effid, e->tool,
                 e->effect_class, e->session, e->step, irreversible ? "outcome_unknown (never re-run)" : "failed");
        return 0;
}

int d_recovery_run(void) {
        clean_stale_mounts();
        struct recovery_stats st = { 0 };
        _cleanup_free_ char *fsynced = NULL;
        int r = ntfs_journal_meta_get(D.j, D_EXT_FSYNC_KEY, &fsynced);
        if (r < 0 && r != -NTFS_ENOTFOUND && r != -ENOENT)
                return r;
        st.fsynced = fsynced;
        r = ntfs_journal_pending(D.j, recover_one, &st);
        if (r < 0)
                return r;
        /* Every command it was about is closed now. */
        if (fsynced && *fsynced && (r = ntfs_journal_meta_set(D.j, D_EXT_FSYNC_KEY, "")) < 0)
                return r;
        if (st.seen)
                log_info("recovery: %u pending effect(s): %u completed, %u rollback(s), %u failed (re-runnable), "
                         "%u outcome_unknown, %u error(s)",
                         st.seen, st.completed, st.rolled_back, st.failed, st.unknown, st.errors);
        else
                log_info("recovery: journal and store agree (no pending effect)");
        return 0;
}
