/* SPDX-License-Identifier: MIT
 * bench-store — the store benchmark of issue 2 (docs/store.md, "Benchmark").
 *
 *   bench-store [--small N] [--big N] [--quick] [--reps N] [--git-reps N]
 *               [--dir DIR] [--seed N] [--no-git]
 *   bench-store --per-file N [--dir DIR] [--native-dir DIR]
 *
 * For a workspace of --small files (default 1,000) and one of --big files
 * (default 100,000), built through the ntfs_ws_* API as a tree of
 * directories of 150 files, three levels deep, file sizes 100 B..64 KiB
 * (about log-uniform), it measures in one run:
 *
 *   - checkpoint after changing one file, fork, tag, rollback, and diff of
 *     two checkpoints that differ in one file: median of --reps (20) runs,
 *     in microseconds, and the ratio big/small of each;
 *   - the store's growth from 100 forks that each change one file and
 *     checkpoint, as a ratio to the base workspace (pages in use by all
 *     LMDB databases after gc; see store_space());
 *
 * Both stores stay open and the timed operations alternate between them rep
 * by rep, so that the machine's load reaches both sizes alike.
 *   - `git add -A && git commit -q` after the same kind of one-file change
 *     in a git repository holding the same tree (median of --git-reps, 3),
 *     as a ratio to the checkpoint.
 *
 * It also times every fsync/fdatasync the store makes (this program defines
 * both, so LMDB's calls land here first) and the fdatasync latency of the
 * scratch filesystem, so that the table separates the disk's flush cost
 * from the store's own work.
 *
 * Then it prints PASS/MISS against the issue's targets. A timing miss never
 * changes the exit status (CI must not gate on time): the exit status is 0
 * after a complete run, 1 on an error (a store call failed, a result was
 * wrong, git failed), 2 on bad usage. --quick (1,000 and 10,000 files, 5
 * reps, 1 git rep) is the smoke test meson runs. Every scratch directory
 * (store, git tree) is created under --dir (default $TMPDIR or /tmp) and
 * removed on exit, also after an error or SIGINT/SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <lmdb.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "fs/store.h"
#include "common/banned.h"

#define LEAF_FILES 150    /* files per directory */
#define CHANGE_LEN 100    /* bytes rewritten by a one-file change */
#define N_FORKS 100       /* forks of the storage measurement */
#define MAX_FILES 10000000ull
#define MAX_REPS 1000ull
#define GIT_CMD "git add -A && git commit -q -m change"

extern char **environ;

/* ---- fsync accounting ----------------------------------------------------
 * LMDB flushes with fdatasync() (and fsync() in some configurations). The
 * definitions below take precedence over libc's for every library of this
 * process, count the calls and time them; the kernel does the work. */

static _Atomic uint64_t g_sync_calls, g_sync_ns;

static void sync_account(int64_t t0) {
        atomic_fetch_add(&g_sync_calls, 1);
        atomic_fetch_add(&g_sync_ns, (uint64_t)(ntfs_mono_ns() - t0));
}

int fdatasync(int fd) {
        int64_t t0 = ntfs_mono_ns();
        int r = (int)syscall(SYS_fdatasync, fd);
        sync_account(t0);
        return r;
}

int fsync(int fd) {
        int64_t t0 = ntfs_mono_ns();
        int r = (int)syscall(SYS_fsync, fd);
        sync_account(t0);
        return r;
}

/* ---- scratch directories and signals ---------------------------------------- */

static volatile sig_atomic_t g_stop;
static char g_scratch[4][PATH_MAX];

static void on_signal(int sig) {
        (void)sig;
        g_stop = 1;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
        (void)sb;
        (void)flag;
        (void)ftw;
        if (remove(path) < 0 && errno != ENOENT)
                fprintf(stderr, "bench-store: cannot remove %s: %s\n", path, strerror(errno));
        return 0;
}

static void rm_rf(const char *dir) {
        if (dir[0])
                nftw(dir, rm_cb, 32, FTW_DEPTH | FTW_PHYS);
}

/* Creates a scratch directory in slot; it is removed by scratch_drop(slot)
 * or at exit. */
static int scratch_make(int slot, const char *parent, const char *tag) {
        if (snprintf(g_scratch[slot], sizeof g_scratch[slot], "%s/ntfs-bench-%s-XXXXXX", parent, tag) >=
            (int)sizeof g_scratch[slot])
                return -ENAMETOOLONG;
        if (!mkdtemp(g_scratch[slot])) {
                int e = -errno;
                g_scratch[slot][0] = 0;
                return e;
        }
        return 0;
}

static void scratch_drop(int slot) {
        rm_rf(g_scratch[slot]);
        g_scratch[slot][0] = 0;
}

static void scratch_drop_all(void) {
        for (int i = 0; i < (int)ARRAY_SIZE(g_scratch); i++)
                scratch_drop(i);
}

/* ---- small helpers ------------------------------------------------------------ */

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int64_t g_t_start;
static void progress(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "[%7.1fs] ", (double)(ntfs_mono_ns() - g_t_start) / 1e9);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

static uint64_t mix64(uint64_t x) {
        /* splitmix64's finalizer: a deterministic hash of x */
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y ? 1 : 0;
}

static double median(const double *v, size_t n) {
        if (n == 0)
                return 0;
        double *c = malloc(n * sizeof *c);
        if (!c)
                return v[0];
        memcpy(c, v, n * sizeof *c);
        qsort(c, n, sizeof *c, cmp_double);
        double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
        free(c);
        return m;
}

static const char *fs_name(const char *dir) {
        struct statfs sf;
        if (statfs(dir, &sf) < 0)
                return "?";
        switch ((unsigned long)sf.f_type) {
        case 0xEF53:
                return "ext4";
        case 0x01021994:
                return "tmpfs";
        case 0x58465342:
                return "xfs";
        case 0x9123683E:
                return "btrfs";
        case 0x794c7630:
                return "overlayfs";
        default:
                return "other";
        }
}

/* ---- the workspace: layout and content ------------------------------------------
 * File i lives in leaf directory i / LEAF_FILES; leaf directories are spread
 * over ceil(sqrt(leaves)) top directories: dTTT/sMMM/fIIIIII.c. Its size and
 * its bytes are functions of (seed, i), so the store and the git tree get
 * the same tree. */

struct layout {
        uint64_t n, nleaf, fan, ntop;
        uint64_t seed;
};

static void layout_init(struct layout *l, uint64_t n, uint64_t seed) {
        l->n = n;
        l->seed = seed;
        l->nleaf = (n + LEAF_FILES - 1) / LEAF_FILES;
        l->fan = 1;
        while (l->fan * l->fan < l->nleaf)
                l->fan++;
        l->ntop = (l->nleaf + l->fan - 1) / l->fan;
}

static void file_dirs(const struct layout *l, uint64_t i, uint64_t *top, uint64_t *mid) {
        uint64_t leaf = i / LEAF_FILES;
        *top = leaf / l->fan;
        *mid = leaf % l->fan;
}

static void name_top(uint64_t t, char *b, size_t n) { snprintf(b, n, "d%03" PRIu64, t); }
static void name_mid(uint64_t m, char *b, size_t n) { snprintf(b, n, "s%03" PRIu64, m); }
static void name_file(uint64_t i, char *b, size_t n) { snprintf(b, n, "f%06" PRIu64 ".c", i); }

