/* SPDX-License-Identifier: MIT
 * fuzz_archive.c — libFuzzer target: arbitrary bytes as an archive given to
 * ntfs_archive_import() (fs/sync/tarball.h), i.e. libarchive's readers plus our
 * entry handling (paths, links, symlinks, xattrs, limits). Invariants
 * (abort on violation):
 *   - import returns 0 or one of the documented errors, with a message;
 *   - on failure no session is left behind (neither the name nor a
 *     temporary ".import-" session);
 *   - on success the new session exists and exports again as a tar.
 * One store (a temporary directory) serves the whole run; imported sessions
 * are ended and the store collected every 256 inputs.
 *
 * Built as `fuzz_archive` with -Dfuzz=true (CC=clang; see the fuzz block of
 * fs/meson.build). Corpus: tests/fuzz/archive/ (small tars).
 */
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "fs/sync/tarball.h"
#include "fs/store.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ntfs_store *fst;
static char fdir[64];
static uint64_t fcount;

static void check(bool ok, const char *what) {
        if (!ok) {
                fprintf(stderr, "fuzz_archive: invariant violated: %s\n", what);
                abort();
        }
}

static int count_cb(const struct ntfs_session_info *si, void *ud) {
        (void)si;
        (*(int *)ud)++;
        return 0;
}

static int null_sink(void *ud, const void *buf, size_t len) {
        (void)buf;
        *(size_t *)ud += len;
        return 0;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(path) < 0 ? -1 : 0;
}

/* libFuzzer leaves through exit(): close the store, remove its directory. */
static void teardown(void) {
        if (!fst)
                return;
        ntfs_store_close(fst);
        fst = NULL;
        nftw(fdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void) {
        if (fst)
                return;
        snprintf(fdir, sizeof fdir, "/tmp/fuzz-archive-XXXXXX");
        check(mkdtemp(fdir) != NULL, "mkdtemp");
        struct ntfs_store_opts o = { .initial_map_bytes = 1ull << 30, .no_flusher = true };
        check(ntfs_store_open(fdir, &o, &fst) == 0, "store open");
        atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        setup();
        char name[32];
        snprintf(name, sizeof name, "fz%llu", (unsigned long long)fcount++);
        struct ntfs_archive_source src = { .fd = -1, .mem = data, .len = size };
        struct ntfs_archive_limits lim = { .max_entries = 2000, .max_bytes = 64u << 20 };
        char why[256] = "";
        ntfs_hash head;
        int rc = ntfs_archive_import(fst, name, &src, &lim, NULL, NULL, &head, why, sizeof why);
        int n = 0;
        check(ntfs_session_list(fst, count_cb, &n) == 0, "session list");
        if (rc < 0) {
                check(rc == -NTFS_EDENIED || rc == -NTFS_ETOOLARGE || rc == -NTFS_EBADREQ || rc == -ENOSPC ||
                              rc == -ENOMEM,
                      "import: undocumented error");
                check(why[0] != 0, "import failed without a message");
                check(n == 0, "a failed import left a session behind");
        } else {
                check(n == 1, "a successful import did not leave exactly one session");
                ntfs_hash at;
                check(ntfs_resolve(fst, name, &at, NULL, 0) == 0, "resolve the imported session");
                size_t bytes = 0;
                rc = ntfs_archive_export(fst, &at, NTFS_ARCHIVE_TAR, null_sink, &bytes, NULL, why, sizeof why);
                check(rc == 0 && bytes > 0, "the imported session does not export");
                check(ntfs_session_end(fst, name) == 0, "session end");
        }
        if (fcount % 256 == 0) {
                struct ntfs_gc_stats gs;
                check(ntfs_gc(fst, NULL, 0, &gs) == 0, "gc");
        }
        return 0;
}

#ifdef FUZZ_REPLAY_MAIN
/* The normal build's regression test (fs/meson.build, "archive-corpus"):
 * every file of the directory argv[1] (tests/fuzz/archive/) through the
 * target above, one TAP line each; an invariant violation aborts. */
#include <dirent.h>

#include "common/util.h"

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
                return 2;
        }
        DIR *d = opendir(argv[1]);
        if (!d) {
                printf("1..1\nnot ok 1 - corpus directory %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        char *files[1024];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < sizeof files / sizeof files[0])
                if (de->d_name[0] != '.')
                        files[n++] = strdup(de->d_name);
        closedir(d);
        qsort(files, n, sizeof files[0], name_cmp);
        int failed = 0;
        for (size_t i = 0; i < n; i++) {
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", argv[1], files[i] ? files[i] : "?");
                char *buf = NULL;
                size_t len = 0;
                if (!files[i] || ntfs_read_file(p, 16u << 20, &buf, &len) < 0) {
                        failed++;
                        printf("not ok %zu - %s (unreadable)\n", i + 1, p);
                } else {
                        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
                        printf("ok %zu - %s (%zu bytes)\n", i + 1, files[i], len);
                }
                free(buf);
                free(files[i]);
        }
        printf("1..%zu\n", n);
        return failed ? 1 : 0;
}
#endif
