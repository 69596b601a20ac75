/* SPDX-License-Identifier: MIT
 * fsx.c — the integrity exerciser (issue 12; docs/reliability.md), in the
 * spirit of fsx: random reads, writes at random offsets, truncates, holes,
 * mmap writes, creates, unlinks, renames and hard links on files in a mount
 * served by ntfsd, each checked against an in-memory model right after it.
 * Checkpoints, rollbacks (the model rolls back to its copy of that
 * checkpoint) and forks (a second model follows the fork's mount) are
 * interleaved at random, all through the control socket.
 *
 *   fsx -s SOCKET [-N OPS] [-S SEED] [-d DIR] [-T SECS] [-F MS] [-v] [-k] [-X OP]
 *
 * Every random choice comes from one generator seeded with SEED (printed
 * first), so a failure is reproduced by running again with -S SEED (and the
 * same -N or more). On a mismatch fsx prints the operation, the expected
 * and the found bytes, the last operations and exits 1; exit 0 when every
 * check held, 2 on a usage or setup error. It ends its sessions and
 * unmounts its mounts on the way out (unless -k).
 *
 * Checked after every operation, on the mount(s) it touched: for every
 * name of the model, that it exists or not as the model says, its size,
 * its link count and that names sharing a model inode share an inode
 * number (and no others do); the full content of the file(s) the operation
 * touched. After a rollback or a fork, and every 64 operations, the full
 * content of every file and the directory listings.
 *
 * With -F MS a second thread forks the main session's live state (no
 * --at: what a fork of a running program's workspace takes) every MS
 * milliseconds while the operations go on; each fork is mounted and must
 * equal the model after some operation between the last one that
 * completed before the request and the last one that started before its
 * answer (issue 61: a checkpoint holds every completed write). A store into
 * a MAP_SHARED mapping is no operation the kernel sees the end of, so the
 * bytes stored through a mapping while the fork is served (by operations
 * after the request, the one in flight included) may be held in part;
 * every store made before the request must be in it. In this mode half of
 * the mapped writes leave their mapping in place, dirty, without msync, for
 * some later operations, so forks find dirty mapped pages to write back.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "ctl/client/client.h"
#include "common/banned.h"

#define NNAMES 8                /* name slots: 6 in the root, 2 in d/ */
#define NINODES (NNAMES + 1)
#define MAXLEN (384 * 1024)     /* crosses the store's 64 KiB chunks */
#define MAXSNAPS 6              /* checkpoints remembered per session */
#define FULL_EVERY 64
#define GC_EVERY 2000           /* POST /v1/gc, then a full check */

static const char *const names[NNAMES] = { "f0", "f1", "f2", "f3", "f4", "f5", "d/g0", "d/g1" };

/* ---- the random generator (splitmix64: one state, fully reproducible) ---- */

static uint64_t rng_state;
static uint64_t rnd(void) {
        uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- the model ------------------------------------------------------------------- */

struct minode {
        bool used;
        uint8_t *data; /* MAXLEN bytes when used */
        size_t len;
};

struct model {
        int slot[NNAMES]; /* inode index or -1 */
        struct minode ino[NINODES];
};

struct snap {
        char commit[65];
        struct model m;
};

struct sess {
        bool live;
        char name[64];
        char mnt[512];
        struct model m;
        struct snap snaps[MAXSNAPS];
        int nsnaps;
};

static void model_init(struct model *m) {
        memset(m, 0, sizeof *m);
        for (int i = 0; i < NNAMES; i++)
                m->slot[i] = -1;
}

static void model_release(struct model *m) {
        for (int i = 0; i < NINODES; i++)
                free(m->ino[i].data);
        model_init(m);
}

static void *xmalloc(size_t n) {
        void *p = malloc(n);
        if (!p) {
                fprintf(stderr, "fsx: out of memory\n");
                exit(2);
        }
        return p;
}

static void model_copy(struct model *dst, const struct model *src) {
        model_release(dst);
        memcpy(dst->slot, src->slot, sizeof dst->slot);
        for (int i = 0; i < NINODES; i++) {
                if (!src->ino[i].used)
                        continue;
                dst->ino[i].used = true;
                dst->ino[i].len = src->ino[i].len;
                dst->ino[i].data = xmalloc(MAXLEN);
                memcpy(dst->ino[i].data, src->ino[i].data, MAXLEN);
        }
}

static int model_nlink(const struct model *m, int ino) {
        int n = 0;
        for (int i = 0; i < NNAMES; i++)
                n += m->slot[i] == ino;
        return n;
}

static void model_drop_name(struct model *m, int s) {
        int ino = m->slot[s];
        m->slot[s] = -1;
        if (ino >= 0 && model_nlink(m, ino) == 0) {
                free(m->ino[ino].data);
                memset(&m->ino[ino], 0, sizeof m->ino[ino]);
        }
}

static int model_new_inode(struct model *m) {
        for (int i = 0; i < NINODES; i++)
                if (!m->ino[i].used) {
                        m->ino[i].used = true;
                        m->ino[i].len = 0;
                        m->ino[i].data = xmalloc(MAXLEN);
                        memset(m->ino[i].data, 0, MAXLEN);
                        return i;
                }
        return -1;
}

/* ---- reporting --------------------------------------------------------------------- */

static uint64_t seed, nops, opno;
static volatile sig_atomic_t stop_requested; /* SIGINT/SIGTERM: stop cleanly */
static void on_stop(int sig) {
        (void)sig;
        stop_requested = 1;
}
static uint64_t inject_at = UINT64_MAX; /* -X: corrupt the model here (self-test) */
static bool verbose;
static char oplog[32][160];

static void logop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logop(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *l = oplog[opno % 32];
        int n = snprintf(l, sizeof oplog[0], "%" PRIu64 ": ", opno);
        vsnprintf(l + n, sizeof oplog[0] - (size_t)n, fmt, ap);
        va_end(ap);
        if (verbose)
                printf("%s\n", l);
}

static void cleanup_all(void);

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
        va_list ap;
        fflush(stdout);
        fprintf(stderr, "fsx: FAILED at operation %" PRIu64 " (seed %" PRIu64 "): ", opno, seed);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nfsx: last operations:\n");
        for (uint64_t i = opno >= 31 ? opno - 31 : 0; i <= opno; i++)
                if (oplog[i % 32][0])
                        fprintf(stderr, "  %s\n", oplog[i % 32]);
        fprintf(stderr, "fsx: reproduce with: fsx -S %" PRIu64 " -N %" PRIu64 " -v\n", seed, opno + 1);
        cleanup_all();
        exit(1);
}

/* ---- the daemon ------------------------------------------------------------------------ */

