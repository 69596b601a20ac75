/* SPDX-License-Identifier: MIT
 * store.c — the LMDB environment, its lock, the batch transaction, objects,
 * the session records and the reflog's writing (refs and tags: store-refs.c;
 * the session calls: store-sessions.c).
 *
 * One process owns a store (flock on dir/lock). LMDB is opened with
 * MDB_NOLOCK: this process serializes every access with st->lock (a READ
 * reply's copy may run outside it, behind the copy gate: store_copy_begin)
 * and keeps one long-lived write transaction (the "batch") that collects
 * working state writes; it is committed every NTFS_STORE_FLUSH_MS by the
 * flusher thread, when it grows past BATCH_MAX_BYTES, and durably (fsync) on
 * every checkpoint, ref change and fsync. MDB_NOMETASYNC keeps integrity across a
 * system crash (a crash may undo the last unsynced batch, never corrupt).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "fs/store-internal.h"
#include "common/banned.h"

#define BATCH_MAX_BYTES (64ull << 20)
#define DEFAULT_MAP_BYTES (8ull << 30)
#define DEFAULT_RESERVE (64ull << 20)

bool ntfs_hash_is_zero(const ntfs_hash *h) {
        static const uint8_t z[NTFS_HASH_LEN];
        return memcmp(h->b, z, NTFS_HASH_LEN) == 0;
}

void ntfs_hash_hex(const ntfs_hash *h, char out[NTFS_HEX_LEN + 1]) { ntfs_hex(h->b, NTFS_HASH_LEN, out); }

int lmdb_err(int rc) {
        switch (rc) {
        case MDB_SUCCESS:
                return 0;
        case MDB_NOTFOUND:
                return -ENOENT;
        case MDB_KEYEXIST:
                return -EEXIST;
        case MDB_MAP_FULL:
        case MDB_TXN_FULL:
                return -ENOSPC;
        case MDB_CORRUPTED:
        case MDB_PAGE_NOTFOUND:
        case MDB_INVALID:
                return -NTFS_ECORRUPT;
        case MDB_VERSION_MISMATCH:
                return -NTFS_EBADFORMAT;
        case MDB_BAD_TXN:
                return -EIO;
        default:
                return rc > 0 ? -rc : -EIO;
        }
}

/* ---- the batch transaction -------------------------------------------------- */

/* The end of the pages LMDB uses, its high-water mark: the file grows past
 * it only by commits. */
static int lmdb_hwm(ntfs_store *st, uint64_t *ret) {
        MDB_envinfo info;
        MDB_stat stat;
        int rc = mdb_env_info(st->env, &info);
        if (rc == 0)
                rc = mdb_env_stat(st->env, &stat);
        if (rc)
                return lmdb_err(rc);
        *ret = (uint64_t)(info.me_last_pgno + 1) * stat.ms_psize;
        return 0;
}

static int grow_map_if_needed(ntfs_store *st) {
        uint64_t used = 0;
        int r = lmdb_hwm(st, &used);
        if (r < 0)
                return r;
        if (used + 2 * BATCH_MAX_BYTES < st->map_bytes / 2)
                return 0;
        uint64_t nsize = st->map_bytes * 2;
        int rc = mdb_env_set_mapsize(st->env, nsize);
        if (rc)
                return lmdb_err(rc);
        log_debug("store: map grown to %" PRIu64 " bytes", nsize);
        st->map_bytes = nsize;
        return 0;
}

static int txn_begin(ntfs_store *st) {
        if (st->txn)
                return 0;
        if (!st->env)
                return -EIO; /* broken by a failed compaction */
        int rc = grow_map_if_needed(st);
        if (rc < 0)
                return rc;
        rc = mdb_txn_begin(st->env, NULL, 0, &st->txn);
        if (rc) {
                st->txn = NULL;
                return lmdb_err(rc);
        }
        st->txn_started = ntfs_mono_ns();
        st->txn_bytes = 0;
        st->txn_broken = false;
        return 0;
}

int store_txn_begin(ntfs_store *st) { return txn_begin(st); }

void store_abort_locked(ntfs_store *st) {
        if (st->txn) {
                mdb_txn_abort(st->txn);
                st->txn = NULL;
        }
        store_caches_drop(st); /* they may hold records of the lost batch */
        wsdata_aborted(st);
}

/* An LMDB commit's error as an errno. LMDB reports a short write as EIO
 * (mdb_page_flush); a disk that is full by then gives short writes, and
 * the caller should hear ENOSPC. */