static void file_path(const struct layout *l, uint64_t i, char *b, size_t n) {
        uint64_t t, m;
        file_dirs(l, i, &t, &m);
        snprintf(b, n, "d%03" PRIu64 "/s%03" PRIu64 "/f%06" PRIu64 ".c", t, m, i);
}

/* 100 B .. 64 KiB: a power-of-two band 2^6..2^15 is chosen uniformly, then a
 * size within it (about log-uniform; mean about 10 KiB, median about 2 KiB). */
static size_t file_size(const struct layout *l, uint64_t i) {
        uint64_t r = mix64(l->seed * 0x100000001b3ull ^ (i * 2 + 1));
        unsigned b = 7 + (unsigned)(r % 10);
        uint64_t half = 1ull << (b - 1);
        uint64_t s = half + (r >> 8) % half;
        if (s < 100)
                s = 100;
        if (s > NTFS_CHUNK_SIZE)
                s = NTFS_CHUNK_SIZE;
        return (size_t)s;
}

/* Text-like bytes (letters, digits, punctuation, spaces, newlines): git
 * compresses them as it would source code. Never contains '#'. */
static void file_fill(const struct layout *l, uint64_t i, uint8_t *buf, size_t len) {
        static const char alpha[65] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789(){};=+-*/,.    \n\n";
        uint64_t s = mix64(l->seed ^ (i * 0x9e3779b97f4a7c15ull));
        for (size_t p = 0; p < len;) {
                s = mix64(s);
                uint64_t w = s;
                for (int k = 0; k < 10 && p < len; k++, w >>= 6)
                        buf[p++] = (uint8_t)alpha[w & 63];
        }
}

/* A one-file change: CHANGE_LEN bytes (starting with '#', so always
 * different from what is there) written at an offset of file ->file. */
struct change {
        uint64_t file;
        uint64_t off;
        size_t len;
        uint8_t data[CHANGE_LEN];
};

static void change_make(const struct layout *l, uint64_t k, struct change *c) {
        uint64_t r = mix64(l->seed ^ 0x636861676eull ^ (k << 20));
        c->file = r % l->n;
        size_t size = file_size(l, c->file);
        c->len = size < CHANGE_LEN ? size : CHANGE_LEN;
        c->off = size > c->len ? mix64(r) % (size - c->len + 1) : 0;
        char tmp[32];
        int n = snprintf(tmp, sizeof tmp, "#change %" PRIu64 "#", k);
        memset(c->data, '#', sizeof c->data);
        memcpy(c->data, tmp, n > 0 && (size_t)n < c->len ? (size_t)n : c->len);
}

/* ---- the store side ------------------------------------------------------------- */

static int fail_store(const char *what, int r) {
        fprintf(stderr, "bench-store: %s: %s (%s)\n", what, ntfs_strerror(r), ntfs_errcode(r));
        return -1;
}

static int ws_build(ntfs_ws *ws, const struct layout *l, uint8_t *buf, uint64_t *ret_bytes) {
        uint64_t cur_top = UINT64_MAX, cur_leaf = UINT64_MAX, top_ino = 0, mid_ino = 0, bytes = 0;
        char name[64];
        struct ntfs_attr a;
        int r;
        for (uint64_t i = 0; i < l->n; i++) {
                if (g_stop)
                        return fail_store("build", -EINTR);
                uint64_t t, m;
                file_dirs(l, i, &t, &m);
                if (t != cur_top) {
                        name_top(t, name, sizeof name);
                        if ((r = ntfs_ws_mkdir(ws, NTFS_ROOT_INO, name, 0755, 0, 0, &a)) < 0)
                                return fail_store("mkdir", r);
                        top_ino = a.ino;
                        cur_top = t;
                }
                if (i / LEAF_FILES != cur_leaf) {
                        name_mid(m, name, sizeof name);
                        if ((r = ntfs_ws_mkdir(ws, top_ino, name, 0755, 0, 0, &a)) < 0)
                                return fail_store("mkdir", r);
                        mid_ino = a.ino;
                        cur_leaf = i / LEAF_FILES;
                }
                name_file(i, name, sizeof name);
                if ((r = ntfs_ws_mknod(ws, mid_ino, name, S_IFREG | 0644, 0, 0, 0, &a)) < 0)
                        return fail_store("mknod", r);
                size_t size = file_size(l, i);
                file_fill(l, i, buf, size);
                ssize_t w = ntfs_ws_write(ws, a.ino, buf, size, 0, false);
                if (w < 0)
                        return fail_store("write", (int)w);
                if ((size_t)w != size)
                        return fail_store("write (short)", -EIO);
                bytes += size;
        }
        *ret_bytes = bytes;
        return 0;
}

static int ws_apply(ntfs_ws *ws, const struct layout *l, const struct change *c) {
        uint64_t t, m;
        char name[64];
        struct ntfs_attr a;
        int r;
        file_dirs(l, c->file, &t, &m);
        name_top(t, name, sizeof name);
        if ((r = ntfs_ws_lookup(ws, NTFS_ROOT_INO, name, &a)) < 0)
                return fail_store("lookup", r);
        name_mid(m, name, sizeof name);
        if ((r = ntfs_ws_lookup(ws, a.ino, name, &a)) < 0)
                return fail_store("lookup", r);
        name_file(c->file, name, sizeof name);
        if ((r = ntfs_ws_lookup(ws, a.ino, name, &a)) < 0)
                return fail_store("lookup", r);
        ssize_t w = ntfs_ws_write(ws, a.ino, c->data, c->len, c->off, false);
        if (w < 0)
                return fail_store("write", (int)w);
        if ((size_t)w != c->len)
                return fail_store("write (short)", -EIO);
        return 0;
}

/* Space used by a store, read with LMDB directly (see measure_space()). The figure the
 * benchmark uses is the pages in use by every database (B-tree branch, leaf
 * and overflow pages, including the main database that names them), times
 * the page size: what the store occupies, without the free pages LMDB keeps
 * for reuse. The data file's size and ntfs_store_stats().used_bytes are its
 * high-water mark instead — they include free pages (the working-state
 * chunks that the first checkpoint turned into objects, for instance), so
 * later growth would hide in them. The sum of the objects' encoded sizes is
 * reported too, as the logical figure. */
struct space {
        uint64_t in_use;   /* bytes of pages in use, all databases */
        uint64_t obj_pages; /* bytes of pages in use by obj */
        uint64_t obj_bytes; /* sum of key + value sizes in obj */
        uint64_t objects;
};

