/* SPDX-License-Identifier: MIT
 * test_journal_corpus.c — replays every file of tests/fuzz/journal/ through the fuzz
 * target (journal/fuzz_journal.c) in the normal build: each file is one TAP
 * test; a crash or an invariant violation aborts the run. At the end the
 * database bytes must not contain the fuzzer's secret.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_journal_teardown(void);

static int cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void) {
        (void)tap_jmp;
        const char *root = getenv("NTFS_SOURCE_ROOT");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/journal", root ? root : ".");
        DIR *d = opendir(dir);
        if (!d) {
                printf("1..0 # SKIP no corpus at %s\n", dir);
                return 77;
        }
        char *names[1024];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < ARRAY_SIZE(names))
                if (de->d_name[0] != '.')
                        names[n++] = strdup(de->d_name);
        closedir(d);
        qsort(names, n, sizeof names[0], cmp);
        for (size_t i = 0; i < n; i++) {
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", dir, names[i]);
                _cleanup_free_ char *buf = NULL;
                size_t len = 0;
                tap_n++;
                if (!names[i] || ntfs_read_file(p, 1 << 20, &buf, &len) < 0) {
                        tap_failed++;
                        printf("not ok %d - %s (unreadable)\n", tap_n, names[i] ? names[i] : "?");
                } else {
                        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
                        printf("ok %d - %s\n", tap_n, names[i]);
                }
                free(names[i]);
        }
        int hits = fuzz_journal_teardown();
        tap_n++;
        if (hits != 0) {
                tap_failed++;
                printf("not ok %d - secret found %d times in the database bytes\n", tap_n, hits);
        } else
                printf("ok %d - secret absent from the database bytes\n", tap_n);
        return tap_done();
}
