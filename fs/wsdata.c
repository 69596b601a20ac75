/* SPDX-License-Identifier: MIT
 * wsdata.c — where a working state's written file content lives between
 * checkpoints: one data file per working state, <store>/wsdata/<wsid>.
 *
 * The file is an array of 64 KiB slots. A chunk record in LMDB (key wsid,
 * ino, chunk index) names the chunk's slot and how many of its bytes are
 * stored; bytes past that read as zeros. A write lands in its slot with one
 * pwrite, in place when the slot exists (made here, or, with the write
 * queue on, by its writer thread: wswrite.c); only a new chunk or a longer
 * one touches LMDB. Reads map the file and point into the mapping (after
 * the chunk's queued writes are made). Checkpoints hash slots into
 * content-addressed blobs and free them.
 *
 * A chunk of at most CHUNK_INLINE_MAX bytes (a small file) is kept inline,
 * in its record, until it grows past that: a slot would cost it a page of
 * the file, a block and an extent of its own, and a pwrite (docs/store.md,
 * "Inline chunks"). Inline chunks are plain LMDB data, in the batch like
 * every other record; the rules below are about slots.
 *
 * The ordering rules (docs/store.md, "Working data files"):
 *
 *  1. A slot's bytes reach the disk before a batch that points at them
 *     commits: store_commit_locked() calls wsdata_presync() first. Bytes
 *     that a committed record already names (an overwrite in place below
 *     the chunk's length) wait for a durable commit or the kernel's
 *     write-back, as a native file's do.
 *  2. A slot freed in a batch keeps its bytes until that batch has
 *     committed: frees are queued and become reusable in
 *     wsdata_committed(); an aborted batch drops its queue
 *     (wsdata_aborted()). Free slots' space goes back to the file system
 *     later, off the store lock (wsdata_trim(), the flusher).
 *  3. Bytes past a chunk's recorded length may hold anything (a write that
 *     a crash cut off); a write that extends the length zeroes the gap first.
 *  4. A file's slots are learnt (scan_slots) before any of its records
 *     changes, so a slot is never free and named at once.
 *
 * So after a crash, every chunk the committed batch names has its bytes on
 * disk; overwrites in place that came after it may show (as with ext4's
 * data=ordered), and no freed or foreign bytes can.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/store-internal.h"
#include "common/banned.h"

#define SLOT_BYTES ((uint64_t)NTFS_CHUNK_SIZE)
/* u64 slot, u32 len, u32 flags (all big-endian); inline: slot 0, flags
 * REC_INLINE, and the len bytes follow */
#define CHUNK_REC_LEN 16
#define REC_INLINE 1u

struct slot_range {
        uint64_t start, count;
};

/* Fresh bytes of a data file, [a, b), to be put in the read mapping's page
 * tables once a sync has reached them (wsdata_prefault). */
struct pf_range {
        uint64_t a, b;
};

struct wsdata {
        uint64_t wsid;
        int fd;
        uint64_t next_slot; /* past the highest slot handed out */
        uint64_t live;      /* slots allocated and not yet freed (an upper bound) */
        struct slot_range *free; /* free slots, reused before next_slot grows */
        size_t nfree, free_cap;
        uint64_t free_slots; /* the slots on the free list */
        uint64_t unpunched; /* free slots whose space may still be on disk */
        uint64_t unpunched_bytes; /* the blocks their chunks covered when freed */
        bool trimming;      /* the flusher is giving free slots' space back */
        bool retired;       /* its working state went while trimming */
        bool dirty;         /* written since the last sync */
        bool fresh;         /* written since the last sync where no committed record points (rule 1) */
        uint64_t wgen;      /* st->wsd_gen at the last write */
        uint64_t fgen;      /* st->wsd_gen at the last fresh write */
        uint64_t fsize;     /* the file's size, as this process made it */
        uint8_t *map;       /* read-only shared mapping of [0, map_len) */
        size_t map_len;
        size_t map_resv;    /* address space held at map: the mapping grows in place (map_cover) */
        struct pf_range *pf; /* fresh ranges in write order (PF_MAX at most; pf_note) */
        uint32_t npf;
        uint32_t pf_ready;   /* pf[0, pf_ready) are synced: wsdata_prefault maps them */
        uint64_t pf_gen;     /* bumped when wsdata_prefault takes ranges off pf */
};


struct wsdata_job {
        uint64_t wsid;
        uint64_t slot; /* UINT64_MAX: the whole working state went */
        uint64_t bytes; /* the blocks its chunk's length covered (frees) */
};

static void chunk_key(uint8_t k[24], uint64_t wsid, uint64_t ino, uint64_t idx) {
        ntfs_put_be64(k, wsid);
        ntfs_put_be64(k + 8, ino);
        ntfs_put_be64(k + 16, idx);
}

static int decode_rec(const MDB_val *v, struct chunk_rec *ret) {
        const uint8_t *p = v->mv_data;
        if (v->mv_size < CHUNK_REC_LEN)
                return -NTFS_ECORRUPT;
        ret->slot = ntfs_get_be64(p);
        ret->len = ntfs_get_be32(p + 8);
        uint32_t flags = ntfs_get_be32(p + 12);
        ret->inl = NULL;
        if (flags == REC_INLINE) {
                if (ret->slot || ret->len > CHUNK_INLINE_MAX || v->mv_size != CHUNK_REC_LEN + ret->len)
                        return -NTFS_ECORRUPT;
                ret->inl = p + CHUNK_REC_LEN;
                return 0;
        }
        if (flags || v->mv_size != CHUNK_REC_LEN || ret->len > NTFS_CHUNK_SIZE ||
            ret->slot >= (UINT64_MAX / SLOT_BYTES))
                return -NTFS_ECORRUPT;
        return 0;
}

int chunk_rec_get(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, struct chunk_rec *ret) {
        uint8_t k[24];
        chunk_key(k, wsid, ino, idx);
        MDB_val v;
        int r = db_get(st, st->chunk, k, 24, &v);
        return r < 0 ? r : decode_rec(&v, ret);
}

