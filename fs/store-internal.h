/* SPDX-License-Identifier: MIT
 * store-internal.h — private to fs/: the LMDB layout and object codecs.
 * docs/store.md describes the same layout for readers.
 */
#ifndef NTFS_FS_STORE_INTERNAL_H
#define NTFS_FS_STORE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>

#include "fs/store.h"

/* The object encoding's version (inside every commit object). */
#define NTFS_FORMAT_VERSION 1
/* The store's layout (meta "format"). 3: a chunk record holds a short chunk
 * inline or names a slot of the working data files (wsdata.c); in 2 it only
 * named slots, in 1 it held the bytes. Layout 2, and layout 1 with no chunk
 * record, are upgraded when opened (both are valid layout 3). */
#define NTFS_STORE_LAYOUT 3

/* Object types: first byte of every value in the obj database. */
enum {
        OBJ_BLOB = 'B',   /* raw bytes: a file chunk or a symlink target */
        OBJ_FILE = 'F',   /* u64 size, u32 n, n x hash (zero hash = hole) */
        OBJ_TREE = 'T',   /* sorted entries, see struct tree_entry */
        OBJ_COMMIT = 'C', /* see encode_commit */
        OBJ_LINKS = 'L',  /* link table: hard-link groups, sorted by id */
        OBJ_XATTR = 'X',  /* sorted (name, value) pairs */
};

/* A directory entry as stored in a tree, or a hard-link group's attributes
 * in a link table (then name is empty and linkid is the group id). */
struct tree_entry {
        uint64_t h;        /* 63-bit name hash: the sort key (then name) */
        const char *name;  /* not NUL-terminated in encoded form */
        uint16_t namelen;
        uint64_t linkid;   /* != 0: attributes and content live in the link table */
        uint32_t mode, uid, gid, nlink;
        uint64_t rdev, size;
        int64_t mtime;     /* ns */
        ntfs_hash content; /* tree, file object, symlink blob; zero for others */
        ntfs_hash xattr;   /* zero: none */
};

/* Decoded view into an encoded tree (borrowed from LMDB memory: valid until
 * the store's transaction ends — i.e. while the store lock is held). */
struct tree_view {
        const uint8_t *data;
        size_t len;
        uint32_t count;
        const uint8_t *offs; /* count x u32 BE offsets */
};

int tree_view_init(struct tree_view *v, const void *data, size_t len);
int tree_view_get(const struct tree_view *v, uint32_t i, struct tree_entry *ret);
/* Index of the first entry >= (h, name); count if none. */
uint32_t tree_view_seek(const struct tree_view *v, uint64_t h, const char *name, size_t namelen);

/* Builder for trees and link tables: entries must be added in order. */
struct tree_builder {
        uint8_t *buf;
        size_t len, cap;
        uint32_t *offs;
        uint32_t count, ocap;
};
int tree_builder_add(struct tree_builder *b, const struct tree_entry *e);
/* Produces the encoded object (type byte included) in *ret/len; resets b. */
int tree_builder_finish(struct tree_builder *b, uint8_t type, uint8_t **ret, size_t *ret_len);
void tree_builder_release(struct tree_builder *b);

uint64_t name_hash(const char *name, size_t len);
int entry_cmp(uint64_t h1, const char *n1, size_t l1, uint64_t h2, const char *n2, size_t l2);

struct commit_obj {
        struct tree_entry root; /* the root directory's attributes + tree */
        ntfs_hash links;        /* link table (zero: none) */
        ntfs_hash parents[2];
        int nparents;
        int64_t time_ns;
        uint64_t bytes, inodes;
        const char *message, *effect, *session; /* borrowed */
        uint16_t message_len, effect_len, session_len;
};
int commit_encode(const struct commit_obj *c, uint8_t **ret, size_t *ret_len);
int commit_decode(const void *data, size_t len, struct commit_obj *ret);

/* File object view. */
struct file_view {
        uint64_t size;
        uint32_t n;
        const uint8_t *hashes;
};
int file_view_init(struct file_view *v, const void *data, size_t len);