static ntfs_client *cli;
static struct sess sess[2]; /* 0: the main session, 1: the current fork */
static char workdir[256];
static bool keep, made_workdir;
static unsigned fork_seq;

static int api(const char *method, const char *path, json_t *body, json_t **ret, char *err, size_t errlen) {
        int r = ntfs_client_call(cli, method, path, body, ret, err, errlen);
        json_decref(body);
        return r;
}

static void api_must(const char *method, const char *path, json_t *body, json_t **ret) {
        char err[512] = "";
        int r = api(method, path, body, ret, err, sizeof err);
        if (r < 0)
                fail("%s %s: %s (%s)", method, path, err[0] ? err : "transport error", strerror(r < -4096 ? EIO : -r));
}

static void mount_sess(struct sess *s) {
        if (mkdir(s->mnt, 0755) < 0 && errno != EEXIST)
                fail("mkdir %s: %m", s->mnt);
        api_must("POST", "/v1/mounts", json_pack("{s:s, s:s}", "session", s->name, "mountpoint", s->mnt), NULL);
}

static void unmount_sess(struct sess *s) {
        char err[256];
        api("POST", "/v1/mounts/unmount", json_pack("{s:s}", "mountpoint", s->mnt), NULL, err, sizeof err);
}

static void end_sess(struct sess *s) {
        char path[256], err[256];
        unmount_sess(s);
        snprintf(path, sizeof path, "/v1/sessions/%s", s->name);
        api("DELETE", path, NULL, NULL, err, sizeof err);
        rmdir(s->mnt);
        model_release(&s->m);
        for (int i = 0; i < s->nsnaps; i++)
                model_release(&s->snaps[i].m);
        s->nsnaps = 0;
        s->live = false;
}

static void kept_unmap(void);
static void lf_stop(void);
static struct sess lf_sess; /* a live fork being checked (-F) */

static void cleanup_all(void) {
        kept_unmap(); /* a dirty mapping would keep the mount busy */
        if (!cli)
                return;
        if (lf_sess.live && !keep)
                end_sess(&lf_sess);
        lf_stop();
        if (keep)
                return;
        for (int i = 1; i >= 0; i--)
                if (sess[i].live)
                        end_sess(&sess[i]);
        if (made_workdir)
                rmdir(workdir);
}

static void remember(struct sess *s, const char *commit) {
        if (s->nsnaps == MAXSNAPS) {
                /* keep the oldest (the floor) and forget a random other */
                int k = 1 + (int)rnd_below(MAXSNAPS - 1);
                model_release(&s->snaps[k].m);
                memmove(&s->snaps[k], &s->snaps[k + 1], sizeof s->snaps[0] * (size_t)(MAXSNAPS - 1 - k));
                s->nsnaps--;
                memset(&s->snaps[s->nsnaps], 0, sizeof s->snaps[0]);
                model_init(&s->snaps[s->nsnaps].m);
        }
        struct snap *sn = &s->snaps[s->nsnaps++];
        snprintf(sn->commit, sizeof sn->commit, "%s", commit);
        model_init(&sn->m);
        model_copy(&sn->m, &s->m);
}

static void checkpoint(struct sess *s) {
        char path[256];
        _cleanup_(json_decrefp) json_t *res = NULL;
        snprintf(path, sizeof path, "/v1/sessions/%s/checkpoint", s->name);
        api_must("POST", path, json_pack("{s:s}", "message", "fsx"), &res);
        const char *c = json_string_value(json_object_get(res, "commit"));
        if (!c || strlen(c) != 64)
                fail("checkpoint of %s: no commit in the answer", s->name);
        logop("checkpoint %s -> %.12s", s->name, c);
        remember(s, c);
}

/* ---- checks on the mount ------------------------------------------------------------------ */

static void path_of(const struct sess *s, int slot, char *buf, size_t len) {
        snprintf(buf, len, "%s/%s", s->mnt, names[slot]);
}

static int kept_fd(const struct sess *s, int ino);