static int store_space(const char *dir, struct space *ret) {
        static const char *const dbs[] = { "meta", "obj",  "commits", "sess",  "tags",  "reflog", "ino",
                                           "dent", "chunk", "xattr", "lmap", "dlink", "orph",   "dead" };
        char path[PATH_MAX];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/data.mdb", dir) >= (int)sizeof path)
                return -ENAMETOOLONG;
        if (stat(path, &sb) < 0)
                return -errno;
        MDB_env *env;
        int rc = mdb_env_create(&env);
        if (rc)
                return -EIO;
        memset(ret, 0, sizeof *ret);
        MDB_txn *txn = NULL;
        size_t map = ((size_t)sb.st_size + (1u << 20)) & ~(size_t)4095;
        if ((rc = mdb_env_set_maxdbs(env, 32)) || (rc = mdb_env_set_mapsize(env, map)) ||
            (rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK, 0600)) ||
            (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)))
                goto out;
        MDB_dbi dbi;
        MDB_stat s;
        if ((rc = mdb_dbi_open(txn, NULL, 0, &dbi)) || (rc = mdb_stat(txn, dbi, &s)))
                goto out;
        ret->in_use += (s.ms_branch_pages + s.ms_leaf_pages + s.ms_overflow_pages) * (uint64_t)s.ms_psize;
        for (size_t i = 0; i < ARRAY_SIZE(dbs); i++) {
                rc = mdb_dbi_open(txn, dbs[i], 0, &dbi);
                if (rc == MDB_NOTFOUND)
                        continue;
                if (rc || (rc = mdb_stat(txn, dbi, &s)))
                        goto out;
                uint64_t b = (s.ms_branch_pages + s.ms_leaf_pages + s.ms_overflow_pages) * (uint64_t)s.ms_psize;
                ret->in_use += b;
                if (strcmp(dbs[i], "obj") != 0)
                        continue;
                ret->obj_pages = b;
                MDB_cursor *cur;
                if ((rc = mdb_cursor_open(txn, dbi, &cur)))
                        goto out;
                MDB_val k, v;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        ret->obj_bytes += k.mv_size + v.mv_size;
                        ret->objects++;
                }
                mdb_cursor_close(cur);
                if (rc != MDB_NOTFOUND)
                        goto out;
                rc = 0;
        }
out:
        if (txn)
                mdb_txn_abort(txn);
        mdb_env_close(env);
        if (rc) {
                fprintf(stderr, "bench-store: reading %s: %s\n", path, mdb_strerror(rc));
                return -EIO;
        }
        return 0;
}

enum { OP_CHECKPOINT, OP_FORK, OP_TAG, OP_ROLLBACK, OP_DIFF, OP_N };
static const char *const op_names[OP_N] = { "checkpoint, 1 file changed", "fork", "tag", "rollback",
                                            "diff, 1 file differs" };

struct result {
        uint64_t nfiles, ndirs, content_bytes;
        double build_s, first_ckpt_s;
        double us[OP_N];       /* median total */
        double sync_us[OP_N];  /* median time in fsync/fdatasync */
        double store_us[OP_N]; /* median of (total - sync) */
        double syncs[OP_N];    /* median number of syncs */
        struct space base, after;
        bool git_done;
        double git_us, git_first_s;
};

/* One timed sample: wall time and the syncs made within it. */
struct sample {
        int64_t t0;
        uint64_t c0, n0;
};

static void sample_start(struct sample *s) {
        s->c0 = atomic_load(&g_sync_calls);
        s->n0 = atomic_load(&g_sync_ns);
        s->t0 = ntfs_mono_ns();
}

struct samples {
        double *us, *sync_us, *store_us, *syncs;
        size_t n;
};

static void sample_end(struct sample *s, struct samples *v) {
        int64_t t1 = ntfs_mono_ns();
        double us = (double)(t1 - s->t0) / 1e3;
        double sus = (double)(atomic_load(&g_sync_ns) - s->n0) / 1e3;
        v->us[v->n] = us;
        v->sync_us[v->n] = sus;
        v->store_us[v->n] = us - sus;
        v->syncs[v->n] = (double)(atomic_load(&g_sync_calls) - s->c0);
        v->n++;
}

static void samples_store(const struct samples *v, struct result *res, int op) {
        res->us[op] = median(v->us, v->n);
        res->sync_us[op] = median(v->sync_us, v->n);
        res->store_us[op] = median(v->store_us, v->n);
        res->syncs[op] = median(v->syncs, v->n);
}

struct diff_count {
        int n;
        char kind;
        char path[256];
};

static int diff_cb(const struct ntfs_diff_entry *e, void *ud) {
        struct diff_count *d = ud;
        if (d->n++ == 0) {
                d->kind = (char)e->kind;
                snprintf(d->path, sizeof d->path, "%s", e->path);
        }
        return 0;
}

static int open_store(const char *dir, ntfs_store **st) {
        int r = ntfs_store_open(dir, NULL, st);
        return r < 0 ? fail_store("open store", r) : 0;
}

/* Flushes the page cache of the filesystem holding dir, so that writeback
 * of what the setup wrote does not run during a measurement. */
static void settle(const char *dir) {
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0)
                (void)syncfs(fd);
}

/* One workspace under test: its store (scratch slot), session "main" and
 * handle, the commits of the checkpoint phase and the samples. */
struct wrun {
        struct layout l;
        struct result *res;
        int slot;
        ntfs_store *st;
        ntfs_ws *ws;
        ntfs_hash *commits; /* [0]: base; [i + 1]: checkpoint i */
        struct samples sv;
        double *arena;
};

static void wrun_release(struct wrun *w) {
        if (w->ws)
                ntfs_ws_close(w->ws);
        if (w->st)
                ntfs_store_close(w->st);
        w->ws = NULL;
        w->st = NULL;
        scratch_drop(w->slot);
        free(w->commits);
        free(w->arena);
        w->commits = NULL;
        w->arena = NULL;
}

/* gc, then the space the store uses. The store stays open: closing and
 * reopening it would leave its map cold (every page touched afterwards
 * faults in again), which would then be timed as checkpoint work. Reading
 * data.mdb through a second, read-only LMDB environment (MDB_NOLOCK: no
 * lock file, no locks) is safe here because nothing writes meanwhile: gc
 * ends with a durable commit and no open batch, the flusher thread only
 * commits an open batch, and this program makes no store call until the
 * read is done. */
static int measure_space(struct wrun *w, struct space *ret) {
        struct ntfs_gc_stats gs;
        int r = ntfs_gc(w->st, NULL, 0, &gs);
        if (r == 0)
                r = ntfs_store_flush(w->st, true);
        if (r < 0)
                return fail_store("gc", r);
        return store_space(g_scratch[w->slot], ret) < 0 ? -1 : 0;
}

/* Builds the workspace, checkpoints it once, and measures the storage of
 * 100 forks that each change one file. Leaves the store open, main's
 * handle open. */
