/* SPDX-License-Identifier: MIT
 * store.h — the versioned store: one LMDB environment per store directory.
 *
 * Objects are content-addressed (SHA-256): 64 KiB file chunks, file objects
 * (chunk lists), trees, link tables and commits. A *session* is a named,
 * mutable branch: a head commit plus a live working state (the "workspace")
 * that a filesystem reads and writes through the ntfs_ws_* calls below.
 *
 * Threading: an ntfs_store is safe to use from any number of threads. Every
 * call takes the store's one lock for its duration; calls are short (the
 * expensive ones — checkpoint, diff, gc, fsck — scale with what changed or
 * what is reachable, see docs/store.md).
 *
 * Errors: every function returns 0 (or a count) on success, a negative errno
 * or -NTFS_E* (common/err.h) on failure. Outputs (ret_*) are written only on
 * success. Nothing here prints or exits.
 *
 * Durability: writes are batched into LMDB transactions. ntfs_checkpoint(),
 * ntfs_ws_fsync(), ntfs_store_flush(.., true) and every ref change (fork,
 * tag, rollback, session create/end) return only when durable. Other working
 * state writes become durable within NTFS_STORE_FLUSH_MS or at the next of
 * those calls; after kill -9 the store reopens at the last durable batch.
 */
#ifndef NTFS_FS_STORE_H
#define NTFS_FS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#include "common/util.h"

typedef struct ntfs_store ntfs_store;
typedef struct ntfs_ws ntfs_ws;

typedef struct {
        uint8_t b[NTFS_HASH_LEN];
} ntfs_hash;

#define NTFS_CHUNK_SIZE (64 * 1024)
#define NTFS_SHORT_ID_MIN 7
/* How old the batch gets before the flusher commits it. Each commit
 * rewrites every B-tree page the batch touched; under a stream of unlinks
 * or creates (rm -rf, untar, git) that is most of the inode and chunk
 * trees each time, so a longer batch writes each page once for more
 * changes. 1 s against 200 ms: rm -rf of the benchmark's tree with its
 * .git ~5% faster, median of 18 rounds (docs/bench-fs.md, session 25). */
#define NTFS_STORE_FLUSH_MS 1000
/* At the end of a burst of requests (the flusher's first quiet wake-up,
 * 50 ms, after a busy one) a batch this old is committed at once: it is
 * written while nothing waits for the lock, not in the middle of the next
 * command. */
#define NTFS_STORE_QUIET_FLUSH_MS 250
/* Between two commits the flusher syncs the working data files' new bytes
 * (off the store lock) at this pace, so that a stream of writes is written
 * back steadily and not a second's worth at a time. */
#define NTFS_STORE_DATASYNC_MS 200
#define NTFS_ROOT_INO 1

/* How a data file write reaches the file (docs/store.md 4.8). */
enum ntfs_data_writes {
        /* the default: a small write is queued and written by the request
         * that comes next, with the writes that continue it, as one call */
        NTFS_DATA_WRITES_MERGE = 0,
        /* each write made in its own request */
        NTFS_DATA_WRITES_SYNC,
        /* queued to a writer thread: helps an untar, hurts make -j2 */
        NTFS_DATA_WRITES_THREAD,
};

struct ntfs_store_opts {
        uint64_t initial_map_bytes; /* 0: default (8 GiB, sparse; grows by doubling) */
        uint64_t reserve_bytes;     /* free disk kept back before writes get ENOSPC; 0: 64 MiB */
        bool no_flusher;            /* tests: no background flush thread */
        /* How data file writes are made (fs/wswrite.c); NTFS_DATA_WRITES
         * (sync, merge, thread) in the environment overrides it. */
        enum ntfs_data_writes data_writes;
};

/* Opens (creating when missing) the store in dir. Takes an exclusive lock on
 * dir/lock: a second opener gets -NTFS_ESTOREBUSY. Cleans up the working
 * states of ended sessions, rolled-past states and read-only views left by
 * a previous process. */
int ntfs_store_open(const char *dir, const struct ntfs_store_opts *opts, ntfs_store **ret);
/* Flushes durably and closes. Open ntfs_ws handles must be closed first. */
void ntfs_store_close(ntfs_store *st);
/* Commits batched writes; with durable, also fsyncs. */
int ntfs_store_flush(ntfs_store *st, bool durable);
const char *ntfs_store_dir(const ntfs_store *st);
/* The calling thread's total time, in ns, spent waiting for a store's lock
 * (or for the copies in flight) since it started: a measuring aid, counted
 * only when the lock was not free at once (NTFS_FUSE_STATS's WAIT column). */