static int commit_err(ntfs_store *st, int rc) {
        int r = lmdb_err(rc);
        struct statvfs sv;
        if (r == -EIO && statvfs(st->dir, &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < st->reserve_bytes)
                r = -ENOSPC;
        return r;
}

int store_commit_locked(ntfs_store *st, bool durable) {
        int r = 0;
        if (!st->env)
                return -EIO;
        if (st->txn) {
                if (st->txn_broken)
                        r = -EIO;
                if (r == 0)
                        r = ino_flush(st);
                if (r == 0)
                        r = sess_flush(st);
                if (r == 0)
                        r = NTFS_FAULT("store.commit");
                /* the slots the batch names reach the disk before it does */
                if (r == 0)
                        r = wsdata_presync(st, durable);
                if (r < 0) {
                        store_abort_locked(st);
                        return r;
                }
                int rc = mdb_txn_commit(st->txn);
                st->txn = NULL;
                if (rc) {
                        store_caches_drop(st);
                        wsdata_aborted(st);
                        return commit_err(st, rc);
                }
                wsdata_committed(st);
        } else if (durable && (r = wsdata_presync(st, true)) < 0) {
                return r; /* overwrites in place that a background batch did not sync */
        }
        if (durable) {
                if ((r = NTFS_FAULT("store.sync")) < 0)
                        return r;
                int rc = mdb_env_sync(st->env, 1);
                if (rc)
                        return lmdb_err(rc);
        }
        return 0;
}

int store_fresh_txn(ntfs_store *st) {
        int r = store_commit_locked(st, false);
        if (r == 0)
                r = txn_begin(st);
        return r;
}

/* This thread's time waiting for the lock or for copies (measured only
 * when it had to wait: a free lock costs no clock read). */
static __thread int64_t tls_wait_ns;

int64_t ntfs_store_thread_wait_ns(void) { return tls_wait_ns; }

void store_wait_copies(ntfs_store *st) {
        if (!atomic_load_explicit(&st->copies, memory_order_acquire))
                return;
        int64_t t0 = ntfs_mono_ns();
        pthread_mutex_lock(&st->copy_mu);
        while (atomic_load_explicit(&st->copies, memory_order_acquire))
                pthread_cond_wait(&st->copy_cond, &st->copy_mu);
        pthread_mutex_unlock(&st->copy_mu);
        tls_wait_ns += ntfs_mono_ns() - t0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
}

/* pthread_mutex_lock(&st->lock), spinning first while the holder says its
 * hold is brief (store_hold_brief). */
static void lock_mutex(ntfs_store *st) {
        if (pthread_mutex_trylock(&st->lock) == 0)
                return;
        int64_t t0 = ntfs_mono_ns(), until = t0 + STORE_BRIEF_SPIN_NS;
        for (unsigned i = 1; atomic_load_explicit(&st->lock_brief, memory_order_relaxed); i++) {
                cpu_relax();
                if (i % 16)
                        continue;
                if (pthread_mutex_trylock(&st->lock) == 0)
                        goto locked;
                if (ntfs_mono_ns() > until)
                        break;
        }
        pthread_mutex_lock(&st->lock);
locked:
        tls_wait_ns += ntfs_mono_ns() - t0;
}

void store_hold_brief(ntfs_store *st) { atomic_store_explicit(&st->lock_brief, true, memory_order_relaxed); }

void store_lock(ntfs_store *st) {
        lock_mutex(st);
        store_wait_copies(st);
}

static int enter(ntfs_store *st, bool reader) {
        atomic_fetch_add_explicit(&st->lock_wanted, 1, memory_order_relaxed);
        lock_mutex(st);
        atomic_fetch_sub_explicit(&st->lock_wanted, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->lock_taken, 1, memory_order_relaxed);
        /* a reader waits too when it must begin the batch: that may grow
         * LMDB's map, which moves every page a copy could be reading */
        if (!reader || !st->txn)
                store_wait_copies(st);
        int r = txn_begin(st);
        if (r < 0)
                pthread_mutex_unlock(&st->lock);
        return r;
}

int store_enter(ntfs_store *st) { return enter(st, false); }

int store_enter_reader(ntfs_store *st) { return enter(st, true); }

static bool settle_due(const ntfs_store *st) {
        return st->txn && (st->txn_broken || st->txn_bytes > BATCH_MAX_BYTES);
}

/* Whether leaving now would commit or unmap, and so must first wait for
 * the copies in flight: store_settle_locked waits exactly then, and a
 * reader whose leave would wait copies under the lock instead. */
static bool leave_waits(const ntfs_store *st) { return settle_due(st) || st->noldmaps; }

bool store_copy_begin(ntfs_store *st) {
        if (leave_waits(st))
                return false;
        atomic_fetch_add_explicit(&st->copies, 1, memory_order_relaxed);
        return true;
}

void store_copy_end(ntfs_store *st) {
        /* under copy_mu, so that a waiter cannot miss the last one */
        pthread_mutex_lock(&st->copy_mu);
        if (atomic_fetch_sub_explicit(&st->copies, 1, memory_order_release) == 1)
                pthread_cond_broadcast(&st->copy_cond);
        pthread_mutex_unlock(&st->copy_mu);
}

void store_settle_locked(ntfs_store *st) {
        /* a reader's lock did not wait for the copies in flight: a commit
         * or an unmap does (store_copy_begin keeps a reader's own copy out
         * of the count when its leave would) */
        if (leave_waits(st))
                store_wait_copies(st);
        if (settle_due(st)) {
                int r = store_commit_locked(st, false);
                if (r < 0)
                        log_warn("store: batch commit failed: %s", ntfs_strerror(r));
        }
        wsdata_leave(st); /* no pointer into a replaced mapping is left */
}

void store_leave(ntfs_store *st) {
        /* a commit or an unmap may follow: not brief */
        atomic_store_explicit(&st->lock_brief, false, memory_order_relaxed);
        store_settle_locked(st);
        /* Invalidation callbacks run only in the thread that replaced the
         * state (ntfs_rollback), never here: a FUSE worker leaving the store
         * must not notify the kernel while its own request holds a lock. */
        pthread_mutex_unlock(&st->lock);
}

void store_run_invalidations(ntfs_store *st) {
        /* inval_lock is held while a callback runs, so that
         * ntfs_ws_set_invalidate_cb() can wait for it to finish. */
        pthread_mutex_lock(&st->inval_lock);
        for (;;) {
                void (*cb)(ntfs_ws *, const struct ntfs_ws_change *, size_t, void *) = NULL;
                void *ud = NULL;
                ntfs_ws *target = NULL;
                struct ws_changes *ch = NULL;
                store_lock(st);
                for (ntfs_ws *w = st->wss; w; w = w->next)
                        if (w->invalidate_pending || w->pending_changes) {
                                /* everything, or what a rollback in place changed */
                                if (!w->invalidate_pending)
                                        ch = w->pending_changes;
                                else
                                        ws_changes_unref(w->pending_changes);
                                w->pending_changes = NULL;
                                w->invalidate_pending = false;
                                cb = w->inval_cb;
                                ud = w->inval_ud;
                                target = w;
                                break;
                        }
                pthread_mutex_unlock(&st->lock);
                if (!target)
                        break;
                if (cb)
                        cb(target, ch ? ch->v : NULL, ch ? ch->n : 0, ud);
                ws_changes_unref(ch);
        }
        pthread_mutex_unlock(&st->inval_lock);
}

bool store_reserve_held(ntfs_store *st) {
        /* at least half of it left past the high-water mark (the flusher
         * tops it up; a store without a flusher holds what open took) */
        uint64_t hwm = 0;
        return st->held_ok && lmdb_hwm(st, &hwm) == 0 && st->held_end >= hwm + st->reserve_bytes / 2;
}

/* Keeps reserve_bytes of disk allocated in LMDB's file past its high-water
 * mark (fallocate KEEP_SIZE: the file's size is unchanged, LMDB writes its
 * new pages into blocks that are already there). Check_space refuses new
 * content before the free disk runs out; this makes sure that what was
 * already acknowledged can still be committed when something else fills
 * the disk. Lock held; released around the fallocate. */
static void reserve_hold(ntfs_store *st) {
        int fd;
        uint64_t hwm = 0;
        if (st->held_nosup || lmdb_hwm(st, &hwm) < 0 || mdb_env_get_fd(st->env, &fd))
                return;
        if (st->held_ok && st->held_end >= hwm + st->reserve_bytes / 4 * 3)
                return;
        uint64_t len = st->reserve_bytes;
        pthread_mutex_unlock(&st->lock);
        int r = fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)hwm, (off_t)len) < 0 ? -errno : 0;
        store_lock(st);
        if (r < 0 && r != -EOPNOTSUPP && !st->held_ok) {
                /* A failed fallocate may keep what it allocated past the end
                 * (ext4 does): on a small disk that filled it, the journal
                 * could not open and every later start met the same full
                 * disk. Truncating to the same length gives back the blocks
                 * past it; under the lock, so that no commit extends the
                 * file meanwhile. syncfs commits ext4's journal: blocks
                 * freed are not handed out again before (the journal's own
                 * file, created next, met ENOSPC). */
                struct stat sb;
                if (fstat(fd, &sb) < 0 || ftruncate(fd, sb.st_size) < 0 || syncfs(fd) < 0)
                        log_debug("store: cannot release a partial reserve: %s", strerror(errno));
        }
        if (r == -EOPNOTSUPP) {
                st->held_nosup = true;
                st->held_ok = false;
                return;
        }
        if (r < 0 && !st->held_warned)
                log_warn("store: cannot hold the %" PRIu64 " MiB reserve: %s", len >> 20, strerror(-r));
        else if (r == 0 && st->held_warned)
                log_info("store: the %" PRIu64 " MiB reserve is held again", len >> 20);
        st->held_warned = r < 0;
        st->held_ok = r == 0;
        if (r == 0)
                st->held_end = hwm + len;
}

