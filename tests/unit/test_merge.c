/* SPDX-License-Identifier: MIT
 * Unit tests of merge commits (ntfs_checkpoint_merge, fs/store.h) and of the
 * three-way merge built on the public store API (fs/sync/merge.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/sync/merge.h"
#include "fs/store.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char tmpdir[256];

static ntfs_store *fresh_store(void) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ntfs-merge-test-XXXXXX");
        if (!mkdtemp(tmpdir))
                abort();
        ntfs_store *st = NULL;
        struct ntfs_store_opts o = { .initial_map_bytes = 64ull << 20, .no_flusher = true };
        int r = ntfs_store_open(tmpdir, &o, &st);
        if (r < 0)
                FAIL("open store: %s", ntfs_strerror(r));
        return st;
}

static void done_store(ntfs_store *st) {
        ntfs_store_close(st);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
                fprintf(stderr, "rm failed\n");
}

/* Looks up the parent of path, creating directories on the way. */
static uint64_t parent_of(ntfs_ws *ws, const char *path, char *last) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", path);
        uint64_t cur = NTFS_ROOT_INO;
        char *save = NULL, *tok = strtok_r(buf, "/", &save);
        for (char *next; tok && (next = strtok_r(NULL, "/", &save)); tok = next) {
                struct ntfs_attr a;
                if (ntfs_ws_lookup(ws, cur, tok, &a) < 0)
                        ASSERT_OK(ntfs_ws_mkdir(ws, cur, tok, 0755, 0, 0, &a));
                cur = a.ino;
        }
        snprintf(last, 256, "%s", tok);
        return cur;
}

static void put(ntfs_store *st, const char *s, const char *path, const char *content) {
        ntfs_ws *ws;
        ASSERT_OK(ntfs_ws_open(st, s, &ws));
        char last[256];
        uint64_t dir = parent_of(ws, path, last);
        struct ntfs_attr a;
        if (ntfs_ws_lookup(ws, dir, last, &a) < 0)
                ASSERT_OK(ntfs_ws_mknod(ws, dir, last, S_IFREG | 0644, 0, 0, 0, &a));
        struct ntfs_attr z = { .size = 0 };
        ASSERT_OK(ntfs_ws_setattr(ws, a.ino, &z, NTFS_SET_SIZE, &(struct ntfs_attr){ 0 }));
        ASSERT_EQ(ntfs_ws_write(ws, a.ino, content, strlen(content), 0, false), (long)strlen(content));
        ntfs_ws_close(ws);
}

static void del(ntfs_store *st, const char *s, const char *path) {
        ntfs_ws *ws;
        ASSERT_OK(ntfs_ws_open(st, s, &ws));
        char last[256];
        uint64_t dir = parent_of(ws, path, last);
        ASSERT_OK(ntfs_ws_unlink(ws, dir, last));
        ntfs_ws_close(ws);
}

static void chmod_(ntfs_store *st, const char *s, const char *path, uint32_t mode) {
        ntfs_ws *ws;
        ASSERT_OK(ntfs_ws_open(st, s, &ws));
        char last[256];
        uint64_t dir = parent_of(ws, path, last);
        struct ntfs_attr a;
        ASSERT_OK(ntfs_ws_lookup(ws, dir, last, &a));
        a.mode = mode;
        ASSERT_OK(ntfs_ws_setattr(ws, a.ino, &a, NTFS_SET_MODE, &(struct ntfs_attr){ 0 }));
        ntfs_ws_close(ws);
}