int64_t ntfs_store_thread_wait_ns(void);

/* ---- hashes and refs ------------------------------------------------- */

bool ntfs_hash_is_zero(const ntfs_hash *h);
void ntfs_hash_hex(const ntfs_hash *h, char out[NTFS_HEX_LEN + 1]);
/* The shortest unique prefix of a commit id, at least NTFS_SHORT_ID_MIN. */
int ntfs_short_id(ntfs_store *st, const ntfs_hash *commit, char out[NTFS_HEX_LEN + 1]);

/* Resolves ref to a commit id. ref is, in order of precedence: a tag name,
 * a session name (its head), "SESSION~N" (N first-parent steps back), a full
 * 64-hex commit id, or a unique hex prefix of at least 4 digits.
 * -NTFS_ENOREF if nothing matches; -NTFS_EAMBIGUOUS for an ambiguous prefix,
 * with the candidates' short ids (comma separated) in ambig if non-NULL. */
int ntfs_resolve(ntfs_store *st, const char *ref, ntfs_hash *ret, char *ambig, size_t ambig_len);

/* ---- commits ---------------------------------------------------------- */

struct ntfs_commit_info {
        ntfs_hash id;
        ntfs_hash tree;   /* root tree */
        ntfs_hash parents[2];
        int nparents;
        int64_t time_ns;
        char message[1024];
        char effect[128]; /* effect id that produced it, "" if none */
        char session[NTFS_NAME_MAX + 1];
        uint64_t bytes;   /* bytes of file content in the workspace */
        uint64_t inodes;  /* files, dirs, links, ... */
};

int ntfs_commit_get(ntfs_store *st, const ntfs_hash *id, struct ntfs_commit_info *ret);

/* ---- sessions --------------------------------------------------------- */

struct ntfs_session_info {
        char name[NTFS_NAME_MAX + 1];
        ntfs_hash head;
        ntfs_hash floor;   /* first commit: rollback --steps stops here */
        int64_t created_ns;
        bool dirty;        /* working state may differ from head */
        uint64_t bytes, inodes;             /* current usage */
        uint64_t quota_bytes, quota_inodes; /* 0 = unlimited */
        uint32_t mounts;   /* open ntfs_ws handles */
};

/* Creates session name. from: NULL (empty workspace), or a ref
 * (session, tag, commit) whose state it starts from (a fork). */
int ntfs_session_create(ntfs_store *st, const char *name, const char *from, ntfs_hash *ret_head);
/* Ends a session: deletes it and its session-scoped tags; its commits stay
 * until gc. -EBUSY while a workspace handle on it is open. */
int ntfs_session_end(ntfs_store *st, const char *name);
int ntfs_session_get(ntfs_store *st, const char *name, struct ntfs_session_info *ret);
/* Calls cb for each session in name order; cb returning non-zero stops. */
int ntfs_session_list(ntfs_store *st, int (*cb)(const struct ntfs_session_info *, void *), void *ud);
int ntfs_session_set_quota(ntfs_store *st, const char *name, uint64_t bytes, uint64_t inodes);
/* The quota every session made from now on starts with (0 = unlimited, the
 * default): sessions made by create, clone, trunk or seed; a fork of a live
 * session keeps its source's quota instead. Not persistent: ntfsd sets it
 * from the policy's [limits] at start. */
void ntfs_store_set_default_quota(ntfs_store *st, uint64_t bytes, uint64_t inodes);

/* Checkpoint: commits the working state of session name. Cost grows with
 * what changed since the last checkpoint (and tree depth), not workspace
 * size. When nothing changed, returns the head and sets *ret_changed false
 * (no commit is made). message and effect may be NULL. Durable on return. */
int ntfs_checkpoint(ntfs_store *st, const char *name, const char *message, const char *effect,
                    ntfs_hash *ret, bool *ret_changed);
/* The same, except that when nothing changed a commit is still made: the
 * head's state with this message, the head its parent (*ret_changed false),
 * so that a checkpoint asked for by name is in the log (an auto-checkpoint
 * may have taken the changes a moment before). */
int ntfs_checkpoint_always(ntfs_store *st, const char *name, const char *message, const char *effect,
                           ntfs_hash *ret, bool *ret_changed);

