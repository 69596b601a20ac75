/* SPDX-License-Identifier: MIT
 * test_treewalk.c — the tree walk (fs/treewalk.c) and the tree builder
 * (fs/import.c): a commit's tree read straight from its objects, and a
 * commit built straight from entries whose ids equal a checkpoint's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "fs/store.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char dir[64];

static ntfs_store *open_store(void) {
        snprintf(dir, sizeof dir, "/tmp/ntfs-treewalk-test-XXXXXX");
        if (!mkdtemp(dir))
                abort();
        ntfs_store *st = NULL;
        struct ntfs_store_opts o = { .initial_map_bytes = 64ull << 20, .no_flusher = true };
        int r = ntfs_store_open(dir, &o, &st);
        if (r < 0)
                FAIL("open store: %s", ntfs_strerror(r));
        return st;
}

static void close_store(ntfs_store *st) {
        ntfs_store_close(st);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "# rm failed\n");
}

#define BIG 300000u /* 5 chunks: 4 full and a short one; chunk 2 all zeros (a hole) */
#define T0 1700000000123456789LL

static uint8_t *big_content(void) {
        uint8_t *b = malloc(BIG);
        if (!b)
                abort();
        for (size_t i = 0; i < BIG; i++)
                b[i] = (i / NTFS_CHUNK_SIZE == 2) ? 0 : (uint8_t)(i * 7 + 3);
        return b;
}

static void set_times(ntfs_ws *ws, uint64_t ino, uint32_t mode, int64_t t) {
        struct ntfs_attr in = { .mode = mode, .mtime = { t / 1000000000LL, t % 1000000000LL } }, out;
        ASSERT_OK(ntfs_ws_setattr(ws, ino, &in, NTFS_SET_MTIME | (mode ? NTFS_SET_MODE : 0), &out));
}

/* The reference tree, written through ntfs_ws_* and checkpointed:
 *   /            0755 root, xattr user.root=r
 *   d/           0750 7:8, xattr user.dir=yes
 *   d/big        0640 1000:1000, 300000 bytes (a zero chunk), xattr user.k="v\0bin"
 *   d/sub/       0700 (empty)
 *   hard         -> d/big (a hard link)
 *   sym          -> "d/big" (symlink, 5:6)
 *   fifo         0600
 *   zero         0400, empty
 */
static void make_with_ws(ntfs_store *st, const char *name, ntfs_hash *ret) {
        ntfs_ws *ws;
        struct ntfs_attr d, f, a, s;
        ASSERT_OK(ntfs_session_create(st, name, NULL, NULL));
        ASSERT_OK(ntfs_ws_open(st, name, &ws));
        ASSERT_OK(ntfs_ws_mkdir(ws, NTFS_ROOT_INO, "d", 0750, 7, 8, &d));
        ASSERT_OK(ntfs_ws_mknod(ws, d.ino, "big", S_IFREG | 0640, 0, 1000, 1000, &f));
        _cleanup_free_ uint8_t *big = big_content();
        ASSERT_EQ(ntfs_ws_write(ws, f.ino, big, BIG, 0, false), (ssize_t)BIG);
        ASSERT_OK(ntfs_ws_setxattr(ws, f.ino, "user.k", "v\0bin", 5, 0));
        ASSERT_OK(ntfs_ws_mkdir(ws, d.ino, "sub", 0700, 0, 0, &s));
        ASSERT_OK(ntfs_ws_link(ws, f.ino, NTFS_ROOT_INO, "hard", &a));
        ASSERT_OK(ntfs_ws_symlink(ws, NTFS_ROOT_INO, "sym", "d/big", 5, 6, &a));
        set_times(ws, a.ino, 0, T0 + 1);
        ASSERT_OK(ntfs_ws_mknod(ws, NTFS_ROOT_INO, "fifo", S_IFIFO | 0600, 0, 0, 0, &a));
        set_times(ws, a.ino, 0, T0 + 2);
        ASSERT_OK(ntfs_ws_mknod(ws, NTFS_ROOT_INO, "zero", S_IFREG | 0400, 0, 0, 0, &a));
        set_times(ws, a.ino, 0, T0 + 3);
        ASSERT_OK(ntfs_ws_setxattr(ws, d.ino, "user.dir", "yes", 3, 0));
        ASSERT_OK(ntfs_ws_setxattr(ws, NTFS_ROOT_INO, "user.root", "r", 1, 0));
        set_times(ws, f.ino, 0640, T0 + 4);
        set_times(ws, s.ino, 0, T0 + 5);
        set_times(ws, d.ino, 0, T0 + 6);
        set_times(ws, NTFS_ROOT_INO, 0, T0 + 7);
        ntfs_ws_close(ws);
        ASSERT_OK(ntfs_checkpoint(st, name, "ref", NULL, ret, NULL));
}