/* Verifies an object's encoding; calls ref(hash) for each reference. */
int object_check(const void *data, size_t len, int (*ref)(const ntfs_hash *, void *), void *ud);

/* ---- the store ---------------------------------------------------------- */

/* Session record: value of the sess database, key = name. */
struct sess_rec {
        uint32_t version;
        uint32_t flags;
        uint64_t wsid;
        uint64_t next_ino;
        uint64_t next_linkid;
        ntfs_hash head, floor;
        int64_t created;
        uint64_t bytes, inodes;
        uint64_t quota_bytes, quota_inodes;
        uint64_t reflog_seq;
};

/* Inode record: value of the ino database, key (wsid, ino). */
struct ino_rec {
        uint32_t mode, uid, gid, nlink;
        uint64_t size, rdev;
        int64_t atime, mtime, ctime;
        uint64_t parent; /* directories and unlinked files: the containing dir */
        uint64_t linkid; /* != 0: member of a hard-link group */
        uint32_t flags;
        uint32_t base_nchunks; /* leading chunks of base content still valid */
        ntfs_hash base;        /* tree / file object / symlink blob */
        ntfs_hash xattr;       /* base xattr set, when !(flags & INO_XMAT) */
};
enum {
        INO_DIRTY = 1 << 0, /* differs from base: must be serialized at checkpoint */
        INO_XMAT = 1 << 1,  /* xattrs live in the xattr db, not in ->xattr */
        INO_ORPHAN = 1 << 2, /* nlink 0, kept while the kernel knows it */
        /* A hard-link group made since the last serialization (so in no
         * link table) whose names are all in directory `parent`: when one
         * name is left it becomes a plain inode again (ws.c drop_link). */
        INO_ONEDIR = 1 << 3
};

/* The inode cache (struct ntfs_store.icache): a direct-mapped copy of
 * recent ino records. ino_put (ws.c) writes a record into its slot only
 * ("pending"); the ino database gets it when the batch commits (ino_flush),
 * or when another inode needs the slot. An untar's file gets five or six
 * puts (create, the parent's times, write, three setattrs): one B-tree
 * write instead (docs/store.md, "The inode cache"). */
#define INO_CACHE_SLOTS 65536
struct ino_cache_slot {
        uint64_t wsid, ino; /* ino 0: empty */
        bool pending;       /* newer than the ino database's record */
        struct ino_rec rec;
};

/* Inode numbers are handed to directories INO_BLOCK at a time (ws.c
 * ino_alloc): what is made in one directory gets neighbouring numbers, so
 * its ino, chunk and orphan records share LMDB pages even when files are
 * made in many directories in turn (git writes each object into one of 256
 * directories by its hash: with one counter, each directory's objects were
 * spread over all the records, and rm -rf of .git touched and rewrote a
 * page per object). Direct-mapped by (wsid, dir); an entry is a hint: losing
 * it leaves the rest of its block unused. */
#define INO_BLOCK 64
#define INO_BLOCK_SLOTS 1024
/* The slot of (wsid, n) in a direct-mapped table of size slots (ws.c). */
size_t wsid_slot(uint64_t wsid, uint64_t n, size_t size);
struct ino_block {
        uint64_t wsid, dir; /* wsid 0: empty */
        uint64_t next, end; /* the block's numbers not handed out yet */
};

/* The name-hash cache (struct ntfs_store.nhcache): slots, and the longest
 * name kept (longer names are hashed every time). */
#define NAME_HASH_CACHE_SLOTS 1024
#define NAME_HASH_CACHE_NAME 55

struct ws_list;
struct wsdata;
struct wsdata_job;
struct wsw;
/* A data file mapping replaced by a bigger one: unmapped when the lock is
 * released, since pointers into it may be in use until then. */
struct wsdata_oldmap {
        void *addr;
        size_t len;
};

