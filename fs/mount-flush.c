/* SPDX-License-Identifier: MIT
 * mount-flush.c — waiting for the write-back of a FUSE mount's shared
 * mappings (mount-flush.h).
 *
 * Why: with the writeback cache off (docs/mount.md) a write(2) is in the
 * store before it returns, so the only bytes the kernel can hold back are
 * pages dirtied through a MAP_SHARED mapping. syncfs(2) starts their
 * write-back, but on FUSE it does not wait for it: wait_sb_inodes() skips
 * FUSE's mappings (AS_NO_DATA_INTEGRITY, Linux 6.19 and stable 6.18.y), and
 * FUSE's own sync_fs waits only on virtiofs. A checkpoint taken right after
 * it could miss, or hold half of, pages written before it was asked for
 * (issue 61; tests/integration/test_snapshot_consistency.py). Where the
 * pages are: a dirty page of a FUSE file has a live shared mapping, since
 * closing one (munmap, exit) writes the file's pages back and waits
 * (fuse_vma_close). So every process's /proc/PID/maps is read, and each
 * file of this mount mapped shared is opened through map_files and
 * synced: sync_file_range with WAIT_BEFORE | WRITE | WAIT_AFTER writes
 * what is dirty and waits for the page-writeback bit, which FUSE holds
 * until the daemon answers the WRITE (since Linux 6.14; before, FUSE ended
 * write-back at once on a temporary copy and only fsync waited). syncfs
 * may not even write every dirty page (its WB_SYNC_NONE pass skips one
 * still under an earlier write-back), so "no request in flight" after it
 * (fusectl's waiting count) is no sign that all was written: tried, and a
 * snapshot then missed a mapped store. Reading every process's maps costs
 * milliseconds: 3-10 ms for 130 processes on this busy 2-core machine.
 *
 * Runs in the helper child of mount.c (a fork of a threaded process):
 * system calls and stack buffers only.
 */
#include "fs/mount-flush.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/util.h"
#include "common/banned.h"

#define MAPS_BUF 65536
#define SEEN_MAX 128

struct seen {
        ino_t ino[SEEN_MAX];
        unsigned n;
};

static bool seen_add(struct seen *s, ino_t ino) {
        for (unsigned i = 0; i < s->n; i++)
                if (s->ino[i] == ino)
                        return false;
        if (s->n < SEEN_MAX)
                s->ino[s->n++] = ino;
        return true;
}

static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* Parses hex digits at *p up to a character that is not one. */
static bool parse_hex(const char **p, const char *end, uint64_t *ret) {
        uint64_t v = 0;
        const char *q = *p;
        int d;
        while (q < end && (d = hexval(*q)) >= 0) {
                v = (v << 4) | (uint64_t)d;
                q++;
        }
        if (q == *p)
                return false;
        *p = q;
        *ret = v;
        return true;
}

static char *put_str(char *p, const char *end, const char *s) {
        while (*s && p < end)
                *p++ = *s++;
        return p;
}

static char *put_hex(char *p, const char *end, uint64_t v) {
        char tmp[16];
        int n = 0;
        do {
                tmp[n++] = "0123456789abcdef"[v & 15];
                v >>= 4;
        } while (v);
        while (n && p < end)
                *p++ = tmp[--n];
        return p;
}

/* One line of /proc/PID/maps: "START-END PERMS OFFSET MAJ:MIN INODE PATH".
 * A shared mapping of a file on dev: its file is synced (once per inode). */