/* Merge checkpoint: commits the working state of session name as a commit
 * with two parents, the session's head (first) and second_parent (which
 * must be an existing commit). Always makes a commit, even when the state
 * equals the head (it records that second_parent was merged). Durable on
 * return; the session's head moves to the new commit (reflog op "merge"). */
int ntfs_checkpoint_merge(ntfs_store *st, const char *name, const char *message, const ntfs_hash *second_parent,
                          ntfs_hash *ret);

/* Fork: new session newname starting from src (a session — including its
 * uncommitted working state —, a tag or a commit). Constant time (plus
 * serializing src's uncommitted changes, if any). */
int ntfs_fork(ntfs_store *st, const char *src, const char *newname, ntfs_hash *ret_head);

/* Rollback: points session name at a commit, discarding its working state.
 * to: a ref (commit, tag); or NULL with steps >= 0 (N first-parent steps
 * back from head; -NTFS_EFLOOR below the session's first commit).
 * Constant time; the commit rolled past stays in the reflog until gc. */
int ntfs_rollback(ntfs_store *st, const char *name, const char *to, int steps, ntfs_hash *ret);

/* history: walks first-parent history from head; cb non-zero stops. */
int ntfs_history(ntfs_store *st, const char *name, size_t max,
             int (*cb)(const struct ntfs_commit_info *, void *), void *ud);

struct ntfs_reflog_entry {
        uint64_t seq;
        ntfs_hash old_head, new_head;
        int64_t time_ns;
        char op[32]; /* "create", "checkpoint", "rollback", "fork" */
};
int ntfs_reflog(ntfs_store *st, const char *name, int (*cb)(const struct ntfs_reflog_entry *, void *),
                void *ud);

/* ---- tags ------------------------------------------------------------- */

enum ntfs_tag_scope { NTFS_TAG_SESSION = 0, NTFS_TAG_STORE = 1 };
struct ntfs_tag_info {
        char name[NTFS_NAME_MAX + 1];
        ntfs_hash commit;
        enum ntfs_tag_scope scope;
        char session[NTFS_NAME_MAX + 1];
        int64_t created_ns;
};
/* Tags never move: an existing name is -NTFS_ETAGEXISTS. at: NULL = head
 * of session (checkpointing nothing; tag the head commit). */
int ntfs_tag_create(ntfs_store *st, const char *session, const char *tag, const char *at,
                    enum ntfs_tag_scope scope, ntfs_hash *ret);
int ntfs_tag_get(ntfs_store *st, const char *tag, struct ntfs_tag_info *ret);
int ntfs_tag_delete(ntfs_store *st, const char *tag);
/* session NULL: all tags; else tags of that session plus store tags. */
int ntfs_tag_list(ntfs_store *st, const char *session, int (*cb)(const struct ntfs_tag_info *, void *),
                  void *ud);

/* ---- diff ------------------------------------------------------------- */

enum ntfs_diff_kind {
        NTFS_DIFF_ADDED = 'A',
        NTFS_DIFF_DELETED = 'D',
        NTFS_DIFF_MODIFIED = 'M', /* content */
        NTFS_DIFF_TYPE = 'T',     /* type changed (file <-> dir <-> symlink ...) */
        NTFS_DIFF_MODE = 'P',     /* only mode/owner/xattrs changed */
};
struct ntfs_diff_entry {
        const char *path; /* relative, no leading slash; valid during the callback */
        enum ntfs_diff_kind kind;
        uint32_t old_mode, new_mode; /* 0 when absent */
        uint64_t old_size, new_size;
};
/* Compares commit from with commit to, or with the working state of session
 * to_session when to is NULL. Cost grows with what differs. */
int ntfs_diff(ntfs_store *st, const char *from, const char *to, const char *to_session,
              int (*cb)(const struct ntfs_diff_entry *, void *), void *ud);

/* ---- gc and fsck ------------------------------------------------------ */

struct ntfs_gc_stats {
        uint64_t objects_before, objects_freed, bytes_freed, states_freed;
};
/* Mark and sweep from sessions (heads, reflogs, working states), tags,
 * views and the extra roots (commits the journal pins). */
int ntfs_gc(ntfs_store *st, const ntfs_hash *extra_roots, size_t n_extra, struct ntfs_gc_stats *ret);

struct ntfs_fsck_stats {
        uint64_t objects_checked, commits, problems;
};
/* Verifies every reachable object's hash, encoding and references, and that
 * the working states' chunk records name distinct slots inside their data
 * files. cb gets
 * one line per problem. Returns 0 when clean, -NTFS_ECORRUPT otherwise. */