struct ntfs_store {
        char *dir;
        int lock_fd;
        MDB_env *env;
        MDB_dbi meta, obj, commits, sess, tags, reflog, ino, dent, chunk, xattr, lmap, dlink, orph, dead;
        bool txn_broken;       /* a write failed: the batch must be aborted */
        pthread_mutex_t lock;
        atomic_int lock_wanted;   /* threads waiting in store_enter() */
        atomic_uint lock_taken;   /* store_enter() acquisitions, wrapping */
        atomic_bool lock_brief;   /* its holder has answered and leaves within microseconds */
        /* READ replies being copied with the lock released (the copy gate,
         * store_copy_begin); copy_mu and copy_cond guard its last drop */
        atomic_int copies;
        pthread_mutex_t copy_mu;
        pthread_cond_t copy_cond;
        pthread_mutex_t inval_lock; /* held while invalidate callbacks run */
        MDB_txn *txn;          /* the batch transaction, NULL when none open */
        int64_t txn_started;   /* mono ns */
        int64_t datasync_at;   /* mono ns: the flusher's last sync of the data files */
        uint64_t txn_bytes;    /* bytes written in it (to bound its size) */
        uint64_t map_bytes;
        uint64_t reserve_bytes;
        uint64_t default_quota_bytes, default_quota_inodes; /* ntfs_store_set_default_quota */
        uint64_t ops_since_space_check;
        uint64_t bytes_since_space_check; /* written since (check_space, ws.c) */
        bool low_space;
        /* The reserve, held: blocks fallocate'd (KEEP_SIZE) in LMDB's file
         * past its high-water mark, so that commits find disk even when
         * something else fills it (reserve_hold, store.c). */
        uint64_t held_end;
        bool held_ok;      /* [high-water mark, + reserve_bytes) is allocated */
        bool held_nosup;   /* the file system cannot fallocate: statvfs only */
        bool held_warned;  /* a failure to hold it was logged */
        pthread_t flusher;
        bool flusher_running, stopping;
        bool broken; /* a compaction could not reopen the environment (env NULL) */
        pthread_cond_t cond;
        struct ntfs_ws *wss;   /* open workspace handles */
        struct wsdata *wsd;    /* open working data files (wsdata.c) */
        struct wsw *wsw;       /* their queued writes (wswrite.c); NULL: synchronous (the default) */
        size_t nwsd, wsd_cap;
        uint64_t wsd_gen;      /* counts data file writes */
        /* Changes to the store (records put or deleted, data file writes),
         * wrapping: the flusher punches free slots only once it has stood
         * still for TRIM_IDLE_MS (wsdata_trim). Changed under the lock, read
         * by the flusher without it while it punches. */
        atomic_uint changes;
        unsigned changes_seen;  /* the flusher's last look at changes */
        int64_t changes_at;     /* mono ns: when it last saw them move */
        int64_t pool_checked;   /* mono ns: the last look at the free disk for the pool */
        bool pool_low;          /* the disk is too full to keep free slots' blocks */
        struct wsdata_oldmap oldmaps[8]; /* unmapped at store_leave */
        size_t noldmaps;
        struct wsdata_job *jobs; /* slots freed by the batch, run when it commits */
        size_t njobs, jobs_cap;
        struct wsdata_job *taken; /* slots the batch took, given back if it aborts */
        size_t ntaken, taken_cap;
        /* The last session record read or written (every ws call reads its
         * session's): a copy of what the batch holds, dropped when the
         * batch is aborted or the session deleted (sess_get, sess_put). */
        bool scache_valid;
        bool scache_dirty; /* newer than the batch's copy (sess_put_lazy) */
        char scache_name[NTFS_NAME_MAX + 1];
        struct sess_rec scache_rec;
        /* Name hashes (SHA-256 based, name_hash) of recent names: a LOOKUP,
         * the MKNOD and the UNLINK of one name hash it once; readdir seeds
         * it. Direct-mapped by a cheap hash; see store_name_hash(). */
        struct name_hash_slot {
                uint64_t h;
                uint8_t len; /* 0: empty */
                char name[NAME_HASH_CACHE_NAME];
        } *nhcache;
        ntfs_hash empty_tree; /* the empty tree object's hash */
        ntfs_hash empty_file; /* the empty file object's hash */
        bool empty_file_ok;   /* it is in obj (put in this batch or before; gc and aborts clear it) */
        /* Copies of the batch's ino records (ino_get, ino_put, ino_del in
         * ws.c): every call reads several. Emptied when the batch is
         * aborted or a working state's records are deleted wholesale. */
        struct ino_cache_slot *icache;
        /* The slots made pending since the last ino_flush (an index may be
         * listed twice, or be no longer pending); INO_CACHE_SLOTS long. */
        uint32_t *ipending;
        size_t nipending;
        /* Directories' blocks of inode numbers (ino_alloc in ws.c); emptied
         * with icache: after an abort the session's counter is back
         * before them. */
        struct ino_block iblocks[INO_BLOCK_SLOTS];
};