/* A record naming a slot. */
static int slot_rec_put(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, uint64_t slot, size_t len) {
        uint8_t k[24], v[CHUNK_REC_LEN] = { 0 };
        chunk_key(k, wsid, ino, idx);
        ntfs_put_be64(v, slot);
        ntfs_put_be32(v + 8, (uint32_t)len);
        return db_put(st, st->chunk, k, 24, v, sizeof v);
}

/* An inline record of bytes [0, len) of data, then [in, in + n) of buf
 * over them, with zeros between (len <= in + n ? the gap : nothing). data
 * and buf may point into the chunk db (the bytes are copied before the put). */
static int inline_rec_put(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const uint8_t *data,
                          size_t len, const uint8_t *buf, size_t in, size_t n) {
        size_t total = NTFS_MAX(len, in + n);
        if (total > CHUNK_INLINE_MAX)
                return -EINVAL;
        uint8_t k[24], v[CHUNK_REC_LEN + CHUNK_INLINE_MAX];
        chunk_key(k, wsid, ino, idx);
        ntfs_put_be64(v, 0);
        ntfs_put_be32(v + 8, (uint32_t)total);
        ntfs_put_be32(v + 12, REC_INLINE);
        uint8_t *b = v + CHUNK_REC_LEN;
        if (len)
                memcpy(b, data, len);
        if (in > len)
                memset(b + len, 0, in - len);
        if (n)
                memcpy(b + in, buf, n);
        return db_put(st, st->chunk, k, 24, v, CHUNK_REC_LEN + total);
}

int chunk_recs_each(ntfs_store *st, uint64_t wsid, uint64_t ino,
                    int (*fn)(uint64_t ino, uint64_t idx, const struct chunk_rec *cr, void *ud), void *ud) {
        uint8_t k0[16];
        ntfs_put_be64(k0, wsid);
        ntfs_put_be64(k0 + 8, ino);
        size_t plen = ino ? 16 : 8;
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->chunk, &cur);
        if (rc)
                return lmdb_err(rc);
        int r = 0;
        MDB_val k = { plen, k0 }, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size == 24 && memcmp(k.mv_data, k0, plen) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                const uint8_t *kp = k.mv_data;
                struct chunk_rec cr;
                if ((r = decode_rec(&v, &cr)) < 0 || (r = fn(ntfs_get_be64(kp + 8), ntfs_get_be64(kp + 16), &cr, ud)) < 0)
                        break;
        }
        mdb_cursor_close(cur);
        if (r == 0 && rc && rc != MDB_NOTFOUND)
                r = lmdb_err(rc);
        return r;
}

static int data_path(ntfs_store *st, uint64_t wsid, char *buf, size_t len) {
        int n = wsid == UINT64_MAX ? snprintf(buf, len, "%s/wsdata", st->dir)
                                   : snprintf(buf, len, "%s/wsdata/%016" PRIx64, st->dir, wsid);
        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int queue_job(ntfs_store *st, uint64_t wsid, uint64_t slot, uint64_t bytes) {
        if (NTFS_ROOM_FOR(st->jobs, st->jobs_cap, st->njobs) < 0)
                return -ENOMEM;
        st->jobs[st->njobs++] = (struct wsdata_job){ wsid, slot, bytes };
        return 0;
}

/* The blocks a chunk of len bytes takes in its slot. */
static uint64_t slot_blocks(uint64_t len) { return (len + 4095) & ~(uint64_t)4095; }

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static int free_push(struct wsdata *w, uint64_t start, uint64_t count) {
        if (w->nfree && w->free[w->nfree - 1].start + w->free[w->nfree - 1].count == start) {
                w->free[w->nfree - 1].count += count;
                w->free_slots += count;
                return 0;
        }
        if (NTFS_ROOM_FOR(w->free, w->free_cap, w->nfree) < 0)
                return -ENOMEM;
        w->free[w->nfree++] = (struct slot_range){ start, count };
        w->free_slots += count;
        return 0;
}

/* Frees count slots from start, whose chunks took up to bytes of disk:
 * onto the free list, and into the pool until a trim punches them.
 * ENOMEM: they are lost until the next scan. */
static int pool_push(struct wsdata *w, uint64_t start, uint64_t count, uint64_t bytes) {
        int r = free_push(w, start, count);
        if (r == 0) {
                w->unpunched += count;
                w->unpunched_bytes += bytes;
        }
        return r;
}

static int cmp_range(const void *a, const void *b) {
        const struct slot_range *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

/* Slots per hole punch: a punch holds the data file's inode (and so every
 * write to it, and every fault in its mapping) through its discard, and an
 * idle trim looks for new changes between two. */
#define PUNCH_PIECE 256 /* 16 MiB */

/* Gives the space of ranges back to the file system: sorted, adjacent
 * ranges merged, punched PUNCH_PIECE slots at a time. With changes set, it
 * stops at the first piece after *changes moved from seen (the store is
 * busy again). Returns the merged count; *ret_left: the slots not punched
 * (a stop, a failure). */
static size_t punch_ranges(int fd, struct slot_range *r, size_t n, atomic_uint *changes, unsigned seen,
                           uint64_t *ret_left) {
        *ret_left = 0;
        if (!n)
                return 0;
        qsort(r, n, sizeof *r, cmp_range);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                if (m && r[m - 1].start + r[m - 1].count == r[i].start)
                        r[m - 1].count += r[i].count;
                else
                        r[m++] = r[i];
        }
        bool stop = false;
        for (size_t i = 0; i < m; i++)
                for (uint64_t done = 0; done < r[i].count;) {
                        uint64_t k = NTFS_MIN(r[i].count - done, (uint64_t)PUNCH_PIECE);
                        if (!stop && changes && atomic_load_explicit(changes, memory_order_relaxed) != seen)
                                stop = true;
                        if (!stop &&
                            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                      (off_t)((r[i].start + done) * SLOT_BYTES), (off_t)(k * SLOT_BYTES)) < 0 &&
                            errno != EOPNOTSUPP) {
                                log_debug("store: punching free slots: %s", strerror(errno));
                                stop = true; /* only space is lost, until the next pass */
                        }
                        if (stop)
                                *ret_left += k;
                        done += k;
                }
        return m;
}