/* Lets a FUSE worker waiting in store_enter() have the lock before the
 * flusher goes on: a request waits for at most one slice of background
 * work, never for all of it. pthread mutexes are not fair (an unlock and a
 * lock would most often keep it), so the flusher yields until one waiter
 * has taken the lock, for at most 200 us. */
static void yield_to_waiters(ntfs_store *st) {
        if (!atomic_load_explicit(&st->lock_wanted, memory_order_relaxed))
                return;
        unsigned taken = atomic_load_explicit(&st->lock_taken, memory_order_relaxed);
        int64_t until = ntfs_mono_ns() + 200 * 1000;
        pthread_mutex_unlock(&st->lock);
        while (atomic_load_explicit(&st->lock_taken, memory_order_relaxed) == taken &&
               atomic_load_explicit(&st->lock_wanted, memory_order_relaxed) && ntfs_mono_ns() < until)
                sched_yield();
        store_lock(st);
}

/* Whether the store was quiet since the flusher's last wake-up, 50 ms
 * before: at most STORE_BUSY_ENTRIES store_enter() calls (lock held). */
static bool store_was_quiet(ntfs_store *st, unsigned *seen) {
        unsigned taken = atomic_load_explicit(&st->lock_taken, memory_order_relaxed);
        bool quiet = taken - *seen <= STORE_BUSY_ENTRIES;
        *seen = taken;
        return quiet;
}

/* Whether the flusher commits the batch now (lock held): when it is
 * NTFS_STORE_FLUSH_MS old, or at the end of a burst (the first quiet
 * wake-up after a busy one, *burst set) once it is NTFS_STORE_QUIET_FLUSH_MS
 * old. A burst's last batch (the end of an untar, a git commit) is then
 * written while nothing waits for the lock, not in the middle of the next
 * command. Later quiet batches (requests trickling in, queued forgets
 * being freed) wait for the full second: committed every 250 ms, they
 * made up to four times as many commits, and the daemon's CPU during the
 * benchmark's make rose (docs/store.md, "The batch transaction"). */
static bool commit_due(ntfs_store *st, bool quiet, bool *burst, int64_t now) {
        if (!quiet)
                *burst = true;
        if (!st->txn) {
                if (quiet)
                        *burst = false; /* its end was committed already */
                return false;
        }
        int64_t age = now - st->txn_started;
        bool due = age > NTFS_STORE_FLUSH_MS * 1000000LL ||
                   (quiet && *burst && age > NTFS_STORE_QUIET_FLUSH_MS * 1000000LL);
        if (due && quiet)
                *burst = false;
        return due;
}

static void *flusher_main(void *arg) {
        ntfs_store *st = arg;
        pthread_setname_np(pthread_self(), "ntfs-flusher");
        unsigned seen = atomic_load_explicit(&st->lock_taken, memory_order_relaxed);
        bool burst = false; /* a busy wake-up since the last quiet commit */
        store_lock(st);
        while (!st->stopping) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 50 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&st->cond, &st->lock, &ts);
                store_wait_copies(st);
                if (st->stopping)
                        break;
                /* Queued forgets, a slice at a time, letting requests in
                 * between. Freed now, while the unlinks that orphaned them
                 * are in the batch, not left for a pause: freed after its
                 * commit, an rm -rf's forgets cost the daemon twice the
                 * CPU, and the next command paid for them (docs/store.md,
                 * "Forgets are queued"). */
                bool quiet = store_was_quiet(st, &seen);
                for (int i = 0; i < FORGET_WAKE_SLICES && ws_forget_drain_all(st) && !st->stopping; i++)
                        yield_to_waiters(st);
                if (st->stopping)
                        break;
                int64_t now = ntfs_mono_ns();
                if (commit_due(st, quiet, &burst, now)) {
                        int64_t started = st->txn_started;
                        st->datasync_at = now;
                        wsdata_presync_unlocked(st, false);
                        if (!st->txn || st->stopping || st->txn_started != started)
                                continue; /* committed meanwhile */
                        int r = store_commit_locked(st, false);
                        if (r < 0)
                                log_warn("store: background flush failed: %s", ntfs_strerror(r));
                } else if (now - st->datasync_at > NTFS_STORE_DATASYNC_MS * 1000000LL) {
                        st->datasync_at = now;
                        wsdata_presync_unlocked(st, false);
                }
                wsdata_prefault(st, true);
                reserve_hold(st);
                wsdata_trim(st);
        }
        pthread_mutex_unlock(&st->lock);
        return NULL;
}