/* Content of path in commit (or "<absent>"), and its mode. */
static const char *read_at(ntfs_store *st, const ntfs_hash *c, const char *path, uint32_t *mode) {
        static char buf[4096];
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(c, hex);
        ntfs_ws *ws;
        ASSERT_OK(ntfs_ws_open_view(st, hex, &ws));
        char last[256];
        char pbuf[1024];
        snprintf(pbuf, sizeof pbuf, "%s", path);
        uint64_t cur = NTFS_ROOT_INO;
        struct ntfs_attr a;
        char *save = NULL;
        snprintf(buf, sizeof buf, "<absent>");
        (void)last;
        for (char *tok = strtok_r(pbuf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
                if (ntfs_ws_lookup(ws, cur, tok, &a) < 0) {
                        ntfs_ws_close(ws);
                        return buf;
                }
                cur = a.ino;
        }
        if (mode)
                *mode = a.mode;
        ssize_t n = ntfs_ws_read(ws, cur, buf, sizeof buf - 1, 0);
        buf[n < 0 ? 0 : n] = 0;
        ntfs_ws_close(ws);
        return buf;
}

static ntfs_hash ckpt(ntfs_store *st, const char *s) {
        ntfs_hash h;
        ASSERT_OK(ntfs_checkpoint(st, s, NULL, NULL, &h, NULL));
        return h;
}

/* base session "b" with files; forks "f" and "h" of it. */
static ntfs_hash setup(ntfs_store *st) {
        ASSERT_OK(ntfs_session_create(st, "b", NULL, NULL));
        put(st, "b", "a.txt", "one\ntwo\nthree\nfour\nfive\n");
        put(st, "b", "b.txt", "bee\n");
        put(st, "b", "d/x", "x\n");
        put(st, "b", "d/y", "y\n");
        ntfs_hash base = ckpt(st, "b");
        ASSERT_OK(ntfs_fork(st, "b", "f", NULL));
        ASSERT_OK(ntfs_fork(st, "b", "h", NULL));
        return base;
}

static int merge(ntfs_store *st, const ntfs_hash *base, struct ntfs_merge_result *res) {
        ntfs_hash f = ckpt(st, "f"), h = ckpt(st, "h");
        return ntfs_merge3(st, base, &h, &f, NTFS_MERGE_SCRATCH_PREFIX "t", "m", res);
}

TEST(checkpoint_merge_two_parents) {
        ntfs_store *st = fresh_store();
        ntfs_hash base = setup(st);
        put(st, "f", "new", "n\n");
        ntfs_hash f = ckpt(st, "f");
        ntfs_hash m;
        ASSERT_ERR(ntfs_checkpoint_merge(st, "h", NULL, NULL, &m), -EINVAL);
        ASSERT_OK(ntfs_checkpoint_merge(st, "h", "merge f", &f, &m));
        struct ntfs_commit_info ci;
        ASSERT_OK(ntfs_commit_get(st, &m, &ci));
        ASSERT_EQ(ci.nparents, 2);
        ASSERT(memcmp(ci.parents[0].b, base.b, NTFS_HASH_LEN) == 0);
        ASSERT(memcmp(ci.parents[1].b, f.b, NTFS_HASH_LEN) == 0);
        ASSERT_STREQ(ci.message, "merge f");
        struct ntfs_session_info si;
        ASSERT_OK(ntfs_session_get(st, "h", &si));
        ASSERT(memcmp(si.head.b, m.b, NTFS_HASH_LEN) == 0);
        struct ntfs_fsck_stats fs;
        ASSERT_OK(ntfs_fsck(st, NULL, NULL, &fs));
        ASSERT_EQ(fs.problems, 0);
        done_store(st);
}

TEST(disjoint_and_same_dir) {
        ntfs_store *st = fresh_store();
        ntfs_hash base = setup(st);
        put(st, "f", "b.txt", "bee2\n");
        put(st, "f", "d/z", "z\n");
        put(st, "h", "d/w", "w\n");
        del(st, "h", "d/y");
        struct ntfs_merge_result res;
        ASSERT_OK(merge(st, &base, &res));
        ASSERT_EQ(res.nconflicts, 0);
        ASSERT_STREQ(read_at(st, &res.commit, "b.txt", NULL), "bee2\n");
        ASSERT_STREQ(read_at(st, &res.commit, "d/z", NULL), "z\n");
        ASSERT_STREQ(read_at(st, &res.commit, "d/w", NULL), "w\n");
        ASSERT_STREQ(read_at(st, &res.commit, "d/y", NULL), "<absent>");
        ASSERT_STREQ(read_at(st, &res.commit, "d/x", NULL), "x\n");
        struct ntfs_session_info si;
        ASSERT_ERR(ntfs_session_get(st, NTFS_MERGE_SCRATCH_PREFIX "t", &si), -NTFS_ENOSESSION);
        ntfs_merge_result_release(&res);
        done_store(st);
}

TEST(conflicts_reported) {
        ntfs_store *st = fresh_store();
        ntfs_hash base = setup(st);
        put(st, "f", "a.txt", "one\nTWO-f\nthree\nfour\nfive\n");
        put(st, "h", "a.txt", "one\nTWO-h\nthree\nfour\nfive\n");
        del(st, "f", "b.txt");           /* delete vs modify */
        put(st, "h", "b.txt", "bee-h\n");
        put(st, "f", "n", "f\n");        /* both added, different */
        put(st, "h", "n", "h\n");
        put(st, "h", "d/x", "x2\n");     /* directory removed vs changed inside */
        del(st, "f", "d/x");
        del(st, "f", "d/y");
        {
                ntfs_ws *ws;
                ASSERT_OK(ntfs_ws_open(st, "f", &ws));
                ASSERT_OK(ntfs_ws_rmdir(ws, NTFS_ROOT_INO, "d"));
                ntfs_ws_close(ws);
        }
        struct ntfs_merge_result res;
        ASSERT_OK(merge(st, &base, &res));
        ASSERT_EQ(res.nconflicts, 4);
        const char *want[][2] = { { "a.txt", "content" }, { "b.txt", "delete/modify" }, { "d/x", "delete/modify" },
                                  { "n", "add/add" } };
        for (size_t i = 0; i < 4; i++) {
                bool found = false;
                for (size_t j = 0; j < res.nconflicts; j++)
                        if (strcmp(res.conflicts[j].path, want[i][0]) == 0) {
                                ASSERT_STREQ(res.conflicts[j].reason, want[i][1]);
                                found = true;
                        }
                if (!found)
                        FAIL("no conflict on %s", want[i][0]);
        }
        for (size_t j = 0; j < res.nconflicts; j++)
                if (strcmp(res.conflicts[j].path, "b.txt") == 0) {
                        ASSERT(!res.conflicts[j].fork.present);
                        ASSERT(res.conflicts[j].trunk.present);
                        ASSERT_EQ(res.conflicts[j].trunk.size, 6);
                        ASSERT_EQ(strlen(res.conflicts[j].trunk.sha256), 64);
                }
        /* nothing committed: no scratch session left */
        struct ntfs_session_info si;
        ASSERT_ERR(ntfs_session_get(st, NTFS_MERGE_SCRATCH_PREFIX "t", &si), -NTFS_ENOSESSION);
        ntfs_merge_result_release(&res);
        done_store(st);
}

TEST(line_merge_and_mode_vs_content) {
        ntfs_store *st = fresh_store();
        ntfs_hash base = setup(st);
        put(st, "f", "a.txt", "ONE\ntwo\nthree\nfour\nfive\n");
        put(st, "h", "a.txt", "one\ntwo\nthree\nfour\nFIVE\n");
        chmod_(st, "f", "b.txt", 0755);
        put(st, "h", "b.txt", "bee-h\n");
        struct ntfs_merge_result res;
        ASSERT_OK(merge(st, &base, &res));
        ASSERT_EQ(res.nconflicts, 0);
        ASSERT_EQ(res.line_merged, 1);
        ASSERT_STREQ(read_at(st, &res.commit, "a.txt", NULL), "ONE\ntwo\nthree\nfour\nFIVE\n");
        uint32_t mode = 0;
        ASSERT_STREQ(read_at(st, &res.commit, "b.txt", &mode), "bee-h\n");
        ASSERT_EQ(mode & 07777, 0755);
        ntfs_merge_result_release(&res);
        done_store(st);
}

TEST(both_add_same_directory) {
        ntfs_store *st = fresh_store();
        ntfs_hash base = setup(st);
        put(st, "f", "new/sub/f1", "1\n");
        put(st, "f", "new/same", "s\n");
        put(st, "h", "new/h1", "2\n");
        put(st, "h", "new/same", "s\n");
        struct ntfs_merge_result res;
        ASSERT_OK(merge(st, &base, &res));
        ASSERT_EQ(res.nconflicts, 0);
        ASSERT_STREQ(read_at(st, &res.commit, "new/sub/f1", NULL), "1\n");
        ASSERT_STREQ(read_at(st, &res.commit, "new/h1", NULL), "2\n");
        ASSERT_STREQ(read_at(st, &res.commit, "new/same", NULL), "s\n");
        ntfs_merge_result_release(&res);
        done_store(st);
}

TEST(text_merge_markers) {
        const char *b = "a\nb\nc\n", *o = "a\nB1\nc\n", *t = "a\nB2\nc\n";
        char *out = NULL;
        size_t n = 0;
        ASSERT_EQ(ntfs_merge_text(b, strlen(b), o, strlen(o), t, strlen(t), &out, &n), 1);
        ASSERT_STREQ(out, "a\n<<<<<<< ours\nB1\n||||||| base\nb\n=======\nB2\n>>>>>>> theirs\nc\n");
        free(out);
        const char *o2 = "a\nb\nc\nd\n", *t2 = "z\na\nb\nc\n";
        ASSERT_EQ(ntfs_merge_text(b, strlen(b), o2, strlen(o2), t2, strlen(t2), &out, &n), 0);
        ASSERT_STREQ(out, "z\na\nb\nc\nd\n");
        free(out);
        /* same change on both sides is not a conflict; no final newline is kept */
        const char *o3 = "a\nX\nc", *t3 = "a\nX\nc";
        ASSERT_EQ(ntfs_merge_text(b, strlen(b), o3, strlen(o3), t3, strlen(t3), &out, &n), 0);
        ASSERT_STREQ(out, "a\nX\nc");
        free(out);
        ASSERT_EQ(ntfs_merge_text("", 0, "x\n", 2, "", 0, &out, &n), 0);
        ASSERT_STREQ(out, "x\n");
        free(out);
}

int main(void) {
        RUN(checkpoint_merge_two_parents);
        RUN(disjoint_and_same_dir);
        RUN(conflicts_reported);
        RUN(line_merge_and_mode_vs_content);
        RUN(both_add_same_directory);
        RUN(text_merge_markers);
        return tap_done();
}