struct ntfs_ws {
        ntfs_store *st;
        struct ntfs_ws *next;
        char *session; /* NULL for a view */
        uint64_t wsid;
        uint64_t generation;
        uint64_t changes;      /* successful write calls (auto-checkpoint polls it) */
        bool readonly;
        bool invalidate_pending;
        /* Another read-write handle on the session is open (atomic: read
         * without the store lock by the mount's workers), and how often the
         * handle became so (ntfs_ws_shared). */
        bool shared;
        uint64_t share_epoch;
        /* for views (no session record): */
        uint64_t view_next_ino;
        ntfs_hash view_commit;
        void (*inval_cb)(ntfs_ws *, const struct ntfs_ws_change *, size_t, void *);
        void *inval_ud;
        /* What the last rollback in place changed, for inval_cb (with
         * invalidate_pending false; invalidate_pending says "everything") */
        struct ws_changes *pending_changes;
        uint64_t rollbacks; /* ntfs_ws_rollbacks */
        /* Told (lock held) when another handle on the session changed an
         * inode's data (ntfs_ws_set_data_cb). */
        void (*data_cb)(ntfs_ws *, uint64_t ino, void *);
        void *data_ud;
        /* Inodes the kernel forgot, not yet looked at (ntfs_ws_forget):
         * the flusher frees the unlinked ones in one pass, so that a FORGET
         * (one per rm'd file) does not contend for the store lock with the
         * requests that follow it. fq_lock guards the three fields. */
        pthread_mutex_t fq_lock;
        uint64_t *fq;
        size_t fq_n, fq_cap;
};

/* Locking and the batch transaction (store.c). Every public function calls
 * store_enter() first and store_leave() last. */
int store_enter(ntfs_store *st);
void store_leave(ntfs_store *st);
/* The copy gate. A read reply may be copied with the lock released, from
 * pointers into LMDB's map and the data files' mappings, so that two READs
 * copy at once. Everything that could move or change what such a pointer
 * shows takes the lock with store_lock() (store_enter() does), which waits
 * for the copies in flight; a reader takes it with store_enter_reader(),
 * which does not, and must change nothing that a copy may be reading. */
/* pthread_mutex_lock(&st->lock), then waits until no copy is in flight:
 * no new one can start meanwhile, since starting one takes the lock. */
void store_lock(ntfs_store *st);
/* Lock held: the holder has already answered its caller and has only a
 * few microseconds of record changes left (a removal answered after its
 * checks, ntfs_ws_unlink_then). Until store_leave, a thread that finds the
 * lock taken spins for it, up to STORE_BRIEF_SPIN_NS, instead of sleeping:
 * the answered caller's next request most often arrives in that tail, and
 * a sleep and wake-up would cost it more than the tail itself. */
void store_hold_brief(ntfs_store *st);
#define STORE_BRIEF_SPIN_NS 20000
/* Waits until no copy is in flight (lock held). */
void store_wait_copies(ntfs_store *st);
/* store_enter() for a caller that only reads records and maps data files,
 * and so can run beside copies in flight. */
int store_enter_reader(ntfs_store *st);
/* Lock held, entered by store_enter_reader(): whether this call's copy may
 * run unlocked, that is, whether leaving now would neither commit nor
 * unmap (which would have to wait for copies, this one included). If so,
 * the copy counts as in flight until store_copy_end(). */