/* First use in this process: learns which slots the records name; every
 * other slot below the highest is free (freed by a batch whose queue a crash
 * cut off, or written by one that never committed), and its space is given
 * back by the flusher (wsdata_trim). */
struct slot_list {
        uint64_t *slots;
        size_t n, cap;
};

static int collect_slot(uint64_t ino, uint64_t idx, const struct chunk_rec *cr, void *ud) {
        (void)ino;
        (void)idx;
        struct slot_list *l = ud;
        if (cr->inl)
                return 0;
        if (NTFS_ROOM_FOR(l->slots, l->cap, l->n) < 0)
                return -ENOMEM;
        l->slots[l->n++] = cr->slot;
        return 0;
}

static int scan_slots(ntfs_store *st, struct wsdata *w) {
        struct slot_list l = { 0 };
        int r = chunk_recs_each(st, w->wsid, 0, collect_slot, &l);
        _cleanup_free_ uint64_t *slots = l.slots;
        size_t n = l.n;
        if (r < 0)
                return r;
        if (n)
                qsort(slots, n, sizeof *slots, cmp_u64);
        w->live = n;
        w->next_slot = n ? slots[n - 1] + 1 : 0;
        w->nfree = 0;
        w->free_slots = 0;
        /* Cut off slots past the last named one. (A file shorter than its
         * records is left for fsck and reads to report, not papered over.) */
        struct stat sb;
        if (fstat(w->fd, &sb) < 0)
                return -errno;
        if ((uint64_t)sb.st_size > w->next_slot * SLOT_BYTES) {
                if (ftruncate(w->fd, (off_t)(w->next_slot * SLOT_BYTES)) < 0)
                        return -errno;
                sb.st_size = (off_t)(w->next_slot * SLOT_BYTES);
        }
        w->fsize = (uint64_t)sb.st_size;
        uint64_t from = 0;
        for (size_t i = 0; i < n; i++) {
                if (slots[i] > from &&
                    (r = pool_push(w, from, slots[i] - from, (slots[i] - from) * SLOT_BYTES)) < 0)
                        return r;
                from = slots[i] + 1;
        }
        return 0;
}

static struct wsdata *find_entry(ntfs_store *st, uint64_t wsid, size_t *ret_i) {
        for (size_t i = 0; i < st->nwsd; i++)
                if (st->wsd[i].wsid == wsid) {
                        *ret_i = i;
                        return &st->wsd[i];
                }
        return NULL;
}

/* The working state's data file; created when create is set, else
 * -ENOENT when the working state has none. Lock held. */
static int wsdata_get(ntfs_store *st, uint64_t wsid, bool create, struct wsdata **ret) {
        size_t i;
        if ((*ret = find_entry(st, wsid, &i)))
                return 0;
        if (NTFS_ROOM_FOR(st->wsd, st->wsd_cap, st->nwsd) < 0)
                return -ENOMEM;
        char path[PATH_MAX];
        int r = data_path(st, UINT64_MAX, path, sizeof path);
        if (r < 0)
                return r;
        if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
                return -errno;
        if ((r = data_path(st, wsid, path, sizeof path)) < 0)
                return r;
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
        if (fd < 0)
                return -errno;
        struct wsdata *w = &st->wsd[st->nwsd];
        *w = (struct wsdata){ .wsid = wsid, .fd = fd };
        if ((r = scan_slots(st, w)) < 0) {
                free(w->free);
                return r;
        }
        w->fd = TAKE_FD(fd);
        st->nwsd++;
        *ret = w;
        return 0;
}

/* A new slot (creates the data file on first use). */
static int wsdata_alloc(ntfs_store *st, uint64_t wsid, uint64_t *ret) {
        struct wsdata *w;
        int r = wsdata_get(st, wsid, true, &w);
        if (r < 0)
                return r;
        if (NTFS_ROOM_FOR(st->taken, st->taken_cap, st->ntaken) < 0)
                return -ENOMEM;
        if (w->nfree) {
                /* a slot freed by a batch that has committed */
                struct slot_range *f = &w->free[w->nfree - 1];
                *ret = f->start++; /* ascending, so a file's chunks stay in order */
                if (!--f->count)
                        w->nfree--;
                w->free_slots--;
        } else if (w->next_slot >= (uint64_t)INT64_MAX / SLOT_BYTES - 1) {
                return -EFBIG;
        } else {
                *ret = w->next_slot++;
        }
        w->live++;
        st->taken[st->ntaken++] = (struct wsdata_job){ wsid, *ret, SLOT_BYTES };
        return 0;
}

/* Puts a slot that no record names back on its file's free list: it was
 * taken by a call or a batch that failed. Its bytes go at the next trim. */
static void slot_give_back(ntfs_store *st, uint64_t wsid, uint64_t slot) {
        size_t i;
        struct wsdata *w = find_entry(st, wsid, &i);
        if (!w || w->retired)
                return;
        if (w->live)
                w->live--;
        (void)pool_push(w, slot, 1, SLOT_BYTES);
}

/* Gives back the slot wsdata_alloc just returned, when nothing came to name
 * it (a failed write: a full disk, say); the batch goes on without it. */
static void wsdata_unalloc(ntfs_store *st, uint64_t wsid, uint64_t slot) {
        if (st->ntaken && st->taken[st->ntaken - 1].slot == slot && st->taken[st->ntaken - 1].wsid == wsid)
                st->ntaken--;
        slot_give_back(st, wsid, slot);
}

/* The address space a data file's mapping holds (MAP_RESV_MIN at least,
 * twice the file when that is more): the file is mapped into it from its
 * start, and as the file grows the mapping is extended in place. */
#define MAP_RESV_MIN ((size_t)1 << (sizeof(size_t) > 4 ? 34 : 28)) /* 16 GiB (256 MiB on 32-bit) */
#define MAP_STEP ((size_t)64 << 20)

