/* SPDX-License-Identifier: MIT
 * test_archive.c — fs/sync/archive.c on a real store: a tree with every kind of
 * entry goes out and back in identically (and out again byte for byte), and
 * hostile archives are refused with their error and leave no session.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/sync/tarball.h"
#include "fs/store.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char tmpdir[256];

static void rm_rf(const char *d) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        if (system(cmd) != 0)
                fprintf(stderr, "rm failed\n");
}

static ntfs_store *open_store(void) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ntfs-archive-test-XXXXXX");
        if (!mkdtemp(tmpdir))
                abort();
        ntfs_store *st = NULL;
        struct ntfs_store_opts o = { .initial_map_bytes = 64ull << 20, .no_flusher = true };
        int r = ntfs_store_open(tmpdir, &o, &st);
        if (r < 0)
                FAIL("open store: %s", ntfs_strerror(r));
        return st;
}

static void close_store(ntfs_store *st) {
        ntfs_store_close(st);
        rm_rf(tmpdir);
}

/* A growing memory sink. */
struct mem {
        char *buf;
        size_t len, cap;
        int fail_after; /* > 0: fail the nth call with -EPIPE */
        int calls;
};

static int mem_sink(void *ud, const void *buf, size_t len) {
        struct mem *m = ud;
        if (m->fail_after && ++m->calls >= m->fail_after)
                return -EPIPE;
        if (m->len + len > m->cap) {
                size_t ncap = m->cap ? m->cap : 65536;
                while (ncap < m->len + len)
                        ncap *= 2;
                char *nb = realloc(m->buf, ncap);
                if (!nb)
                        return -ENOMEM;
                m->buf = nb;
                m->cap = ncap;
        }
        memcpy(m->buf + m->len, buf, len);
        m->len += len;
        return 0;
}

static int export_ref(ntfs_store *st, const char *ref, enum ntfs_archive_format fmt, struct mem *m) {
        ntfs_hash h;
        int r = ntfs_resolve(st, ref, &h, NULL, 0);
        if (r < 0)
                return r;
        char why[512];
        r = ntfs_archive_export(st, &h, fmt, mem_sink, m, NULL, why, sizeof why);
        if (r < 0)
                printf("# export: %s\n", why);
        return r;
}

static int import_mem(ntfs_store *st, const char *name, const struct mem *m, const struct ntfs_archive_limits *lim,
                      char *why, size_t whylen) {
        struct ntfs_archive_source src = { .fd = -1, .mem = m->buf, .len = m->len };
        return ntfs_archive_import(st, name, &src, lim, NULL, NULL, NULL, why, whylen);
}

static int count_cb(const struct ntfs_session_info *si, void *ud) {
        (*(int *)ud)++;
        return 0;
}

static int n_sessions(ntfs_store *st) {
        int n = 0;
        ASSERT_OK(ntfs_session_list(st, count_cb, &n));
        return n;
}

static void build_tree(ntfs_store *st) {
        ntfs_ws *ws;
        struct ntfs_attr a, d, f, out;
        ASSERT_OK(ntfs_session_create(st, "src", NULL, NULL));
        ASSERT_OK(ntfs_ws_open(st, "src", &ws));
        ASSERT_OK(ntfs_ws_mkdir(ws, NTFS_ROOT_INO, "dir", 0750, 7, 8, &d));
        ASSERT_OK(ntfs_ws_mkdir(ws, NTFS_ROOT_INO, "empty", 01777, 0, 0, &a));
        ASSERT_OK(ntfs_ws_mknod(ws, d.ino, "big", S_IFREG | 0644, 0, 1000, 1000, &f));
        char *buf = malloc(300000);
        ASSERT(buf);
        for (size_t i = 0; i < 300000; i++)
                buf[i] = (char)(i * 7 + i / 251);
        ASSERT_EQ(ntfs_ws_write(ws, f.ino, buf, 300000, 0, false), 300000);
        free(buf);
        ASSERT_OK(ntfs_ws_setxattr(ws, f.ino, "user.k", "v\0bin", 5, 0));
        struct ntfs_attr in = { .mode = 04755, .mtime = { 1600000000, 123456789 } };
        ASSERT_OK(ntfs_ws_setattr(ws, f.ino, &in, NTFS_SET_MODE | NTFS_SET_MTIME, &out));
        ASSERT_OK(ntfs_ws_link(ws, f.ino, NTFS_ROOT_INO, "hard", &a));
        ASSERT_OK(ntfs_ws_symlink(ws, d.ino, "sym", "big", 0, 0, &a));
        ASSERT_OK(ntfs_ws_symlink(ws, NTFS_ROOT_INO, "abs", "/etc/passwd", 0, 0, &a));
        ASSERT_OK(ntfs_ws_mknod(ws, NTFS_ROOT_INO, "fifo", S_IFIFO | 0600, 0, 0, 0, &a));
        ASSERT_OK(ntfs_ws_mknod(ws, NTFS_ROOT_INO, "zero", S_IFREG | 0400, 0, 0, 0, &a));
        ASSERT_OK(ntfs_ws_setxattr(ws, d.ino, "user.dir", "yes", 3, 0));
        in.mtime = (struct timespec){ 1500000000, 42 };
        ASSERT_OK(ntfs_ws_setattr(ws, d.ino, &in, NTFS_SET_MTIME, &out));
        ASSERT_OK(ntfs_ws_setattr(ws, NTFS_ROOT_INO, &in, NTFS_SET_MTIME, &out));
        ntfs_ws_close(ws);
        ntfs_hash h;
        bool changed;
        ASSERT_OK(ntfs_checkpoint(st, "src", "tree", NULL, &h, &changed));
}