int ntfs_fsck(ntfs_store *st, void (*cb)(const char *problem, void *), void *ud, struct ntfs_fsck_stats *ret);

/* Store-wide counts for status. */
struct ntfs_store_stats {
        uint64_t objects, sessions, tags, map_bytes;
        uint64_t used_bytes; /* LMDB's data file, up to its high-water mark */
        uint64_t data_bytes; /* disk space of the working data files (file content written since checkpoints) */
        uint64_t data_reusable_bytes; /* of which freed, kept for reuse until the store pauses (at most) */
        /* data.mdb's space (docs/store.md, "Space and compaction"): */
        uint64_t live_bytes;        /* pages in use (the high-water mark less the free pages) */
        uint64_t free_bytes;        /* free pages inside the file, reused by later writes */
        uint64_t file_bytes;        /* data.mdb's length */
        uint64_t disk_bytes;        /* data.mdb's blocks on disk, the held reserve included (du) */
        uint64_t reclaimable_bytes; /* what compaction would give back: file_bytes - live_bytes */
};
int ntfs_store_stats(ntfs_store *st, struct ntfs_store_stats *ret);

/* Compaction: writes a copy of data.mdb without its free pages
 * (mdb_env_copyfd2 with MDB_CP_COMPACT) to DIR/data.mdb.compact, then, with
 * the store's lock held throughout, puts it in place of data.mdb and reopens
 * the environment. Refused with -EBUSY while any ntfs_ws handle is open (a
 * mount, a view): they point into the environment. The copy's name is
 * given first to on_start (for a progress reader: its size as it grows,
 * against total, the live bytes). Fills *ret with the sizes before and
 * after (disk_bytes and file_bytes). A failure before the swap leaves the
 * store as it was; the swap itself is a rename. */
struct ntfs_compact_result {
        uint64_t file_before, file_after, disk_before, disk_after;
};
int ntfs_store_compact(ntfs_store *st, void (*on_start)(const char *copy_path, uint64_t total, void *ud), void *ud,
                       struct ntfs_compact_result *ret);

/* ---- the working state (used by the FUSE layer) ------------------------
 *
 * An ntfs_ws is a handle on a session's live working state (read-write) or
 * on a commit (a read-only view: writes fail with -EROFS). Inode numbers
 * are stable while the state is not replaced; the root is NTFS_ROOT_INO.
 * When a rollback replaces the state under an open handle, later calls on
 * inode numbers of the old state fail with -ESTALE, the root shows the new
 * state at once, and the invalidate callback (if set) runs after the
 * store's lock is released, so the caller can drop kernel caches.
 */

struct ntfs_attr {
        uint64_t ino;
        uint32_t mode, uid, gid, nlink;
        uint64_t size, blocks, rdev;
        struct timespec atime, mtime, ctime;
};

enum {
        NTFS_SET_MODE = 1 << 0,
        NTFS_SET_UID = 1 << 1,
        NTFS_SET_GID = 1 << 2,
        NTFS_SET_SIZE = 1 << 3,
        NTFS_SET_ATIME = 1 << 4,
        NTFS_SET_MTIME = 1 << 5,
        NTFS_SET_ATIME_NOW = 1 << 6,
        NTFS_SET_MTIME_NOW = 1 << 7,
        NTFS_SET_CTIME = 1 << 8,
};

int ntfs_ws_open(ntfs_store *st, const char *session, ntfs_ws **ret);
int ntfs_ws_open_view(ntfs_store *st, const char *ref, ntfs_ws **ret);
void ntfs_ws_close(ntfs_ws *ws);
bool ntfs_ws_readonly(const ntfs_ws *ws);
/* What a rollback in place changed (fs/ws-rollback.c), for the caches of a
 * handle's user (a mount's kernel): */
enum ntfs_ws_change_kind {
        NTFS_WS_CH_INODE = 1, /* ino kept its number; its attributes or content changed */
        NTFS_WS_CH_DIR,       /* directory ino kept its number; its entries or attributes changed */
        NTFS_WS_CH_GONE,      /* (parent, name) no longer names ino, which is unlinked (or, a
                               * hard-link group member, lives on under its other names) */
};
struct ntfs_ws_change {
        uint64_t parent, ino;
        const char *name; /* NTFS_WS_CH_GONE only */
        uint8_t kind;
};
/* Called (without the store lock held) after a rollback changed the state,
 * and when another handle on the same session opens (see ntfs_ws_shared).
 * changes: what changed, the entries of a removed directory before it;
 * NULL (n 0) when anything may have: the state was replaced and every inode
 * number is void (see ntfs_ws_generation), or the handle became shared. */