bool store_copy_begin(ntfs_store *st);
void store_copy_end(ntfs_store *st);
/* Aborts the batch transaction, if any. Lock held. */
void store_abort_locked(ntfs_store *st);
/* Commits the batch transaction (durable: also fsync). Lock held. */
int store_commit_locked(ntfs_store *st, bool durable);
/* Commits the batch (not durably) and begins a new one, so that a failing
 * operation can abort its own writes without losing earlier ones. */
int store_fresh_txn(ntfs_store *st);
/* What store_leave does before unlocking: commits a broken (to abort it)
 * or oversized batch, unmaps replaced data file mappings. */
void store_settle_locked(ntfs_store *st);
/* Begins the batch if none is open (lock held). */
int store_txn_begin(ntfs_store *st);
/* Frees the unlinked inodes among one slice of the handles' queued forgets,
 * all handles together (lock held, batch open; ws.c, called by the
 * flusher); returns how many are still queued. A slice is what the flusher
 * frees per hold of the store lock: each forget takes a few microseconds,
 * and a FUSE request that wants the lock waits for the whole slice. */
#define FORGET_SLICE 32
size_t ws_forget_drain_all(ntfs_store *st);
/* A handle queues at most FORGET_QUEUE_MAX (2 MiB of inode numbers;
 * beyond, ntfs_ws_forget frees at once). The flusher frees what is queued
 * at each of its wake-ups, 50 ms apart, up to FORGET_WAKE_SLICES (store.c,
 * flusher_main): bounded, so that forgets arriving as fast as they are
 * freed cannot hold off the batch's commit. */
#define FORGET_QUEUE_MAX 262144
#define FORGET_WAKE_SLICES 4096
/* A store is busy while more than STORE_BUSY_ENTRIES store_enter() calls
 * come between two of the flusher's wake-ups; the first quiet wake-up after
 * a busy one commits the batch sooner (store.c, commit_due,
 * NTFS_STORE_QUIET_FLUSH_MS). */
#define STORE_BUSY_ENTRIES 64u
/* Counts a change to the store (a record put or deleted, a data file
 * write). Lock held: only the holder writes the counter, so a plain load
 * and store do (no locked add on every put); the flusher reads it without
 * the lock while it punches (wsdata_trim). */
static inline void store_changed(ntfs_store *st) {
        unsigned n = atomic_load_explicit(&st->changes, memory_order_relaxed);
        atomic_store_explicit(&st->changes, n + 1, memory_order_relaxed);
}
/* The reserve is held in LMDB's file (store.c, reserve_hold). Lock held. */
bool store_reserve_held(ntfs_store *st);
/* Runs invalidate callbacks that a rollback queued (call without the lock). */
void store_run_invalidations(ntfs_store *st);

int db_get(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, MDB_val *ret);
int db_put(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, const void *v, size_t vl);
int db_del(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl);
/* Looks key up with a cursor of dbi left on it (*ret_cur, to close with
 * mdb_cursor_close, before the store is left): db_cursor_del then deletes
 * the record without a second descent. -ENOENT (cursor closed) when absent. */
int db_get_at(ntfs_store *st, MDB_dbi dbi, const void *k, size_t kl, MDB_val *ret, MDB_cursor **ret_cur);
int db_cursor_del(ntfs_store *st, MDB_cursor *cur);
/* Deletes every key starting with prefix. */
int db_del_prefix(ntfs_store *st, MDB_dbi dbi, const void *prefix, size_t pl);
int lmdb_err(int rc);

int obj_put(ntfs_store *st, const void *data, size_t len, ntfs_hash *ret);
/* The encodings of the empty tree and of the empty file object (their
 * hashes: struct ntfs_store.empty_tree / empty_file). */
extern const uint8_t obj_empty_tree[5];
extern const uint8_t obj_empty_file[13];
int obj_get(ntfs_store *st, const ntfs_hash *h, MDB_val *ret);
int obj_get_typed(ntfs_store *st, const ntfs_hash *h, uint8_t type, MDB_val *ret);

int sess_get(ntfs_store *st, const char *name, struct sess_rec *ret);
int sess_put(ntfs_store *st, const char *name, const struct sess_rec *r);
int sess_del(ntfs_store *st, const char *name);
/* sess_put for a record sess_get just returned, from the ws calls (their
 * counters): kept in the session copy and written at the next commit or
 * sess_flush(). */