/* The same tree through the builder, in another order, with replaced
 * entries on the way. */
static void make_with_builder(ntfs_store *st, const char *name, ntfs_hash *ret) {
        ntfs_builder *b;
        ASSERT_OK(ntfs_builder_new(st, &b));
        ASSERT_OK(ntfs_builder_add_symlink(b, "zero", "placeholder", 0, 0, T0)); /* replaced below */
        ASSERT_OK(ntfs_builder_file_begin(b, "d/big", 0600, 1000, 1000, T0, 0)); /* makes d/ */
        _cleanup_free_ uint8_t *big = big_content();
        /* a write in pieces that straddle chunks, the zero chunk skipped (a hole) */
        ASSERT_OK(ntfs_builder_file_write(b, big, 1000, 0));
        ASSERT_OK(ntfs_builder_file_write(b, big + 1000, 2 * NTFS_CHUNK_SIZE - 1000, 1000));
        ASSERT_OK(ntfs_builder_file_write(b, big + 3 * NTFS_CHUNK_SIZE, BIG - 3 * NTFS_CHUNK_SIZE,
                                          3 * NTFS_CHUNK_SIZE));
        ASSERT_ERR(ntfs_builder_add_dir(b, "x", 0755, 0, 0, T0), -EBUSY); /* one open file at a time */
        ASSERT_OK(ntfs_builder_file_end(b, BIG));
        ASSERT_OK(ntfs_builder_add_dir(b, "d", 0750, 7, 8, T0 + 6)); /* keeps d/big */
        ASSERT_OK(ntfs_builder_add_dir(b, "d/sub", 0700, 0, 0, T0 + 5));
        ASSERT_OK(ntfs_builder_add_hardlink(b, "hard", "d/big"));
        ASSERT_OK(ntfs_builder_add_hardlink(b, "hard", "d/big")); /* already that file */
        ASSERT_OK(ntfs_builder_set_xattr(b, "hard", "user.k", "old", 3));
        ASSERT_OK(ntfs_builder_set_xattr(b, "d/big", "user.k", "v\0bin", 5)); /* replaces */
        ASSERT_OK(ntfs_builder_file_begin(b, "hard", 0640, 1000, 1000, T0 + 4, NTFS_BUILD_REWRITE));
        ASSERT_OK(ntfs_builder_file_write(b, big, BIG, 0)); /* the same bytes, in one piece */
        ASSERT_OK(ntfs_builder_file_end(b, BIG));
        ASSERT_OK(ntfs_builder_add_symlink(b, "sym", "d/big", 5, 6, T0 + 1));
        ASSERT_OK(ntfs_builder_add_node(b, "fifo", S_IFIFO | 0600, 0, 0, 0, T0 + 2));
        ASSERT_OK(ntfs_builder_file_begin(b, "zero", 0400, 0, 0, T0 + 3, 0));
        ASSERT_OK(ntfs_builder_file_end(b, 0));
        ASSERT_OK(ntfs_builder_set_xattr(b, "d", "user.dir", "yes", 3));
        ASSERT_OK(ntfs_builder_set_xattr(b, "", "user.root", "r", 1));
        ASSERT_OK(ntfs_builder_add_dir(b, "", 0755, 0, 0, T0 + 7));
        ASSERT_OK(ntfs_builder_commit(b, name, "built", ret));
        ASSERT_ERR(ntfs_builder_commit(b, "again", "x", NULL), -EINVAL); /* once */
        ntfs_builder_free(b);
}