void ntfs_ws_set_invalidate_cb(ntfs_ws *ws,
                               void (*cb)(ntfs_ws *, const struct ntfs_ws_change *changes, size_t n, void *ud),
                               void *ud);
/* Number of successful write calls on this handle (for auto-checkpoint). */
uint64_t ntfs_ws_changes(ntfs_ws *ws);
/* Incremented each time the state is replaced by a fresh one, with new
 * inode numbers (a rollback that cannot be done in place). */
uint64_t ntfs_ws_generation(ntfs_ws *ws);
/* Incremented by every rollback, in place or not: an answer computed
 * across one may be of either state. */
uint64_t ntfs_ws_rollbacks(ntfs_ws *ws);
/* True while another read-write handle on the same session is open: then
 * changes can reach the working state that this handle's user (a mount)
 * does not see, so it must not let the kernel cache answers for long. When
 * a second handle opens, every handle already open on the session becomes
 * shared, its sharing epoch is incremented, and its invalidate callback
 * runs (before ntfs_ws_open returns). */
bool ntfs_ws_shared(ntfs_ws *ws);
/* Incremented each time the handle becomes shared. */
uint64_t ntfs_ws_share_epoch(ntfs_ws *ws);
/* While the session is shared, cb(ws, ino, ud) is called when another
 * handle on it changed a file's data (write, truncate, fallocate), so that
 * this handle's user can drop the pages its kernel cached: nothing else
 * tells it, since a refreshed mtime does not (the mount asks the kernel not
 * to compare them, docs/mount.md). cb runs with the store lock held, in the
 * writer's thread: it must only queue. Once this returns, the old cb is not
 * running and will not run. */
void ntfs_ws_set_data_cb(ntfs_ws *ws, void (*cb)(ntfs_ws *, uint64_t ino, void *), void *ud);
const char *ntfs_ws_session(const ntfs_ws *ws); /* NULL for a view */

int ntfs_ws_lookup(ntfs_ws *ws, uint64_t parent, const char *name, struct ntfs_attr *ret);
int ntfs_ws_getattr(ntfs_ws *ws, uint64_t ino, struct ntfs_attr *ret);
int ntfs_ws_setattr(ntfs_ws *ws, uint64_t ino, const struct ntfs_attr *in, unsigned to_set,
                    struct ntfs_attr *ret);
/* A read of ino under relatime (ext4's default): atime becomes now when it
 * is not later than mtime or ctime, or is 24 hours old; else unchanged.
 * Like any atime-only change it does not make the state dirty (a
 * checkpoint after reads changes nothing). 1 when updated, 0 when not. */
int ntfs_ws_touch_atime(ntfs_ws *ws, uint64_t ino);
/* Regular files, fifos, sockets and device nodes (mode carries the type). */
int ntfs_ws_mknod(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                  uint32_t gid, struct ntfs_attr *ret);
int ntfs_ws_mkdir(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                  struct ntfs_attr *ret);
/* A program's create (mknod or mkdir: mode carries the type) as on ext4:
 * the node inherits the parent's default POSIX ACL (its access ACL, and a
 * directory the default ACL too, with the mode limited by it), or without
 * one the umask's bits are taken from mode. ntfs_ws_mknod and
 * ntfs_ws_mkdir take mode as it is. */
int ntfs_ws_create(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                   uint32_t gid, uint32_t umask, struct ntfs_attr *ret);
int ntfs_ws_symlink(ntfs_ws *ws, uint64_t parent, const char *name, const char *target, uint32_t uid,
                    uint32_t gid, struct ntfs_attr *ret);
/* Copies the target (not NUL-terminated) into buf; returns its length
 * (truncated to size). */
ssize_t ntfs_ws_readlink(ntfs_ws *ws, uint64_t ino, char *buf, size_t size);
int ntfs_ws_unlink(ntfs_ws *ws, uint64_t parent, const char *name);
int ntfs_ws_rmdir(ntfs_ws *ws, uint64_t parent, const char *name);
/* The same, calling checked(arg) once every check has passed (the name
 * exists, is of the right kind, the directory is empty, the state is
 * writable), before the records change, with the store's lock held: from
 * there on the call can fail only if the store cannot write its records,
 * and that breaks the batch, which is then aborted -- as a crash before
 * the batch commits would lose it, with every other change of the batch.
 * The mount replies to the kernel there, so the removal's B-tree work is
 * no longer between the caller and its reply (docs/mount.md). checked must
 * not call into the store. Returns the call's result either way. */