TEST(round_trip_every_kind) {
        ntfs_store *st = open_store();
        build_tree(st);
        struct mem m = { 0 }, m2 = { 0 };
        ASSERT_OK(export_ref(st, "src", NTFS_ARCHIVE_TAR, &m));
        ASSERT(m.len > 300000 && m.len % 10240 == 0);
        char why[512] = "";
        int r = import_mem(st, "copy", &m, NULL, why, sizeof why);
        if (r < 0)
                FAIL("import: %s", why);
        ASSERT_EQ(n_sessions(st), 2);
        /* the copy exports to the same bytes: same names, types, modes,
         * owners, mtimes (ns), sizes, data, links and xattrs */
        ASSERT_OK(export_ref(st, "copy", NTFS_ARCHIVE_TAR, &m2));
        ASSERT_EQ(m.len, m2.len);
        ASSERT(memcmp(m.buf, m2.buf, m.len) == 0);
        /* and the store says so: one file object per content, linked */
        ntfs_ws *v;
        struct ntfs_attr a, b;
        ASSERT_OK(ntfs_ws_open_view(st, "copy", &v));
        ASSERT_OK(ntfs_ws_lookup(v, NTFS_ROOT_INO, "hard", &a));
        ASSERT_OK(ntfs_ws_lookup(v, NTFS_ROOT_INO, "dir", &b));
        ASSERT_OK(ntfs_ws_lookup(v, b.ino, "big", &b));
        ASSERT_EQ(a.ino, b.ino);
        ASSERT_EQ(a.nlink, 2);
        ASSERT_EQ(a.mode, S_IFREG | 04755);
        ASSERT_EQ(a.mtime.tv_nsec, 123456789);
        char val[16];
        ASSERT_EQ(ntfs_ws_getxattr(v, a.ino, "user.k", val, sizeof val), 5);
        ASSERT(memcmp(val, "v\0bin", 5) == 0);
        ntfs_ws_close(v);
        free(m2.buf);
        /* compressed formats go through the same reader */
        for (int f = NTFS_ARCHIVE_TAR_GZ; f <= NTFS_ARCHIVE_TAR_ZST; f++) {
                struct mem c = { 0 }, c2 = { 0 };
                ASSERT_OK(export_ref(st, "src", (enum ntfs_archive_format)f, &c));
                ASSERT(c.len < m.len);
                char nm[16];
                snprintf(nm, sizeof nm, "c%d", f);
                ASSERT_OK(import_mem(st, nm, &c, NULL, why, sizeof why));
                ASSERT_OK(export_ref(st, nm, NTFS_ARCHIVE_TAR, &c2));
                ASSERT(c2.len == m.len && memcmp(c2.buf, m.buf, m.len) == 0);
                free(c.buf);
                free(c2.buf);
        }
        free(m.buf);
        close_store(st);
}

TEST(sink_error_stops_export) {
        ntfs_store *st = open_store();
        build_tree(st);
        struct mem m = { .fail_after = 1 };
        char why[256] = "";
        ntfs_hash h;
        ASSERT_OK(ntfs_resolve(st, "src", &h, NULL, 0));
        ASSERT_ERR(ntfs_archive_export(st, &h, NTFS_ARCHIVE_TAR, mem_sink, &m, NULL, why, sizeof why), -EPIPE);
        ASSERT(strstr(why, "receiver"));
        free(m.buf);
        close_store(st);
}

/* ---- hostile archives, made with libarchive ---- */

struct ent {
        const char *path;
        unsigned type; /* AE_IF*; 0 with link: a hard link */
        const char *link;
        size_t size;
};