static void map_line(const char *pid, const char *l, const char *end, dev_t dev, struct seen *seen, int *count) {
        uint64_t start, stop, off, maj, min;
        const char *p = l;
        if (!parse_hex(&p, end, &start) || p >= end || *p++ != '-' || !parse_hex(&p, end, &stop))
                return;
        if (end - p < 6 || p[0] != ' ' || p[4] != 's') /* " rw-s": shared */
                return;
        p += 6;
        if (!parse_hex(&p, end, &off) || p >= end || *p++ != ' ' || !parse_hex(&p, end, &maj) || p >= end ||
            *p++ != ':' || !parse_hex(&p, end, &min))
                return;
        if (makedev((unsigned)maj, (unsigned)min) != dev)
                return;
        char path[96];
        char *w = path, *wend = path + sizeof path - 1;
        w = put_str(w, wend, "/proc/");
        w = put_str(w, wend, pid);
        w = put_str(w, wend, "/map_files/");
        w = put_hex(w, wend, start);
        w = put_str(w, wend, "-");
        w = put_hex(w, wend, stop);
        if (w >= wend)
                return;
        *w = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return; /* gone, or not ours to open */
        struct stat st;
        if (fstat(fd, &st) == 0 && st.st_dev == dev && S_ISREG(st.st_mode) && seen_add(seen, st.st_ino)) {
                int r;
                do
                        r = sync_file_range(fd, 0, 0,
                                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                                    SYNC_FILE_RANGE_WAIT_AFTER);
                while (r < 0 && errno == EINTR);
                (*count)++;
        }
        close(fd);
}

static void scan_pid(const char *pid, dev_t dev, struct seen *seen, int *count) {
        char path[64] = "";
        char *w = put_str(path, path + sizeof path - 1, "/proc/");
        w = put_str(w, path + sizeof path - 1, pid);
        w = put_str(w, path + sizeof path - 1, "/maps");
        *w = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        char buf[MAPS_BUF];
        size_t have = 0;
        for (;;) {
                ssize_t n = read(fd, buf + have, sizeof buf - have);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                have += (size_t)n;
                size_t at = 0;
                char *nl;
                while ((nl = memchr(buf + at, '\n', have - at))) {
                        map_line(pid, buf + at, nl, dev, seen, count);
                        at = (size_t)(nl - buf) + 1;
                }
                if (at == 0 && have == sizeof buf) /* a line longer than the buffer: skip it */
                        have = 0;
                else {
                        memmove(buf, buf + at, have - at);
                        have -= at;
                }
        }
        close(fd);
}

int mount_flush_mapped(dev_t dev) {
        int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        struct seen seen = { .n = 0 };
        int count = 0;
        char buf[16384];
        for (;;) {
                long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                for (long at = 0; at < n;) {
                        /* struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name */
                        unsigned short reclen;
                        memcpy(&reclen, buf + at + 16, sizeof reclen);
                        const char *name = buf + at + 19;
                        if (name[0] >= '1' && name[0] <= '9')
                                scan_pid(name, dev, &seen, &count);
                        at += reclen;
                }
        }
        close(dfd);
        return count;
}

/* ---- write(2)s split into several WRITE requests (mount-flush.h) ---------- */