/* Makes w's read mapping cover [0, end) and the whole file (lock held).
 * Within its reservation the mapping grows in place: its address stays,
 * so a copy in flight keeps its pointers, and the pages already mapped
 * keep their page-table entries (wsdata_prefault). Past it, a new and larger
 * reservation is taken and the old one is unmapped at store_leave, after
 * the copies in flight. */
static int map_cover(ntfs_store *st, struct wsdata *w, uint64_t end) {
        uint64_t need = NTFS_MAX(end, w->fsize);
        if (need > SIZE_MAX / 4)
                return -EFBIG;
        size_t len = MAP_STEP;
        while (len < need)
                len *= 2;
        if (w->map && len <= w->map_resv) {
                void *m = mmap(w->map + w->map_len, len - w->map_len, PROT_READ, MAP_SHARED | MAP_FIXED, w->fd,
                               (off_t)w->map_len);
                if (m == MAP_FAILED)
                        return -errno;
                w->map_len = len;
                return 0;
        }
        if (st->noldmaps == ARRAY_SIZE(st->oldmaps))
                return -EAGAIN; /* cannot happen: one operation grows a map a few times */
        size_t resv = MAP_RESV_MIN;
        while (resv < 2 * len)
                resv *= 2;
        uint8_t *base = mmap(NULL, resv, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED)
                return -errno;
        if (mmap(base, len, PROT_READ, MAP_SHARED | MAP_FIXED, w->fd, 0) == MAP_FAILED) {
                int r = -errno;
                munmap(base, resv);
                return r;
        }
        if (w->map)
                st->oldmaps[st->noldmaps++] = (struct wsdata_oldmap){ w->map, w->map_resv };
        w->map = base;
        w->map_len = len;
        w->map_resv = resv;
        return 0;
}

/* Fresh bytes are put in the read mapping's page tables (the kernel's copy
 * of a READ then does not fault them in one 64 KiB at a time: the first
 * read of freshly written data was a quarter slower than the next ones,
 * docs/bench-fs.md), but only after a sync has reached them: a page mapped
 * while still dirty makes the sync write-protect it in the daemon's page
 * tables, and a warm `du` right after a big untar paid ~1.2x for that
 * (docs/store.md, section 4.8). So writes note their fresh ranges here, a
 * sync marks the ones it covered ready (pf_ready), and the flusher maps
 * them (wsdata_prefault). A range shorter than a slot is not kept: its
 * first read faults once anyway (fault-around maps 64 KiB). When PF_MAX
 * ranges wait, further ones are not prefaulted. */
#define PF_MAX 1024
#define PF_MIN SLOT_BYTES
#define PF_PIECE ((uint64_t)4 << 20) /* populated per store lock hold: ~0.5 ms */

static void pf_note(struct wsdata *w, uint64_t a, uint64_t b) {
        if (w->npf > w->pf_ready) { /* the last one, not yet synced, may grow */
                struct pf_range *l = &w->pf[w->npf - 1];
                if (a >= l->a && a <= l->b) {
                        l->b = NTFS_MAX(l->b, b);
                        return;
                }
                if (l->b - l->a < PF_MIN) { /* not worth a place */
                        *l = (struct pf_range){ a, b };
                        return;
                }
        }
        if (w->npf == PF_MAX || (!w->pf && !(w->pf = malloc(PF_MAX * sizeof *w->pf))))
                return;
        w->pf[w->npf++] = (struct pf_range){ a, b };
}

/* A sync reached the first n fresh ranges, the last of them as [a, b)
 * (lock held; no range was taken off since). A last one that grew since
 * (a file written on) is split at b, so that a long write is prefaulted as
 * it goes, not all at its end. */
static void pf_synced(struct wsdata *w, uint32_t n, uint64_t a, uint64_t b) {
        if (n <= w->pf_ready)
                return; /* a commit's sync, meanwhile, reached them all */
        struct pf_range *l = &w->pf[n - 1];
        if (l->a != a || l->b != b) {
                if (l->a != a || l->b < b || w->npf == PF_MAX) {
                        n--; /* replaced (or no room to split): the next sync's */
                } else {
                        memmove(l + 2, l + 1, (w->npf - n) * sizeof *l);
                        l[1] = (struct pf_range){ b, l->b };
                        l->b = b;
                        w->npf++;
                }
        }
        w->pf_ready = NTFS_MAX(w->pf_ready, n);
}

void wsdata_prefault(ntfs_store *st, bool may_unlock) {
        long pg = sysconf(_SC_PAGESIZE); /* madvise wants whole pages, not always 4 KiB */
        if (pg <= 0)
                return;
        uint64_t m = (uint64_t)pg - 1;
        while (!st->stopping) {
                struct wsdata *w = NULL;
                for (size_t i = 0; i < st->nwsd && !w; i++)
                        if (st->wsd[i].pf_ready && !st->wsd[i].retired)
                                w = &st->wsd[i];
                if (!w)
                        break;
                /* a piece of the first ready range; what is left of it
                 * stays longer than PF_PIECE, so only ranges written short
                 * are skipped */
                struct pf_range *p = &w->pf[0];
                bool whole = p->b - p->a <= 2 * PF_PIECE;
                uint64_t a = p->a & ~m, b = whole ? p->b : p->a + PF_PIECE;
                bool skip = p->b - p->a < PF_MIN;
                if (whole) {
                        memmove(w->pf, w->pf + 1, (w->npf - 1) * sizeof *w->pf);
                        w->npf--;
                        w->pf_ready--;
                } else {
                        p->a = b;
                }
                w->pf_gen++;
                b = NTFS_MIN((b + m) & ~m, w->fsize & ~m); /* no page past the file's end */
                if (skip || b <= a || (b > w->map_len && map_cover(st, w, b) < 0))
                        continue;
                uint8_t *addr = w->map + a;
                if (may_unlock && store_copy_begin(st)) {
                        /* behind the copy gate, as a READ's copy: the
                         * mapping stays until it is done */
                        pthread_mutex_unlock(&st->lock);
                        (void)madvise(addr, b - a, MADV_POPULATE_READ);
                        store_copy_end(st);
                        store_lock(st);
                } else {
                        (void)madvise(addr, b - a, MADV_POPULATE_READ);
                }
        }
        if (may_unlock && st->noldmaps) {
                store_wait_copies(st); /* none can start: the lock is held */
                wsdata_leave(st);
        }
}

