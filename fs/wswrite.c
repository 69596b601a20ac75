/* SPDX-License-Identifier: MIT
 * wswrite.c — working data file writes queued and merged.
 *
 * A FUSE WRITE used to end in a pwrite into the working data file, under
 * the store lock, before its reply. On this kind of machine that pwrite is
 * most of the request: a new page-cache page and ext4's delayed allocation
 * for every block cost 6-8 us per 10 KiB, against under 1 us to copy the
 * bytes into memory that is already mapped (docs/store.md, "Writes off the
 * request path"). So the bytes are copied into a ring that was faulted in
 * at open and the write is queued; the queue is written in order, adjacent
 * writes as one pwritev, by the next request (merge) or a writer thread
 * (thread), below. A thread that has to wait for the queue (a read, a
 * commit, a full ring) writes the waiting batches itself instead of waking
 * the writer and waiting.
 *
 * What keeps this correct (the callers are in wsdata.c; the store lock is
 * held for every call here but wsw_wait_mark's):
 *
 *  - Order. Every data file write goes through the queue while it is on,
 *    and the queue is written first in, first out. A write that cannot be
 *    queued (too big, space low, the queue off) is made by the caller only
 *    after the queue is empty (wsw_queue returns 0 then).
 *  - Readers see every queued byte. A read maps the data file; before
 *    wsdata_map hands out a chunk it waits for the queued writes into the
 *    chunk and those before them (wsw_drain_range), so no page is read
 *    before its write is in the page cache, and none past the file's end.
 *  - Rule 1 of wsdata.c (bytes before the batch that names them): the
 *    commit's presync drains the queue before it syncs; the unlocked
 *    presync notes how many writes were queued (wsw_mark) and waits for
 *    those (wsw_wait_mark) before its sync, which is then what it notes as
 *    synced.
 *  - A failed queued write: its bytes are not in the file, but a record of
 *    the open batch may name them. The error is kept, every drain returns
 *    it and marks the batch broken, so the batch is aborted (with the
 *    records) instead of committed; the abort clears it. That is what a
 *    failed fdatasync of the data files already did.
 *  - A full disk. The queue holds at most WSW_RING_BYTES, and is used only
 *    while the store's free-disk check is not low, which keeps 8 MiB beyond
 *    the store's reserve. Something else can still fill the disk between
 *    two checks, so a reserve file of WSW_RESERVE_BYTES is kept allocated
 *    while the queue is on: a queued write that meets ENOSPC gives the
 *    reserve back and writes again, and the queue stays off (writes get
 *    their ENOSPC themselves, as before) until the reserve can be taken
 *    again.
 *
 * What changes for a crash: a write that returned and was still queued
 * dies with the process. Its batch dies with it (a commit drains the queue
 * first), so what a restart shows is the last committed batch, as before;
 * only an overwrite in place that came after that batch, which a kill -9
 * used to leave in the page cache, may now be lost with the batch instead
 * (docs/store.md, 4.8). fsync is unchanged: a durable commit drains.
 *
 * Two ways to write the queue (ntfs_store_opts.data_writes, or
 * NTFS_DATA_WRITES in the environment):
 *
 *  - merge, the default: no writer thread. A write of up to WSW_MERGE_JOB
 *    bytes is queued; the request whose write does not continue the last
 *    queued one (another file, another place) first writes the queue, each
 *    run of adjacent writes as one pwritev. tar writes a file in pieces of
 *    a few KiB, and ext4's cost is per call and per page touched: one call
 *    per file instead of four took 6% off the daemon's CPU time in an
 *    untar, 4% off its time (docs/store.md 4.8). The queue holds at most
 *    one run, so a read of queued bytes waits for little.
 *  - thread: a writer thread writes the queue as it fills. Measured on
 *    this kind of machine, it took up to a fifth off an untar on a fresh
 *    mount but mostly under 8% in the benchmark's sequence, and added
 *    5-24% to the make -j2 that runs there after the untar and git
 *    (docs/store.md 4.8 and docs/bench-fs.md, "Writes off the request
 *    path"). With no idle CPU, work moved off the request only competes
 *    with the program that no longer waits for it, and a read of bytes
 *    still queued pays for them under the store lock.
 *
 * sync makes every write in its own request, with no queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/store-internal.h"
#include "common/banned.h"

#define WSW_RING_BYTES (4u << 20)
#define WSW_RESERVE_BYTES (8u << 20)
#define WSW_JOBS 4096
#define WSW_BATCH_IOV 64
#define WSW_BATCH_BYTES (1u << 20)
/* An idle writer with an empty queue is woken by the next write; one that
 * emptied the queue a moment ago looks again after this long instead, so
 * that a stream of small writes costs one wake-up per interval and not one
 * futex call per write. (Whoever needs the queue empty sooner writes it.) */