/* ---- db helpers ------------------------------------------------------------------ */

int db_get(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, MDB_val *ret) {
        MDB_val key = { kl, (void *)k };
        int rc = mdb_get(st->txn, dbi, &key, ret);
        return lmdb_err(rc);
}

int db_put(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, const void *v, size_t vl) {
        MDB_val key = { kl, (void *)k }, val = { vl, (void *)v };
        int rc = mdb_put(st->txn, dbi, &key, &val, 0);
        if (rc) {
                if (rc != MDB_KEYEXIST)
                        st->txn_broken = true;
                return lmdb_err(rc);
        }
        st->txn_bytes += kl + vl;
        store_changed(st);
        return 0;
}

int db_del(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl) {
        MDB_val key = { kl, (void *)k };
        int rc = mdb_del(st->txn, dbi, &key, NULL);
        if (rc && rc != MDB_NOTFOUND)
                st->txn_broken = true;
        if (!rc)
                store_changed(st);
        return lmdb_err(rc);
}

int db_get_at(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, MDB_val *ret, MDB_cursor **ret_cur) {
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, dbi, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val key = { kl, (void *)k };
        if ((rc = mdb_cursor_get(cur, &key, ret, MDB_SET)) != 0) {
                mdb_cursor_close(cur);
                return lmdb_err(rc);
        }
        *ret_cur = cur;
        return 0;
}

int db_cursor_del(ntfs_store *st, MDB_cursor *cur) {
        int rc = mdb_cursor_del(cur, 0);
        if (rc) {
                st->txn_broken = true;
                return lmdb_err(rc);
        }
        store_changed(st);
        return 0;
}

int db_del_prefix(ntfs_store *st, MDB_dbi dbi, const void *prefix, size_t pl) {
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, dbi, &cur);
        if (rc)
                return lmdb_err(rc);
        int n = 0;
        /* after a deletion the cursor stands on the record that followed:
         * MDB_NEXT returns it without a new descent (as chunks_drop) */
        MDB_val k = { pl, (void *)prefix }, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size >= pl && memcmp(k.mv_data, prefix, pl) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                if ((rc = mdb_cursor_del(cur, 0)) != 0)
                        break;
                n++;
        }
        mdb_cursor_close(cur);
        if (rc && rc != MDB_NOTFOUND) {
                st->txn_broken = true;
                return lmdb_err(rc);
        }
        return n;
}

/* ---- objects ---------------------------------------------------------------------- */

const uint8_t obj_empty_tree[5] = { OBJ_TREE, 0, 0, 0, 0 };   /* no entries */
const uint8_t obj_empty_file[13] = { OBJ_FILE };            /* size 0, no chunks */

int obj_put(ntfs_store *st, const void *data, size_t len, ntfs_hash *ret) {
        ntfs_hash h;
        ntfs_sha256(data, len, h.b);
        MDB_val key = { NTFS_HASH_LEN, h.b }, val = { len, (void *)data };
        int rc = mdb_put(st->txn, st->obj, &key, &val, MDB_NOOVERWRITE);
        if (rc == 0) {
                st->txn_bytes += len;
                if (((const uint8_t *)data)[0] == OBJ_COMMIT) {
                        MDB_val one = { 1, (void *)"" };
                        rc = mdb_put(st->txn, st->commits, &key, &one, 0);
                }
        }
        if (rc && rc != MDB_KEYEXIST) {
                st->txn_broken = true;
                return lmdb_err(rc);
        }
        *ret = h;
        return 0;
}

int obj_get(ntfs_store *st, const ntfs_hash *h, MDB_val *ret) {
        int r = db_get(st, st->obj, h->b, NTFS_HASH_LEN, ret);
        if (r == -ENOENT)
                return -NTFS_ECORRUPT; /* a referenced object is missing */
        if (r == 0 && ret->mv_size == 0)
                return -NTFS_ECORRUPT;
        return r;
}

int obj_get_typed(ntfs_store *st, const ntfs_hash *h, uint8_t type, MDB_val *ret) {
        int r = obj_get(st, h, ret);
        if (r < 0)
                return r;
        if (((const uint8_t *)ret->mv_data)[0] != type)
                return -NTFS_ECORRUPT;
        return 0;
}

int commit_load(ntfs_store *st, const ntfs_hash *id, struct commit_obj *ret) {
        MDB_val v;
        int r = db_get(st, st->obj, id->b, NTFS_HASH_LEN, &v);
        if (r == -ENOENT)
                return -NTFS_ENOREF;
        if (r < 0)
                return r;
        if (v.mv_size == 0 || ((const uint8_t *)v.mv_data)[0] != OBJ_COMMIT)
                return -NTFS_ENOREF;
        return commit_decode(v.mv_data, v.mv_size, ret);
}

/* ---- sessions ------------------------------------------------------------------ */

static void icache_drop(ntfs_store *st) {
        for (size_t i = 0; i < INO_CACHE_SLOTS; i++) {
                st->icache[i].ino = 0;
                st->icache[i].pending = false;
        }
        st->nipending = 0;
}

void store_caches_drop(ntfs_store *st) {
        st->scache_valid = false;
        st->scache_dirty = false; /* its changes were the lost batch's */
        st->empty_file_ok = false;
        icache_drop(st);
        memset(st->iblocks, 0, sizeof st->iblocks);
}

/* The session cache holds the record the batch has for one name: set by a
 * read or a successful write, dropped by a failed write (the batch will be
 * aborted), a deletion, and any abort or failed commit. */
static bool scache_holds(const ntfs_store *st, const char *name) {
        return st->scache_valid && strcmp(st->scache_name, name) == 0;
}

static void scache_set(ntfs_store *st, const char *name, const struct sess_rec *r) {
        size_t n = strlen(name);
        st->scache_dirty = false;
        if (n >= sizeof st->scache_name) {
                st->scache_valid = false;
                return;
        }
        memcpy(st->scache_name, name, n + 1);
        st->scache_rec = *r;
        st->scache_valid = true;
}

int sess_flush(ntfs_store *st) {
        if (!st->scache_valid || !st->scache_dirty)
                return 0;
        int rc = db_put(st, st->sess, st->scache_name, strlen(st->scache_name), &st->scache_rec,
                        sizeof st->scache_rec);
        if (rc < 0) {
                st->scache_valid = false; /* the batch is broken: aborted at leave */
                return rc;
        }
        st->scache_dirty = false;
        return 0;
}