/* Writes len bytes at byte in of a slot; buf NULL writes zeros. fresh: some
 * of the bytes are past what the slot's committed record names (a new slot,
 * or a chunk growing), so the next commit must sync them first (rule 1);
 * an overwrite in place below the recorded length waits for a durable one. */
static int wsdata_pwrite(ntfs_store *st, uint64_t wsid, uint64_t slot, size_t in, const void *buf, size_t len,
                         bool fresh) {
        if (in > NTFS_CHUNK_SIZE || len > SLOT_BYTES * 1024 || slot >= UINT64_MAX / SLOT_BYTES - 1024)
                return -EINVAL;
        struct wsdata *w;
        int r = wsdata_get(st, wsid, true, &w);
        if (r < 0)
                return r;
        if ((r = NTFS_FAULT("wsdata.write")) < 0)
                return r;
        static const uint8_t zeros[NTFS_CHUNK_SIZE];
        off_t pos = (off_t)(slot * SLOT_BYTES + in);
        const uint8_t *p = buf ? buf : zeros;
        w->dirty = true;
        w->wgen = ++st->wsd_gen;
        store_changed(st);
        if (fresh) {
                w->fresh = true;
                w->fgen = w->wgen;
        }
        while (len) {
                size_t n = NTFS_MIN(len, sizeof zeros);
                r = wsw_queue(st, w->fd, (uint64_t)pos, buf ? p : NULL, n);
                if (r < 0)
                        return r;
                bool here = r == 0;
                if (here) { /* not queued: written here, after the queue */
                        struct iovec v = { (void *)p, n };
                        if ((r = wsw_write_all(w->fd, &v, 1, (uint64_t)pos, n)) < 0)
                                return r;
                }
                if (buf)
                        p += n;
                pos += (off_t)n;
                len -= n;
                w->fsize = NTFS_MAX(w->fsize, (uint64_t)pos);
                if (fresh)
                        pf_note(w, (uint64_t)pos - n, (uint64_t)pos);
        }
        return 0;
}

static const uint8_t *wsdata_map(ntfs_store *st, uint64_t wsid, const struct chunk_rec *cr, int *err) {
        struct wsdata *w;
        int r = wsdata_get(st, wsid, false, &w);
        if (r == -ENOENT)
                r = -NTFS_ECORRUPT; /* a chunk record without its file */
        uint64_t end = cr->slot * SLOT_BYTES + cr->len;
        /* the chunk's queued writes in the file (none of its pages past the
         * file's end, where a read would raise SIGBUS) */
        if (r == 0)
                r = wsw_drain_range(st, w->fd, cr->slot * SLOT_BYTES, cr->len);
        if (r == 0 && end > w->fsize)
                r = -NTFS_ECORRUPT; /* the record names bytes the file lacks */
        if (r == 0 && end > w->map_len)
                r = map_cover(st, w, end);
        if (r < 0) {
                *err = r;
                return NULL;
        }
        return w->map + cr->slot * SLOT_BYTES;
}

const uint8_t *chunk_data(ntfs_store *st, uint64_t wsid, const struct chunk_rec *cr, int *err) {
        return cr->inl ? cr->inl : wsdata_map(st, wsid, cr, err);
}

/* Writes n bytes of buf at byte in of a slot that stores have bytes,
 * zeroing the gap between first (rule 3). is_new: no committed record names
 * the slot yet. */
static int slot_patch(ntfs_store *st, uint64_t wsid, uint64_t slot, size_t have, const uint8_t *buf, size_t in,
                      size_t n, bool is_new) {
        int r = 0;
        if (in > have && (r = wsdata_pwrite(st, wsid, slot, have, NULL, in - have, true)) < 0)
                return r;
        return n ? wsdata_pwrite(st, wsid, slot, in, buf, n, is_new || in + n > have) : 0;
}

/* A new slot for a chunk: bytes [0, len) of data, then n bytes of buf at
 * in, zeros between; the record names it. */
static int slot_store(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const uint8_t *data, size_t len,
                      const uint8_t *buf, size_t in, size_t n) {
        uint64_t slot;
        int r = wsdata_alloc(st, wsid, &slot);
        if (r < 0)
                return r;
        if (len)
                r = wsdata_pwrite(st, wsid, slot, 0, data, len, true);
        if (r == 0)
                r = slot_patch(st, wsid, slot, len, buf, in, n, true);
        if (r == 0)
                r = slot_rec_put(st, wsid, ino, idx, slot, NTFS_MAX(len, in + n));
        if (r < 0)
                wsdata_unalloc(st, wsid, slot);
        return r;
}

int chunk_store(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const uint8_t *data, size_t len) {
        if (len > NTFS_CHUNK_SIZE)
                return -EINVAL;
        if (len <= CHUNK_INLINE_MAX)
                return inline_rec_put(st, wsid, ino, idx, data, len, NULL, 0, 0);
        return slot_store(st, wsid, ino, idx, data, len, NULL, 0, 0);
}

int chunk_update(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const struct chunk_rec *cr,
                 const uint8_t *buf, size_t in, size_t n) {
        if (in > NTFS_CHUNK_SIZE || n > NTFS_CHUNK_SIZE - in)
                return -EINVAL;
        if (cr->inl) {
                if (NTFS_MAX(cr->len, in + n) <= CHUNK_INLINE_MAX)
                        return inline_rec_put(st, wsid, ino, idx, cr->inl, cr->len, buf, in, n);
                /* grown past the inline limit: the bytes move to a slot (the
                 * record is replaced only after they are written, so cr->inl
                 * stays valid meanwhile) */
                return slot_store(st, wsid, ino, idx, cr->inl, cr->len, buf, in, n);
        }
        int r = slot_patch(st, wsid, cr->slot, cr->len, buf, in, n, false);
        if (r < 0 || in + n <= cr->len)
                return r;
        return slot_rec_put(st, wsid, ino, idx, cr->slot, in + n);
}