static int diff_cb(const struct ntfs_diff_entry *e, void *ud) {
        printf("# differs: %s %c\n", e->path, e->kind);
        ++*(int *)ud;
        return 0;
}

static int stop_cb(const struct ntfs_walk_entry *e, void *ud) {
        (void)ud;
        return e->depth == 1 ? -ECANCELED : 0;
}

static int count_cb(const struct ntfs_session_info *si, void *ud) {
        (void)si;
        ++*(int *)ud;
        return 0;
}

TEST(builder_ids_equal_checkpoint) {
        ntfs_store *st = open_store();
        ntfs_hash a, b;
        make_with_ws(st, "ws", &a);
        make_with_builder(st, "built", &b);
        struct ntfs_commit_info ca, cb;
        ASSERT_OK(ntfs_commit_get(st, &a, &ca));
        ASSERT_OK(ntfs_commit_get(st, &b, &cb));
        char ha[NTFS_HEX_LEN + 1], hb[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&ca.tree, ha);
        ntfs_hash_hex(&cb.tree, hb);
        ASSERT_STREQ(ha, hb);
        ASSERT_EQ(ca.bytes, cb.bytes);
        ASSERT_EQ(ca.inodes, cb.inodes);
        ASSERT_EQ(cb.nparents, 0);
        ASSERT_STREQ(cb.message, "built");
        ASSERT_STREQ(cb.session, "built");
        struct ntfs_session_info si;
        ASSERT_OK(ntfs_session_get(st, "built", &si));
        ASSERT(memcmp(si.head.b, b.b, NTFS_HASH_LEN) == 0);
        ASSERT(memcmp(si.floor.b, b.b, NTFS_HASH_LEN) == 0);
        /* nothing differs between the two commits, root attributes included */
        ntfs_hash_hex(&a, ha);
        ntfs_hash_hex(&b, hb);
        int n = 0;
        ASSERT_OK(ntfs_diff(st, ha, hb, NULL, diff_cb, &n));
        ASSERT_EQ(n, 0);
        /* the built session is a working session: it reads back through ntfs_ws */
        ntfs_ws *ws;
        struct ntfs_attr at;
        ASSERT_OK(ntfs_ws_open(st, "built", &ws));
        ASSERT_OK(ntfs_ws_lookup(ws, NTFS_ROOT_INO, "hard", &at));
        ASSERT_EQ(at.nlink, 2u);
        ASSERT_EQ(at.size, (uint64_t)BIG);
        ntfs_ws_close(ws);
        struct ntfs_fsck_stats fs;
        ASSERT_OK(ntfs_fsck(st, NULL, NULL, &fs));
        close_store(st);
}

struct seen {
        char paths[32][64];
        struct ntfs_walk_entry e[32];
        char target[32][64];
        char names[32][64];
        int n;
        bool skip_d;
};

static int walk_cb(const struct ntfs_walk_entry *e, void *ud) {
        struct seen *s = ud;
        if (s->n >= 32)
                return -E2BIG;
        snprintf(s->paths[s->n], 64, "%s", e->path);
        s->e[s->n] = *e;
        snprintf(s->target[s->n], 64, "%s", e->target ? e->target : "");
        snprintf(s->names[s->n], 64, "%s", e->name);
        s->n++;
        return s->skip_d && strcmp(e->path, "d") == 0 ? 1 : 0;
}

static int find(const struct seen *s, const char *p) {
        for (int i = 0; i < s->n; i++)
                if (strcmp(s->paths[i], p) == 0)
                        return i;
        return -1;
}

struct sink {
        uint8_t *buf;
        size_t len, cap;
        uint64_t next_off;
};

static int chunk_cb(const void *data, size_t len, uint64_t off, void *ud) {
        struct sink *k = ud;
        if (off != k->next_off || len > NTFS_CHUNK_SIZE || k->len + len > k->cap)
                return -EPROTO;
        memcpy(k->buf + k->len, data, len);
        k->len += len;
        k->next_off += len;
        return 0;
}