int sess_put_lazy(ntfs_store *st, const char *name, const struct sess_rec *r);
/* Writes a lazily put session record into the batch; before anything that
 * reads the sess database directly (lists, gc). */
int sess_flush(ntfs_store *st);
/* Drops every cached copy of a batch record (session, inodes), with any
 * lazily kept session change: after an abort or a failed commit. */
void store_caches_drop(ntfs_store *st);
/* Writes the inode cache's pending records into the batch (ws.c): before a
 * commit, and before anything reads the ino database other than ino_get. */
int ino_flush(ntfs_store *st);
/* name_hash(name, len) through the store's cache (lock held); _known
 * records a hash read from a directory entry. */
uint64_t store_name_hash(ntfs_store *st, const char *name, size_t len);
void store_name_hash_known(ntfs_store *st, const char *name, size_t len, uint64_t h);
int reflog_append(ntfs_store *st, const char *name, struct sess_rec *r, const ntfs_hash *old_head,
                  const ntfs_hash *new_head, const char *op);
/* A reflog record and its key (name, NUL, u64 BE seq): store.c writes them,
 * store-refs.c reads them, store-sessions.c deletes a session's. */
struct reflog_rec {
        ntfs_hash old_head, new_head;
        int64_t time;
        char op[32];
};
size_t store_reflog_key(const char *name, uint64_t seq, uint8_t *k);
/* A tag's record (tags database): store-refs.c, store-sessions.c. */
struct tag_rec {
        ntfs_hash commit;
        uint32_t scope;
        int64_t created;
        char session[NTFS_NAME_MAX + 1];
};
int commit_load(ntfs_store *st, const ntfs_hash *id, struct commit_obj *ret);
/* Encodes and stores a commit; parent and parent2 may be NULL (or zero). */
int store_make_commit(ntfs_store *st, const struct tree_entry *root, const ntfs_hash *links,
                      const ntfs_hash *parent, const ntfs_hash *parent2, const char *msg, const char *effect,
                      const char *session, uint64_t bytes, uint64_t inodes, ntfs_hash *ret);
/* Ends an operation's writes: on success commits the batch (durably when
 * asked) and returns its result; on failure aborts the batch so the store
 * is as it was (callers began with store_fresh_txn) and returns r. */
int store_finish(ntfs_store *st, int r, bool durable);
int resolve_locked(ntfs_store *st, const char *ref, ntfs_hash *ret, char *ambig, size_t ambig_len);
uint64_t wsid_alloc(ntfs_store *st);
/* Marks a working state for deletion (done lazily). */
int wsid_retire(ntfs_store *st, uint64_t wsid);
int wsid_reclaim_all(ntfs_store *st, uint64_t *ret_count);

/* wsdata.c: the working data files. A chunk record (value of the chunk db,
 * key wsid, ino, chunk index) holds a chunk written since the base: a short
 * one inline, its bytes in the record itself; any other in a 64 KiB slot of
 * the working state's data file, the record naming the slot and how many
 * bytes are stored (the rest read as zeros). Lock held for all of these. */
#define CHUNK_INLINE_MAX 1984 /* bytes: the record stays inside an LMDB leaf page */
struct chunk_rec {
        uint64_t slot;      /* unless inline */
        uint32_t len;       /* bytes stored */
        const uint8_t *inl; /* inline: its bytes, in the record (valid until the next change in this txn) */
};
int chunk_rec_get(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, struct chunk_rec *ret);
/* Calls fn(ino, chunk index, record, ud) for each chunk record of a working
 * state, in key order: of one inode, or of all when ino is 0. A negative
 * return from fn stops the walk and is returned. */
int chunk_recs_each(ntfs_store *st, uint64_t wsid, uint64_t ino,
                    int (*fn)(uint64_t ino, uint64_t idx, const struct chunk_rec *cr, void *ud), void *ud);
/* A chunk that had no record gets one storing bytes [0, len) of data
 * (inline when len <= CHUNK_INLINE_MAX, else in a new slot). */