static int wrun_setup(struct wrun *w, const char *parent, unsigned reps) {
        struct result *res = w->res;
        const struct layout *l = &w->l;
        _cleanup_free_ uint8_t *buf = malloc(NTFS_CHUNK_SIZE);
        w->commits = calloc(reps + 1, sizeof *w->commits);
        w->arena = calloc(4 * (size_t)reps, sizeof(double));
        if (!buf || !w->commits || !w->arena)
                return fail_store("allocate", -ENOMEM);
        w->sv = (struct samples){ w->arena, w->arena + reps, w->arena + 2 * (size_t)reps,
                                  w->arena + 3 * (size_t)reps, 0 };
        int r = scratch_make(w->slot, parent, "store");
        if (r < 0)
                return fail_store("create the store directory", r);
        res->nfiles = l->n;
        res->ndirs = l->ntop + l->nleaf;
        if (open_store(g_scratch[w->slot], &w->st) < 0)
                return -1;
        if ((r = ntfs_session_create(w->st, "main", NULL, NULL)) < 0 ||
            (r = ntfs_ws_open(w->st, "main", &w->ws)) < 0)
                return fail_store("create session main", r);
        progress("%" PRIu64 " files: building the workspace through ntfs_ws_*", l->n);
        int64_t t0 = ntfs_mono_ns();
        if (ws_build(w->ws, l, buf, &res->content_bytes) < 0)
                return -1;
        res->build_s = (double)(ntfs_mono_ns() - t0) / 1e9;
        t0 = ntfs_mono_ns();
        bool changed;
        if ((r = ntfs_checkpoint(w->st, "main", "base", NULL, &w->commits[0], &changed)) < 0)
                return fail_store("first checkpoint", r);
        res->first_ckpt_s = (double)(ntfs_mono_ns() - t0) / 1e9;
        progress("%" PRIu64 " files: built in %.1f s (%.1f MiB), first checkpoint %.2f s", l->n, res->build_s,
                 (double)res->content_bytes / (1 << 20), res->first_ckpt_s);
        ntfs_ws_close(w->ws);
        w->ws = NULL;

        if (measure_space(w, &res->base) < 0)
                return -1;
        for (unsigned f = 0; f < N_FORKS; f++) {
                char name[32];
                struct change c;
                ntfs_hash h;
                snprintf(name, sizeof name, "fk-%03u", f);
                if (g_stop)
                        return fail_store("forks", -EINTR);
                if ((r = ntfs_fork(w->st, "main", name, NULL)) < 0 || (r = ntfs_ws_open(w->st, name, &w->ws)) < 0)
                        return fail_store("fork", r);
                change_make(l, 1000000 + f, &c);
                if (ws_apply(w->ws, l, &c) < 0)
                        return -1;
                if ((r = ntfs_checkpoint(w->st, name, "fork change", NULL, &h, &changed)) < 0 || !changed)
                        return fail_store("checkpoint a fork", r < 0 ? r : -EIO);
                ntfs_ws_close(w->ws);
                w->ws = NULL;
        }
        if (measure_space(w, &res->after) < 0)
                return -1;
        progress("%" PRIu64 " files: storage of %d one-file forks measured", l->n, N_FORKS);
        if ((r = ntfs_ws_open(w->st, "main", &w->ws)) < 0)
                return fail_store("open main", r);
        return 0;
}

/* One timed repetition of op on w. */
static int wrun_op(struct wrun *w, int op, unsigned i, unsigned reps) {
        const struct layout *l = &w->l;
        struct sample s;
        struct change c;
        char a[NTFS_HEX_LEN + 1], b[NTFS_HEX_LEN + 1], name[32];
        ntfs_hash h;
        bool changed;
        int r;
        switch (op) {
        case OP_CHECKPOINT:
                /* after a one-file change (not timed) */
                change_make(l, i, &c);
                if (ws_apply(w->ws, l, &c) < 0)
                        return -1;
                sample_start(&s);
                r = ntfs_checkpoint(w->st, "main", "one file", NULL, &w->commits[i + 1], &changed);
                sample_end(&s, &w->sv);
                if (r < 0 || !changed)
                        return fail_store("checkpoint", r < 0 ? r : -EIO);
                return 0;
        case OP_DIFF: {
                /* checkpoints i and i + 1 differ in the file change i wrote */
                struct diff_count d = { 0 };
                char want[256];
                ntfs_hash_hex(&w->commits[i], a);
                ntfs_hash_hex(&w->commits[i + 1], b);
                sample_start(&s);
                r = ntfs_diff(w->st, a, b, NULL, diff_cb, &d);
                sample_end(&s, &w->sv);
                if (r < 0)
                        return fail_store("diff", r);
                change_make(l, i, &c);
                file_path(l, c.file, want, sizeof want);
                if (d.n != 1 || d.kind != NTFS_DIFF_MODIFIED || strcmp(d.path, want) != 0) {
                        fprintf(stderr, "bench-store: diff gave %d entries (first: %c %s), expected M %s\n", d.n,
                                d.kind ? d.kind : '-', d.path, want);
                        return -1;
                }
                return 0;
        }
        case OP_FORK:
                snprintf(name, sizeof name, "bf-%04u", i);
                sample_start(&s);
                r = ntfs_fork(w->st, "main", name, &h);
                sample_end(&s, &w->sv);
                if (r < 0 || memcmp(h.b, w->commits[reps].b, NTFS_HASH_LEN) != 0)
                        return fail_store("fork", r < 0 ? r : -EIO);
                return 0;
        case OP_TAG:
                snprintf(name, sizeof name, "tg-%04u", i);
                sample_start(&s);
                r = ntfs_tag_create(w->st, "main", name, NULL, NTFS_TAG_SESSION, &h);
                sample_end(&s, &w->sv);
                if (r < 0 || memcmp(h.b, w->commits[reps].b, NTFS_HASH_LEN) != 0)
                        return fail_store("tag", r < 0 ? r : -EIO);
                return 0;
        case OP_ROLLBACK:
                /* to checkpoint i: never the head (which is checkpoint reps, then i - 1) */
                ntfs_hash_hex(&w->commits[i], a);
                sample_start(&s);
                r = ntfs_rollback(w->st, "main", a, 0, &h);
                sample_end(&s, &w->sv);
                if (r < 0 || memcmp(h.b, w->commits[i].b, NTFS_HASH_LEN) != 0)
                        return fail_store("rollback", r < 0 ? r : -EIO);
                return 0;
        default:
                return -1;
        }
}

/* The store side for both workspaces. Both stores stay open and every
 * operation alternates between them rep by rep (small first on even reps,
 * big first on odd ones), so that a change in the machine's load during
 * the run reaches both sizes alike and their ratio stays meaningful. */
static int run_store(const char *parent, const struct layout lay[2], unsigned reps, struct result res[2]) {
        struct wrun w[2] = { { .l = lay[0], .res = &res[0], .slot = 0 }, { .l = lay[1], .res = &res[1], .slot = 3 } };
        static const int order[OP_N] = { OP_CHECKPOINT, OP_DIFF, OP_FORK, OP_TAG, OP_ROLLBACK };
        int ret = -1;
        for (int k = 0; k < 2; k++)
                if (wrun_setup(&w[k], parent, reps) < 0)
                        goto out;
        for (int o = 0; o < OP_N; o++) {
                int op = order[o];
                settle(parent);
                w[0].sv.n = w[1].sv.n = 0;
                for (unsigned i = 0; i < reps; i++)
                        for (int k = 0; k < 2; k++) {
                                if (g_stop) {
                                        fail_store("timing", -EINTR);
                                        goto out;
                                }
                                if (wrun_op(&w[(int)(i + (unsigned)k) % 2], op, i, reps) < 0)
                                        goto out;
                        }
                for (int k = 0; k < 2; k++)
                        samples_store(&w[k].sv, w[k].res, op);
                progress("timed: %s (%u reps at each size)", op_names[op], reps);
        }
        ret = 0;
out:
        for (int k = 0; k < 2; k++)
                wrun_release(&w[k]);
        return ret;
}

/* ---- the git side ------------------------------------------------------------------ */

/* Environment for git: the caller's, minus GIT_*, plus a fixed identity, no
 * system or global configuration, and no automatic gc/maintenance (which
 * would otherwise start repacking 100,000 loose objects in the middle of
 * the measurement). Built before any fork: the child only calls
 * async-signal-safe functions. */