static int xa_cb(const char *name, const void *value, size_t len, void *ud) {
        char *out = ud;
        size_t o = strlen(out);
        snprintf(out + o, 256 - o, "%s=%zu:%.*s;", name, len, (int)strnlen(value, len), (const char *)value);
        return 0;
}

TEST(walk_reads_every_kind) {
        ntfs_store *st = open_store();
        ntfs_hash c;
        make_with_ws(st, "ws", &c);
        struct seen s = { 0 };
        ASSERT_OK(ntfs_tree_walk(st, &c, walk_cb, &s));
        /* parents first, names in byte order within each directory */
        const char *want[] = { "", "d", "d/big", "d/sub", "fifo", "hard", "sym", "zero" };
        ASSERT_EQ(s.n, 8);
        for (int i = 0; i < 8; i++)
                ASSERT_STREQ(s.paths[i], want[i]);
        int big = find(&s, "d/big"), hard = find(&s, "hard"), d = find(&s, "d"), sym = find(&s, "sym");
        ASSERT(s.e[big].linkid != 0 && s.e[big].linkid == s.e[hard].linkid);
        ASSERT_EQ(s.e[big].nlink, 2u);
        ASSERT_EQ(s.e[big].size, (uint64_t)BIG);
        ASSERT_EQ(s.e[big].mode, (uint32_t)(S_IFREG | 0640));
        ASSERT_EQ(s.e[big].uid, 1000u);
        ASSERT_EQ(s.e[big].mtime_ns, T0 + 4);
        ASSERT_EQ(s.e[big].rdev, 0u);
        ASSERT_STREQ(s.names[big], "big");
        ASSERT_EQ(s.e[big].depth, 2);
        ASSERT_EQ(s.e[d].mode, (uint32_t)(S_IFDIR | 0750));
        ASSERT_EQ(s.e[d].nlink, 3u);
        ASSERT_EQ(s.e[d].mtime_ns, T0 + 6);
        ASSERT_STREQ(s.target[sym], "d/big");
        ASSERT_EQ(s.e[sym].size, 5u);
        ASSERT_EQ(s.e[find(&s, "")].mtime_ns, T0 + 7);
        ASSERT(S_ISFIFO(s.e[find(&s, "fifo")].mode));
        /* content, chunk by chunk, holes as zeros */
        struct sink k = { .buf = malloc(BIG), .cap = BIG };
        ASSERT(k.buf);
        ASSERT_OK(ntfs_file_read_chunks(st, &s.e[hard].content, chunk_cb, &k));
        _cleanup_free_ uint8_t *ref = big_content();
        ASSERT_EQ(k.len, (size_t)BIG);
        ASSERT(memcmp(k.buf, ref, BIG) == 0);
        k.len = 0;
        k.next_off = 0;
        ASSERT_OK(ntfs_file_read_chunks(st, &s.e[find(&s, "zero")].content, chunk_cb, &k));
        ASSERT_EQ(k.len, 0u);
        free(k.buf);
        /* xattrs */
        char xa[256] = "";
        ASSERT_OK(ntfs_xattr_read(st, &s.e[big].xattr, xa_cb, xa));
        ASSERT_STREQ(xa, "user.k=5:v;");
        xa[0] = 0;
        ASSERT_OK(ntfs_xattr_read(st, &s.e[find(&s, "")].xattr, xa_cb, xa));
        ASSERT_STREQ(xa, "user.root=1:r;");
        xa[0] = 0;
        ASSERT_OK(ntfs_xattr_read(st, &s.e[find(&s, "fifo")].xattr, xa_cb, xa)); /* none */
        ASSERT_STREQ(xa, "");
        /* 1 skips a directory's children; a negative return stops and comes back */
        struct seen s2 = { .skip_d = true };
        ASSERT_OK(ntfs_tree_walk(st, &c, walk_cb, &s2));
        ASSERT_EQ(s2.n, 6);
        ASSERT_EQ(find(&s2, "d/big"), -1);
        ASSERT_ERR(ntfs_tree_walk(st, &c, stop_cb, NULL), -ECANCELED);
        /* not a commit */
        ASSERT_ERR(ntfs_tree_walk(st, &s.e[big].content, walk_cb, &s), -NTFS_ENOREF);
        /* a walk writes nothing: the store's object count is unchanged */
        struct ntfs_store_stats a, b;
        ASSERT_OK(ntfs_store_stats(st, &a));
        s.n = 0;
        ASSERT_OK(ntfs_tree_walk(st, &c, walk_cb, &s));
        ASSERT_OK(ntfs_store_stats(st, &b));
        ASSERT_EQ(a.objects, b.objects);
        close_store(st);
}