int ntfs_ws_unlink_then(ntfs_ws *ws, uint64_t parent, const char *name, void (*checked)(void *), void *arg);
int ntfs_ws_rmdir_then(ntfs_ws *ws, uint64_t parent, const char *name, void (*checked)(void *), void *arg);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
int ntfs_ws_rename(ntfs_ws *ws, uint64_t parent, const char *name, uint64_t newparent, const char *newname,
                   unsigned flags);
int ntfs_ws_link(ntfs_ws *ws, uint64_t ino, uint64_t newparent, const char *newname, struct ntfs_attr *ret);
ssize_t ntfs_ws_read(ntfs_ws *ws, uint64_t ino, void *buf, size_t size, uint64_t off);
/* The same read without a copy: fn gets the bytes as n iovecs (total bytes
 * in all) pointing into the store's map, holes at a shared zero page. fn is
 * called once, most often with the store's lock released but behind its
 * copy gate: other reads run meanwhile, and anything that changes the
 * store waits until fn returns. So fn must not call into the store (it
 * would wait for itself) and must not block (a FUSE reply is fine); the
 * pointers are dead once it returns. size may be at most
 * NTFS_WS_READ_IOV_MAX_BYTES (-E2BIG).
 * Returns fn's result, or a negative errno before calling it. */
#define NTFS_WS_READ_IOV_MAX_BYTES (4u << 20)
struct iovec;
int ntfs_ws_read_iov(ntfs_ws *ws, uint64_t ino, size_t size, uint64_t off,
                     int (*fn)(const struct iovec *iov, int n, size_t total, void *ud), void *ud);
/* Writes size bytes at off (append: off is ignored, writes at the end).
 * Returns bytes written. Updates mtime/ctime. (Clearing setuid/setgid is
 * the FUSE layer's job: only the kernel knows whether the writer may keep
 * them; see fs/mount.c.) */
ssize_t ntfs_ws_write(ntfs_ws *ws, uint64_t ino, const void *buf, size_t size, uint64_t off, bool append);
/* mode 0 only (allocate/extend); others -EOPNOTSUPP. */
int ntfs_ws_fallocate(ntfs_ws *ws, uint64_t ino, int mode, uint64_t off, uint64_t len);

/* Directory listing in a stable order (by a 63-bit hash of the name) whose
 * cookies survive concurrent changes: entries not added or removed during
 * the listing are returned exactly once. Start with cookie 0; cb gets each
 * entry and the cookie that resumes after it; cb returning non-zero stops
 * (that entry is not consumed). "." and ".." are not included. With plus,
 * each entry is looked up (attr filled); otherwise only attr->ino and
 * attr->mode's type bits are set. max (0: no bound) is how many entries
 * the caller can take at most: no more are read (a FUSE reply's buffer
 * holds a known number at most). */
int ntfs_ws_readdir(ntfs_ws *ws, uint64_t ino, uint64_t cookie, bool plus, size_t max,
                    int (*cb)(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *),
                    void *ud);

/* flags: 0, XATTR_CREATE or XATTR_REPLACE. getxattr/listxattr return the
 * value's / list's length; with size 0 only the length. */
int ntfs_ws_setxattr(ntfs_ws *ws, uint64_t ino, const char *name, const void *value, size_t size, int flags);
ssize_t ntfs_ws_getxattr(ntfs_ws *ws, uint64_t ino, const char *name, void *buf, size_t size);
ssize_t ntfs_ws_listxattr(ntfs_ws *ws, uint64_t ino, char *buf, size_t size);
int ntfs_ws_removexattr(ntfs_ws *ws, uint64_t ino, const char *name);

int ntfs_ws_statfs(ntfs_ws *ws, struct statvfs *ret);
/* Makes every write so far durable. */
int ntfs_ws_fsync(ntfs_ws *ws);
/* The kernel forgot ino: an unlinked inode with no names left is freed. */
void ntfs_ws_forget(ntfs_ws *ws, uint64_t ino);

/* ---- raw objects (export/import for remotes; fs/objects-io.c) ----------
 *
 * Objects are identified by the SHA-256 of their encoded bytes (type byte
 * first). These calls let a transport copy objects between stores without
 * knowing their encoding. */