static void make_archive(struct mem *m, const struct ent *e, size_t n, bool gzip) {
        struct archive *a = archive_write_new();
        ASSERT(a);
        archive_write_set_format_pax(a);
        if (gzip)
                archive_write_add_filter_gzip(a);
        size_t used = 0;
        m->cap = 64 << 20;
        m->buf = malloc(m->cap);
        ASSERT(m->buf);
        ASSERT_EQ(archive_write_open_memory(a, m->buf, m->cap, &used), ARCHIVE_OK);
        struct archive_entry *ae = archive_entry_new();
        static char zeros[65536];
        for (size_t i = 0; i < n; i++) {
                archive_entry_clear(ae);
                archive_entry_set_pathname(ae, e[i].path);
                archive_entry_set_mode(ae, (e[i].type ? e[i].type : AE_IFREG) | 0644);
                if (e[i].type == AE_IFLNK)
                        archive_entry_set_symlink(ae, e[i].link);
                else if (!e[i].type)
                        archive_entry_set_hardlink(ae, e[i].link);
                if (e[i].type == AE_IFCHR)
                        archive_entry_set_rdev(ae, makedev(1, 3));
                archive_entry_set_size(ae, (la_int64_t)(e[i].type == AE_IFREG ? e[i].size : 0));
                ASSERT(archive_write_header(a, ae) >= ARCHIVE_WARN);
                for (size_t left = e[i].type == AE_IFREG ? e[i].size : 0; left > 0;) {
                        size_t k = left < sizeof zeros ? left : sizeof zeros;
                        ASSERT(archive_write_data(a, zeros, k) == (la_ssize_t)k);
                        left -= k;
                }
        }
        archive_entry_free(ae);
        ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        m->len = used;
}

static void refused(ntfs_store *st, const struct ent *e, size_t n, bool gzip, size_t cut,
                    const struct ntfs_archive_limits *lim, int want, const char *words) {
        struct mem m = { 0 };
        make_archive(&m, e, n, gzip);
        if (cut)
                m.len = cut < m.len ? cut : m.len / 2;
        int before = n_sessions(st);
        char why[512] = "";
        int r = import_mem(st, "evil", &m, lim, why, sizeof why);
        free(m.buf);
        if (r != want)
                FAIL("%s: got %d (%s) '%s', want %s", e[n - 1].path, r, ntfs_errcode(r), why, ntfs_errcode(want));
        if (!strstr(why, words))
                FAIL("message '%s' lacks '%s'", why, words);
        ASSERT_EQ(n_sessions(st), before);
        struct ntfs_session_info si;
        ASSERT_ERR(ntfs_session_get(st, "evil", &si), -NTFS_ENOSESSION);
}