static void check_content(const struct sess *s, int slot) {
        char p[600];
        path_of(s, slot, p, sizeof p);
        const struct minode *mi = &s->m.ino[s->m.slot[slot]];
        /* A file mapped dirty (-F) is read through the mapping's fd: a
         * close writes its dirty pages back (FUSE's flush). */
        int kfd = kept_fd(s, s->m.slot[slot]);
        _cleanup_close_ int fd = kfd >= 0 ? -1 : open(p, O_RDONLY | O_CLOEXEC);
        if (kfd < 0 && fd < 0)
                fail("open %s for the content check: %m", p);
        static uint8_t buf[MAXLEN + 1];
        size_t got = 0;
        for (;;) {
                ssize_t n = pread(kfd >= 0 ? kfd : fd, buf + got, sizeof buf - got, (off_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        fail("read %s: %m", p);
                if (n == 0 || got + (size_t)n == sizeof buf) {
                        got += (size_t)n;
                        break;
                }
                got += (size_t)n;
        }
        if (got != mi->len)
                fail("%s: read %zu bytes, the model has %zu", p, got, mi->len);
        if (memcmp(buf, mi->data, got) != 0) {
                size_t i = 0;
                while (buf[i] == mi->data[i])
                        i++;
                size_t j = i;
                while (j < got && buf[j] != mi->data[j])
                        j++;
                fail("%s: content differs from byte %zu (to %zu at least): found 0x%02x, expected 0x%02x", p, i, j,
                     buf[i], mi->data[i]);
        }
}

/* Existence, size, link counts and inode identity of every name. */
static void check_names(const struct sess *s) {
        uint64_t inos[NINODES];
        bool seen[NINODES] = { false };
        for (int i = 0; i < NNAMES; i++) {
                char p[600];
                path_of(s, i, p, sizeof p);
                struct stat st;
                int r = lstat(p, &st);
                int mi = s->m.slot[i];
                if (mi < 0) {
                        if (r == 0)
                                fail("%s exists, the model has no such name", p);
                        if (errno != ENOENT)
                                fail("lstat %s: %m (expected ENOENT)", p);
                        continue;
                }
                if (r < 0)
                        fail("lstat %s: %m (the model has %zu bytes)", p, s->m.ino[mi].len);
                if (!S_ISREG(st.st_mode))
                        fail("%s: not a regular file (mode %o)", p, st.st_mode);
                if ((size_t)st.st_size != s->m.ino[mi].len)
                        fail("%s: size %jd, the model has %zu", p, (intmax_t)st.st_size, s->m.ino[mi].len);
                int nl = model_nlink(&s->m, mi);
                if (st.st_nlink != (nlink_t)nl)
                        fail("%s: st_nlink %ju, the model has %d", p, (uintmax_t)st.st_nlink, nl);
                if (seen[mi] && inos[mi] != st.st_ino)
                        fail("%s: inode %ju differs from its hard link's %ju", p, (uintmax_t)st.st_ino,
                             (uintmax_t)inos[mi]);
                for (int k = 0; k < NINODES; k++)
                        if (k != mi && seen[k] && inos[k] == st.st_ino)
                                fail("%s: shares inode %ju with a different file of the model", p,
                                     (uintmax_t)st.st_ino);
                seen[mi] = true;
                inos[mi] = st.st_ino;
        }
}

static void check_listing(const struct sess *s, const char *sub, int first, int last) {
        char p[600];
        snprintf(p, sizeof p, "%s%s%s", s->mnt, sub[0] ? "/" : "", sub);
        DIR *d = opendir(p);
        if (!d)
                fail("opendir %s: %m", p);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (!sub[0] && !strcmp(de->d_name, "d"))
                        continue;
                bool ok = false;
                for (int i = first; i <= last; i++) {
                        const char *leaf = strrchr(names[i], '/');
                        leaf = leaf ? leaf + 1 : names[i];
                        if (!strcmp(leaf, de->d_name) && s->m.slot[i] >= 0)
                                ok = true;
                }
                if (!ok) {
                        closedir(d);
                        fail("readdir %s: unexpected entry '%s'", p, de->d_name);
                }
                n++;
        }
        closedir(d);
        int want = 0;
        for (int i = first; i <= last; i++)
                want += s->m.slot[i] >= 0;
        if (n != want)
                fail("readdir %s: %d entries, the model has %d", p, n, want);
}

static void check_all(const struct sess *s) {
        check_names(s);
        check_listing(s, "", 0, 5);
        check_listing(s, "d", 6, 7);
        for (int i = 0; i < NNAMES; i++)
                if (s->m.slot[i] >= 0)
                        check_content(s, i);
}

/* ---- operations ------------------------------------------------------------------------------ */

static uint64_t n_read, n_write, n_hole, n_trunc, n_mmap, n_create, n_unlink, n_rename, n_link, n_ckpt, n_rb,
        n_rb_refused, n_fork, n_fsync, n_gc;

static int pick_existing(const struct sess *s) {
        int c[NNAMES], n = 0;
        for (int i = 0; i < NNAMES; i++)
                if (s->m.slot[i] >= 0)
                        c[n++] = i;
        return n ? c[rnd_below((uint64_t)n)] : -1;
}

static int pick_free(const struct sess *s) {
        int c[NNAMES], n = 0;
        for (int i = 0; i < NNAMES; i++)
                if (s->m.slot[i] < 0)
                        c[n++] = i;
        return n ? c[rnd_below((uint64_t)n)] : -1;
}

static void fill(uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i += 8) {
                uint64_t v = rnd();
                memcpy(p + i, &v, n - i < 8 ? n - i : 8);
        }
}

static int open_slot(const struct sess *s, int slot, int flags) {
        char p[600];
        path_of(s, slot, p, sizeof p);
        int fd = open(p, flags | O_CLOEXEC, 0644);
        if (fd < 0)
                fail("open %s: %m", p);
        return fd;
}

static void op_read(struct sess *s, int slot) {
        struct minode *mi = &s->m.ino[s->m.slot[slot]];
        size_t off = rnd_below(mi->len + 4096);
        size_t len = 1 + rnd_below(rnd_below(4) ? 8192 : 140000);
        logop("%s: read %s off %zu len %zu", s->name, names[slot], off, len);
        _cleanup_close_ int fd = open_slot(s, slot, O_RDONLY);
        static uint8_t buf[MAXLEN + 200000];
        ssize_t n;
        do
                n = pread(fd, buf, len, (off_t)off);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                fail("pread %s: %m", names[slot]);
        size_t want = off >= mi->len ? 0 : (mi->len - off < len ? mi->len - off : len);
        /* FUSE may return short reads only at EOF */
        if ((size_t)n != want)
                fail("pread %s off %zu len %zu: %zd bytes, the model has %zu", names[slot], off, len, n, want);
        if (want && memcmp(buf, mi->data + off, want) != 0)
                fail("pread %s off %zu len %zu: content differs from the model", names[slot], off, len);
        n_read++;
}

static void op_write(struct sess *s, int slot, bool hole) {
        struct minode *mi = &s->m.ino[s->m.slot[slot]];
        size_t len = 1 + rnd_below(rnd_below(4) ? 4096 : 100000);
        if (len > MAXLEN / 2)
                len = MAXLEN / 2;
        size_t off;
        if (hole) {
                size_t room = MAXLEN > mi->len + len ? MAXLEN - mi->len - len : 1;
                off = mi->len + 1 + rnd_below(room);
        } else
                off = rnd_below(mi->len + 8192);
        if (off + len > MAXLEN) {
                if (len > MAXLEN)
                        len = MAXLEN;
                off = MAXLEN - len;
        }
        static uint8_t buf[MAXLEN];
        fill(buf, len);
        bool do_fsync = rnd_below(16) == 0;
        logop("%s: %s %s off %zu len %zu%s", s->name, hole ? "holewrite" : "write", names[slot], off, len,
              do_fsync ? " +fsync" : "");
        _cleanup_close_ int fd = open_slot(s, slot, O_RDWR);
        size_t done = 0;
        while (done < len) {
                ssize_t n = pwrite(fd, buf + done, len - done, (off_t)(off + done));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        fail("pwrite %s off %zu len %zu: %m", names[slot], off + done, len - done);
                done += (size_t)n;
        }
        if (do_fsync) {
                if (fsync(fd) < 0)
                        fail("fsync %s: %m", names[slot]);
                n_fsync++;
        }
        if (off > mi->len)
                memset(mi->data + mi->len, 0, off - mi->len);
        memcpy(mi->data + off, buf, len);
        if (off + len > mi->len)
                mi->len = off + len;
        if (hole)
                n_hole++;
        else
                n_write++;
}

static void op_truncate(struct sess *s, int slot) {
        struct minode *mi = &s->m.ino[s->m.slot[slot]];
        size_t nl = rnd_below(3) ? rnd_below(mi->len + 1) : rnd_below(MAXLEN + 1);
        bool by_path = rnd_below(2);
        logop("%s: truncate %s %zu -> %zu (%s)", s->name, names[slot], mi->len, nl, by_path ? "path" : "fd");
        if (by_path) {
                char p[600];
                path_of(s, slot, p, sizeof p);
                if (truncate(p, (off_t)nl) < 0)
                        fail("truncate %s: %m", p);
        } else {
                _cleanup_close_ int fd = open_slot(s, slot, O_RDWR);
                if (ftruncate(fd, (off_t)nl) < 0)
                        fail("ftruncate %s: %m", names[slot]);
        }
        if (nl > mi->len)
                memset(mi->data + mi->len, 0, nl - mi->len);
        else
                memset(mi->data + nl, 0, mi->len - nl);
        mi->len = nl;
        n_trunc++;
}