/* Copies object h into a malloc'd buffer (*ret, owned by the caller).
 * -ENOENT when the store does not hold it. */
int ntfs_object_get(ntfs_store *st, const ntfs_hash *h, uint8_t **ret, size_t *ret_len);
/* 1 when the store holds h, 0 when not, or a negative error. */
int ntfs_object_has(ntfs_store *st, const ntfs_hash *h);
/* Stores an object that arrived from elsewhere: -NTFS_ECORRUPT unless the
 * bytes hash to *expected and decode as a valid object. Objects it refers
 * to need not be present yet (the caller moves a ref only once they are).
 * Not durable by itself: follow with ntfs_store_flush(st, true). */
int ntfs_object_put_verified(ntfs_store *st, const void *data, size_t len, const ntfs_hash *expected);
/* Calls cb for each object that the encoded object data refers to.
 * -NTFS_ECORRUPT for an invalid encoding; cb's negative return stops. */
int ntfs_object_refs(const void *data, size_t len, int (*cb)(const ntfs_hash *, void *), void *ud);
/* Visits every object reachable from commit (parents, trees, files, chunks,
 * link tables, xattrs), each once, parents before children. cb gets the
 * object's bytes (valid during the call) and returns 0 to descend, 1 to
 * skip what it refers to, or a negative error to stop (returned). The store
 * lock is taken per object, not for the whole walk. A missing object is
 * -NTFS_ECORRUPT. */
int ntfs_object_walk(ntfs_store *st, const ntfs_hash *commit,
                     int (*cb)(const ntfs_hash *h, const void *data, size_t len, void *ud), void *ud);

/* ==== tree walk and tree builder (fs/treewalk.c, fs/import.c) ============
 *
 * Direct access to a commit's objects for bulk export and import (archives,
 * fs/sync/archive.c): no working state, no inode records, nothing written by a
 * walk. docs/store.md ("Bulk export and import") has the design.
 */

/* One entry of a commit's tree, as ntfs_tree_walk() reports it. Pointers
 * are valid during the callback only. */
struct ntfs_walk_entry {
        const char *path;   /* "" for the root, else "a/b/c" (no leading or trailing slash) */
        const char *name;   /* the last component ("" for the root) */
        int depth;          /* 0 for the root */
        uint32_t mode, uid, gid, nlink;
        uint64_t size;      /* regular files and symlinks (target length); 0 otherwise */
        uint64_t rdev;      /* character and block devices; 0 otherwise */
        int64_t mtime_ns;
        uint64_t linkid;    /* != 0: a hard-link group; every name of the group has the same id */
        ntfs_hash content;  /* tree, file object or symlink blob; zero for the others */
        ntfs_hash xattr;    /* xattr set (ntfs_xattr_read); zero: none */
        const char *target; /* symlinks: the target, NUL-terminated; NULL otherwise */
};

/* Walks the tree of commit depth-first, parents before children, the
 * children of each directory in byte order of their names, starting with
 * the root ("" path). cb returns 0 to go on (and into a directory), 1 to
 * skip a directory's children, or a negative error that stops the walk and
 * is returned. The store lock is taken only to copy one tree object (or
 * symlink target) out, never across a callback; memory is the trees on the
 * current path plus the commit's link table. Nothing is written.
 * -NTFS_ENOREF: commit is not a commit; -NTFS_ECORRUPT: a missing or bad
 * object; -ELOOP: deeper than 4096 levels. */
int ntfs_tree_walk(ntfs_store *st, const ntfs_hash *commit, int (*cb)(const struct ntfs_walk_entry *e, void *ud),
                   void *ud);

/* Streams the content of file object file chunk by chunk (64 KiB, the
 * last one shorter; holes as zeros), in order: cb gets the bytes (valid
 * during the call), their offset, and returns 0 or a negative error that
 * stops and is returned. The lock is held per chunk while the chunk is
 * copied out, never across cb. Memory: one chunk. */
int ntfs_file_read_chunks(ntfs_store *st, const ntfs_hash *file,
                          int (*cb)(const void *data, size_t len, uint64_t off, void *ud), void *ud);

/* Calls cb for each (name, value) of the xattr set xattr, in name order.
 * name is NUL-terminated; both valid during the call. A zero hash: no
 * calls. */