int sess_get(ntfs_store *st, const char *name, struct sess_rec *ret) {
        if (!ntfs_name_valid(name))
                return -NTFS_EINVALNAME;
        if (scache_holds(st, name)) {
                *ret = st->scache_rec;
                return 0;
        }
        int r0 = sess_flush(st); /* the copy is about to hold another name */
        if (r0 < 0)
                return r0;
        MDB_val v;
        int r = db_get(st, st->sess, name, strlen(name), &v);
        if (r == -ENOENT)
                return -NTFS_ENOSESSION;
        if (r < 0)
                return r;
        if (v.mv_size != sizeof *ret)
                return -NTFS_ECORRUPT;
        memcpy(ret, v.mv_data, sizeof *ret);
        scache_set(st, name, ret);
        return 0;
}

int sess_put(ntfs_store *st, const char *name, const struct sess_rec *r) {
        if (!scache_holds(st, name)) {
                int r0 = sess_flush(st); /* another name's lazy record */
                if (r0 < 0)
                        return r0;
        }
        int rc = db_put(st, st->sess, name, strlen(name), r, sizeof *r);
        if (rc < 0)
                st->scache_valid = false;
        else
                scache_set(st, name, r);
        return rc;
}

int sess_put_lazy(ntfs_store *st, const char *name, const struct sess_rec *r) {
        if (!scache_holds(st, name))
                return sess_put(st, name, r);
        st->scache_rec = *r;
        st->scache_dirty = true;
        return 0;
}

int sess_del(ntfs_store *st, const char *name) {
        int r = sess_flush(st);
        if (r < 0)
                return r;
        st->scache_valid = false;
        return db_del(st, st->sess, name, strlen(name));
}

/* ---- name hashes ---------------------------------------------------------------- */

static size_t nh_slot(const char *name, size_t len) {
        uint64_t x = 0xcbf29ce484222325ULL; /* FNV-1a: only picks the slot */
        for (size_t i = 0; i < len; i++) {
                x ^= (unsigned char)name[i];
                x *= 0x100000001b3ULL;
        }
        return (size_t)(x >> 32) & (NAME_HASH_CACHE_SLOTS - 1);
}

void store_name_hash_known(ntfs_store *st, const char *name, size_t len, uint64_t h) {
        if (len == 0 || len > NAME_HASH_CACHE_NAME)
                return;
        struct name_hash_slot *s = &st->nhcache[nh_slot(name, len)];
        s->h = h;
        s->len = (uint8_t)len;
        memcpy(s->name, name, len);
}

uint64_t store_name_hash(ntfs_store *st, const char *name, size_t len) {
        if (len == 0 || len > NAME_HASH_CACHE_NAME)
                return name_hash(name, len);
        const struct name_hash_slot *s = &st->nhcache[nh_slot(name, len)];
        if (s->len == len && memcmp(s->name, name, len) == 0)
                return s->h;
        uint64_t h = name_hash(name, len);
        store_name_hash_known(st, name, len, h);
        return h;
}

size_t store_reflog_key(const char *name, uint64_t seq, uint8_t *k) {
        size_t n = strlen(name);
        memcpy(k, name, n);
        k[n] = 0;
        ntfs_put_be64(k + n + 1, seq);
        return n + 9;
}

int reflog_append(ntfs_store *st, const char *name, struct sess_rec *r, const ntfs_hash *old_head,
                  const ntfs_hash *new_head, const char *op) {
        uint8_t k[NTFS_NAME_MAX + 9];
        struct reflog_rec rec = { .old_head = *old_head, .new_head = *new_head, .time = ntfs_now_ns() };
        snprintf(rec.op, sizeof rec.op, "%s", op);
        size_t kl = store_reflog_key(name, ++r->reflog_seq, k);
        return db_put(st, st->reflog, k, kl, &rec, sizeof rec);
}

uint64_t wsid_alloc(ntfs_store *st) {
        MDB_val v;
        uint64_t next = 1;
        if (db_get(st, st->meta, "next_wsid", 9, &v) == 0 && v.mv_size == 8)
                memcpy(&next, v.mv_data, 8);
        uint64_t n2 = next + 1;
        if (db_put(st, st->meta, "next_wsid", 9, &n2, 8) < 0)
                return 0;
        return next;
}

int wsid_retire(ntfs_store *st, uint64_t wsid) {
        uint8_t k[8];
        ntfs_put_be64(k, wsid);
        return db_put(st, st->dead, k, 8, "", 0);
}

/* Deletes the records of one working state. */
static int wsid_purge(ntfs_store *st, uint64_t wsid) {
        uint8_t k[8];
        ntfs_put_be64(k, wsid);
        int r0 = ino_flush(st); /* other working states' records stay */
        if (r0 < 0)
                return r0;
        icache_drop(st); /* its ino records go; the session copy holds no
                          * record of it (callers commit first, too) */
        MDB_dbi dbis[] = { st->ino, st->dent, st->chunk, st->xattr, st->lmap, st->dlink, st->orph };
        for (size_t i = 0; i < ARRAY_SIZE(dbis); i++) {
                int r = db_del_prefix(st, dbis[i], k, 8);
                if (r < 0)
                        return r;
        }
        return wsdata_retire(st, wsid);
}

int wsid_reclaim_all(ntfs_store *st, uint64_t *ret_count) {
        uint64_t n = 0;
        for (;;) {
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->dead, &cur);
                if (rc)
                        return lmdb_err(rc);
                uint8_t first[8];
                ntfs_put_be64(first, 1); /* past the keeper (put_keepers) */
                MDB_val k = { 8, first }, v;
                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                uint8_t key[8];
                if (rc == 0 && k.mv_size == 8)
                        memcpy(key, k.mv_data, 8);
                mdb_cursor_close(cur);
                if (rc == MDB_NOTFOUND)
                        break;
                if (rc)
                        return lmdb_err(rc);
                int r = wsid_purge(st, ntfs_get_be64(key));
                if (r < 0)
                        return r;
                if ((r = db_del(st, st->dead, key, 8)) < 0)
                        return r;
                n++;
        }
        if (ret_count)
                *ret_count = n;
        return 0;
}


