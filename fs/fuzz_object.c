/* SPDX-License-Identifier: MIT
 * fuzz_object.c — libFuzzer target: arbitrary bytes fed to the store's
 * object decoders (fs/store-internal.h): tree_view_init/get/seek,
 * commit_decode, file_view_init and object_check. A corrupt object must be
 * an error (-NTFS_ECORRUPT), never a crash, an out-of-bounds read or a
 * result that points outside the input. Invariants checked (abort on
 * violation):
 *   - every decoder returns 0 or -NTFS_ECORRUPT;
 *   - a decoded name, message, effect or session lies inside the input;
 *   - tree_view_seek returns an index <= count;
 *   - a decoded file view's hashes lie inside the input, n matches size;
 *   - a decoded commit re-encodes (commit_encode) into bytes that decode to
 *     the same commit;
 *   - object_check accepts only what the specific decoder accepts.
 *
 * Built as `fuzz_object` with -Dfuzz=true (CC=clang, see fs/meson.build);
 * the corpus tests/fuzz/object/ is replayed by tests/unit/test_object_corpus.c
 * in every build (which also regenerates valid objects of each kind).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "fs/store-internal.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Trees larger than this are only partly walked (time per input bound). */
#define FUZZ_MAX_ENTRIES 4096

static void check(bool ok, const char *what) {
        if (!ok) {
                fprintf(stderr, "fuzz_object: invariant violated: %s\n", what);
                abort();
        }
}

static bool inside(const void *p, size_t n, const uint8_t *data, size_t size) {
        const uint8_t *q = p;
        if (n == 0)
                return true;
        return q && q >= data && n <= size && (size_t)(q - data) <= size - n;
}

static int count_ref(const ntfs_hash *h, void *ud) {
        (void)h;
        (*(uint64_t *)ud)++;
        return 0;
}

static int fail_ref(const ntfs_hash *h, void *ud) {
        (void)h;
        (void)ud;
        return -ENOENT;
}

static bool same_entry(const struct tree_entry *a, const struct tree_entry *b) {
        return a->h == b->h && a->namelen == b->namelen &&
               (a->namelen == 0 || memcmp(a->name, b->name, a->namelen) == 0) && a->linkid == b->linkid &&
               a->mode == b->mode && a->uid == b->uid && a->gid == b->gid && a->nlink == b->nlink &&
               a->rdev == b->rdev && a->size == b->size && a->mtime == b->mtime &&
               memcmp(a->content.b, b->content.b, NTFS_HASH_LEN) == 0 &&
               memcmp(a->xattr.b, b->xattr.b, NTFS_HASH_LEN) == 0;
}

static void fuzz_tree(const uint8_t *data, size_t size) {
        struct tree_view v;
        int rc = tree_view_init(&v, data, size);
        check(rc == 0 || rc == -NTFS_ECORRUPT, "tree_view_init: unexpected error");
        if (rc < 0)
                return;
        check(v.count <= size, "tree_view_init: count larger than the object");
        uint32_t n = v.count < FUZZ_MAX_ENTRIES ? v.count : FUZZ_MAX_ENTRIES;
        for (uint32_t i = 0; i < n; i++) {
                struct tree_entry e;
                rc = tree_view_get(&v, i, &e);
                check(rc == 0 || rc == -NTFS_ECORRUPT, "tree_view_get: unexpected error");
                if (rc < 0)
                        continue;
                check(inside(e.name, e.namelen, data, size), "tree_view_get: name outside the object");
                uint32_t s = tree_view_seek(&v, e.h, e.name, e.namelen);
                check(s <= v.count, "tree_view_seek: index past count");
        }
        /* Seeks for names that are not (necessarily) there. */
        static const char *probes[] = { "", "a", "README.md", "zzzzzzzzzzzzzzzz" };
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
                size_t l = strlen(probes[i]);
                check(tree_view_seek(&v, name_hash(probes[i], l), probes[i], l) <= v.count,
                      "tree_view_seek: index past count");
        }
        check(tree_view_seek(&v, 0, "", 0) <= v.count, "tree_view_seek(0): index past count");
        check(tree_view_seek(&v, UINT64_MAX, "", 0) <= v.count, "tree_view_seek(max): index past count");
        /* The first entry's own (h, name) when the input has 10 bytes for it. */
        if (size >= 15) {
                uint64_t h = ntfs_get_be64(data + 5);
                size_t l = size - 15 < 32 ? size - 15 : 32;
                check(tree_view_seek(&v, h, (const char *)data + 15, l) <= v.count,
                      "tree_view_seek(input): index past count");
        }
}