int chunk_shorten(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t idx, const struct chunk_rec *cr, size_t len) {
        if (len >= cr->len)
                return 0;
        if (cr->inl)
                return inline_rec_put(st, wsid, ino, idx, cr->inl, len, NULL, 0, 0);
        return slot_rec_put(st, wsid, ino, idx, cr->slot, len);
}

void wsdata_leave(ntfs_store *st) {
        while (st->noldmaps) {
                struct wsdata_oldmap *m = &st->oldmaps[--st->noldmaps];
                munmap(m->addr, m->len);
        }
}

int chunks_drop(ntfs_store *st, uint64_t wsid, uint64_t ino, uint64_t from) {
        /* The file is opened (and its slots learnt) before the first slot
         * record goes: a scan after the deletes would hand the freed slots
         * out again while their frees are still queued. Inline records need
         * no file, so a file with none is not looked for. */
        bool opened = false;
        int r = 0;
        uint8_t k0[24];
        chunk_key(k0, wsid, ino, from);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->chunk, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val k = { 24, k0 }, v;
        /* after a deletion the cursor stands on the record that followed:
         * MDB_NEXT returns it without a second descent (LMDB's C_DEL) */
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size == 24 && memcmp(k.mv_data, k0, 16) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                struct chunk_rec cr;
                if ((r = decode_rec(&v, &cr)) < 0)
                        break;
                if (!cr.inl) {
                        if (!opened) {
                                struct wsdata *w;
                                r = wsdata_get(st, wsid, false, &w);
                                if (r == -ENOENT)
                                        r = 0; /* no file: no slot can be handed out (fsck reports the record) */
                                if (r < 0)
                                        break;
                                opened = true;
                        }
                        if ((r = queue_job(st, wsid, cr.slot, slot_blocks(cr.len))) < 0)
                                break;
                }
                if ((rc = mdb_cursor_del(cur, 0)) != 0)
                        break;
        }
        mdb_cursor_close(cur);
        if (r == 0 && rc && rc != MDB_NOTFOUND)
                r = lmdb_err(rc);
        if (r < 0)
                st->txn_broken = true;
        return r;
}

int wsdata_retire(ntfs_store *st, uint64_t wsid) { return queue_job(st, wsid, UINT64_MAX, 0); }

/* What a commit must sync first: every write for a durable one, only the
 * fresh ones otherwise (rule 1). */
static bool needs_sync(const struct wsdata *w, bool durable) { return durable ? w->dirty : w->fresh; }

size_t wsdata_unsynced(ntfs_store *st) {
        size_t n = 0;
        for (size_t i = 0; i < st->nwsd; i++)
                n += needs_sync(&st->wsd[i], false);
        return n;
}

int wsdata_presync(ntfs_store *st, bool durable) {
        int r0 = wsw_drain(st); /* the sync covers every write made */
        if (r0 < 0)
                return r0;
        for (size_t i = 0; i < st->nwsd; i++) {
                struct wsdata *w = &st->wsd[i];
                if (!needs_sync(w, durable))
                        continue;
                int r = NTFS_FAULT("wsdata.sync");
                if (r == 0 && fdatasync(w->fd) < 0)
                        r = -errno;
                if (r < 0)
                        return r;
                w->dirty = w->fresh = false;
                w->pf_ready = w->npf;
        }
        if (!st->flusher_running)
                wsdata_prefault(st, false); /* no flusher to do it later (tests) */
        return 0;
}

#define PRESYNC_MAX 16
void wsdata_presync_unlocked(ntfs_store *st, bool durable) {
        /* the writes queued until now are what the sync must cover: written
         * (by the writer or by this thread) with the lock released too */
        uint64_t mark = wsw_mark(st);
        int fds[PRESYNC_MAX];
        uint64_t ids[PRESYNC_MAX], wgens[PRESYNC_MAX], fgens[PRESYNC_MAX];
        uint64_t pfgens[PRESYNC_MAX], pfa[PRESYNC_MAX], pfb[PRESYNC_MAX];
        uint32_t npfs[PRESYNC_MAX];
        size_t n = 0;
        for (size_t i = 0; i < st->nwsd && n < PRESYNC_MAX; i++) {
                struct wsdata *w = &st->wsd[i];
                if (!needs_sync(w, durable) || (fds[n] = fcntl(w->fd, F_DUPFD_CLOEXEC, 0)) < 0)
                        continue;
                ids[n] = w->wsid;
                wgens[n] = w->wgen;
                pfgens[n] = w->pf_gen;
                npfs[n] = w->npf;
                pfa[n] = w->npf ? w->pf[w->npf - 1].a : 0;
                pfb[n] = w->npf ? w->pf[w->npf - 1].b : 0;
                fgens[n++] = w->fgen;
        }
        if (!n)
                return;
        pthread_mutex_unlock(&st->lock);
        /* (a test holds this window open with a sleep, or fails the sync) */
        bool written = NTFS_FAULT("wsdata.sync.unlocked") == 0 && wsw_wait_mark(st, mark) == 0;
        bool ok[PRESYNC_MAX];
        for (size_t k = 0; k < n; k++) {
                ok[k] = written && fdatasync(fds[k]) == 0;
                close(fds[k]);
        }
        store_lock(st);
        for (size_t k = 0; k < n; k++)
                for (size_t i = 0; ok[k] && i < st->nwsd; i++) {
                        struct wsdata *w = &st->wsd[i];
                        if (w->wsid != ids[k])
                                continue;
                        /* what was written before the sync is on the disk */
                        if (w->wgen == wgens[k])
                                w->dirty = false;
                        if (w->fgen == fgens[k])
                                w->fresh = false;
                        if (w->pf_gen == pfgens[k] && npfs[k] <= w->npf)
                                pf_synced(w, npfs[k], pfa[k], pfb[k]);
                }
}