int chunk_store(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const uint8_t *data, size_t len);
/* Writes n bytes of buf at byte in of the chunk cr describes; bytes between
 * its stored length and in become zeros. In place in its slot; an inline
 * chunk that grows past CHUNK_INLINE_MAX moves to a slot. */
int chunk_update(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const struct chunk_rec *cr,
                 const uint8_t *buf, size_t in, size_t n);
/* The chunk keeps only its first len bytes (no change if it has no more). */
int chunk_shorten(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const struct chunk_rec *cr, size_t len);
/* The stored bytes of a chunk: in its record, or read-only in the data
 * file's mapping (valid until the next change in this transaction, or until
 * the lock is released). NULL with *err set on failure. */
const uint8_t *chunk_data(ntfs_store *st, uint64_t wsid, const struct chunk_rec *cr, int *err);
/* Unmaps mappings that a bigger one replaced (store_leave, lock held). */
void wsdata_leave(ntfs_store *st);
/* Deletes a file's chunk records from index from on; their slots are freed
 * when the batch commits. */
int chunks_drop(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t from);
/* The working state's data file goes when the batch commits. */
int wsdata_retire(ntfs_store *st, uint64_t wsid);
/* Before a batch commits: the bytes its records newly name reach the disk
 * (durable: every byte written). */
int wsdata_presync(ntfs_store *st, bool durable);
/* Before a commit: the same sync with the lock released, so that the
 * commit finds little left to sync. Called and returns with the lock
 * held. */
void wsdata_presync_unlocked(ntfs_store *st, bool durable);
/* Puts the fresh bytes a sync has reached in the read mappings' page
 * tables (MADV_POPULATE_READ), a few MiB at a time. Lock held; may_unlock
 * (the flusher): released while each piece is populated, behind the copy
 * gate. */
void wsdata_prefault(ntfs_store *st, bool may_unlock);
/* How many data files hold new bytes no sync has reached yet (lock held;
 * for tests). */
size_t wsdata_unsynced(ntfs_store *st);
/* The flusher, at each wake-up: gives the space of free slots back to the
 * file system (hole punches) with the lock released, once the store has
 * stood still for TRIM_IDLE_MS, or at once when a working state holds
 * POOL_MAX_BYTES freed or the disk runs low (wsdata.c). Called and returns
 * with the lock held. */
void wsdata_trim(ntfs_store *st);
/* Bytes that free slots of a working state (UINT64_MAX: of every one) may
 * still hold on disk, the reuse pool: free to its writers, though not yet
 * to the file system. Lock held. */
uint64_t wsdata_pool_bytes(ntfs_store *st, uint64_t wsid);
/* After a batch committed / was aborted: run / drop its queued frees. */
void wsdata_committed(ntfs_store *st);
void wsdata_aborted(ntfs_store *st);
/* Disk space the working data files take (st_blocks), for status; no lock
 * needed (it only lists <store>/wsdata). */
uint64_t wsdata_disk_bytes(ntfs_store *st);
/* At open: removes data files whose working state names no chunk. */
int wsdata_sweep(ntfs_store *st);
void wsdata_close_all(ntfs_store *st);
/* fsck: every chunk record decodes (an inline one holds exactly its
 * length), a slot record names a slot inside its data file, and no two name
 * the same slot. cb gets one line per problem. */
int wsdata_check(ntfs_store *st, void (*cb)(const char *problem, void *), void *ud, uint64_t *ret_problems);

/* wswrite.c: data file writes queued, merged and written by the next
 * request or a writer thread (its header comment has the rules). All but
 * open, close, wsw_wait_mark and wsw_write_all with the lock held. */
/* Sets the queue up (at open) as mode says (NTFS_DATA_WRITES overrides
 * it); NTFS_DATA_WRITES_SYNC, or a failure, leaves the writes synchronous
 * (st->wsw NULL). */