int mount_probe_inodes(int mntfd, const uint64_t *ino, unsigned n, uint32_t gen, uint64_t *ret_stale, int *fds) {
        uint64_t stale = 0;
        for (unsigned i = 0; i < MOUNT_PROBE_MAX; i++)
                fds[i] = -1;
        for (unsigned i = 0; i < n && i < MOUNT_PROBE_MAX; i++) {
                /* FUSE's file handle (fuse_encode_fh): FILEID_INO64_GEN, the
                 * node id's two halves and the generation. Decoded without
                 * export support for an inode the kernel has in its cache,
                 * which a writer's inode is; ESTALE otherwise. */
                struct {
                        struct file_handle fh;
                        uint32_t raw[3];
                } h;
                h.fh.handle_bytes = sizeof h.raw;
                h.fh.handle_type = 0x81;
                h.raw[0] = (uint32_t)(ino[i] >> 32);
                h.raw[1] = (uint32_t)ino[i];
                h.raw[2] = gen;
                int fd = open_by_handle_at(mntfd, &h.fh, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
                if (fd < 0) {
                        stale |= 1ull << i;
                        continue;
                }
                /* A write of nothing takes the inode's lock and returns (no
                 * request): it waits for the write(2) that holds it. */
                ssize_t r;
                do
                        r = pwrite(fd, "", 0, 0);
                while (r < 0 && errno == EINTR);
                if (r < 0)
                        stale |= 1ull << i;
                fds[i] = fd; /* closed by the caller after its answer (see the header) */
        }
        *ret_stale = stale;
        return 0;
}

#define WSEQ_SLOTS 64
#define WSEQ_PAGE 4096

struct mount_wseq {
        pthread_rwlock_t apply; /* shared: a WRITE being applied; exclusive: a hold */
        pthread_mutex_t mu;     /* guards the slots */
        bool kept;              /* a probe of the current hold left files open */
        atomic_uint wb_pending; /* page write-backs arrived and not yet applied */
        struct {
                uint64_t ino;
                int64_t at; /* ntfs_mono_ns of its last WRITE, 0: slot free */
        } open[WSEQ_SLOTS];
};

struct mount_wseq *mount_wseq_new(void) {
        struct mount_wseq *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        pthread_rwlockattr_t a;
        pthread_rwlockattr_init(&a);
        /* A hold must not wait behind an endless stream of WRITEs. */
        pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        int r = pthread_rwlock_init(&s->apply, &a);
        pthread_rwlockattr_destroy(&a);
        if (r != 0) {
                free(s);
                return NULL;
        }
        pthread_mutex_init(&s->mu, NULL);
        return s;
}

void mount_wseq_free(struct mount_wseq *s) {
        if (!s)
                return;
        pthread_rwlock_destroy(&s->apply);
        pthread_mutex_destroy(&s->mu);
        free(s);
}

void mount_wseq_enter(struct mount_wseq *s) { pthread_rwlock_rdlock(&s->apply); }

static void wseq_note(struct mount_wseq *s, uint64_t ino, bool open) {
        pthread_mutex_lock(&s->mu);
        int slot = -1, oldest = 0;
        for (int i = 0; i < WSEQ_SLOTS; i++) {
                if (s->open[i].at && s->open[i].ino == ino) {
                        slot = i;
                        break;
                }
                if (s->open[i].at < s->open[oldest].at)
                        oldest = i;
        }
        if (open) {
                if (slot < 0)
                        slot = oldest; /* a free slot (at 0), or the one written longest ago */
                s->open[slot].ino = ino;
                s->open[slot].at = ntfs_mono_ns();
        } else if (slot >= 0) {
                s->open[slot].at = 0;
        }
        pthread_mutex_unlock(&s->mu);
}

void mount_wseq_leave(struct mount_wseq *s, uint64_t ino, uint64_t end, bool applied, bool writeback) {
        wseq_note(s, ino, writeback || (applied && end % WSEQ_PAGE == 0));
        pthread_rwlock_unlock(&s->apply);
}

void mount_wseq_lock(struct mount_wseq *s) { pthread_rwlock_wrlock(&s->apply); }

void mount_wseq_unlock(struct mount_wseq *s) { pthread_rwlock_unlock(&s->apply); }

unsigned mount_wseq_open(struct mount_wseq *s, uint64_t *ino, int64_t *at, unsigned max) {
        unsigned n = 0;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WSEQ_SLOTS && n < max; i++)
                if (s->open[i].at) {
                        ino[n] = s->open[i].ino;
                        at[n++] = s->open[i].at;
                }
        pthread_mutex_unlock(&s->mu);
        return n;
}

void mount_wseq_close(struct mount_wseq *s, uint64_t ino) {
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WSEQ_SLOTS; i++)
                if (s->open[i].at && s->open[i].ino == ino)
                        s->open[i].at = 0;
        pthread_mutex_unlock(&s->mu);
}

void mount_wseq_wb_begin(struct mount_wseq *s) { atomic_fetch_add(&s->wb_pending, 1); }

void mount_wseq_wb_end(struct mount_wseq *s) { atomic_fetch_sub(&s->wb_pending, 1); }

unsigned mount_wseq_wb_pending(struct mount_wseq *s) { return atomic_load(&s->wb_pending); }

void mount_wseq_set_kept(struct mount_wseq *s, bool kept) { s->kept = kept; }

bool mount_wseq_kept(const struct mount_wseq *s) { return s->kept; }