static int count_sessions(ntfs_store *st) {
        int n = 0;
        ASSERT_OK(ntfs_session_list(st, count_cb, &n));
        return n;
}

TEST(builder_refuses_and_leaves_nothing) {
        ntfs_store *st = open_store();
        ntfs_builder *b;
        ASSERT_OK(ntfs_builder_new(st, &b));
        ASSERT_OK(ntfs_builder_add_symlink(b, "l", "/etc", 0, 0, T0));
        ASSERT_ERR(ntfs_builder_add_dir(b, "l/x", 0755, 0, 0, T0), -NTFS_EDENIED);
        ASSERT_STREQ(ntfs_builder_error_path(b), "l");
        ASSERT_ERR(ntfs_builder_add_hardlink(b, "h", "l/passwd"), -NTFS_EDENIED);
        ASSERT_OK(ntfs_builder_add_dir(b, "a/b", 0755, 0, 0, T0));
        ASSERT_OK(ntfs_builder_add_symlink(b, "a/b/s", "..", 0, 0, T0));
        ASSERT_ERR(ntfs_builder_file_begin(b, "a/b/s/s/c", 0644, 0, 0, T0, 0), -NTFS_EDENIED);
        ASSERT_STREQ(ntfs_builder_error_path(b), "a/b/s");
        ASSERT_OK(ntfs_builder_add_node(b, "f", S_IFIFO | 0644, 0, 0, 0, T0));
        ASSERT_ERR(ntfs_builder_add_dir(b, "f/x", 0755, 0, 0, T0), -ENOTDIR);
        ASSERT_ERR(ntfs_builder_add_hardlink(b, "h", "missing"), -ENOENT);
        ASSERT_ERR(ntfs_builder_add_hardlink(b, "h", "a"), -EPERM);
        ASSERT_ERR(ntfs_builder_add_node(b, "a", S_IFIFO | 0644, 0, 0, 0, T0), -ENOTEMPTY);
        ASSERT_ERR(ntfs_builder_add_dir(b, "x/../y", 0755, 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_add_dir(b, "/abs", 0755, 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_add_dir(b, "a//b", 0755, 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_add_dir(b, "./a", 0755, 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_add_symlink(b, "", "x", 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_add_node(b, "r", S_IFREG | 0644, 0, 0, 0, T0), -EINVAL);
        ASSERT_ERR(ntfs_builder_file_write(b, "x", 1, 0), -EINVAL); /* no open file */
        ASSERT_OK(ntfs_builder_file_begin(b, "g", 0644, 0, 0, T0, 0));
        ASSERT_OK(ntfs_builder_file_write(b, "abc", 3, 10));
        ASSERT_ERR(ntfs_builder_file_write(b, "abc", 3, 5), -EINVAL); /* backwards */
        ASSERT_ERR(ntfs_builder_file_end(b, 12), -EINVAL);             /* shorter than the data */
        ASSERT_OK(ntfs_builder_file_end(b, 1 << 20));                   /* a trailing hole */
        /* an empty directory can be replaced; a later entry replaces an earlier one */
        ASSERT_OK(ntfs_builder_add_dir(b, "e", 0755, 0, 0, T0));
        ASSERT_OK(ntfs_builder_add_node(b, "e", S_IFIFO | 0600, 0, 0, 0, T0));
        /* the commit fails at its last step: no session, nothing referenced */
        ntfs_fault_arm("builder.commit", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_builder_commit(b, "s", NULL, NULL), -EIO);
        ntfs_fault_disarm();
        ntfs_builder_free(b);
        ASSERT_EQ(count_sessions(st), 0);
        /* a taken name */
        ASSERT_OK(ntfs_session_create(st, "taken", NULL, NULL));
        ASSERT_OK(ntfs_builder_new(st, &b));
        ASSERT_ERR(ntfs_builder_commit(b, "taken", NULL, NULL), -NTFS_ESESSEXISTS);
        ntfs_builder_free(b);
        ASSERT_OK(ntfs_builder_new(st, &b));
        ASSERT_ERR(ntfs_builder_commit(b, "bad/name", NULL, NULL), -NTFS_EINVALNAME);
        ntfs_builder_free(b);
        ASSERT_EQ(count_sessions(st), 1);
        ntfs_builder_free(NULL);
        close_store(st);
}

TEST(builder_sparse_and_gc) {
        ntfs_store *st = open_store();
        ntfs_builder *b;
        ASSERT_OK(ntfs_builder_new(st, &b));
        /* data at 1 MiB + 5 only: every chunk before it is a hole */
        ASSERT_OK(ntfs_builder_file_begin(b, "sparse", 0644, 0, 0, T0, 0));
        ASSERT_OK(ntfs_builder_file_write(b, "tail", 4, (1 << 20) + 5));
        ASSERT_OK(ntfs_builder_file_end(b, (2 << 20)));
        ntfs_hash h;
        ASSERT_OK(ntfs_builder_commit(b, "sp", NULL, &h));
        ntfs_builder_free(b);
        struct seen s = { 0 };
        ASSERT_OK(ntfs_tree_walk(st, &h, walk_cb, &s));
        int i = find(&s, "sparse");
        ASSERT(i > 0);
        ASSERT_EQ(s.e[i].size, (uint64_t)(2 << 20));
        struct sink k = { .buf = calloc(1, 2 << 20), .cap = 2 << 20 };
        ASSERT(k.buf);
        ASSERT_OK(ntfs_file_read_chunks(st, &s.e[i].content, chunk_cb, &k));
        ASSERT_EQ(k.len, (size_t)(2 << 20));
        for (size_t j = 0; j < k.len; j++)
                if (k.buf[j] != ((j >= (1u << 20) + 5 && j < (1u << 20) + 9) ? "tail"[j - (1u << 20) - 5] : 0))
                        FAIL("byte %zu", j);
        free(k.buf);
        ntfs_ws *ws;
        struct ntfs_attr at;
        ASSERT_OK(ntfs_ws_open(st, "sp", &ws));
        ASSERT_OK(ntfs_ws_lookup(ws, NTFS_ROOT_INO, "sparse", &at));
        ASSERT_EQ(at.blocks, (uint64_t)(NTFS_CHUNK_SIZE / 512)); /* one stored chunk: the rest are holes */
        ntfs_ws_close(ws);

        /* a gc during a build takes the chunks nothing refers to yet: the
         * commit notices instead of making a commit with missing objects */
        ASSERT_OK(ntfs_builder_new(st, &b));
        ASSERT_OK(ntfs_builder_file_begin(b, "f", 0644, 0, 0, T0, 0));
        ASSERT_OK(ntfs_builder_file_write(b, "unique content of this test", 27, 0));
        ASSERT_OK(ntfs_builder_file_end(b, 27));
        struct ntfs_gc_stats gs;
        ASSERT_OK(ntfs_gc(st, NULL, 0, &gs));
        ASSERT(gs.objects_freed >= 2);
        ASSERT_ERR(ntfs_builder_commit(b, "lost", NULL, NULL), -EAGAIN);
        ntfs_builder_free(b);
        struct ntfs_session_info si;
        ASSERT_ERR(ntfs_session_get(st, "lost", &si), -NTFS_ENOSESSION);
        struct ntfs_fsck_stats fs;
        ASSERT_OK(ntfs_fsck(st, NULL, NULL, &fs));
        close_store(st);
}

int main(void) {
        RUN(builder_ids_equal_checkpoint);
        RUN(walk_reads_every_kind);
        RUN(builder_refuses_and_leaves_nothing);
        RUN(builder_sparse_and_gc);
        return tap_done();
}