const char *ntfs_store_dir(const ntfs_store *st) { return st->dir; }

static int open_dbs(ntfs_store *st) {
        struct {
                const char *name;
                MDB_dbi *dbi;
        } dbs[] = {
                { "meta", &st->meta },   { "obj", &st->obj },     { "commits", &st->commits },
                { "sess", &st->sess },   { "tags", &st->tags },   { "reflog", &st->reflog },
                { "ino", &st->ino },     { "dent", &st->dent },   { "chunk", &st->chunk },
                { "xattr", &st->xattr }, { "lmap", &st->lmap },   { "dlink", &st->dlink },
                { "orph", &st->orph },   { "dead", &st->dead },
        };
        for (size_t i = 0; i < ARRAY_SIZE(dbs); i++) {
                int rc = mdb_dbi_open(st->txn, dbs[i].name, MDB_CREATE, dbs[i].dbi);
                if (rc)
                        return lmdb_err(rc);
        }
        MDB_val v;
        int r = db_get(st, st->meta, "format", 6, &v);
        if (r == -ENOENT) {
                uint32_t f = NTFS_STORE_LAYOUT;
                return db_put(st, st->meta, "format", 6, &f, 4);
        }
        if (r < 0)
                return r;
        uint32_t f;
        if (v.mv_size != 4)
                return -NTFS_EBADFORMAT;
        memcpy(&f, v.mv_data, 4);
        if (f == 2) {
                /* every layout-2 chunk record (a slot's) reads the same in 3 */
                f = NTFS_STORE_LAYOUT;
                return db_put(st, st->meta, "format", 6, &f, 4);
        }
        if (f == 1) {
                /* Version 1 kept chunk bytes in the chunk db; with none
                 * there the layouts agree. */
                MDB_stat ms;
                int rc = mdb_stat(st->txn, st->chunk, &ms);
                if (rc)
                        return lmdb_err(rc);
                if (ms.ms_entries) {
                        log_error("store: format 1 with %zu unsaved chunks; checkpoint every session "
                                  "with the ntfs that wrote it, then open it again",
                                  (size_t)ms.ms_entries);
                        return -NTFS_EBADFORMAT;
                }
                f = NTFS_STORE_LAYOUT;
                return db_put(st, st->meta, "format", 6, &f, 4);
        }
        return f == NTFS_STORE_LAYOUT ? 0 : -NTFS_EBADFORMAT;
}

/* Each database whose records all come and go (hard-link groups, orphans,
 * materialized xattrs, dead working states) holds one record that is never
 * deleted, with a key of wsid 0, which no working state has. LMDB 0.9
 * frees an emptied database's root page but still writes it at the
 * commit, and the next record takes a new page: git's link-then-unlink of
 * every object it writes emptied lmap and dlink each time, and 60-80% of
 * the pages the batches of a `git add` wrote were such empty leaves
 * (docs/store.md, "Databases never emptied"). Scans of these databases
 * start from a working state's prefix, or past wsid 0 (wsid_reclaim_all). */
static int put_keepers(ntfs_store *st) {
        static const uint8_t zero[16];
        const struct {
                MDB_dbi dbi;
                size_t klen;
        } keep[] = { { st->lmap, 16 }, { st->dlink, 16 }, { st->orph, 16 }, { st->xattr, 16 }, { st->dead, 8 } };
        for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
                MDB_val k = { keep[i].klen, (void *)zero }, v = { 0, (void *)zero };
                int rc = mdb_put(st->txn, keep[i].dbi, &k, &v, MDB_NOOVERWRITE);
                if (rc && rc != MDB_KEYEXIST)
                        return lmdb_err(rc);
        }
        return 0;
}

/* Views are ephemeral: any left by a crashed process are retired. */
static int retire_stale_views(ntfs_store *st) {
        for (;;) {
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->meta, &cur);
                if (rc)
                        return lmdb_err(rc);
                MDB_val k = { 5, (void *)"view:" }, v;
                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                uint8_t key[13];
                bool found = rc == 0 && k.mv_size == 13 && memcmp(k.mv_data, "view:", 5) == 0;
                if (found)
                        memcpy(key, k.mv_data, 13);
                mdb_cursor_close(cur);
                if (!found)
                        return 0;
                int r = wsid_retire(st, ntfs_get_be64(key + 5));
                if (r == 0)
                        r = db_del(st, st->meta, key, 13);
                if (r < 0)
                        return r;
        }
}

/* The inode cache is used at random, a slot per inode by hash. Its memory
 * is mapped on its own, not taken from malloc:
 * - faulted in at open: on 4 KiB pages its first use faulted a page in
 *   every few new inodes, and on this kind of VM a fault costs ~11 us
 *   (bench-store --per-file: a create took 5-7 us with a fresh
 *   65,536-slot table, 1.0-1.6 us with one faulted in);
 * - on 2 MiB boundaries and asked for transparent huge pages (a hint: the
 *   kernel's "madvise" setting, Debian's default, grants it), so that
 *   this is six faults, and the table's random reads miss the TLB less;
 * - not inherited by a fork (MADV_DONTFORK): the mount's helper process
 *   (mount.c, own_mount_call) is forked after the store opens and lives
 *   as long as the daemon; sharing the table with it made the daemon's
 *   first write to each page a copy. No child touches the cache.
 * Its own mapping, so that the advice dies with it (freed to malloc,
 * the memory could come back to other objects still marked DONTFORK). */
#define HUGE_PAGE ((size_t)2 << 20)