#define WSW_LINGER_NS (1000 * 1000)
/* merge: bigger writes are made at once, and a run stops at WSW_MERGE_RUN */
#define WSW_MERGE_JOB (32u << 10)
#define WSW_MERGE_RUN (128u << 10)
/* How often a spent reserve is tried again (while the disk is not low). */
#define WSW_RETAKE_NS (1000ll * 1000 * 1000)

struct wsw_job {
        int fd;
        uint64_t pos;
        uint32_t len;
        uint32_t rspace; /* ring bytes it holds, the skipped end of the ring included */
        uint32_t roff;   /* where its bytes are in the ring */
        bool zeros;      /* write zeros (no ring bytes) */
};

enum wsw_idle { WSW_BUSY, WSW_LINGER, WSW_SLEEP };

struct wsw {
        pthread_mutex_t mu;
        pthread_cond_t work; /* the writer waits for jobs */
        pthread_cond_t done; /* drains and a full ring wait for the writer */
        pthread_t thread;
        bool stop;
        enum wsw_idle idle;
        bool writing; /* a batch is being written (by the writer or a waiting thread) */
        uint8_t *ring;
        uint32_t tail;  /* where the next job's bytes go */
        uint32_t used;  /* ring bytes held by queued jobs */
        uint32_t bytes; /* bytes the queued jobs write, zeros too: at most WSW_RING_BYTES */
        struct wsw_job jobs[WSW_JOBS];
        uint32_t jhead, jcount; /* queued jobs, the writer's current batch included */
        int err;                /* the first failure of a queued write; cleared by wsw_batch_gone */
        int reserve_fd;
        bool reserve_held;
        int64_t reserve_tried;             /* mono ns */
        uint64_t queued, written, batches; /* counters (tests, the stats) */
        bool merge; /* no writer thread: see WSW_MERGE_RUN */
};

static void *writer_main(void *arg);
static void wait_empty(struct wsw *q);

/* mu held: allocates the reserve file (created at the first try, so that
 * a store whose files all stay inline has none). */