TEST(hostile_archives_refused) {
        ntfs_store *st = open_store();
        const struct ent dotdot[] = { { "ok", AE_IFREG, NULL, 1 }, { "a/../../x", AE_IFREG, NULL, 1 } };
        refused(st, dotdot, 2, false, 0, NULL, -NTFS_EDENIED, "'..'");
        const struct ent abs[] = { { "/etc/x", AE_IFREG, NULL, 1 } };
        refused(st, abs, 1, false, 0, NULL, -NTFS_EDENIED, "absolute");
        const struct ent through[] = { { "l", AE_IFLNK, "/tmp", 0 }, { "l/x", AE_IFREG, NULL, 1 } };
        refused(st, through, 2, false, 0, NULL, -NTFS_EDENIED, "symlink");
        const struct ent deep[] = { { "a/b", AE_IFDIR, NULL, 0 }, { "a/b/l", AE_IFLNK, "..", 0 },
                                    { "a/b/l/l/c", AE_IFREG, NULL, 1 } };
        refused(st, deep, 3, false, 0, NULL, -NTFS_EDENIED, "symlink");
        const struct ent hl[] = { { "l", AE_IFLNK, "/etc", 0 }, { "h", 0, "l/passwd", 0 } };
        refused(st, hl, 2, false, 0, NULL, -NTFS_EDENIED, "symlink");
        const struct ent dev[] = { { "null", AE_IFCHR, NULL, 0 } };
        refused(st, dev, 1, false, 0, NULL, -NTFS_EDENIED, "device");
        const struct ent many[] = { { "a", AE_IFREG, NULL, 1 }, { "b", AE_IFREG, NULL, 1 },
                                    { "c", AE_IFREG, NULL, 1 }, { "d", AE_IFREG, NULL, 1 } };
        refused(st, many, 4, false, 0, &(struct ntfs_archive_limits){ .max_entries = 3 }, -NTFS_ETOOLARGE,
                "entries");
        const struct ent bomb[] = { { "zeros", AE_IFREG, NULL, 32 << 20 } };
        refused(st, bomb, 1, true, 0, &(struct ntfs_archive_limits){ .max_bytes = 1 << 20 }, -NTFS_ETOOLARGE,
                "bytes");
        const struct ent two[] = { { "a", AE_IFREG, NULL, 200000 }, { "b", AE_IFREG, NULL, 200000 } };
        refused(st, two, 2, false, 300000, NULL, -NTFS_EBADREQ, "runcated");
        refused(st, two, 2, true, 1, NULL, -NTFS_EBADREQ, "");
        const struct ent nolink[] = { { "h", 0, "missing", 0 } };
        refused(st, nolink, 1, false, 0, NULL, -NTFS_EBADREQ, "not in it");
        struct mem junk = { .buf = malloc(4096), .len = 4096 };
        ASSERT(junk.buf);
        for (size_t i = 0; i < junk.len; i++)
                junk.buf[i] = (char)(i * 131 + 7);
        char why[256];
        ASSERT_ERR(import_mem(st, "junk", &junk, NULL, why, sizeof why), -NTFS_EBADREQ);
        free(junk.buf);
        ASSERT_EQ(n_sessions(st), 0);
        /* names: invalid, reserved, taken */
        struct mem ok = { 0 };
        const struct ent one[] = { { "f", AE_IFREG, NULL, 3 } };
        make_archive(&ok, one, 1, false);
        ASSERT_ERR(import_mem(st, "a/b", &ok, NULL, why, sizeof why), -NTFS_EINVALNAME);
        ASSERT_ERR(import_mem(st, ".import-x", &ok, NULL, why, sizeof why), -NTFS_EINVALNAME);
        ASSERT_OK(import_mem(st, "fine", &ok, NULL, why, sizeof why));
        ASSERT_ERR(import_mem(st, "fine", &ok, NULL, why, sizeof why), -NTFS_ESESSEXISTS);
        free(ok.buf);
        ASSERT_EQ(n_sessions(st), 1);
        close_store(st);
}

TEST(later_entries_replace_earlier_and_cleanup) {
        ntfs_store *st = open_store();
        const struct ent e[] = { { "x", AE_IFREG, NULL, 5 }, { "x", AE_IFLNK, "target", 0 },
                                 { "d/f", AE_IFREG, NULL, 2 }, { "d", AE_IFDIR, NULL, 0 } };
        struct mem m = { 0 };
        make_archive(&m, e, 4, false);
        char why[256];
        ASSERT_OK(import_mem(st, "r", &m, NULL, why, sizeof why));
        free(m.buf);
        ntfs_ws *v;
        struct ntfs_attr a;
        ASSERT_OK(ntfs_ws_open_view(st, "r", &v));
        ASSERT_OK(ntfs_ws_lookup(v, NTFS_ROOT_INO, "x", &a));
        ASSERT(S_ISLNK(a.mode));
        ASSERT_OK(ntfs_ws_lookup(v, NTFS_ROOT_INO, "d", &a));
        ASSERT_EQ(a.mode, S_IFDIR | 0644); /* the explicit entry's mode, set after its children */
        ntfs_ws_close(v);
        /* an interrupted import's temporary session is ended at startup */
        ASSERT_OK(ntfs_session_create(st, NTFS_ARCHIVE_TMP_PREFIX "dead", NULL, NULL));
        ASSERT_EQ(ntfs_archive_cleanup(st), 1);
        ASSERT_EQ(n_sessions(st), 1);
        close_store(st);
}

TEST(formats) {
        enum ntfs_archive_format f;
        ASSERT_OK(ntfs_archive_format_parse("tgz", &f));
        ASSERT_EQ(f, NTFS_ARCHIVE_TAR_GZ);
        ASSERT_OK(ntfs_archive_format_from_name("x/y.tar.zst", &f));
        ASSERT_EQ(f, NTFS_ARCHIVE_TAR_ZST);
        ASSERT_OK(ntfs_archive_format_from_name("y.tar", &f));
        ASSERT_EQ(f, NTFS_ARCHIVE_TAR);
        ASSERT_ERR(ntfs_archive_format_from_name("y.zip", &f), -EINVAL);
        ASSERT_ERR(ntfs_archive_format_parse("zip", &f), -EINVAL);
        ASSERT_STREQ(ntfs_archive_content_type(NTFS_ARCHIVE_TAR), "application/x-tar");
}

int main(void) {
        RUN(formats);
        RUN(round_trip_every_kind);
        RUN(sink_error_stops_export);
        RUN(hostile_archives_refused);
        RUN(later_entries_replace_earlier_and_cleanup);
        return tap_done();
}