static size_t icache_bytes(void) {
        return (INO_CACHE_SLOTS * sizeof(struct ino_cache_slot) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

static struct ino_cache_slot *icache_map(void) {
        const size_t n = icache_bytes();
        uint8_t *p = mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return NULL;
        uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (a > p)
                (void)munmap(p, (size_t)(a - p));
        (void)munmap(a + n, HUGE_PAGE - (size_t)(a - p));
        (void)madvise(a, n, MADV_HUGEPAGE); /* refused: 4 KiB pages, faulted in all the same */
        (void)madvise(a, n, MADV_DONTFORK);
        memset(a, 0, n);
        return (struct ino_cache_slot *)a;
}

static void icache_unmap(struct ino_cache_slot *c) {
        if (c)
                (void)munmap(c, icache_bytes());
}

/* ---- space and compaction ------------------------------------------------------------ */

/* The pages on LMDB's freelist (the free database, dbi 0: each record an
 * IDL, its first word the count of page numbers after it), as the batch
 * sees it. With MDB_NOLOCK and no other reader every one is reusable. */
static int free_page_count(ntfs_store *st, uint64_t *ret, uint64_t *ret_psize) {
        MDB_stat ms;
        int rc = mdb_env_stat(st->env, &ms);
        if (rc)
                return lmdb_err(rc);
        *ret_psize = ms.ms_psize;
        /* LMDB opens no cursor on the free database in a write transaction:
         * a read-only one (MDB_NOLOCK, MDB_NOTLS: beside the batch) sees the
         * last commit's freelist */
        MDB_txn *rt;
        if ((rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &rt)))
                return lmdb_err(rc);
        MDB_cursor *cur;
        if ((rc = mdb_cursor_open(rt, 0, &cur))) {
                mdb_txn_abort(rt);
                return lmdb_err(rc);
        }
        uint64_t n = 0;
        MDB_val k, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
                if (v.mv_size >= sizeof(size_t)) {
                        size_t c;
                        memcpy(&c, v.mv_data, sizeof c);
                        n += c;
                }
        mdb_cursor_close(cur);
        mdb_txn_abort(rt);
        if (rc != MDB_NOTFOUND)
                return lmdb_err(rc);
        *ret = n;
        return 0;
}

static void data_file_sizes(const ntfs_store *st, uint64_t *file, uint64_t *disk) {
        char path[PATH_MAX];
        struct stat sb;
        *file = *disk = 0;
        if (snprintf(path, sizeof path, "%s/data.mdb", st->dir) < (int)sizeof path && stat(path, &sb) == 0) {
                *file = (uint64_t)sb.st_size;
                *disk = (uint64_t)sb.st_blocks * 512;
        }
}

static int env_open(ntfs_store *st) {
        int rc = mdb_env_create(&st->env);
        if (rc) {
                st->env = NULL;
                return lmdb_err(rc);
        }
        if ((rc = mdb_env_set_mapsize(st->env, st->map_bytes)) || (rc = mdb_env_set_maxdbs(st->env, 16)) ||
            (rc = mdb_env_open(st->env, st->dir, MDB_NOLOCK | MDB_NOMETASYNC | MDB_NOTLS, 0600)))
                return lmdb_err(rc);
        return 0;
}

int ntfs_store_compact(ntfs_store *st, void (*on_start)(const char *copy_path, uint64_t total, void *ud), void *ud,
                       struct ntfs_compact_result *ret) {
        char tmp[PATH_MAX], dst[PATH_MAX];
        if (snprintf(tmp, sizeof tmp, "%s/data.mdb.compact", st->dir) >= (int)sizeof tmp ||
            snprintf(dst, sizeof dst, "%s/data.mdb", st->dir) >= (int)sizeof dst)
                return -ENAMETOOLONG;
        memset(ret, 0, sizeof *ret);
        store_lock(st);
        if (st->wss || st->broken) {
                pthread_mutex_unlock(&st->lock);
                return st->broken ? -EIO : -EBUSY;
        }
        int r = store_commit_locked(st, true);
        uint64_t hwm = 0, free_pages = 0, psize = 4096;
        if (r == 0)
                r = txn_begin(st);
        if (r == 0)
                r = lmdb_hwm(st, &hwm);
        if (r == 0)
                r = free_page_count(st, &free_pages, &psize);
        if (r == 0)
                r = store_commit_locked(st, false); /* no write transaction during the copy */
        if (r < 0) {
                pthread_mutex_unlock(&st->lock);
                return r;
        }
        data_file_sizes(st, &ret->file_before, &ret->disk_before);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
                r = -errno;
                pthread_mutex_unlock(&st->lock);
                return r;
        }
        if (on_start)
                on_start(tmp, hwm > free_pages * psize ? hwm - free_pages * psize : hwm, ud);
        int rc = mdb_env_copyfd2(st->env, fd, MDB_CP_COMPACT);
        r = rc ? lmdb_err(rc) : 0;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0)
                r = NTFS_FAULT("store.compact.copy");
        if (r < 0) {
                (void)unlink(tmp);
                pthread_mutex_unlock(&st->lock);
                return r;
        }
        /* The swap: nothing points into the environment (no handle, no
         * transaction, the lock held). The rename is atomic: a crash leaves
         * either file in place, and the next open finds a whole store. */
        mdb_env_close(st->env);
        st->env = NULL;
        st->held_ok = false; /* the reserve went with the old file's blocks */
        if (rename(tmp, dst) < 0) {
                r = -errno;
                (void)unlink(tmp);
        }
        if (r == 0) {
                int dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd >= 0) {
                        (void)fsync(dfd);
                        close(dfd);
                }
        }
        int r2 = env_open(st);
        if (r2 == 0)
                r2 = txn_begin(st);
        if (r2 == 0)
                r2 = open_dbs(st);
        if (r2 == 0)
                r2 = store_commit_locked(st, true);
        else if (st->txn)
                store_abort_locked(st);
        store_caches_drop(st);
        if (r2 < 0) {
                /* the environment cannot be used: everything fails with EIO
                 * until a restart opens the store again */
                st->broken = true;
                log_error("store: cannot reopen %s after compaction: %s", dst, ntfs_strerror(r2));
                pthread_mutex_unlock(&st->lock);
                return r2;
        }
        reserve_hold(st);
        data_file_sizes(st, &ret->file_after, &ret->disk_after);
        pthread_mutex_unlock(&st->lock);
        return r;
}

/* ---- open / close ----------------------------------------------------------------- */