/* -F: a mapping left in place, dirty, by a mapped write (op_mmap). */
static struct {
        uint8_t *addr;
        size_t len;
        int fd; /* the file's, kept open: closing one writes the dirty pages back */
        const struct sess *s;
        int ino; /* model inode */
        unsigned ops_left;
} kept;

static int kept_fd(const struct sess *s, int ino) { return kept.addr && kept.s == s && kept.ino == ino ? kept.fd : -1; }
static int last_op_mmap_ino = -1; /* the model inode of sess[0] the last operation stored into by mmap */
static uint64_t lf_period_ms;     /* -F */

static void lf_wait_answer(void);

static void kept_unmap(void) {
        if (!kept.addr)
                return;
        /* Not while a live fork is being served: the unmapping writes the
         * pages back itself, and a fork does not wait for a write-back of
         * a mapping that is already gone (docs/mount.md, "What a
         * checkpoint of a live mount holds": the gap found this way). */
        lf_wait_answer();
        munmap(kept.addr, kept.len); /* writes the dirty pages back and waits (FUSE) */
        close(kept.fd);
        kept.addr = NULL;
}

static void op_mmap(struct sess *s, int slot) {
        struct minode *mi = &s->m.ino[s->m.slot[slot]];
        if (mi->len == 0) {
                op_write(s, slot, false);
                return;
        }
        bool reuse = kept.addr && kept.s == s && kept.ino == s->m.slot[slot] && kept.len <= mi->len;
        if (!reuse)
                kept_unmap();
        size_t maplen = reuse ? kept.len : mi->len;
        size_t off = rnd_below(maplen);
        size_t len = 1 + rnd_below(maplen - off < 70000 ? maplen - off : 70000);
        bool keep_map = lf_period_ms && rnd_below(2);
        logop("%s: mmapwrite %s off %zu len %zu (size %zu)%s", s->name, names[slot], off, len, mi->len,
              reuse ? " into the kept mapping" : keep_map ? ", kept mapped without msync" : "");
        uint8_t *m;
        int fd = -1;
        if (reuse) {
                m = kept.addr;
        } else {
                fd = open_slot(s, slot, O_RDWR);
                m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (m == MAP_FAILED) {
                        close(fd);
                        fail("mmap %s (%zu bytes): %m", names[slot], maplen);
                }
        }
        static uint8_t buf[MAXLEN];
        fill(buf, len);
        memcpy(m + off, buf, len);
        if (memcmp(m, mi->data, off) != 0)
                fail("mmap %s: the mapping's bytes before the write differ from the model", names[slot]);
        memcpy(mi->data + off, buf, len);
        if (s == &sess[0])
                last_op_mmap_ino = s->m.slot[slot];
        if (reuse || keep_map) {
                if (!reuse) {
                        kept.addr = m;
                        kept.len = maplen;
                        kept.fd = fd;
                        kept.s = s;
                        kept.ino = s->m.slot[slot];
                }
                kept.ops_left = 1 + (unsigned)rnd_below(16);
        } else {
                if (msync(m, maplen, MS_SYNC) < 0) {
                        close(fd);
                        fail("msync %s: %m", names[slot]);
                }
                munmap(m, maplen);
                close(fd);
        }
        n_mmap++;
}

static void op_create(struct sess *s) {
        int slot = pick_free(s);
        if (slot < 0)
                return;
        logop("%s: create %s", s->name, names[slot]);
        _cleanup_close_ int fd = open_slot(s, slot, O_RDWR | O_CREAT | O_EXCL);
        int ino = model_new_inode(&s->m);
        if (ino < 0)
                fail("model: no free inode (bug in fsx)");
        s->m.slot[slot] = ino;
        n_create++;
}

static void op_unlink(struct sess *s, int slot) {
        char p[600];
        path_of(s, slot, p, sizeof p);
        logop("%s: unlink %s", s->name, names[slot]);
        if (unlink(p) < 0)
                fail("unlink %s: %m", p);
        model_drop_name(&s->m, slot);
        n_unlink++;
}

static void op_rename(struct sess *s, int from) {
        int to = (int)rnd_below(NNAMES);
        if (to == from)
                to = (to + 1) % NNAMES;
        char a[600], b[600];
        path_of(s, from, a, sizeof a);
        path_of(s, to, b, sizeof b);
        logop("%s: rename %s -> %s%s", s->name, names[from], names[to], s->m.slot[to] >= 0 ? " (replacing)" : "");
        if (rename(a, b) < 0)
                fail("rename %s %s: %m", a, b);
        /* POSIX: when both names are links to the same file, nothing happens. */
        if (s->m.slot[to] != s->m.slot[from]) {
                int ino = s->m.slot[from];
                s->m.slot[from] = -1;
                model_drop_name(&s->m, to);
                s->m.slot[to] = ino;
        }
        n_rename++;
}

static void op_link(struct sess *s, int from) {
        int to = pick_free(s);
        if (to < 0)
                return;
        char a[600], b[600];
        path_of(s, from, a, sizeof a);
        path_of(s, to, b, sizeof b);
        logop("%s: link %s -> %s", s->name, names[from], names[to]);
        if (link(a, b) < 0)
                fail("link %s %s: %m", a, b);
        s->m.slot[to] = s->m.slot[from];
        n_link++;
}

static void op_rollback(struct sess *s) {
        if (s->nsnaps == 0)
                return;
        int k = (int)rnd_below((uint64_t)s->nsnaps);
        char path[256], err[512] = "";
        snprintf(path, sizeof path, "/v1/sessions/%s/rollback", s->name);
        logop("%s: rollback to %.12s (checkpoint %d of %d)", s->name, s->snaps[k].commit, k + 1, s->nsnaps);
        int r = api("POST", path, json_pack("{s:s}", "to", s->snaps[k].commit), NULL, err, sizeof err);
        if (r < 0) {
                if (strncmp(err, "rollback_floor", 14) == 0) {
                        n_rb_refused++;
                        return;
                }
                fail("rollback %s to %s: %s", s->name, s->snaps[k].commit, err);
        }
        model_copy(&s->m, &s->snaps[k].m);
        /* Checkpoints after k are no longer on the session's chain; a later
         * rollback to them is still allowed (they exist), so keep them. */
        n_rb++;
        check_all(s);
}