static int reserve_take(ntfs_store *st, struct wsw *q) {
        q->reserve_tried = ntfs_mono_ns();
        if (q->reserve_fd < 0) {
                char path[PATH_MAX];
                if (snprintf(path, sizeof path, "%s/wsdata", st->dir) >= (int)sizeof path)
                        return -ENAMETOOLONG;
                if (mkdir(path, 0700) < 0 && errno != EEXIST)
                        return -errno;
                if (snprintf(path, sizeof path, "%s/wsdata/reserve", st->dir) >= (int)sizeof path)
                        return -ENAMETOOLONG;
                if ((q->reserve_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
                        return -errno;
        }
        if (fallocate(q->reserve_fd, 0, 0, WSW_RESERVE_BYTES) < 0) {
                int r = -errno;
                if (ftruncate(q->reserve_fd, 0) < 0) /* what a full disk let it take */
                        log_debug("store: emptying the queue's reserve: %s", strerror(errno));
                return r;
        }
        q->reserve_held = true;
        return 0;
}

/* Frees what wsw_open made, the thread stopped (or never started). */
static void wsw_free(struct wsw *q) {
        if (q->reserve_fd >= 0)
                close(q->reserve_fd); /* the file stays: the next open takes it again */
        munmap(q->ring, WSW_RING_BYTES);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->done);
        free(q);
}

/* NTFS_DATA_WRITES=sync|merge|thread overrides the store's option; the
 * older NTFS_ASYNC_DATA_WRITES=1 (thread) and =0 (sync) still count. */
static enum ntfs_data_writes mode_from_env(enum ntfs_data_writes mode) {
        static const char *const names[] = {
                [NTFS_DATA_WRITES_MERGE] = "merge",
                [NTFS_DATA_WRITES_SYNC] = "sync",
                [NTFS_DATA_WRITES_THREAD] = "thread",
        };
        const char *env = getenv("NTFS_DATA_WRITES");
        if (env && *env) {
                for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                        if (strcmp(env, names[i]) == 0)
                                return (enum ntfs_data_writes)i;
                log_warn("store: NTFS_DATA_WRITES=%s is none of sync, merge, thread: ignored", env);
                return mode;
        }
        env = getenv("NTFS_ASYNC_DATA_WRITES");
        if (env && *env)
                return strcmp(env, "0") != 0 ? NTFS_DATA_WRITES_THREAD : NTFS_DATA_WRITES_SYNC;
        return mode;
}

int wsw_open(ntfs_store *st, enum ntfs_data_writes mode) {
        st->wsw = NULL;
        mode = mode_from_env(mode);
        if (mode != NTFS_DATA_WRITES_MERGE && mode != NTFS_DATA_WRITES_THREAD)
                return 0;
        struct wsw *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->reserve_fd = -1;
        /* faulted in now: copying into it must not fault (MAP_POPULATE) */
        q->ring = mmap(NULL, WSW_RING_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (q->ring == MAP_FAILED) {
                int r = -errno;
                free(q);
                return r;
        }
        pthread_mutex_init(&q->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&q->work, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&q->done, NULL);
        q->idle = WSW_BUSY;
        q->merge = mode == NTFS_DATA_WRITES_MERGE;
        if (q->merge) {
                st->wsw = q;
                return 0;
        }
        if (pthread_create(&q->thread, NULL, writer_main, q) != 0) {
                wsw_free(q);
                return -EAGAIN;
        }
        st->wsw = q;
        return 0;
}

void wsw_close(ntfs_store *st) {
        struct wsw *q = st->wsw;
        if (!q)
                return;
        pthread_mutex_lock(&q->mu);
        q->stop = true;
        if (q->merge)
                wait_empty(q);
        pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->mu);
        if (!q->merge)
                pthread_join(q->thread, NULL); /* it writes what is queued first */
        if (q->err)
                log_error("store: a queued data file write failed: %s", ntfs_strerror(q->err));
        wsw_free(q);
        st->wsw = NULL;
}

static void write_batch(struct wsw *q);

/* mu held: until the jobs queued before the target-th (counted from the
 * start, wsw.queued) are in their files, writes batches itself, or waits
 * for the one being written. */
static void help_until(struct wsw *q, uint64_t target) {
        while (q->written < target) {
                if (q->writing)
                        pthread_cond_wait(&q->done, &q->mu);
                else
                        write_batch(q);
        }
}

/* mu held: until every queued write is in its file. */
static void wait_empty(struct wsw *q) {
        help_until(q, q->queued);
}

/* Room for a job of n bytes that takes need ring bytes. */
static bool has_room(const struct wsw *q, uint32_t need, uint32_t n) {
        return q->jcount < WSW_JOBS && need <= WSW_RING_BYTES - q->used && n <= WSW_RING_BYTES - q->bytes;
}

/* mu held: the kept error, which breaks the open batch (store lock held). */
static int report(ntfs_store *st, struct wsw *q) {
        if (q->err)
                st->txn_broken = true;
        return q->err;
}

int wsw_drain(ntfs_store *st) {
        struct wsw *q = st->wsw;
        if (!q)
                return 0;
        pthread_mutex_lock(&q->mu);
        wait_empty(q);
        int r = report(st, q);
        pthread_mutex_unlock(&q->mu);
        return r;
}

uint64_t wsw_mark(ntfs_store *st) {
        struct wsw *q = st->wsw;
        if (!q)
                return 0;
        pthread_mutex_lock(&q->mu);
        uint64_t mark = q->queued;
        pthread_mutex_unlock(&q->mu);
        return mark;
}

int wsw_wait_mark(ntfs_store *st, uint64_t mark) {
        struct wsw *q = st->wsw;
        if (!q)
                return 0;
        pthread_mutex_lock(&q->mu);
        help_until(q, mark);
        int r = q->err; /* reported (the batch broken) by the next drain in the lock */
        pthread_mutex_unlock(&q->mu);
        return r;
}

int wsw_drain_range(ntfs_store *st, int fd, uint64_t pos, uint64_t len) {
        struct wsw *q = st->wsw;
        if (!q)
                return 0;
        pthread_mutex_lock(&q->mu);
        /* the last queued job that writes into the range, and all before it */
        uint64_t target = 0;
        for (uint32_t i = q->jcount; i-- > 0;) {
                const struct wsw_job *j = &q->jobs[(q->jhead + i) % WSW_JOBS];
                if (j->fd == fd && j->pos < pos + len && pos < j->pos + j->len) {
                        target = q->written + i + 1;
                        break;
                }
        }
        help_until(q, target);
        int r = report(st, q);
        pthread_mutex_unlock(&q->mu);
        return r;
}

void wsw_batch_gone(ntfs_store *st) {
        struct wsw *q = st->wsw;
        if (!q)
                return;
        pthread_mutex_lock(&q->mu);
        wait_empty(q);
        q->err = 0; /* the records that named the lost bytes went with the batch */
        pthread_mutex_unlock(&q->mu);
}

int wsw_queue(ntfs_store *st, int fd, uint64_t pos, const void *buf, size_t len) {
        struct wsw *q = st->wsw;
        if (!q)
                return 0;
        pthread_mutex_lock(&q->mu);
        if (!q->reserve_held && !st->low_space &&
            (q->reserve_tried == 0 || ntfs_mono_ns() - q->reserve_tried > WSW_RETAKE_NS)) {
                bool again = q->reserve_tried != 0;
                int rr = reserve_take(st, q);
                if (rr < 0)
                        log_debug(
                                "store: no reserve for queued writes (%s): data file writes stay synchronous",
                                ntfs_strerror(rr));
                else if (again)
                        log_info("store: queued data file writes are on again");
        }
        bool big = q->merge && len > WSW_MERGE_JOB;
        if (q->err || !q->reserve_held || st->low_space || len > NTFS_CHUNK_SIZE || len == 0 || big) {
                /* the caller writes it, after everything queued */
                wait_empty(q);
                int r = report(st, q);
                pthread_mutex_unlock(&q->mu);
                return r < 0 ? r : 0;
        }
        if (q->merge) {
                /* a write that does not continue the last run: the run
                 * queued before it goes to its file now, as one pwritev.
                 * So the queue only ever holds that one run, and q->bytes
                 * is its length. */
                const struct wsw_job *last = q->jcount ? &q->jobs[(q->jhead + q->jcount - 1) % WSW_JOBS] : NULL;
                if (!last || last->fd != fd || last->pos + last->len != pos || q->bytes + len > WSW_MERGE_RUN) {
                        wait_empty(q);
                        int r = report(st, q);
                        if (r < 0) {
                                pthread_mutex_unlock(&q->mu);
                                return r;
                        }
                }
        }
        uint32_t n = (uint32_t)len, off = q->tail, skip = 0;
        if (buf && off + n > WSW_RING_BYTES) {
                skip = WSW_RING_BYTES - off; /* the bytes stay contiguous */
                off = 0;
        }
        uint32_t need = buf ? skip + n : 0;
        while (!has_room(q, need, n)) {
                if (q->writing) {
                        pthread_cond_wait(&q->done, &q->mu);
                        continue;
                }
                write_batch(q);
                if (q->jcount == 0) { /* everything written: the ring starts over */
                        off = 0;
                        need = buf ? n : 0;
                }
        }
        struct wsw_job *j = &q->jobs[(q->jhead + q->jcount) % WSW_JOBS];
        *j = (struct wsw_job){.fd = fd, .pos = pos, .len = n, .rspace = need, .roff = off, .zeros = !buf};
        if (buf) {
                memcpy(q->ring + off, buf, n);
                q->tail = (off + n) % WSW_RING_BYTES;
                q->used += need;
        }
        q->bytes += n;
        q->jcount++;
        q->queued++;
        if (q->idle == WSW_SLEEP)
                pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->mu);
        return 1;
}