int wsw_open(ntfs_store *st, enum ntfs_data_writes mode);
/* Writes what is queued and stops the writer (at close). */
void wsw_close(ntfs_store *st);
/* Queues a write of len (<= NTFS_CHUNK_SIZE) bytes of buf (NULL: zeros) at
 * pos of fd: 1 when queued (the bytes are copied); 0 when the caller must
 * write them itself (everything queued before is in the file by then); a
 * negative errno when a queued write failed (the batch is then broken). */
int wsw_queue(ntfs_store *st, int fd, uint64_t pos, const void *buf, size_t len);
/* Waits until every queued write is in its file; returns the kept error of
 * a failed one (and breaks the batch), else 0. */
int wsw_drain(ntfs_store *st);
/* The same for the queued writes into [pos, pos + len) of fd (and those
 * queued before them): what a read of those bytes waits for. */
int wsw_drain_range(ntfs_store *st, int fd, uint64_t pos, uint64_t len);
/* How many writes were queued so far (lock held), and waiting until those
 * are in their files, writing them too (the store lock NOT held: the
 * flusher's sync before a commit); returns a failed write's kept error. */
uint64_t wsw_mark(ntfs_store *st);
int wsw_wait_mark(ntfs_store *st, uint64_t mark);
/* The batch was aborted: drains and forgets a failed write's error. */
void wsw_batch_gone(ntfs_store *st);
/* pwritev of iov (n pieces, total bytes) at pos of fd, to the end (a short
 * write goes on; EINTR is retried); iov is used up. 0 or a negative errno. */
struct iovec;
int wsw_write_all(int fd, struct iovec *iov, int n, uint64_t pos, size_t total);
/* Writes queued, written, and the pwritev calls that wrote them. */
void wsw_counters(ntfs_store *st, uint64_t *queued, uint64_t *written, uint64_t *batches);

/* ws.c */
int ino_get(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *ret);
int ino_put(ntfs_store *st, uint64_t wsid, uint64_t ino, const struct ino_rec *r);
/* Deletes an ino record (-ENOENT when there is none). */
int ino_del(ntfs_store *st, uint64_t wsid, uint64_t ino);
/* Creates the root inode of a new working state from a commit. */
int ws_init_from_commit(ntfs_store *st, uint64_t wsid, const struct commit_obj *c);
void ino_from_entry(const struct tree_entry *e, struct ino_rec *r);

/* checkpoint.c: serializes a working state into objects (clearing dirty
 * flags); returns the root entry and link table. */
int ws_serialize(ntfs_store *st, uint64_t wsid, const ntfs_hash *old_links, struct tree_entry *ret_root,
                 ntfs_hash *ret_links);
/* What a rollback in place changed (refcounted: ws_changes_unref). */
struct ws_changes {
        unsigned refs;
        size_t n, cap;
        struct ntfs_ws_change *v;
};
struct ws_changes *ws_changes_new(void);
void ws_changes_unref(struct ws_changes *c);
/* checkpoint.c: moves session name's head and working state to commit,
 * in place while a handle is open on the state (*ret_ch: what changed),
 * else replaced by a fresh state (*ret_ch NULL). Lock held, batch open. */
int ws_replace_state(ntfs_store *st, const char *name, struct sess_rec *r, const ntfs_hash *commit,
                     struct ws_changes **ret_ch);
/* A rollback in place (fs/ws-rollback.c): rewrites working state wsid to
 * commit c, keeping the inode numbers of the paths both have; *ret gets
 * what changed. -EAGAIN: hard-link groups differ, the state must be
 * replaced. Lock held, batch open; the caller does the session record. */
int ws_rollback_in_place(ntfs_store *st, uint64_t wsid, const struct commit_obj *c, struct ws_changes **ret);
/* The link table working state wsid is based on (ws.c). */
int ws_links_get(ntfs_store *st, uint64_t wsid, ntfs_hash *ret);
/* A new session name at commit (lock held; op names the reflog entry);
 * name_free: -NTFS_EINVALNAME / -NTFS_ESESSEXISTS unless name is free for
 * a session. (Used by fs/import.c too.) */
int new_session_at(ntfs_store *st, const char *name, const ntfs_hash *commit, const char *op);
int name_free(ntfs_store *st, const char *name);

#endif
