/* SPDX-License-Identifier: MIT
 * test_object_corpus.c — the store's object decoders against valid and
 * corrupt objects, in the normal build:
 *   1. a small generator builds a valid object of each kind (blob, file with
 *      a hole, tree, link table, commit with one and two parents, xattr set)
 *      with the store's own encoders; each must pass object_check, and every
 *      proper prefix of a non-blob object must be rejected as corrupt;
 *   2. every file of the corpus directory (argv[1], tests/fuzz/object/) is
 *      replayed through the fuzz target (fs/fuzz_object.c), which aborts on
 *      any invariant violation; each file is one TAP test.
 * `test_object_corpus --write-corpus DIR` writes the generated objects and
 * the hand-made edge cases to DIR (how tests/fuzz/object/ was seeded).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "fs/store-internal.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct obj {
        const char *name;
        uint8_t *data;
        size_t len;
        bool valid; /* object_check must accept it */
};

#define MAX_OBJS 64
static struct obj objs[MAX_OBJS];
static size_t nobjs;

static void add(const char *name, const void *data, size_t len, bool valid) {
        if (nobjs >= MAX_OBJS)
                abort();
        uint8_t *p = malloc(len ? len : 1);
        if (!p)
                abort();
        if (len)
                memcpy(p, data, len);
        objs[nobjs++] = (struct obj){ name, p, len, valid };
}

static void add_owned(const char *name, uint8_t *data, size_t len, bool valid) {
        add(name, data, len, valid);
        free(data);
}

static void fake_hash(ntfs_hash *h, uint8_t seed) {
        for (size_t i = 0; i < NTFS_HASH_LEN; i++)
                h->b[i] = (uint8_t)(seed * 31 + i + 1);
}

static struct tree_entry mk_entry(const char *name, uint32_t mode, uint8_t seed) {
        struct tree_entry e = { 0 };
        e.name = name;
        e.namelen = (uint16_t)strlen(name);
        e.h = name_hash(name, e.namelen);
        e.mode = mode;
        e.uid = 1000;
        e.gid = 1000;
        e.nlink = S_ISDIR(mode) ? 2 : 1;
        e.size = 1234;
        e.mtime = 1700000000123456789LL;
        if (S_ISDIR(mode) || S_ISREG(mode) || S_ISLNK(mode))
                fake_hash(&e.content, seed);
        return e;
}

static int ecmp(const void *a, const void *b) {
        const struct tree_entry *x = a, *y = b;
        return entry_cmp(x->h, x->name, x->namelen, y->h, y->name, y->namelen);
}