void wsw_counters(ntfs_store *st, uint64_t *queued, uint64_t *written, uint64_t *batches) {
        struct wsw *q = st->wsw;
        *queued = *written = *batches = 0;
        if (!q)
                return;
        pthread_mutex_lock(&q->mu);
        *queued = q->queued;
        *written = q->written;
        *batches = q->batches;
        pthread_mutex_unlock(&q->mu);
}

int wsw_write_all(int fd, struct iovec *iov, int n, uint64_t pos, size_t total) {
        while (total) {
                ssize_t k = pwritev(fd, iov, n, (off_t)pos);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO;
                total -= (size_t)k;
                pos += (uint64_t)k;
                while (k > 0 && n > 0) {
                        if ((size_t)k >= iov->iov_len) {
                                k -= (ssize_t)iov->iov_len;
                                iov++;
                                n--;
                        } else {
                                iov->iov_base = (uint8_t *)iov->iov_base + k;
                                iov->iov_len -= (size_t)k;
                                k = 0;
                        }
                }
        }
        return 0;
}

/* mu held, no batch being written: writes the first queued job and the
 * ones that continue it (same file, adjacent), with mu released meanwhile,
 * and takes them off the queue. The writer thread calls it, and so does a
 * thread that has to wait for the queue (a drain, a full ring) when no
 * batch is being written: it does the work instead of waking the writer
 * and waiting for it. Only one batch is written at a time, so the queue is
 * written in order. */
