/* SPDX-License-Identifier: MIT
 * test_objects_io.c — raw object export/import (fs/objects-io.c): copy the
 * closure of a commit from one store to another by hash, verify on arrival.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/store.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char dir_a[64], dir_b[64];

static void rm_rf(const char *d) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        if (system(cmd) != 0)
                fprintf(stderr, "rm failed\n");
}

static ntfs_store *open_at(char *dir) {
        snprintf(dir, 64, "/tmp/ntfs-objio-test-XXXXXX");
        if (!mkdtemp(dir))
                abort();
        ntfs_store *st = NULL;
        struct ntfs_store_opts o = { .initial_map_bytes = 64ull << 20, .no_flusher = true };
        int r = ntfs_store_open(dir, &o, &st);
        if (r < 0)
                FAIL("open store: %s", ntfs_strerror(r));
        return st;
}

struct objs {
        ntfs_hash h[256];
        uint8_t *data[256];
        size_t len[256];
        size_t n;
        int prune_after;
};

static int collect(const ntfs_hash *h, const void *data, size_t len, void *ud) {
        struct objs *o = ud;
        if (o->n >= 256)
                return -E2BIG;
        o->h[o->n] = *h;
        o->data[o->n] = malloc(len);
        if (!o->data[o->n])
                return -ENOMEM;
        memcpy(o->data[o->n], data, len);
        o->len[o->n++] = len;
        return o->prune_after && (int)o->n >= o->prune_after ? 1 : 0;
}

static void objs_free(struct objs *o) {
        for (size_t i = 0; i < o->n; i++)
                free(o->data[i]);
}

static void write_file(ntfs_ws *ws, const char *name, size_t size, char fill) {
        struct ntfs_attr a;
        ASSERT_OK(ntfs_ws_mknod(ws, NTFS_ROOT_INO, name, S_IFREG | 0644, 0, 0, 0, &a));
        _cleanup_free_ char *buf = malloc(size);
        ASSERT(buf);
        for (size_t i = 0; i < size; i++)
                buf[i] = (char)(fill + (i % 7));
        ASSERT(ntfs_ws_write(ws, a.ino, buf, size, 0, false) == (ssize_t)size);
}

TEST(copy_closure_between_stores) {
        ntfs_store *a = open_at(dir_a), *b = open_at(dir_b);
        ntfs_hash head, h2;
        ASSERT_OK(ntfs_session_create(a, "s", NULL, NULL));
        ntfs_ws *ws = NULL;
        ASSERT_OK(ntfs_ws_open(a, "s", &ws));
        write_file(ws, "small", 10, 'a');
        write_file(ws, "big", 3 * NTFS_CHUNK_SIZE + 5, 'k');
        ntfs_ws_close(ws);
        bool changed = false;
        ASSERT_OK(ntfs_checkpoint(a, "s", "two files", NULL, &head, &changed));
        ASSERT(changed);

        struct objs o = { 0 };
        ASSERT_OK(ntfs_object_walk(a, &head, collect, &o));
        /* 2 commits, 2 root trees (empty + two entries), 2 file objects,
         * 1 small blob + big's 3 full chunks (identical? no: offsets differ) + tail */
        ASSERT(o.n >= 8);
        ASSERT(memcmp(o.h[0].b, head.b, NTFS_HASH_LEN) == 0); /* the commit first */
        for (size_t i = 0; i < o.n; i++) {
                ntfs_hash x;
                ntfs_sha256(o.data[i], o.len[i], x.b);
                ASSERT(memcmp(x.b, o.h[i].b, NTFS_HASH_LEN) == 0);
                ASSERT_EQ(ntfs_object_has(a, &o.h[i]), 1);
        }

        /* arrival: a wrong hash and a flipped byte are refused */
        ASSERT_EQ(ntfs_object_put_verified(b, o.data[0], o.len[0], &o.h[1]), -NTFS_ECORRUPT);
        o.data[0][o.len[0] - 1] ^= 1;
        ASSERT_EQ(ntfs_object_put_verified(b, o.data[0], o.len[0], &o.h[0]), -NTFS_ECORRUPT);
        o.data[0][o.len[0] - 1] ^= 1;
        ASSERT_EQ(ntfs_object_has(b, &o.h[0]), 0);
        uint8_t *got = NULL;
        size_t gl = 0;
        ASSERT_EQ(ntfs_object_get(b, &o.h[0], &got, &gl), -ENOENT);
        /* garbage that hashes right but is no object */
        uint8_t junk[3] = { 'Q', 1, 2 };
        ntfs_hash jh;
        ntfs_sha256(junk, sizeof junk, jh.b);
        ASSERT_EQ(ntfs_object_put_verified(b, junk, sizeof junk, &jh), -NTFS_ECORRUPT);

        /* children first or last does not matter: import in reverse */
        for (size_t i = o.n; i-- > 0;)
                ASSERT_OK(ntfs_object_put_verified(b, o.data[i], o.len[i], &o.h[i]));
        ASSERT_OK(ntfs_store_flush(b, true));
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&head, hex);
        ASSERT_OK(ntfs_session_create(b, "c", hex, &h2));
        ASSERT(memcmp(h2.b, head.b, NTFS_HASH_LEN) == 0);
        ASSERT_OK(ntfs_object_get(b, &o.h[0], &got, &gl));
        ASSERT(gl == o.len[0] && memcmp(got, o.data[0], gl) == 0);
        free(got);

        /* the copied session reads the same bytes */
        ASSERT_OK(ntfs_ws_open(b, "c", &ws));
        struct ntfs_attr at;
        ASSERT_OK(ntfs_ws_lookup(ws, NTFS_ROOT_INO, "big", &at));
        ASSERT(at.size == 3 * NTFS_CHUNK_SIZE + 5);
        char buf[16];
        ASSERT_EQ(ntfs_ws_read(ws, at.ino, buf, 3, 3 * NTFS_CHUNK_SIZE + 2), 3);
        ntfs_ws_close(ws);
        struct ntfs_fsck_stats fs;
        ASSERT_OK(ntfs_fsck(b, NULL, NULL, &fs));

        /* pruning: cb returning 1 does not descend */
        struct objs p = { .prune_after = 1 };
        ASSERT_OK(ntfs_object_walk(a, &head, collect, &p));
        ASSERT_EQ((long)p.n, 1L);
        objs_free(&p);

        /* a missing object is corruption, named by the walk's error */
        ntfs_hash zero = { { 0 } };
        zero.b[0] = 1;
        struct objs q = { 0 };
        ASSERT_EQ(ntfs_object_walk(a, &zero, collect, &q), -NTFS_ECORRUPT);
        objs_free(&q);

        objs_free(&o);
        ntfs_store_close(a);
        ntfs_store_close(b);
        rm_rf(dir_a);
        rm_rf(dir_b);
}

int main(void) {
        RUN(copy_closure_between_stores);
        return tap_done();
}