int ntfs_store_open(const char *dir, const struct ntfs_store_opts *opts, ntfs_store **ret) {
        struct ntfs_store_opts o = { 0 };
        if (opts)
                o = *opts;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        _cleanup_free_ ntfs_store *st = calloc(1, sizeof *st);
        if (!st)
                return -ENOMEM;
        st->lock_fd = -1;
        ntfs_sha256(obj_empty_tree, sizeof obj_empty_tree, st->empty_tree.b);
        ntfs_sha256(obj_empty_file, sizeof obj_empty_file, st->empty_file.b);
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/lock", dir) >= (int)sizeof path)
                return -ENAMETOOLONG;
        _cleanup_close_ int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lfd < 0)
                return -errno;
        if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
                return errno == EWOULDBLOCK ? -NTFS_ESTOREBUSY : -errno;

        st->dir = realpath(dir, NULL);
        if (!st->dir)
                return -errno;
        /* a compaction's copy that a crash left: data.mdb is whole either way */
        if (snprintf(path, sizeof path, "%s/data.mdb.compact", st->dir) < (int)sizeof path && unlink(path) == 0)
                log_info("store: removed an unfinished compaction's copy");
        st->map_bytes = o.initial_map_bytes ? o.initial_map_bytes : DEFAULT_MAP_BYTES;
        st->reserve_bytes = o.reserve_bytes ? o.reserve_bytes : DEFAULT_RESERVE;
        pthread_mutex_init(&st->lock, NULL);
        pthread_mutex_init(&st->copy_mu, NULL);
        pthread_cond_init(&st->copy_cond, NULL);
        pthread_mutex_init(&st->inval_lock, NULL);
        pthread_cond_init(&st->cond, NULL);

        int r;
        int rc = mdb_env_create(&st->env);
        if (rc) {
                free(st->dir);
                return lmdb_err(rc);
        }
        st->nhcache = calloc(NAME_HASH_CACHE_SLOTS, sizeof *st->nhcache);
        st->icache = icache_map();
        st->ipending = calloc(INO_CACHE_SLOTS, sizeof *st->ipending);
        if (!st->nhcache || !st->icache || !st->ipending) {
                r = -ENOMEM;
                goto fail;
        }
        /* The data file may already be bigger than the default map. */
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/data.mdb", dir) < (int)sizeof path && stat(path, &sb) == 0)
                while (st->map_bytes < (uint64_t)sb.st_size * 2)
                        st->map_bytes *= 2;
        if ((rc = mdb_env_set_mapsize(st->env, st->map_bytes)) || (rc = mdb_env_set_maxdbs(st->env, 16)) ||
            (rc = mdb_env_open(st->env, st->dir, MDB_NOLOCK | MDB_NOMETASYNC | MDB_NOTLS, 0600))) {
                r = lmdb_err(rc);
                goto fail;
        }
        store_lock(st);
        r = txn_begin(st);
        if (r == 0)
                r = open_dbs(st);
        if (r == 0)
                r = put_keepers(st);
        if (r == 0)
                r = retire_stale_views(st);
        if (r == 0)
                r = wsid_reclaim_all(st, NULL);
        if (r == 0)
                r = wsdata_sweep(st);
        if (r == 0)
                r = store_commit_locked(st, true);
        else
                store_abort_locked(st);
        if (r == 0)
                reserve_hold(st);
        pthread_mutex_unlock(&st->lock);
        if (r < 0)
                goto fail;
        if ((r = wsw_open(st, o.data_writes)) < 0)
                log_warn("store: no write queue (%s): data file writes stay synchronous", ntfs_strerror(r));
        if (!o.no_flusher) {
                if (pthread_create(&st->flusher, NULL, flusher_main, st) != 0) {
                        r = -EAGAIN;
                        goto fail;
                }
                st->flusher_running = true;
        }
        st->lock_fd = TAKE_FD(lfd);
        *ret = TAKE_PTR(st);
        return 0;
fail:
        wsdata_close_all(st);
        wsw_close(st);
        mdb_env_close(st->env);
        icache_unmap(st->icache);
        free(st->ipending);
        free(st->nhcache);
        free(st->dir);
        return r;
}

void ntfs_store_close(ntfs_store *st) {
        if (!st)
                return;
        store_lock(st);
        st->stopping = true;
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
        if (st->flusher_running)
                pthread_join(st->flusher, NULL);
        while (st->wss)
                ntfs_ws_close(st->wss);
        store_lock(st);
        int r = store_commit_locked(st, true);
        if (r < 0)
                log_error("store: final flush failed: %s", ntfs_strerror(r));
        pthread_mutex_unlock(&st->lock);
        wsdata_close_all(st);
        wsw_close(st);
        mdb_env_close(st->env);
        if (st->lock_fd >= 0)
                close(st->lock_fd);
        pthread_mutex_destroy(&st->lock);
        pthread_mutex_destroy(&st->copy_mu);
        pthread_cond_destroy(&st->copy_cond);
        pthread_mutex_destroy(&st->inval_lock);
        pthread_cond_destroy(&st->cond);
        icache_unmap(st->icache);
        free(st->ipending);
        free(st->nhcache);
        free(st->dir);
        free(st);
}

int ntfs_store_flush(ntfs_store *st, bool durable) {
        store_lock(st);
        int r = store_commit_locked(st, durable);
        pthread_mutex_unlock(&st->lock);
        return r;
}

int ntfs_store_stats(ntfs_store *st, struct ntfs_store_stats *ret) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        MDB_stat s;
        memset(ret, 0, sizeof *ret);
        if (mdb_stat(st->txn, st->obj, &s) == 0)
                ret->objects = s.ms_entries;
        if (mdb_stat(st->txn, st->sess, &s) == 0)
                ret->sessions = s.ms_entries;
        if (mdb_stat(st->txn, st->tags, &s) == 0)
                ret->tags = s.ms_entries;
        MDB_envinfo info;
        if (mdb_env_info(st->env, &info) == 0)
                ret->map_bytes = info.me_mapsize;
        if (lmdb_hwm(st, &ret->used_bytes) < 0)
                ret->used_bytes = 0;
        ret->data_reusable_bytes = wsdata_pool_bytes(st, UINT64_MAX);
        uint64_t free_pages = 0, psize = 4096;
        if (free_page_count(st, &free_pages, &psize) == 0) {
                ret->free_bytes = free_pages * psize;
                ret->live_bytes = ret->used_bytes > ret->free_bytes ? ret->used_bytes - ret->free_bytes : 0;
        }
        data_file_sizes(st, &ret->file_bytes, &ret->disk_bytes);
        ret->reclaimable_bytes = ret->file_bytes > ret->live_bytes ? ret->file_bytes - ret->live_bytes : 0;
        store_leave(st);
        ret->data_bytes = wsdata_disk_bytes(st);
        /* an upper bound either way: shown as at most what the files take */
        ret->data_reusable_bytes = NTFS_MIN(ret->data_reusable_bytes, ret->data_bytes);
        return 0;
}