static void write_batch(struct wsw *q) {
        static const uint8_t zeros[NTFS_CHUNK_SIZE];
        struct iovec iov[WSW_BATCH_IOV];
        const struct wsw_job *first = &q->jobs[q->jhead];
        int fd = first->fd;
        uint64_t pos = first->pos, end = pos;
        size_t total = 0;
        uint32_t k = 0;
        while (k < q->jcount && k < WSW_BATCH_IOV) {
                const struct wsw_job *j = &q->jobs[(q->jhead + k) % WSW_JOBS];
                if (k && (j->fd != fd || j->pos != end || total + j->len > WSW_BATCH_BYTES))
                        break;
                iov[k].iov_base = j->zeros ? (void *)zeros : q->ring + j->roff;
                iov[k].iov_len = j->len;
                total += j->len;
                end += j->len;
                k++;
        }
        q->writing = true;
        pthread_mutex_unlock(&q->mu);
        /* the jobs of the batch stay as they are: new ones go after them */
        int r = NTFS_FAULT("wsdata.queued_write");
        if (r == 0 && NTFS_FAULT("wsdata.queued_full") < 0)
                r = -ENOSPC; /* tests: as if the disk were full */
        if (r == 0)
                r = wsw_write_all(fd, iov, (int)k, pos, total);
        bool gave_reserve = false;
        if (r == -ENOSPC) {
                /* something else filled the disk since the last check:
                 * the reserve is for this */
                pthread_mutex_lock(&q->mu);
                if (q->reserve_held && ftruncate(q->reserve_fd, 0) == 0) {
                        q->reserve_held = false;
                        gave_reserve = true;
                }
                pthread_mutex_unlock(&q->mu);
                if (gave_reserve) {
                        for (uint32_t i = 0; i < k; i++) { /* iov was used up: again */
                                const struct wsw_job *j = &q->jobs[(q->jhead + i) % WSW_JOBS];
                                iov[i].iov_base = j->zeros ? (void *)zeros : q->ring + j->roff;
                                iov[i].iov_len = j->len;
                        }
                        r = wsw_write_all(fd, iov, (int)k, pos, total);
                }
        }
        pthread_mutex_lock(&q->mu);
        if (gave_reserve)
                log_warn("store: the disk filled up under queued writes; their reserve took them, and writes "
                         "are "
                         "synchronous until it can be held again");
        if (r < 0 && !q->err) {
                log_error("store: a queued data file write failed: %s", ntfs_strerror(r));
                q->err = r;
        }
        for (uint32_t i = 0; i < k; i++) {
                q->used -= q->jobs[q->jhead].rspace;
                q->bytes -= q->jobs[q->jhead].len;
                q->jhead = (q->jhead + 1) % WSW_JOBS;
        }
        q->jcount -= k;
        q->written += k;
        q->batches++;
        if (q->jcount == 0)
                q->tail = 0; /* nothing held: start the ring over */
        q->writing = false;
        pthread_cond_broadcast(&q->done);
}

static void *writer_main(void *arg) {
        struct wsw *q = arg;
        pthread_setname_np(pthread_self(), "ntfs-datawrite");
        bool lingered = false;
        pthread_mutex_lock(&q->mu);
        for (;;) {
                if (q->jcount && q->writing) { /* a waiting thread writes a batch */
                        pthread_cond_wait(&q->done, &q->mu);
                        continue;
                }
                if (q->jcount) {
                        lingered = false;
                        write_batch(q);
                        continue;
                }
                if (q->stop)
                        break;
                if (!lingered) {
                        /* linger: the next writes wake nobody */
                        q->idle = WSW_LINGER;
                        struct timespec ts;
                        clock_gettime(CLOCK_MONOTONIC, &ts);
                        int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + WSW_LINGER_NS;
                        ts.tv_sec = t / 1000000000;
                        ts.tv_nsec = t % 1000000000;
                        while (q->jcount == 0 && !q->stop &&
                               pthread_cond_timedwait(&q->work, &q->mu, &ts) == 0)
                                ;
                        lingered = true; /* nothing more: sleep next time */
                } else {
                        q->idle = WSW_SLEEP;
                        while (q->jcount == 0 && !q->stop)
                                pthread_cond_wait(&q->work, &q->mu);
                }
                q->idle = WSW_BUSY;
        }
        pthread_mutex_unlock(&q->mu);
        return NULL;
}