static void op_fork(int from) {
        struct sess *src = &sess[from];
        if (src->nsnaps == 0)
                return;
        int k = (int)rnd_below((uint64_t)src->nsnaps);
        struct sess nf;
        memset(&nf, 0, sizeof nf);
        model_init(&nf.m);
        for (int i = 0; i < MAXSNAPS; i++)
                model_init(&nf.snaps[i].m);
        snprintf(nf.name, sizeof nf.name, "fsx-%" PRIx64 "-f%u", seed & 0xffffffffu, ++fork_seq);
        snprintf(nf.mnt, sizeof nf.mnt, "%s/fork%u", workdir, fork_seq);
        char path[256];
        snprintf(path, sizeof path, "/v1/sessions/%s/fork", src->name);
        logop("%s: fork at %.12s -> %s", src->name, src->snaps[k].commit, nf.name);
        api_must("POST", path, json_pack("{s:s, s:s}", "name", nf.name, "at", src->snaps[k].commit), NULL);
        model_copy(&nf.m, &src->snaps[k].m);
        nf.live = true;
        remember(&nf, src->snaps[k].commit);
        if (sess[1].live)
                end_sess(&sess[1]);
        sess[1] = nf;
        mount_sess(&sess[1]);
        n_fork++;
        check_all(&sess[1]);
}

static int64_t t_api, t_io; /* ns spent in control calls and in file operations + checks */

static void one_op(void) {
        int64_t t_start = ntfs_mono_ns();
        bool is_api = false;
        struct sess *s = &sess[sess[1].live && rnd_below(3) == 0 ? 1 : 0];
        uint64_t r = rnd_below(100);
        int slot = pick_existing(s);
        int touched = -1;
        if (slot < 0 && r < 80)
                r = 80; /* nothing to work on: create */
        last_op_mmap_ino = -1;
        /* A kept mapping (-F) stays over reads, writes, mapped writes (into
         * it, or it is replaced), links, creates and checkpoints: not over
         * what can drop its inode or its pages (truncate, rename, unlink,
         * rollback, fork). */
        if (kept.addr &&
            (kept.ops_left-- == 0 || !(r < 41 || (r >= 50 && r < 57) || (r >= 63 && r < 68) || (r >= 73 && r < 94))))
                kept_unmap();
        if (r < 16) {
                op_read(s, slot);
        } else if (r < 36) {
                op_write(s, slot, false);
                touched = slot;
        } else if (r < 41) {
                op_write(s, slot, true);
                touched = slot;
        } else if (r < 50) {
                op_truncate(s, slot);
                touched = slot;
        } else if (r < 57) {
                op_mmap(s, slot);
                touched = slot;
        } else if (r < 63) {
                op_rename(s, slot);
        } else if (r < 68) {
                op_link(s, slot);
        } else if (r < 73) {
                op_unlink(s, slot);
        } else if (r < 80) {
                logop("%s: verify", s->name);
                check_all(s);
        } else if (r < 88) {
                op_create(s);
        } else if (r < 94) {
                is_api = true;
                checkpoint(s);
                n_ckpt++;
        } else if (r < 98) {
                is_api = true;
                op_rollback(s);
        } else {
                is_api = true;
                op_fork(s == &sess[1] ? 1 : 0);
                s = &sess[1];
        }
        check_names(s);
        if (touched >= 0 && s->m.slot[touched] >= 0)
                check_content(s, touched);
        if (opno == inject_at) {
                /* Self-test of the checks: flip one byte of the model (or
                 * invent a file); the next full check must report it. */
                int k = pick_existing(s);
                if (k >= 0 && s->m.ino[s->m.slot[k]].len > 0)
                        s->m.ino[s->m.slot[k]].data[rnd_below(s->m.ino[s->m.slot[k]].len)] ^= 0x5a;
                else if (k >= 0)
                        s->m.ino[s->m.slot[k]].len = 1;
                else
                        s->m.slot[0] = model_new_inode(&s->m);
                logop("%s: (injected a model fault)", s->name);
                check_all(s);
                fail("the injected fault was not detected");
        }
        if (opno % FULL_EVERY == FULL_EVERY - 1)
                check_all(s);
        *(is_api ? &t_api : &t_io) += ntfs_mono_ns() - t_start;
}

/* ---- live forks (-F) -------------------------------------------------------------------------
 *
 * The main thread counts the operations it starts and completes. When a fork
 * is due, between two operations, it keeps a copy of the main session's
 * model (the state after lo = ops_done operations) and wakes the fork
 * thread, which sends POST /v1/sessions/NAME/fork without "at" and, once
 * answered, reads hi = ops_started. Meanwhile the main thread keeps a copy
 * of the model after each operation it completes. The fork may hold the
 * state after any operation from lo to hi (every one that completed before
 * the request was sent is in it, none that started after its answer): it
 * must equal one of those copies. */

#define LF_MAX 48 /* copies kept while a fork is in flight; past it the main thread waits for the answer */

enum { LF_IDLE, LF_ASKED, LF_ANSWERED, LF_QUIT };
static pthread_mutex_t lf_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lf_cv = PTHREAD_COND_INITIALIZER;
static int lf_state;      /* under lf_mu */
static uint64_t lf_lo, lf_hi;
static int lf_err;
static char lf_errmsg[512];
static char lf_name[64];
static pthread_t lf_thread;
static bool lf_started;
static const char *sock_path;
static _Atomic uint64_t ops_started, ops_done;
static struct {
        uint64_t c;     /* the state after c operations */
        int mmap_ino;   /* operation c stored into this model inode through a mapping, or -1 */
        struct model m; /* sess[0]'s */
} lf_cand[LF_MAX];
static int lf_ncand;
static int64_t lf_next;
static uint64_t n_lf, n_lf_mmap, lf_win_max, lf_win_sum;
static int64_t lf_sent, lf_answered; /* ntfs_mono_ns */

static void lf_wait_answer(void) {
        if (!lf_started)
                return;
        pthread_mutex_lock(&lf_mu);
        while (lf_state == LF_ASKED)
                pthread_cond_wait(&lf_cv, &lf_mu);
        pthread_mutex_unlock(&lf_mu);
}