static void fuzz_commit(const uint8_t *data, size_t size) {
        struct commit_obj c;
        int rc = commit_decode(data, size, &c);
        check(rc == 0 || rc == -NTFS_ECORRUPT, "commit_decode: unexpected error");
        if (rc < 0)
                return;
        check(c.nparents >= 0 && c.nparents <= 2, "commit_decode: nparents out of range");
        check(inside(c.root.name, c.root.namelen, data, size), "commit_decode: root name outside");
        check(inside(c.message, c.message_len, data, size), "commit_decode: message outside");
        check(inside(c.effect, c.effect_len, data, size), "commit_decode: effect outside");
        check(inside(c.session, c.session_len, data, size), "commit_decode: session outside");
        uint8_t *enc = NULL;
        size_t enc_len = 0;
        rc = commit_encode(&c, &enc, &enc_len);
        if (rc == -ENOMEM)
                return;
        check(rc == 0, "commit_encode of a decoded commit failed");
        struct commit_obj d;
        rc = commit_decode(enc, enc_len, &d);
        check(rc == 0, "re-encoded commit does not decode");
        check(same_entry(&c.root, &d.root), "re-encoded commit: root differs");
        check(memcmp(c.links.b, d.links.b, NTFS_HASH_LEN) == 0, "re-encoded commit: links differ");
        check(c.nparents == d.nparents, "re-encoded commit: parents differ");
        for (int i = 0; i < c.nparents; i++)
                check(memcmp(c.parents[i].b, d.parents[i].b, NTFS_HASH_LEN) == 0, "re-encoded commit: parent differs");
        check(c.time_ns == d.time_ns && c.bytes == d.bytes && c.inodes == d.inodes, "re-encoded commit: counters differ");
        check(c.message_len == d.message_len && (!c.message_len || memcmp(c.message, d.message, c.message_len) == 0),
              "re-encoded commit: message differs");
        check(c.effect_len == d.effect_len && (!c.effect_len || memcmp(c.effect, d.effect, c.effect_len) == 0),
              "re-encoded commit: effect differs");
        check(c.session_len == d.session_len && (!c.session_len || memcmp(c.session, d.session, c.session_len) == 0),
              "re-encoded commit: session differs");
        free(enc);
}

static void fuzz_file(const uint8_t *data, size_t size) {
        struct file_view v;
        int rc = file_view_init(&v, data, size);
        check(rc == 0 || rc == -NTFS_ECORRUPT, "file_view_init: unexpected error");
        if (rc < 0)
                return;
        check(inside(v.hashes, (size_t)v.n * NTFS_HASH_LEN, data, size), "file_view_init: hashes outside");
        check((v.size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE == v.n, "file_view_init: n does not match size");
}

static void fuzz_one(const uint8_t *data, size_t size) {
        fuzz_tree(data, size);
        fuzz_commit(data, size);
        fuzz_file(data, size);
        uint64_t refs = 0;
        int rc = object_check(data, size, count_ref, &refs);
        check(rc == 0 || rc == -NTFS_ECORRUPT, "object_check: unexpected error");
        if (rc == 0 && refs > 0) {
                /* A failing callback's error must come back unchanged. */
                check(object_check(data, size, fail_ref, NULL) == -ENOENT, "object_check: ref error lost");
        }
        if (rc == 0 && size > 0) {
                /* What object_check accepts, the specific decoder accepts. */
                struct commit_obj c;
                struct file_view f;
                struct tree_view t;
                if (data[0] == OBJ_COMMIT)
                        check(commit_decode(data, size, &c) == 0, "object_check accepted a bad commit");
                if (data[0] == OBJ_FILE)
                        check(file_view_init(&f, data, size) == 0, "object_check accepted a bad file");
                if (data[0] == OBJ_TREE || data[0] == OBJ_LINKS)
                        check(tree_view_init(&t, data, size) == 0, "object_check accepted a bad tree");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* Decoders read LMDB memory: give them an exact-size heap copy so that
         * ASan sees any read past the end. */
        uint8_t *copy = calloc(1, size ? size : 1);
        if (!copy)
                return 0;
        if (size)
                memcpy(copy, data, size);
        fuzz_one(copy, size);
        /* The same bytes under each type tag, so that one corpus entry
         * exercises every decoder. */
        static const uint8_t tags[] = { OBJ_BLOB, OBJ_FILE, OBJ_TREE, OBJ_COMMIT, OBJ_LINKS, OBJ_XATTR };
        if (size > 0) {
                for (size_t i = 0; i < sizeof tags; i++) {
                        if (tags[i] == data[0])
                                continue;
                        copy[0] = tags[i];
                        fuzz_one(copy, size);
                }
        }
        free(copy);
        return 0;
}
