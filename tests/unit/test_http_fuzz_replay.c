/* SPDX-License-Identifier: MIT
 * Replays every file of the fuzz corpus (argv[1], default
 * $NTFS_SOURCE_ROOT/tests/fuzz/http) through LLVMFuzzerTestOneInput from
 * ctl/fuzz_http.c: one TAP test per file. A crash or a sanitizer report
 * fails the run.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
        char dir[4096];
        if (argc > 1)
                snprintf(dir, sizeof dir, "%s", argv[1]);
        else {
                const char *root = getenv("NTFS_SOURCE_ROOT");
                snprintf(dir, sizeof dir, "%s/tests/fuzz/http", root ? root : ".");
        }
        DIR *d = opendir(dir);
        if (!d) {
                printf("not ok 1 - open corpus %s: %s\n1..1\n", dir, strerror(errno));
                return 1;
        }
        char *names[1024];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < ARRAY_SIZE(names))
                if (de->d_name[0] != '.')
                        names[n++] = strdup(de->d_name);
        closedir(d);
        qsort(names, n, sizeof names[0], cmp);
        int failed = 0;
        for (size_t i = 0; i < n; i++) {
                char path[8192];
                snprintf(path, sizeof path, "%s/%s", dir, names[i]);
                _cleanup_free_ char *buf = NULL;
                size_t len = 0;
                int r = ntfs_read_file(path, 1 << 20, &buf, &len);
                if (r < 0) {
                        printf("not ok %zu - %s: read failed (%d)\n", i + 1, names[i], r);
                        failed = 1;
                } else {
                        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
                        printf("ok %zu - %s (%zu bytes)\n", i + 1, names[i], len);
                }
                fflush(stdout);
                free(names[i]);
        }
        if (n < 20) {
                printf("not ok %zu - corpus has only %zu files (want 20+)\n", n + 1, n);
                n++;
                failed = 1;
        }
        printf("1..%zu\n", n);
        return failed;
}