static void generate(void) {
        /* blobs */
        add("valid-blob", "Bhello, world\n", 14, true);
        add("valid-blob-empty", "B", 1, true);
        /* file object: 100000 bytes = 2 chunks, the second one a hole */
        {
                uint8_t f[13 + 2 * NTFS_HASH_LEN] = { OBJ_FILE };
                ntfs_put_be64(f + 1, 100000);
                ntfs_put_be32(f + 9, 2);
                ntfs_hash h;
                fake_hash(&h, 7);
                memcpy(f + 13, h.b, NTFS_HASH_LEN);
                add("valid-file-hole", f, sizeof f, true);
                uint8_t z[13] = { OBJ_FILE };
                add("valid-file-empty", z, sizeof z, true);
        }
        /* tree: directory, file, symlink, fifo, xattr, link reference */
        {
                struct tree_entry es[6] = {
                        mk_entry("src", S_IFDIR | 0755, 1),      mk_entry("README.md", S_IFREG | 0644, 2),
                        mk_entry("link", S_IFLNK | 0777, 3),     mk_entry("fifo", S_IFIFO | 0600, 4),
                        mk_entry("with-xattr", S_IFREG | 0600, 5), mk_entry("hard", S_IFREG | 0644, 6),
                };
                fake_hash(&es[4].xattr, 9);
                es[5].linkid = 3;
                qsort(es, 6, sizeof es[0], ecmp);
                struct tree_builder b = { 0 };
                for (size_t i = 0; i < 6; i++)
                        if (tree_builder_add(&b, &es[i]) < 0)
                                abort();
                uint8_t *p = NULL;
                size_t l = 0;
                if (tree_builder_finish(&b, OBJ_TREE, &p, &l) < 0)
                        abort();
                add_owned("valid-tree", p, l, true);
                if (tree_builder_finish(&b, OBJ_TREE, &p, &l) < 0)
                        abort();
                add_owned("valid-tree-empty", p, l, true);
        }
        /* link table: two groups, sorted by id, no names */
        {
                struct tree_builder b = { 0 };
                for (uint64_t id = 3; id <= 4; id++) {
                        struct tree_entry e = mk_entry("", S_IFREG | 0644, (uint8_t)id);
                        e.namelen = 0;
                        e.h = 0;
                        e.linkid = id;
                        e.nlink = 2;
                        if (tree_builder_add(&b, &e) < 0)
                                abort();
                }
                uint8_t *p = NULL;
                size_t l = 0;
                if (tree_builder_finish(&b, OBJ_LINKS, &p, &l) < 0)
                        abort();
                add_owned("valid-links", p, l, true);
        }
        /* commits: a root, one parent and two parents (a merge) */
        for (int np = 0; np <= 2; np++) {
                struct commit_obj c = { 0 };
                c.root = mk_entry("", S_IFDIR | 0755, 11);
                c.root.namelen = 0;
                c.root.h = 0;
                c.nparents = np;
                for (int i = 0; i < np; i++)
                        fake_hash(&c.parents[i], (uint8_t)(20 + i));
                if (np == 1)
                        fake_hash(&c.links, 30);
                c.time_ns = 1700000000000000000LL;
                c.bytes = 4096;
                c.inodes = 7;
                c.message = "checkpoint: tests pass";
                c.message_len = (uint16_t)strlen(c.message);
                c.effect = np ? "e-42" : "";
                c.effect_len = (uint16_t)strlen(c.effect);
                c.session = "main";
                c.session_len = 4;
                uint8_t *p = NULL;
                size_t l = 0;
                if (commit_encode(&c, &p, &l) < 0)
                        abort();
                static const char *names[] = { "valid-commit-root", "valid-commit", "valid-commit-merge" };
                add_owned(names[np], p, l, true);
        }
        /* xattr set: two pairs */
        {
                uint8_t x[64];
                size_t o = 0;
                x[o++] = OBJ_XATTR;
                ntfs_put_be32(x + o, 2);
                o += 4;
                static const char *kv[][2] = { { "user.a", "1" }, { "user.mime", "text/plain" } };
                for (size_t i = 0; i < 2; i++) {
                        size_t nl = strlen(kv[i][0]), vl = strlen(kv[i][1]);
                        x[o++] = 0;
                        x[o++] = (uint8_t)nl;
                        memcpy(x + o, kv[i][0], nl);
                        o += nl;
                        ntfs_put_be32(x + o, (uint32_t)vl);
                        o += 4;
                        memcpy(x + o, kv[i][1], vl);
                        o += vl;
                }
                add("valid-xattr", x, o, true);
        }

        /* Hand-made edge cases (all must be rejected, none may crash). */
        add("edge-empty", "", 0, false);
        add("edge-unknown-type", "Q1234567890", 11, false);
        {
                /* A tree whose only offset is near UINT32_MAX: a 32-bit
                 * "off + 10" wraps around (tree_view_seek, fixed). */
                uint8_t t[32] = { OBJ_TREE, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfa };
                add("edge-tree-offset-wrap", t, sizeof t, false);
                uint8_t u[9] = { OBJ_TREE, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9 };
                add("edge-tree-huge-count", u, sizeof u, false);
                uint8_t w[9] = { OBJ_TREE, 0, 0, 0, 1, 0, 0, 0, 0 };
                add("edge-tree-offset-zero", w, sizeof w, false);
        }
        {
                uint8_t f[13 + NTFS_HASH_LEN] = { OBJ_FILE };
                ntfs_put_be64(f + 1, UINT64_MAX);
                ntfs_put_be32(f + 9, 1);
                add("edge-file-size-overflow", f, sizeof f, false);
        }
        {
                uint8_t x[5] = { OBJ_XATTR, 0xff, 0xff, 0xff, 0xff };
                add("edge-xattr-huge-count", x, sizeof x, false);
        }
        {
                /* The valid commit with 3 parents claimed. */
                const struct obj *c = &objs[0];
                for (size_t i = 0; i < nobjs; i++)
                        if (strcmp(objs[i].name, "valid-commit") == 0)
                                c = &objs[i];
                _cleanup_free_ uint8_t *p = malloc(c->len);
                if (!p)
                        abort();
                memcpy(p, c->data, c->len);
                /* root entry: 8 h + 2 nl + 0 name + 1 flags + 8 linkid + 4 mode
                 * + 4+4+4 + 8+8+8 + 32 content = 91 bytes after the 2 header
                 * bytes, then 32 bytes of links, then nparents. */
                p[2 + 91 + 32] = 3;
                add("edge-commit-three-parents", p, c->len, false);
                p[2 + 91 + 32] = 1;
                p[1] = 2; /* unknown format version */
                add("edge-commit-version", p, c->len, false);
        }
}