static void drop_entry(ntfs_store *st, size_t i) {
        (void)wsw_drain(st); /* no queued write to the fd about to close */
        free(st->wsd[i].free);
        free(st->wsd[i].pf);
        if (st->wsd[i].map)
                munmap(st->wsd[i].map, st->wsd[i].map_resv);
        close(st->wsd[i].fd);
        st->wsd[i] = st->wsd[--st->nwsd];
}

/* Free slots are a pool kept for reuse: a write takes one before the data
 * file grows, and its blocks are still allocated, so neither a punch nor a
 * new allocation is paid for it. Their space goes back to the file system
 * (wsdata_trim) once the store has stood still for TRIM_IDLE_MS (an agent
 * waiting on its model, a command done), at once when a working state has
 * freed POOL_MAX_BYTES since its last punch, and at once when the disk is
 * low: less than POOL_LOW_DISK free, or less than four times the pool.
 * Hole punches wait for the disk's discard on this machine: done in the
 * store lock, one per freed slot, they made an rm -rf of 20,000 files 2.5x
 * slower; done by the flusher while the rm -rf ran, they were still ~5%
 * of the daemon's samples, and punched at the first quiet moment they
 * slowed the next command instead (docs/store.md 4.8, "Free slots are a
 * pool"). */
#define TRIM_IDLE_MS 2000
#define POOL_MAX_BYTES ((uint64_t)1 << 30)
#define POOL_LOW_DISK ((uint64_t)1 << 30)

void wsdata_committed(ntfs_store *st) {
        for (size_t j = 0; j < st->njobs; j++) {
                struct wsdata_job *job = &st->jobs[j];
                size_t i;
                struct wsdata *w = find_entry(st, job->wsid, &i);
                if (job->slot == UINT64_MAX) {
                        if (w && !w->trimming)
                                drop_entry(st, i);
                        else if (w)
                                w->retired = true; /* the trim drops it */
                        char path[PATH_MAX];
                        if (data_path(st, job->wsid, path, sizeof path) == 0 && unlink(path) < 0 &&
                            errno != ENOENT)
                                log_warn("store: cannot remove %s: %s", path, strerror(errno));
                        continue;
                }
                if (!w || w->retired)
                        continue; /* no entry cannot happen: a slot's file is opened to free it */
                if (w->live)
                        w->live--;
                /* reusable from now on: the batch that freed it has committed */
                (void)pool_push(w, job->slot, 1, job->bytes);
        }
        st->njobs = 0;
        st->ntaken = 0;
}

static uint64_t pool_of(const struct wsdata *w) {
        if (w->retired)
                return 0;
        return NTFS_MIN(w->unpunched_bytes, NTFS_MIN(w->unpunched, w->free_slots) * SLOT_BYTES);
}

uint64_t wsdata_pool_bytes(ntfs_store *st, uint64_t wsid) {
        uint64_t sum = 0;
        for (size_t i = 0; i < st->nwsd; i++)
                if (wsid == UINT64_MAX || st->wsd[i].wsid == wsid)
                        sum += pool_of(&st->wsd[i]);
        return sum;
}

/* Whether the disk is too full to keep the pool (looked at once a second,
 * and whenever a write found space low). */
static bool pool_low(ntfs_store *st, uint64_t pool, int64_t now) {
        if (st->low_space)
                return st->pool_low = true;
        if (now - st->pool_checked < 1000000000LL)
                return st->pool_low;
        st->pool_checked = now;
        struct statvfs sv;
        if (statvfs(st->dir, &sv) < 0)
                return st->pool_low = true; /* cannot tell: give it back */
        uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        return st->pool_low = avail < POOL_LOW_DISK || avail / 4 < pool;
}

void wsdata_trim(ntfs_store *st) {
        int64_t now = ntfs_mono_ns();
        unsigned seen = atomic_load_explicit(&st->changes, memory_order_relaxed);
        if (seen != st->changes_seen) {
                st->changes_seen = seen;
                st->changes_at = now;
        }
        uint64_t pool = wsdata_pool_bytes(st, UINT64_MAX);
        if (!pool)
                return;
        bool idle = now - st->changes_at >= TRIM_IDLE_MS * 1000000LL;
        bool low = pool_low(st, pool, now);
        for (size_t i = 0; i < st->nwsd; i++) {
                struct wsdata *w = &st->wsd[i];
                if (w->trimming || !pool_of(w))
                        continue;
                bool at_once = low || w->unpunched_bytes >= POOL_MAX_BYTES;
                if (!at_once && !idle)
                        continue;
                int fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0)
                        return;
                /* The ranges leave the free list while they are punched, so
                 * no write can take one of them meanwhile. */
                struct slot_range *r = w->free;
                size_t n = w->nfree;
                uint64_t wsid = w->wsid, bytes = w->unpunched_bytes, left;
                w->free = NULL;
                w->nfree = w->free_cap = 0;
                w->free_slots = 0;
                w->unpunched = w->unpunched_bytes = 0;
                w->trimming = true;
                pthread_mutex_unlock(&st->lock);
                /* an idle trim yields to the first change: what it did not
                 * punch waits for the next pause */
                n = punch_ranges(fd, r, n, at_once ? NULL : &st->changes, seen, &left);
                close(fd);
                store_lock(st);
                w = find_entry(st, wsid, &i);
                if (w) {
                        w->trimming = false;
                        w->unpunched += left;
                        w->unpunched_bytes += NTFS_MIN(bytes, left * SLOT_BYTES);
                        /* lowest last: it is taken first */
                        for (size_t k = n; k-- > 0 && !w->retired;)
                                if (free_push(w, r[k].start, r[k].count) < 0)
                                        break; /* lost until the next scan */
                        if (w->retired)
                                drop_entry(st, i);
                }
                free(r);
                return; /* one per call: the entries may have changed meanwhile */
        }
}