static void *lf_main(void *arg) {
        (void)arg;
        ntfs_client *c = NULL;
        int cr = ntfs_client_new(sock_path, &c);
        pthread_mutex_lock(&lf_mu);
        for (;;) {
                while (lf_state != LF_ASKED && lf_state != LF_QUIT)
                        pthread_cond_wait(&lf_cv, &lf_mu);
                if (lf_state == LF_QUIT)
                        break;
                char path[256], err[512] = "";
                snprintf(path, sizeof path, "/v1/sessions/%s/fork", sess[0].name);
                json_t *body = json_pack("{s:s}", "name", lf_name);
                pthread_mutex_unlock(&lf_mu);
                int64_t sent = ntfs_mono_ns();
                int r = cr < 0 ? cr : ntfs_client_call(c, "POST", path, body, NULL, err, sizeof err);
                json_decref(body);
                uint64_t hi = atomic_load(&ops_started);
                int64_t answered = ntfs_mono_ns();
                pthread_mutex_lock(&lf_mu);
                lf_sent = sent;
                lf_answered = answered;
                lf_hi = hi;
                lf_err = r;
                snprintf(lf_errmsg, sizeof lf_errmsg, "%s", err[0] ? err : strerror(r < -4096 ? EIO : -r));
                lf_state = LF_ANSWERED;
                pthread_cond_broadcast(&lf_cv);
        }
        pthread_mutex_unlock(&lf_mu);
        ntfs_client_free(c);
        return NULL;
}

/* What a mount holds, read once: every name of the model's namespace. */
struct found {
        bool exists[NNAMES];
        uint64_t ino[NNAMES];
        nlink_t nlink[NNAMES];
        size_t len[NNAMES];
        uint8_t *data[NNAMES]; /* MAXLEN + 1 bytes each */
        int root_entries, d_entries;
};

static int count_entries(const char *dir, bool skip_d) {
        DIR *d = opendir(dir);
        if (!d)
                fail("opendir %s: %m", dir);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !(skip_d && !strcmp(de->d_name, "d")))
                        n++;
        closedir(d);
        return n;
}