static char **git_env(void) {
        static const char *const extra[] = {
                "GIT_CONFIG_NOSYSTEM=1",         "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=bench",
                "GIT_AUTHOR_EMAIL=bench@localhost", "GIT_COMMITTER_NAME=bench",
                "GIT_COMMITTER_EMAIL=bench@localhost", "GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto",
                "GIT_CONFIG_VALUE_0=0", "GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
                "LC_ALL=C",
        };
        size_t n = 0;
        while (environ && environ[n])
                n++;
        char **env = calloc(n + ARRAY_SIZE(extra) + 1, sizeof *env);
        if (!env)
                return NULL;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
                if (strncmp(environ[i], "GIT_", 4) != 0 && strncmp(environ[i], "LC_ALL=", 7) != 0)
                        env[m++] = environ[i];
        for (size_t i = 0; i < ARRAY_SIZE(extra); i++)
                env[m++] = (char *)extra[i];
        return env;
}

/* Runs `sh -c cmd` in dir (its stdout goes to our stderr); returns the exit
 * status, or -errno. */
static int run_sh(char **env, const char *dir, const char *cmd) {
        char *argv[] = { (char *)"sh", (char *)"-c", (char *)cmd, NULL };
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                if (chdir(dir) < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
                        _exit(126);
                execve("/bin/sh", argv, env);
                _exit(127);
        }
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off) {
        while (n) {
                ssize_t w = pwrite(fd, p, n, off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                p += w;
                n -= (size_t)w;
                off += w;
        }
        return 0;
}

static int path_join(char *out, size_t n, const char *root, const char *rel) {
        int len = snprintf(out, n, "%s/%s", root, rel);
        return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

static int native_build(const char *root, const struct layout *l, uint8_t *buf) {
        char path[PATH_MAX], rel[128];
        uint64_t cur_top = UINT64_MAX, cur_leaf = UINT64_MAX;
        int r;
        for (uint64_t i = 0; i < l->n; i++) {
                if (g_stop)
                        return -EINTR;
                uint64_t t, m;
                file_dirs(l, i, &t, &m);
                if (t != cur_top) {
                        snprintf(rel, sizeof rel, "d%03" PRIu64, t);
                        if ((r = path_join(path, sizeof path, root, rel)) < 0)
                                return r;
                        if (mkdir(path, 0755) < 0)
                                return -errno;
                        cur_top = t;
                }
                if (i / LEAF_FILES != cur_leaf) {
                        snprintf(rel, sizeof rel, "d%03" PRIu64 "/s%03" PRIu64, t, m);
                        if ((r = path_join(path, sizeof path, root, rel)) < 0)
                                return r;
                        if (mkdir(path, 0755) < 0)
                                return -errno;
                        cur_leaf = i / LEAF_FILES;
                }
                file_path(l, i, rel, sizeof rel);
                if ((r = path_join(path, sizeof path, root, rel)) < 0)
                        return r;
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0)
                        return -errno;
                size_t size = file_size(l, i);
                file_fill(l, i, buf, size);
                if ((r = write_all(fd, buf, size, 0)) < 0)
                        return r;
        }
        return 0;
}

static int native_apply(const char *root, const struct layout *l, const struct change *c) {
        char path[PATH_MAX], rel[128];
        file_path(l, c->file, rel, sizeof rel);
        int r = path_join(path, sizeof path, root, rel);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return write_all(fd, c->data, c->len, (off_t)c->off);
}

/* Returns 0 when measured, 1 when git is not available, -1 on error. */
static int run_git(const char *parent, const struct layout *l, unsigned reps, struct result *res) {
        _cleanup_free_ char **env = git_env();
        _cleanup_free_ uint8_t *buf = malloc(NTFS_CHUNK_SIZE);
        _cleanup_free_ double *us = calloc(reps, sizeof *us);
        int ret = -1, r;
        if (!env || !buf || !us) {
                fprintf(stderr, "bench-store: out of memory\n");
                return -1;
        }
        if ((r = run_sh(env, "/", "git --version >/dev/null 2>&1")) != 0) {
                fprintf(stderr, "bench-store: git is not available (sh: %d); the git comparison is skipped\n", r);
                return 1;
        }
        if ((r = scratch_make(1, parent, "git")) < 0) {
                fprintf(stderr, "bench-store: scratch directory: %s\n", strerror(-r));
                return -1;
        }
        const char *dir = g_scratch[1];
        progress("%" PRIu64 " files: writing the same tree to %s", l->n, dir);
        if ((r = native_build(dir, l, buf)) < 0) {
                fprintf(stderr, "bench-store: writing the native tree: %s\n", strerror(-r));
                goto out;
        }
        int64_t t0 = ntfs_mono_ns();
        if ((r = run_sh(env, dir, "git init -q && git add -A && git commit -q -m base")) != 0) {
                fprintf(stderr, "bench-store: git init/add/commit of the base tree failed (%d)\n", r);
                goto out;
        }
        res->git_first_s = (double)(ntfs_mono_ns() - t0) / 1e9;
        progress("%" PRIu64 " files: first git commit took %.1f s", l->n, res->git_first_s);
        settle(dir);
        for (unsigned i = 0; i < reps; i++) {
                struct change c;
                change_make(l, i, &c);
                if (g_stop)
                        goto out;
                if ((r = native_apply(dir, l, &c)) < 0) {
                        fprintf(stderr, "bench-store: changing a file: %s\n", strerror(-r));
                        goto out;
                }
                t0 = ntfs_mono_ns();
                r = run_sh(env, dir, GIT_CMD);
                us[i] = (double)(ntfs_mono_ns() - t0) / 1e3;
                if (r != 0) {
                        fprintf(stderr, "bench-store: `%s` failed (%d)\n", GIT_CMD, r);
                        goto out;
                }
        }
        res->git_us = median(us, reps);
        res->git_done = true;
        ret = 0;
out:
        scratch_drop(1);
        return ret;
}

/* ---- fdatasync floor -------------------------------------------------------------- */

static int sync_floor(const char *parent, double *ret_us) {
        int r = scratch_make(2, parent, "sync");
        if (r < 0)
                return r;
        char path[PATH_MAX];
        if ((r = path_join(path, sizeof path, g_scratch[2], "f")) < 0) {
                scratch_drop(2);
                return r;
        }
        double us[20];
        uint8_t page[4096];
        memset(page, 'x', sizeof page);
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                r = -errno;
        for (int i = 0; r == 0 && i < (int)ARRAY_SIZE(us); i++) {
                if ((r = write_all(fd, page, sizeof page, (off_t)(i % 8) * 4096)) < 0)
                        break;
                int64_t t0 = ntfs_mono_ns();
                if (fdatasync(fd) < 0)
                        r = -errno;
                us[i] = (double)(ntfs_mono_ns() - t0) / 1e3;
        }
        scratch_drop(2);
        if (r == 0)
                *ret_us = median(us, ARRAY_SIZE(us));
        return r;
}

/* ---- the report --------------------------------------------------------------------- */

static unsigned g_pass, g_miss;

static void verdict(const char *what, const char *figure, const char *target, bool ok, const char *note) {
        printf("  %-52s %12s  %-9s %s%s%s\n", what, figure, target, ok ? "PASS" : "MISS", note && *note ? "  " : "",
               note ? note : "");
        if (ok)
                g_pass++;
        else
                g_miss++;
}

static void sync_note(char *buf, size_t n, const struct result *r, int op) {
        if (r->syncs[op] <= 0) {
                buf[0] = 0;
                return;
        }
        snprintf(buf, n, "(%.0f fsync%s = %.0f us of it; store work %.0f us)", r->syncs[op],
                 r->syncs[op] == 1 ? "" : "s", r->sync_us[op], r->store_us[op]);
}

static void report(const struct result *s, const struct result *b, unsigned reps, unsigned git_reps,
                   const char *dir, double floor_us, uint64_t seed) {
        char c1[32], c2[32];
        snprintf(c1, sizeof c1, "%" PRIu64 " files", s->nfiles);
        snprintf(c2, sizeof c2, "%" PRIu64 " files", b->nfiles);
        printf("\nbench-store: median of %u reps (git: %u), seed %" PRIu64 ", scratch %s (%s)\n", reps, git_reps,
               seed, dir, fs_name(dir));
        printf("fdatasync on that filesystem: %.0f us (median of 20)\n", floor_us);
        printf("workspaces: %s in %" PRIu64 " dirs, %.1f MiB; %s in %" PRIu64 " dirs, %.1f MiB\n"
               "            (%d files per dir, 3 levels, 100 B..64 KiB, checkpointed once)\n\n",
               c1, s->ndirs, (double)s->content_bytes / (1 << 20), c2, b->ndirs,
               (double)b->content_bytes / (1 << 20), LEAF_FILES);

        printf("%-28s %35s | %-7s | %s\n", "", "total (what the caller waits)", "fsyncs",
               "store work (total - fsync time)");
        printf("%-28s %12s %12s %9s | %7s | %12s %12s %9s\n", "median, microseconds", c1, c2, "big/small", "", c1, c2,
               "big/small");
        for (int op = 0; op < OP_N; op++)
                printf("%-28s %12.1f %12.1f %9.2f | %3.0f %3.0f | %12.1f %12.1f %9.2f\n", op_names[op], s->us[op],
                       b->us[op], b->us[op] / s->us[op], s->syncs[op], b->syncs[op], s->store_us[op],
                       b->store_us[op], b->store_us[op] / s->store_us[op]);
        if (s->git_done && b->git_done) {
                printf("%-28s %12.1f %12.1f %9.2f |\n", "git add -A && git commit -q", s->git_us, b->git_us,
                       b->git_us / s->git_us);
                printf("%-28s %11.1fx %11.1fx %9s | %7s | %11.1fx %11.1fx\n", "git / checkpoint",
                       s->git_us / s->us[OP_CHECKPOINT], b->git_us / b->us[OP_CHECKPOINT], "", "",
                       s->git_us / s->store_us[OP_CHECKPOINT], b->git_us / b->store_us[OP_CHECKPOINT]);
        } else {
                printf("%-28s %12s %12s\n", "git add -A && git commit -q", "skipped", "skipped");
        }

        printf("\nstorage: pages in use by all LMDB databases after gc [objects' encoded bytes]\n");
        printf("%-28s %12s %12s\n", "", c1, c2);
        const struct result *rs[2] = { s, b };
        double ratio[2], oratio[2], per[2], oper[2];
        for (int i = 0; i < 2; i++) {
                ratio[i] = (double)rs[i]->after.in_use / (double)rs[i]->base.in_use;
                oratio[i] = (double)rs[i]->after.obj_bytes / (double)rs[i]->base.obj_bytes;
                per[i] = ((double)rs[i]->after.in_use - (double)rs[i]->base.in_use) / N_FORKS / 1024;
                oper[i] = ((double)rs[i]->after.obj_bytes - (double)rs[i]->base.obj_bytes) / N_FORKS / 1024;
        }
        printf("%-28s %12.2f %12.2f   [%.2f, %.2f]\n", "base workspace (MiB)", (double)s->base.in_use / (1 << 20),
               (double)b->base.in_use / (1 << 20), (double)s->base.obj_bytes / (1 << 20),
               (double)b->base.obj_bytes / (1 << 20));
        printf("%-28s %12.2f %12.2f   [%.2f, %.2f]\n", "+ 100 one-file forks (MiB)",
               (double)s->after.in_use / (1 << 20), (double)b->after.in_use / (1 << 20),
               (double)s->after.obj_bytes / (1 << 20), (double)b->after.obj_bytes / (1 << 20));
        printf("%-28s %11.4fx %11.4fx   [%.4fx, %.4fx]\n", "ratio to the base", ratio[0], ratio[1], oratio[0],
               oratio[1]);
        printf("%-28s %12.1f %12.1f   [%.1f, %.1f]\n", "per fork (KiB)", per[0], per[1], oper[0], oper[1]);

        printf("\ntargets (issue 2)%*s %12s  %-9s\n", 36, "", "figure", "target");
        char fig[32], what[96], note[200];
        for (int op = 0; op < OP_N; op++) {
                double x = b->store_us[op] / s->store_us[op];
                snprintf(what, sizeof what, "%s: big/small", op_names[op]);
                snprintf(fig, sizeof fig, "%.2f", x);
                snprintf(note, sizeof note, "(store work; total %.2f)", b->us[op] / s->us[op]);
                verdict(what, fig, "<= 1.5", x <= 1.5, note);
        }
        for (int op = OP_FORK; op <= OP_ROLLBACK; op++) {
                const struct result *w = b->us[op] >= s->us[op] ? b : s;
                snprintf(what, sizeof what, "%s at %" PRIu64 " files (the slower size)", op_names[op], w->nfiles);
                snprintf(fig, sizeof fig, "%.0f us", w->us[op]);
                bool ok = w->us[op] <= 1000;
                sync_note(note, sizeof note, w, op);
                verdict(what, fig, "<= 1 ms", ok, ok ? NULL : note);
        }
        snprintf(what, sizeof what, "git / checkpoint at %" PRIu64 " files", b->nfiles);
        if (b->git_done) {
                double x = b->git_us / b->us[OP_CHECKPOINT];
                snprintf(fig, sizeof fig, "%.1fx", x);
                snprintf(note, sizeof note, "(checkpoint %.0f us = %.0f fsyncs %.0f us + store work %.0f us; git %.0f us)",
                         b->us[OP_CHECKPOINT], b->syncs[OP_CHECKPOINT], b->sync_us[OP_CHECKPOINT],
                         b->store_us[OP_CHECKPOINT], b->git_us);
                verdict(what, fig, ">= 100x", x >= 100, note);
        } else {
                printf("  %-52s %12s  %-9s %s\n", what, "-", ">= 100x", "SKIPPED");
        }
        snprintf(what, sizeof what, "100 one-file forks / base at %" PRIu64 " files", b->nfiles);
        snprintf(fig, sizeof fig, "%.4fx", ratio[1]);
        verdict(what, fig, "<= 1.05x", ratio[1] <= 1.05, NULL);
        printf("  (at %" PRIu64 " files they cost %.4fx: %.1f KiB per fork against a %.1f MiB workspace;\n"
               "   the storage target is judged on the big workspace)\n",
               s->nfiles, ratio[0], per[0], (double)s->base.in_use / (1 << 20));
        printf("  big/small is judged on the store's work: an fsync's latency is the disk's, the same at any\n"
               "  size, and on a shared disk it varies more between two runs than the store's work does.\n");
        printf("\n%u PASS, %u MISS (timing misses do not change the exit status)\n", g_pass, g_miss);
}

/* ---- --per-file: the store's own work per file created and removed --------------
 * What the FUSE mount asks of the store for each file of the benchmark's
 * creates row (tools/bench-fs-helper.py: open O_CREAT|O_EXCL, write 100 B,
 * close): a LOOKUP that misses, a MKNOD, a GETATTR and a WRITE; and for
 * each file of rm -rf an UNLINK and the FORGET that follows. Timed call
 * by call through ntfs_ws_*, without FUSE, against the same steps as
 * system calls on a native directory (under --native-dir, default --dir:
 * a tmpfs such as /dev/shm is the steadier baseline, since this kind of
 * machine's ext4 creates swing widely), in the same process,
 * rounds alternating. It tells the store's part of a create apart from what
 * /dev/fuse and scheduling cost (docs/bench-fs.md). */

enum { CR_LOOKUP, CR_MKNOD, CR_GETATTR, CR_WRITE, CR_UNLINK, CR_N };
static const char *const cr_names[CR_N] = { "lookup (missing)", "create", "getattr", "write 100 B", "unlink" };
#define CR_ROUNDS 3

/* A create's four steps, timed at t[0..4]. */
static void create_account(int64_t ns[CR_N], const int64_t t[CR_UNLINK + 1]) {
        for (int k = 0; k < CR_UNLINK; k++)
                ns[k] += t[k + 1] - t[k];
}

static void per_file_us(double us[CR_N], const int64_t ns[CR_N], uint64_t n) {
        for (int k = 0; k < CR_N; k++)
                us[k] = (double)ns[k] / 1e3 / (double)n;
}

static int per_file_store(const char *parent, uint64_t n, double us[CR_N]) {
        int slot = 0, r = scratch_make(slot, parent, "per-file-store");
        if (r < 0) {
                fprintf(stderr, "bench-store: scratch directory in %s: %s\n", parent, strerror(-r));
                return r;
        }
        ntfs_store *st = NULL;
        ntfs_ws *ws = NULL;
        struct ntfs_attr d, a, g;
        uint8_t data[CHANGE_LEN];
        int64_t ns[CR_N] = { 0 };
        memset(data, 'x', sizeof data);
        if ((r = open_store(g_scratch[slot], &st)) < 0)
                goto out;
        if ((r = ntfs_session_create(st, "per-file", NULL, NULL)) < 0 ||
            (r = ntfs_ws_open(st, "per-file", &ws)) < 0 ||
            (r = ntfs_ws_mkdir(ws, NTFS_ROOT_INO, "c", 0755, 0, 0, &d)) < 0) {
                r = fail_store("per-file setup", r);
                goto out;
        }
        for (uint64_t i = 0; i < n && !g_stop; i++) {
                char name[32];
                name_file(i, name, sizeof name);
                int64_t t0 = ntfs_mono_ns();
                r = ntfs_ws_lookup(ws, d.ino, name, &a);
                int64_t t1 = ntfs_mono_ns();
                if (r != -ENOENT) {
                        r = fail_store("lookup of a missing name", r < 0 ? r : -EEXIST);
                        goto out;
                }
                if ((r = ntfs_ws_mknod(ws, d.ino, name, S_IFREG | 0644, 0, 0, 0, &a)) < 0) {
                        r = fail_store("mknod", r);
                        goto out;
                }
                int64_t t2 = ntfs_mono_ns();
                if ((r = ntfs_ws_getattr(ws, a.ino, &g)) < 0) {
                        r = fail_store("getattr", r);
                        goto out;
                }
                int64_t t3 = ntfs_mono_ns();
                ssize_t w = ntfs_ws_write(ws, a.ino, data, sizeof data, 0, false);
                int64_t t4 = ntfs_mono_ns();
                if (w != (ssize_t)sizeof data) {
                        r = fail_store("write", w < 0 ? (int)w : -EIO);
                        goto out;
                }
                create_account(ns, (const int64_t[]){ t0, t1, t2, t3, t4 });
        }
        /* then rm: each name unlinked, and its inode forgotten as the
         * kernel's FORGET does (queued; the flusher frees it) */
        for (uint64_t i = 0; i < n && !g_stop; i++) {
                char name[32];
                name_file(i, name, sizeof name);
                if ((r = ntfs_ws_lookup(ws, d.ino, name, &a)) < 0) {
                        r = fail_store("lookup", r);
                        goto out;
                }
                int64_t t0 = ntfs_mono_ns();
                r = ntfs_ws_unlink(ws, d.ino, name);
                if (r == 0)
                        ntfs_ws_forget(ws, a.ino);
                ns[CR_UNLINK] += ntfs_mono_ns() - t0;
                if (r < 0) {
                        r = fail_store("unlink", r);
                        goto out;
                }
        }
        r = g_stop ? -EINTR : 0;
        per_file_us(us, ns, n);
out:
        if (ws)
                ntfs_ws_close(ws);
        if (st)
                ntfs_store_close(st);
        scratch_drop(slot);
        return r;
}

static int per_file_native(const char *parent, uint64_t n, double us[CR_N]) {
        int slot = 1, r = scratch_make(slot, parent, "per-file-native");
        if (r < 0)
                return r;
        int dfd = open(g_scratch[slot], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        uint8_t data[CHANGE_LEN];
        int64_t ns[CR_N] = { 0 };
        memset(data, 'x', sizeof data);
        if (dfd < 0) {
                r = -errno;
                goto out;
        }
        for (uint64_t i = 0; i < n && !g_stop; i++) {
                char name[32];
                struct stat sb;
                name_file(i, name, sizeof name);
                int64_t t0 = ntfs_mono_ns();
                int e = fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ? errno : 0;
                int64_t t1 = ntfs_mono_ns();
                if (e != ENOENT) {
                        r = e ? -e : -EEXIST;
                        goto out;
                }
                int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
                int64_t t2 = ntfs_mono_ns();
                if (fd < 0) {
                        r = -errno;
                        goto out;
                }
                int rs = fstat(fd, &sb);
                int64_t t3 = ntfs_mono_ns();
                ssize_t w = rs < 0 ? -1 : write(fd, data, sizeof data);
                int64_t t4 = ntfs_mono_ns();
                if (w != (ssize_t)sizeof data)
                        r = w < 0 ? -errno : -EIO;
                close(fd);
                if (r < 0)
                        goto out;
                create_account(ns, (const int64_t[]){ t0, t1, t2, t3, t4 });
        }
        for (uint64_t i = 0; i < n && !g_stop; i++) {
                char name[32];
                name_file(i, name, sizeof name);
                int64_t t0 = ntfs_mono_ns();
                int e = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
                ns[CR_UNLINK] += ntfs_mono_ns() - t0;
                if (e < 0) {
                        r = e;
                        goto out;
                }
        }
        r = g_stop ? -EINTR : 0;
        per_file_us(us, ns, n);
out:
        if (dfd >= 0)
                close(dfd);
        scratch_drop(slot);
        return r;
}

/* One round's time for step k; k == CR_N: a create's four steps together. */
static double step_us(const double row[CR_N], int k) {
        if (k < CR_N)
                return row[k];
        double sum = 0;
        for (int j = 0; j < CR_UNLINK; j++)
                sum += row[j];
        return sum;
}

/* Prints the medians of CR_ROUNDS alternating rounds per step, and a create's sum. */
static int run_per_file(const char *parent, const char *native, uint64_t n) {
        double s[CR_ROUNDS][CR_N], v[CR_ROUNDS][CR_N], ms[CR_N + 1], mv[CR_N + 1];
        for (int round = 0; round < CR_ROUNDS; round++) {
                progress("per-file: round %d of %d, %" PRIu64 " files in the store, then natively\n", round + 1,
                         CR_ROUNDS, n);
                int r = per_file_store(parent, n, s[round]);
                if (r == 0) {
                        settle(parent);
                        r = per_file_native(native, n, v[round]);
                        if (r < 0)
                                fprintf(stderr, "bench-store: native files in %s: %s\n", native, strerror(-r));
                }
                if (r < 0)
                        return r;
                settle(native);
        }
        for (int k = 0; k <= CR_N; k++) {
                double a[CR_ROUNDS], b[CR_ROUNDS];
                for (int round = 0; round < CR_ROUNDS; round++) {
                        a[round] = step_us(s[round], k);
                        b[round] = step_us(v[round], k);
                }
                ms[k] = median(a, CR_ROUNDS);
                mv[k] = median(b, CR_ROUNDS);
        }
        printf("# bench-store --per-file: %" PRIu64 " files in one directory, median of %d alternating rounds\n", n,
               CR_ROUNDS);
        printf("# store: ntfs_ws_* calls on a store in %s (%s); native: system calls in %s (%s)\n", parent,
               fs_name(parent), native, fs_name(native));
        printf("| step per file      | store, us | native, us | store/native |\n");
        printf("|--------------------|-----------|------------|--------------|\n");
        for (int k = 0; k <= CR_N; k++)
                printf("| %-18s | %9.2f | %10.2f | %12.2f |\n", k < CR_N ? cr_names[k] : "a create (4 above)",
                       ms[k], mv[k], mv[k] > 0 ? ms[k] / mv[k] : 0.0);
        return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *f) {
        fprintf(f, "usage: bench-store [--small N] [--big N] [--quick] [--reps N] [--git-reps N]\n"
                   "                   [--dir DIR] [--seed N] [--no-git]\n"
                   "       bench-store --per-file N [--dir DIR] [--native-dir DIR]\n"
                   "  --small N     files in the small workspace (default 1000)\n"
                   "  --big N       files in the big workspace (default 100000)\n"
                   "  --quick       smoke test: 1000 and 10000 files, 5 reps, 1 git rep\n"
                   "  --reps N      repetitions of each store operation (default 20)\n"
                   "  --git-reps N  repetitions of the git commit (default 3)\n"
                   "  --dir DIR     where the scratch store and git tree go (default $TMPDIR or /tmp)\n"
                   "  --seed N      content seed (default 1)\n"
                   "  --no-git      skip the git comparison\n"
                   "  --per-file N  only this: the store's own time per file created (lookup,\n"
                   "                create, getattr, write) and removed (unlink), against the\n"
                   "                same system calls on a native directory; N files (e.g. 20000)\n"
                   "  --native-dir DIR  with --per-file: where the native files go (default --dir)\n");
}

static int parse_num(const char *opt, const char *v, uint64_t min, uint64_t max, uint64_t *ret) {
        if (!v || ntfs_parse_u64(v, max, ret) < 0 || *ret < min) {
                fprintf(stderr, "bench-store: %s needs a number in %" PRIu64 "..%" PRIu64 "\n", opt, min, max);
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        uint64_t small = 1000, big = 100000, reps = 20, git_reps = 3, seed = 1, per_file = 0;
        bool quick = false, no_git = false, set_small = false, set_big = false, set_reps = false, set_git = false;
        const char *dir = getenv("TMPDIR"), *native_dir = NULL;
        (void)ntfs_malloc_tune(); /* as the daemons do */
        if (!dir || !*dir)
                dir = "/tmp";
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                int r = 0;
                if (strcmp(a, "--quick") == 0) {
                        quick = true;
                        continue;
                } else if (strcmp(a, "--no-git") == 0) {
                        no_git = true;
                        continue;
                } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                        usage(stdout);
                        return 0;
                } else if (strcmp(a, "--small") == 0) {
                        r = parse_num(a, v, 1, MAX_FILES, &small);
                        set_small = true;
                } else if (strcmp(a, "--big") == 0) {
                        r = parse_num(a, v, 1, MAX_FILES, &big);
                        set_big = true;
                } else if (strcmp(a, "--reps") == 0) {
                        r = parse_num(a, v, 1, MAX_REPS, &reps);
                        set_reps = true;
                } else if (strcmp(a, "--git-reps") == 0) {
                        r = parse_num(a, v, 1, MAX_REPS, &git_reps);
                        set_git = true;
                } else if (strcmp(a, "--per-file") == 0) {
                        r = parse_num(a, v, 1, MAX_FILES, &per_file);
                } else if (strcmp(a, "--seed") == 0) {
                        r = parse_num(a, v, 0, UINT64_MAX, &seed);
                } else if (strcmp(a, "--dir") == 0) {
                        if (!v || !*v)
                                r = -1;
                        dir = v;
                } else if (strcmp(a, "--native-dir") == 0) {
                        if (!v || !*v)
                                r = -1;
                        native_dir = v;
                } else {
                        fprintf(stderr, "bench-store: unknown argument '%s'\n", a);
                        r = -1;
                }
                if (r < 0) {
                        usage(stderr);
                        return 2;
                }
                i++;
        }
        if (quick) {
                if (!set_small)
                        small = 1000;
                if (!set_big)
                        big = 10000;
                if (!set_reps)
                        reps = 5;
                if (!set_git)
                        git_reps = 1;
        }
        if (!native_dir)
                native_dir = dir;
        struct stat sb;
        for (int k = 0; k < 2; k++) {
                const char *d = k ? native_dir : dir;
                if (stat(d, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
                        fprintf(stderr, "bench-store: %s is not a directory\n", d);
                        return 2;
                }
        }

        g_t_start = ntfs_mono_ns();
        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        setvbuf(stdout, NULL, _IOLBF, 0);

        if (per_file) {
                int rc = run_per_file(dir, native_dir, per_file) < 0 || g_stop ? 1 : 0;
                scratch_drop_all();
                return rc;
        }

        static struct result res[2];
        struct layout lay[2];
        layout_init(&lay[0], small, seed);
        layout_init(&lay[1], big, seed);
        double floor_us = 0;
        int rc = 0, r;
        if ((r = sync_floor(dir, &floor_us)) < 0) {
                fprintf(stderr, "bench-store: measuring fdatasync in %s: %s\n", dir, strerror(-r));
                rc = 1;
        }
        if (rc == 0 && run_store(dir, lay, (unsigned)reps, res) < 0)
                rc = 1;
        for (int i = 0; rc == 0 && !no_git && i < 2; i++) {
                r = run_git(dir, &lay[i], (unsigned)git_reps, &res[i]);
                if (r < 0)
                        rc = 1;
                else if (r > 0)
                        break;
        }
        scratch_drop_all();
        if (rc == 0 && g_stop)
                rc = 1;
        if (rc == 0)
                report(&res[0], &res[1], (unsigned)reps, (unsigned)git_reps, dir, floor_us, seed);
        else
                fprintf(stderr, "bench-store: stopped by an error; nothing reported\n");
        return rc;
}