static int null_ref(const ntfs_hash *h, void *ud) {
        (void)h;
        (void)ud;
        return 0;
}

static int write_corpus(const char *dir) {
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                fprintf(stderr, "mkdir %s: %m\n", dir);
                return 1;
        }
        for (size_t i = 0; i < nobjs; i++) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", dir, objs[i].name);
                int rc = ntfs_write_file_durable(p, objs[i].data, objs[i].len, 0644);
                if (rc < 0) {
                        fprintf(stderr, "write %s: %s\n", p, strerror(-rc));
                        return 1;
                }
        }
        printf("wrote %zu objects to %s\n", nobjs, dir);
        return 0;
}

static int cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
        (void)tap_jmp;
        generate();
        if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
                return write_corpus(argv[2]);

        /* 1. the generated objects */
        for (size_t i = 0; i < nobjs; i++) {
                const struct obj *o = &objs[i];
                int rc = object_check(o->data, o->len, null_ref, NULL);
                tap_n++;
                if ((rc == 0) != o->valid) {
                        tap_failed++;
                        printf("not ok %d - %s: object_check = %d\n", tap_n, o->name, rc);
                        continue;
                }
                bool prefixes_ok = true;
                if (o->valid && o->data[0] != OBJ_BLOB) {
                        for (size_t l = 0; l < o->len; l++) {
                                /* exact-size copy so ASan sees overreads */
                                _cleanup_free_ uint8_t *p = malloc(l ? l : 1);
                                if (!p)
                                        abort();
                                memcpy(p, o->data, l);
                                if (object_check(p, l, null_ref, NULL) != -NTFS_ECORRUPT) {
                                        /* an empty tree's 5-byte header is a valid
                                         * prefix of nothing else */
                                        prefixes_ok = false;
                                        printf("# %s: prefix of %zu bytes accepted\n", o->name, l);
                                        break;
                                }
                                LLVMFuzzerTestOneInput(p, l);
                        }
                }
                LLVMFuzzerTestOneInput(o->data, o->len);
                if (!prefixes_ok) {
                        tap_failed++;
                        printf("not ok %d - %s: a truncated copy passes object_check\n", tap_n, o->name);
                } else
                        printf("ok %d - %s (%s, %zu bytes)\n", tap_n, o->name, o->valid ? "valid" : "rejected",
                               o->len);
        }

        /* 2. the corpus */
        const char *dir = argc > 1 ? argv[1] : "tests/fuzz/object";
        DIR *d = opendir(dir);
        if (!d) {
                tap_n++;
                tap_failed++;
                printf("not ok %d - corpus directory %s: %s\n", tap_n, dir, strerror(errno));
                return tap_done();
        }
        char *names[4096];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < ARRAY_SIZE(names))
                if (de->d_name[0] != '.')
                        names[n++] = strdup(de->d_name);
        closedir(d);
        qsort(names, n, sizeof names[0], cmp);
        for (size_t i = 0; i < n; i++) {
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", dir, names[i] ? names[i] : "?");
                _cleanup_free_ char *buf = NULL;
                size_t len = 0;
                tap_n++;
                if (!names[i] || ntfs_read_file(p, 1 << 20, &buf, &len) < 0) {
                        tap_failed++;
                        printf("not ok %d - %s (unreadable)\n", tap_n, names[i] ? names[i] : "?");
                } else {
                        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
                        printf("ok %d - corpus %s (%zu bytes)\n", tap_n, names[i], len);
                }
                free(names[i]);
        }
        for (size_t i = 0; i < nobjs; i++)
                free(objs[i].data);
        return tap_done();
}
