/* SPDX-License-Identifier: MIT
 * test_policy_corpus.c — replays the policy fuzzer's corpus
 * (tests/fuzz/policy/) through the parser in the normal build, so every
 * input that once crashed stays a regression test. Files named good-*
 * must parse; files named bad-* must be refused; others just must not crash.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "policy/policy.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#include "policy/fuzz_policy.c"

static char corpus[4096];

TEST(replay) {
        DIR *d = opendir(corpus);
        if (!d)
                FAIL("opendir %s: %s", corpus, strerror(errno));
        unsigned n = 0, good = 0, bad = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char path[8192];
                snprintf(path, sizeof path, "%s/%s", corpus, de->d_name);
                char *text = NULL;
                size_t len = 0;
                int r = ntfs_read_file(path, NTFS_POLICY_MAX_FILE + 1, &text, &len);
                if (r < 0) {
                        closedir(d);
                        FAIL("read %s: %d", path, r);
                }
                LLVMFuzzerTestOneInput((const uint8_t *)text, len);
                ntfs_policy *p = NULL;
                char why[256] = "";
                r = ntfs_policy_parse(text, len, &p, why, sizeof why);
                ntfs_policy_free(p);
                free(text);
                n++;
                if (strncmp(de->d_name, "good-", 5) == 0) {
                        good++;
                        if (r < 0) {
                                closedir(d);
                                FAIL("%s: %s", de->d_name, why);
                        }
                } else if (strncmp(de->d_name, "bad-", 4) == 0) {
                        bad++;
                        if (r != -NTFS_EBADREQ || strncmp(why, "line ", 5) != 0) {
                                closedir(d);
                                FAIL("%s: parsed (%d) or no line number: %s", de->d_name, r, why);
                        }
                }
        }
        closedir(d);
        printf("# %u corpus files (%u good, %u bad)\n", n, good, bad);
        ASSERT(n >= 5 && good >= 1 && bad >= 1);
}

int main(void) {
        const char *root = getenv("NTFS_SOURCE_ROOT");
        snprintf(corpus, sizeof corpus, "%s/tests/fuzz/policy", root ? root : ".");
        RUN(replay);
        return tap_done();
}