void wsdata_aborted(ntfs_store *st) {
        /* The slots the batch freed stay named by the committed records; the
         * ones it took were free when it took them, and no record names them
         * now: they are free again (once no queued write is left to land in
         * one). */
        wsw_batch_gone(st);
        st->njobs = 0;
        for (size_t j = 0; j < st->ntaken; j++)
                slot_give_back(st, st->taken[j].wsid, st->taken[j].slot);
        st->ntaken = 0;
}

void wsdata_close_all(ntfs_store *st) {
        wsdata_leave(st);
        /* the pool's blocks go back to the file system before the files
         * close: a working state not opened again would keep them */
        (void)wsw_drain(st); /* no queued write lands in a slot being punched */
        for (size_t i = 0; i < st->nwsd; i++) {
                struct wsdata *w = &st->wsd[i];
                uint64_t left;
                if (pool_of(w) && !w->trimming) {
                        punch_ranges(w->fd, w->free, w->nfree, NULL, 0, &left);
                        w->nfree = 0;
                        w->free_slots = 0;
                }
        }
        while (st->nwsd)
                drop_entry(st, st->nwsd - 1);
        free(st->wsd);
        free(st->jobs);
        free(st->taken);
        st->wsd = NULL;
        st->jobs = NULL;
        st->taken = NULL;
        st->wsd_cap = st->jobs_cap = st->taken_cap = 0;
        st->njobs = st->ntaken = 0;
}

uint64_t wsdata_disk_bytes(ntfs_store *st) {
        char path[PATH_MAX];
        if (data_path(st, UINT64_MAX, path, sizeof path) < 0)
                return 0;
        DIR *d = opendir(path);
        if (!d)
                return 0; /* no data file yet (ENOENT), or unreadable: counts nothing */
        uint64_t sum = 0;
        struct dirent *de;
        struct stat sb;
        while ((de = readdir(d)))
                if (strlen(de->d_name) == 16 && fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(sb.st_mode)) /* data files, not the queue's reserve */
                        sum += (uint64_t)sb.st_blocks * 512;
        closedir(d);
        return sum;
}

int wsdata_sweep(ntfs_store *st) {
        char path[PATH_MAX];
        int r = data_path(st, UINT64_MAX, path, sizeof path);
        if (r < 0)
                return r;
        DIR *d = opendir(path);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end;
                if (strlen(de->d_name) != 16)
                        continue;
                errno = 0;
                uint64_t wsid = strtoull(de->d_name, &end, 16);
                if (errno || *end)
                        continue;
                /* a file whose working state names no chunk holds nothing */
                uint8_t k0[8];
                ntfs_put_be64(k0, wsid);
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->chunk, &cur);
                if (rc) {
                        r = lmdb_err(rc);
                        break;
                }
                MDB_val k = { 8, k0 }, v;
                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                bool used = rc == 0 && k.mv_size == 24 && memcmp(k.mv_data, k0, 8) == 0;
                mdb_cursor_close(cur);
                if (!used && unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
                        r = -errno;
                        break;
                }
        }
        closedir(d);
        return r;
}

/* fsck of one working state's slot records: slots are distinct and inside
 * the data file. */
static uint64_t check_ws(ntfs_store *st, uint64_t wsid, uint64_t *slots, size_t n, uint64_t end,
                         void (*cb)(const char *, void *), void *ud) {
        char line[160];
        uint64_t problems = 0;
        struct wsdata *w;
        int r = wsdata_get(st, wsid, false, &w);
        struct stat sb;
        if (r == 0 && fstat(w->fd, &sb) < 0)
                r = -errno;
        if (r < 0) {
                snprintf(line, sizeof line, "working state %016" PRIx64 ": %zu chunks but no data file: %s", wsid,
                         n, ntfs_strerror(r));
                if (cb)
                        cb(line, ud);
                return 1;
        }
        if (end > (uint64_t)sb.st_size) {
                problems++;
                snprintf(line, sizeof line, "working state %016" PRIx64 ": chunks end at byte %" PRIu64
                         ", past the data file's %" PRIu64, wsid, end, (uint64_t)sb.st_size);
                if (cb)
                        cb(line, ud);
        }
        qsort(slots, n, sizeof *slots, cmp_u64);
        for (size_t i = 1; i < n; i++) {
                if (slots[i] != slots[i - 1])
                        continue;
                problems++;
                snprintf(line, sizeof line, "working state %016" PRIx64 ": slot %" PRIu64 " named by two chunks",
                         wsid, slots[i]);
                if (cb)
                        cb(line, ud);
        }
        return problems;
}

int wsdata_check(ntfs_store *st, void (*cb)(const char *problem, void *), void *ud, uint64_t *ret_problems) {
        (void)wsw_drain(st); /* the files' sizes as they will be */
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->chunk, &cur);
        if (rc)
                return lmdb_err(rc);
        _cleanup_free_ uint64_t *slots = NULL;
        size_t n = 0, cap = 0;
        uint64_t wsid = 0, problems = 0, wend = 0;
        int r = 0;
        MDB_val k, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                bool end = rc != 0;
                uint64_t kw = !end && k.mv_size == 24 ? ntfs_get_be64(k.mv_data) : 0;
                if (n && (end || kw != wsid)) {
                        problems += check_ws(st, wsid, slots, n, wend, cb, ud);
                        n = 0;
                        wend = 0;
                }
                if (end)
                        break;
                struct chunk_rec cr;
                if (k.mv_size != 24 || decode_rec(&v, &cr) < 0) {
                        problems++;
                        if (cb)
                                cb("a chunk record with a bad key or value", ud);
                        continue;
                }
                wsid = kw;
                if (cr.inl)
                        continue; /* decoded, so its bytes are all there */
                if ((r = NTFS_ROOM_FOR(slots, cap, n)) < 0)
                        break;
                slots[n++] = cr.slot;
                wend = NTFS_MAX(wend, cr.slot * SLOT_BYTES + cr.len);
        }
        mdb_cursor_close(cur);
        if (r == 0 && rc && rc != MDB_NOTFOUND)
                r = lmdb_err(rc);
        *ret_problems = problems;
        return r;
}