int ntfs_xattr_read(ntfs_store *st, const ntfs_hash *xattr,
                    int (*cb)(const char *name, const void *value, size_t len, void *ud), void *ud);

/* ---- the tree builder: a new commit straight from a stream of entries ----
 *
 * Lifecycle: ntfs_builder_new(), any number of add/set calls, then
 * ntfs_builder_commit() once (success or not), then ntfs_builder_free()
 * (always; NULL is accepted). Not thread-safe: one thread per builder;
 * several builders may run at once on one store.
 *
 * The directory structure lives in memory (a name and a tree entry per
 * entry); file content goes to the store as it arrives: each 64 KiB chunk
 * is hashed once (outside the store lock) and put as a blob unless the
 * store has it, so content ids are identical to what a checkpoint of the
 * same files makes. Nothing refers to those objects until the commit (gc
 * may take them; the commit checks that every object it names is present,
 * else -EAGAIN). On any failure nothing is referenced and no session is
 * made.
 *
 * Paths: "a/b/c", components separated by one '/', no "." or "..", no
 * empty component; "" is the root (ntfs_builder_add_dir only). -EINVAL
 * otherwise. Like tar: missing parent directories are made (0755, the
 * entry's owner, mtime = now); an entry replaces what is at its path (a
 * directory over a directory keeps the children and takes the new
 * attributes; a non-empty directory cannot be replaced: -ENOTEMPTY). A
 * parent that is a symlink is refused (-NTFS_EDENIED: the builder never
 * goes through one), a parent that is not a directory is -ENOTDIR. After
 * an error, ntfs_builder_error_path() names the path (or path prefix) it
 * is about. Times are ns since the epoch; modes carry permission bits
 * (07777) and, for add_node, the type. */
typedef struct ntfs_builder ntfs_builder;

int ntfs_builder_new(ntfs_store *st, ntfs_builder **ret);
void ntfs_builder_free(ntfs_builder *b);
const char *ntfs_builder_error_path(const ntfs_builder *b);

int ntfs_builder_add_dir(ntfs_builder *b, const char *path, uint32_t mode, uint32_t uid, uint32_t gid,
                         int64_t mtime_ns);
/* A fifo, socket or device node (mode carries the type; rdev for devices). */
int ntfs_builder_add_node(ntfs_builder *b, const char *path, uint32_t mode, uint64_t rdev, uint32_t uid,
                          uint32_t gid, int64_t mtime_ns);
/* target: 1..4095 bytes (-ENAMETOOLONG, -EINVAL). */
int ntfs_builder_add_symlink(ntfs_builder *b, const char *path, const char *target, uint32_t uid, uint32_t gid,
                             int64_t mtime_ns);
/* A new name for the file (or fifo, symlink ...) at target: both names
 * share content and attributes (a hard-link group). -ENOENT: no target;
 * -EPERM: target is a directory; a path that already names the target is
 * left as it is. */
int ntfs_builder_add_hardlink(ntfs_builder *b, const char *path, const char *target);

/* A regular file: begin, write its data in increasing offsets (gaps are
 * holes), end with its size (>= the end of the data: a trailing hole).
 * With NTFS_BUILD_REWRITE and an existing regular file at path, its
 * content and attributes are replaced in place (its other hard links see
 * the new content). Only one file is open at a time: another add call
 * while one is open is -EBUSY. */
enum { NTFS_BUILD_REWRITE = 1 << 0 };
int ntfs_builder_file_begin(ntfs_builder *b, const char *path, uint32_t mode, uint32_t uid, uint32_t gid,
                            int64_t mtime_ns, unsigned flags);
/* off must be >= the end of the previous write (-EINVAL). */
int ntfs_builder_file_write(ntfs_builder *b, const void *data, size_t len, uint64_t off);
int ntfs_builder_file_end(ntfs_builder *b, uint64_t size);

/* Sets (replaces) an xattr of the entry at path. name 1..255 bytes,
 * value <= 64 KiB (-EINVAL, -E2BIG). */
int ntfs_builder_set_xattr(ntfs_builder *b, const char *path, const char *name, const void *value, size_t len);

/* Stores the trees, the link table and one commit (no parent, message,
 * session name), then creates session name at it (ref change durable;
 * -NTFS_ESESSEXISTS / -NTFS_EINVALNAME). ret_head may be NULL. */
int ntfs_builder_commit(ntfs_builder *b, const char *session, const char *message, ntfs_hash *ret_head);
/* ==== end of tree walk and tree builder =================================== */

#endif