static void read_found(const struct sess *s, struct found *f) {
        for (int i = 0; i < NNAMES; i++) {
                char p[600];
                path_of(s, i, p, sizeof p);
                struct stat st;
                f->exists[i] = lstat(p, &st) == 0;
                if (!f->exists[i]) {
                        if (errno != ENOENT)
                                fail("lstat %s: %m", p);
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        fail("%s: not a regular file (mode %o)", p, st.st_mode);
                f->ino[i] = st.st_ino;
                f->nlink[i] = st.st_nlink;
                _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        fail("open %s: %m", p);
                size_t got = 0;
                for (;;) {
                        ssize_t n = read(fd, f->data[i] + got, MAXLEN + 1 - got);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                fail("read %s: %m", p);
                        got += (size_t)n;
                        if (n == 0 || got == MAXLEN + 1)
                                break;
                }
                f->len[i] = got;
        }
        char p[600];
        snprintf(p, sizeof p, "%s", s->mnt);
        f->root_entries = count_entries(p, true);
        snprintf(p, sizeof p, "%s/d", s->mnt);
        f->d_entries = count_entries(p, false);
}

/* NULL when f equals model m; the bytes of a model inode in mask may also
 * be those of one of the nalt models alt at the same offset (stores into a
 * mapping made while the request was served). Else what differs. */
static const char *differs(const struct found *f, const struct model *m, const struct model *const *alt, int nalt,
                           unsigned mask, char *why, size_t whylen) {
        int root = 0, d = 0;
        for (int i = 0; i < NNAMES; i++) {
                int mi = m->slot[i];
                if (mi >= 0)
                        *(i < 6 ? &root : &d) += 1;
                if (f->exists[i] != (mi >= 0)) {
                        snprintf(why, whylen, "%s %s", names[i], f->exists[i] ? "exists, not in the model" : "missing");
                        return why;
                }
                if (mi < 0)
                        continue;
                if (f->nlink[i] != (nlink_t)model_nlink(m, mi)) {
                        snprintf(why, whylen, "%s: st_nlink %ju, the model has %d", names[i], (uintmax_t)f->nlink[i],
                                 model_nlink(m, mi));
                        return why;
                }
                for (int k = 0; k < i; k++)
                        if (m->slot[k] >= 0 && (m->slot[k] == mi) != (f->ino[k] == f->ino[i])) {
                                snprintf(why, whylen, "%s and %s: %s inode, the model says otherwise", names[k],
                                         names[i], f->ino[k] == f->ino[i] ? "the same" : "not the same");
                                return why;
                        }
                const struct minode *n = &m->ino[mi];
                if (f->len[i] != n->len) {
                        snprintf(why, whylen, "%s: %zu bytes, the model has %zu", names[i], f->len[i], n->len);
                        return why;
                }
                for (size_t b = 0; b < n->len; b++) {
                        if (f->data[i][b] == n->data[b])
                                continue;
                        bool any = false;
                        for (int a = 0; a < nalt && (mask >> mi & 1) && !any; a++)
                                any = alt[a]->ino[mi].used && alt[a]->ino[mi].len > b &&
                                      alt[a]->ino[mi].data[b] == f->data[i][b];
                        if (!any) {
                                size_t e = b, last = b, ndiff = 0;
                                while (e < n->len && f->data[i][e] != n->data[e])
                                        e++;
                                for (size_t x = b; x < n->len; x++)
                                        if (f->data[i][x] != n->data[x]) {
                                                ndiff++;
                                                last = x;
                                        }
                                snprintf(why, whylen,
                                         "%s: bytes %zu to %zu differ from the model (%zu bytes differ, the last "
                                         "at %zu)",
                                         names[i], b, e, ndiff, last);
                                return why;
                        }
                }
        }
        if (f->root_entries != root || f->d_entries != d) {
                snprintf(why, whylen, "%d entries in the root and %d in d/, the model has %d and %d", f->root_entries,
                         f->d_entries, root, d);
                return why;
        }
        return NULL;
}

static void lf_keep(void) {
        uint64_t c = atomic_load(&ops_done);
        if (lf_ncand > 0 && lf_cand[lf_ncand - 1].c == c)
                return;
        if (lf_ncand == LF_MAX) { /* lf_between waits before: cannot happen */
                fprintf(stderr, "fsx: live fork: more than %d copies (bug in fsx)\n", LF_MAX);
                abort();
        }
        lf_cand[lf_ncand].c = c;
        lf_cand[lf_ncand].mmap_ino = last_op_mmap_ino;
        model_copy(&lf_cand[lf_ncand].m, &sess[0].m);
        lf_ncand++;
}

static void lf_check(void) {
        if (lf_err < 0)
                fail("live fork of %s: %s", sess[0].name, lf_errmsg);
        static struct found f;
        for (int i = 0; i < NNAMES; i++)
                if (!f.data[i])
                        f.data[i] = xmalloc(MAXLEN + 1);
        memset(&lf_sess, 0, sizeof lf_sess);
        model_init(&lf_sess.m);
        for (int i = 0; i < MAXSNAPS; i++)
                model_init(&lf_sess.snaps[i].m);
        snprintf(lf_sess.name, sizeof lf_sess.name, "%s", lf_name);
        snprintf(lf_sess.mnt, sizeof lf_sess.mnt, "%s/live", workdir);
        lf_sess.live = true;
        mount_sess(&lf_sess);
        read_found(&lf_sess, &f);
        end_sess(&lf_sess);
        /* Operation numbers as in the log: the state after c operations
         * is the state after operation c - 1. */
        char why[256], diffs[1536] = "";
        size_t dl = 0;
        bool ok = false, mixed = false;
        int k0 = -1;
        for (int k = 0; k < lf_ncand && !ok; k++) {
                if (lf_cand[k].c < lf_lo || lf_cand[k].c > lf_hi)
                        continue;
                if (k0 < 0)
                        k0 = k;
                const char *w = differs(&f, &lf_cand[k].m, NULL, 0, 0, why, sizeof why);
                if (!w) {
                        ok = true;
                        break;
                }
                if (dl < sizeof diffs)
                        dl += (size_t)snprintf(diffs + dl, sizeof diffs - dl, "\n  after operation %" PRId64 ": %s",
                                               (int64_t)lf_cand[k].c - 1, w);
                /* Stores into a mapping made while the request was served
                 * (by operations after lo, and by operation c + 1 in
                 * flight) may be held in part: their bytes may be any value
                 * they had meanwhile (docs/mount.md). */
                unsigned mask = 0;
                int last = k;
                for (int j = k0 + 1; j <= k; j++)
                        if (lf_cand[j].mmap_ino >= 0)
                                mask |= 1u << lf_cand[j].mmap_ino;
                if (k + 1 < lf_ncand && lf_cand[k + 1].c <= lf_hi && lf_cand[k + 1].mmap_ino >= 0) {
                        mask |= 1u << lf_cand[k + 1].mmap_ino;
                        last = k + 1;
                }
                if (!mask)
                        continue;
                const struct model *alt[LF_MAX];
                int nalt = 0;
                for (int j = k0; j <= last; j++)
                        alt[nalt++] = &lf_cand[j].m;
                w = differs(&f, &lf_cand[k].m, alt, nalt, mask, why, sizeof why);
                if (!w)
                        ok = mixed = true;
                else if (dl < sizeof diffs)
                        dl += (size_t)snprintf(diffs + dl, sizeof diffs - dl,
                                               " (with the mapped stores of the window in part: %s)", w);
        }
        if (!ok)
                fail("live fork %s (requested after operation %" PRId64 ", answered during operation %" PRId64
                     "; sent at %.3f s, answered at %.3f s of CLOCK_MONOTONIC) equals the model after none of them:%s",
                     lf_name, (int64_t)lf_lo - 1, (int64_t)lf_hi - 1, (double)lf_sent / 1e9, (double)lf_answered / 1e9,
                     diffs);
        logop("live fork %s: equal to the model between operations %" PRId64 " and %" PRId64 "%s", lf_name,
              (int64_t)lf_lo - 1, (int64_t)lf_hi - 1, mixed ? " (mapped stores made meanwhile held in part)" : "");
        n_lf++;
        n_lf_mmap += mixed;
        lf_win_sum += lf_hi - lf_lo;
        if (lf_hi - lf_lo > lf_win_max)
                lf_win_max = lf_hi - lf_lo;
        for (int k = 0; k < lf_ncand; k++)
                model_release(&lf_cand[k].m);
        lf_ncand = 0;
}

/* Between two operations (the main thread). final: wait for a fork in
 * flight, check it, and start no other. */
static void lf_between(bool final) {
        if (!lf_period_ms)
                return;
        pthread_mutex_lock(&lf_mu);
        /* Waited for: the fork then answered between two operations, so
         * no more than one more copy is needed. */
        if (lf_state == LF_ASKED && (final || lf_ncand >= LF_MAX - 1))
                while (lf_state == LF_ASKED)
                        pthread_cond_wait(&lf_cv, &lf_mu);
        if (lf_state == LF_ASKED || (lf_state == LF_ANSWERED && lf_hi >= atomic_load(&ops_done)))
                lf_keep();
        if (lf_state == LF_ANSWERED) {
                pthread_mutex_unlock(&lf_mu);
                lf_check();
                pthread_mutex_lock(&lf_mu);
                lf_state = LF_IDLE;
                lf_next = ntfs_mono_ns() + (int64_t)lf_period_ms * 1000000;
        }
        if (lf_state == LF_IDLE && !final && ntfs_mono_ns() >= lf_next) {
                lf_ncand = 0;
                lf_keep();
                lf_lo = atomic_load(&ops_done);
                snprintf(lf_name, sizeof lf_name, "fsx-%" PRIx64 "-l%" PRIu64, seed & 0xffffffffu, n_lf + 1);
                lf_state = LF_ASKED;
                pthread_cond_signal(&lf_cv);
        }
        pthread_mutex_unlock(&lf_mu);
}

static void lf_stop(void) {
        if (!lf_started)
                return;
        pthread_mutex_lock(&lf_mu);
        while (lf_state == LF_ASKED)
                pthread_cond_wait(&lf_cv, &lf_mu);
        if (lf_state == LF_ANSWERED && lf_err == 0 && !keep) {
                /* made and not checked (a failure on the way): ended here */
                char path[256], err[256];
                snprintf(path, sizeof path, "/v1/sessions/%s", lf_name);
                api("DELETE", path, NULL, NULL, err, sizeof err);
        }
        lf_state = LF_QUIT;
        pthread_cond_broadcast(&lf_cv);
        pthread_mutex_unlock(&lf_mu);
        pthread_join(lf_thread, NULL);
        lf_started = false;
        for (int k = 0; k < lf_ncand; k++)
                model_release(&lf_cand[k].m);
        lf_ncand = 0;
}

static void usage(FILE *f) {
        fprintf(f,
                "usage: fsx -s SOCKET [-N OPS] [-S SEED] [-d DIR] [-T SECS] [-F MS] [-v] [-k] [-X OP]\n"
                "  -s SOCKET  ntfsd's control socket (or $NTFS_SOCKET)\n"
                "  -N OPS     operations to run (default 10000)\n"
                "  -S SEED    seed of the random choices (default: from the clock; printed)\n"
                "  -d DIR     where to create the mountpoints (default: a new /tmp/fsx-XXXXXX)\n"
                "  -v         print every operation\n"
                "  -k         keep the sessions (and mounts) at the end\n"
                "  -T SECS    stop after SECS seconds (with the checks and the summary)\n"
                "  -F MS      fork the main session's live state every MS ms from another thread;\n"
                "             each fork must equal the model after an operation around its request\n"
                "  -X OP      self-test: corrupt the model at operation OP; fsx must then fail\n"
                "exit: 0 all checks held, 1 a mismatch or failed call, 2 usage/setup error\n");
}

int main(int argc, char **argv) {
        const char *sock = getenv("NTFS_SOCKET");
        const char *dir = NULL;
        uint64_t max_secs = 0;
        nops = 10000;
        seed = (uint64_t)ntfs_now_ns() ^ ((uint64_t)getpid() << 32);
        int c;
        while ((c = getopt(argc, argv, "s:N:S:d:X:T:F:vkh")) != -1) {
                switch (c) {
                case 's':
                        sock = optarg;
                        break;
                case 'N':
                        if (ntfs_parse_u64(optarg, UINT64_MAX, &nops) < 0) {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'S':
                        if (ntfs_parse_u64(optarg, UINT64_MAX, &seed) < 0) {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'd':
                        dir = optarg;
                        break;
                case 'T':
                        if (ntfs_parse_u64(optarg, UINT64_MAX / 1000000000ull, &max_secs) < 0) {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'F':
                        if (ntfs_parse_u64(optarg, 3600 * 1000, &lf_period_ms) < 0 || lf_period_ms == 0) {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'X':
                        if (ntfs_parse_u64(optarg, UINT64_MAX, &inject_at) < 0) {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'v':
                        verbose = true;
                        break;
                case 'k':
                        keep = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (!sock || optind != argc) {
                usage(stderr);
                return 2;
        }
        sock_path = sock;
        rng_state = seed;
        setvbuf(stdout, NULL, _IOLBF, 0);
        printf("fsx: seed %" PRIu64 ", %" PRIu64 " operations\n", seed, nops);
        if (dir) {
                snprintf(workdir, sizeof workdir, "%s", dir);
        } else {
                snprintf(workdir, sizeof workdir, "/tmp/fsx-XXXXXX");
                if (!mkdtemp(workdir)) {
                        fprintf(stderr, "fsx: mkdtemp: %m\n");
                        return 2;
                }
                made_workdir = true;
        }
        int r = ntfs_client_new(sock, &cli);
        if (r < 0) {
                fprintf(stderr, "fsx: %s: %s\n", sock, strerror(-r));
                return 2;
        }
        for (int i = 0; i < 2; i++) {
                model_init(&sess[i].m);
                for (int k = 0; k < MAXSNAPS; k++)
                        model_init(&sess[i].snaps[k].m);
        }
        struct sess *m = &sess[0];
        snprintf(m->name, sizeof m->name, "fsx-%" PRIx64, seed & 0xffffffffu);
        snprintf(m->mnt, sizeof m->mnt, "%s/main", workdir);
        char err[512] = "";
        r = api("POST", "/v1/sessions", json_pack("{s:s}", "name", m->name), NULL, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "fsx: cannot create session %s: %s\n", m->name, err);
                ntfs_client_free(cli);
                return 2;
        }
        m->live = true;
        mount_sess(m);
        char d[600];
        snprintf(d, sizeof d, "%s/d", m->mnt);
        if (mkdir(d, 0755) < 0)
                fail("mkdir %s: %m", d);
        checkpoint(m);
        if (lf_period_ms) {
                lf_next = ntfs_mono_ns() + (int64_t)lf_period_ms * 1000000;
                int e = pthread_create(&lf_thread, NULL, lf_main, NULL);
                if (e != 0)
                        fail("pthread_create: %s", strerror(e));
                lf_started = true;
        }
        struct sigaction sa = { .sa_handler = on_stop, .sa_flags = SA_RESTART };
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        int64_t t0 = ntfs_mono_ns();
        uint64_t done_ops = 0;
        for (opno = 0; opno < nops && !stop_requested; opno++) {
                atomic_store(&ops_started, opno + 1);
                one_op();
                atomic_store(&ops_done, opno + 1);
                lf_between(false);
                done_ops = opno + 1;
                if (!verbose && done_ops % 10000 == 0)
                        printf("fsx: %" PRIu64 " operations, %.0f s\n", done_ops,
                               (double)(ntfs_mono_ns() - t0) / 1e9);
                if (done_ops % GC_EVERY == 0) {
                        /* The store's gc must keep everything live: both
                         * working states, every remembered checkpoint. */
                        logop("gc");
                        api_must("POST", "/v1/gc", NULL, NULL);
                        n_gc++;
                        for (int i = 0; i < 2; i++)
                                if (sess[i].live)
                                        check_all(&sess[i]);
                }
                if (max_secs && ntfs_mono_ns() - t0 > (int64_t)(max_secs * 1000000000ull))
                        break;
        }
        lf_between(true);
        lf_stop();
        kept_unmap();
        for (int i = 0; i < 2; i++)
                if (sess[i].live)
                        check_all(&sess[i]);
        double secs = (double)(ntfs_mono_ns() - t0) / 1e9;
        printf("fsx: %" PRIu64 " operations in %.1f s, no mismatch (seed %" PRIu64 ")%s\n", done_ops, secs, seed,
               done_ops < nops ? " (stopped early)" : "");
        printf("fsx: reads %" PRIu64 " writes %" PRIu64 " holewrites %" PRIu64 " truncates %" PRIu64
               " mmapwrites %" PRIu64 " fsyncs %" PRIu64 " creates %" PRIu64 " unlinks %" PRIu64 " renames %" PRIu64
               " links %" PRIu64 " checkpoints %" PRIu64 " rollbacks %" PRIu64 " (refused %" PRIu64 ") forks %" PRIu64
               " gcs %" PRIu64 "\n",
               n_read, n_write, n_hole, n_trunc, n_mmap, n_fsync, n_create, n_unlink, n_rename, n_link, n_ckpt, n_rb,
               n_rb_refused, n_fork, n_gc);
        if (lf_period_ms)
                printf("fsx: live forks %" PRIu64 " (each equal to the model after an operation around its request; "
                       "%" PRIu64 " with mapped stores made meanwhile held in part), up to %" PRIu64
                       " operations in a request's window (mean %.1f)\n",
                       n_lf, n_lf_mmap, lf_win_max, n_lf ? (double)lf_win_sum / (double)n_lf : 0.0);
        printf("fsx: time in checkpoint/rollback/fork operations %.1f s, in file operations and checks %.1f s\n",
               (double)t_api / 1e9, (double)t_io / 1e9);
        cleanup_all();
        for (int i = 0; i < 2; i++) {
                model_release(&sess[i].m);
                for (int k = 0; k < MAXSNAPS; k++)
                        model_release(&sess[i].snaps[k].m);
        }
        ntfs_client_free(cli);
        return 0;
}
