/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

TEST(names) {
        ASSERT(ntfs_name_valid("main"));
        ASSERT(ntfs_name_valid("feature.x-1_2"));
        ASSERT(!ntfs_name_valid(""));
        ASSERT(!ntfs_name_valid("."));
        ASSERT(!ntfs_name_valid(".."));
        ASSERT(!ntfs_name_valid("a/b"));
        ASSERT(!ntfs_name_valid("a\nb"));
        ASSERT(!ntfs_name_valid("a\x7f"));
        ASSERT(!ntfs_name_valid("-rf"));
        /* names travel in JSON: well-formed UTF-8 only */
        ASSERT(ntfs_name_valid("caf\xc3\xa9"));          /* café */
        ASSERT(ntfs_name_valid("\xe6\x97\xa5\xf0\x9f\x8c\xb1")); /* U+65E5 U+1F331 */
        ASSERT(!ntfs_name_valid("\xff"));
        ASSERT(!ntfs_name_valid("a\xc3"));                /* cut short */
        ASSERT(!ntfs_name_valid("\xc0\xaf"));            /* overlong '/' */
        ASSERT(!ntfs_name_valid("\xed\xa0\x80"));       /* a surrogate */
        ASSERT(!ntfs_name_valid("\xf4\x90\x80\x80"));  /* above U+10FFFF */
        char big[300];
        memset(big, 'a', sizeof big - 1);
        big[sizeof big - 1] = 0;
        ASSERT(!ntfs_name_valid(big));
        big[255] = 0;
        ASSERT(ntfs_name_valid(big));
}

TEST(hex_roundtrip) {
        uint8_t h[32], back[32];
        char hex[65];
        ntfs_sha256("abc", 3, h);
        ntfs_hex(h, 32, hex);
        ASSERT_STREQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        ASSERT_OK(ntfs_unhex(hex, back, 32));
        ASSERT(memcmp(h, back, 32) == 0);
        hex[3] = 'z';
        ASSERT_ERR(ntfs_unhex(hex, back, 32), -EINVAL);
}

TEST(durable_write) {
        char dir[] = "/tmp/ntfs-test-XXXXXX";
        ASSERT(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof path, "%s/f", dir);
        ASSERT_OK(ntfs_write_file_durable(path, "hello", 5, 0600));
        _cleanup_free_ char *s = NULL;
        size_t n;
        ASSERT_OK(ntfs_read_file(path, 100, &s, &n));
        ASSERT_EQ(n, 5);
        ASSERT_STREQ(s, "hello");
        free(s);
        s = NULL;
        ASSERT_ERR(ntfs_read_file(path, 2, &s, &n), -EFBIG);
        unlink(path);
        rmdir(dir);
}

TEST(parse_u64) {
        uint64_t v;
        ASSERT_OK(ntfs_parse_u64("42", 100, &v));
        ASSERT_EQ(v, 42);
        ASSERT_ERR(ntfs_parse_u64("101", 100, &v), -ERANGE);
        ASSERT_ERR(ntfs_parse_u64("-1", 100, &v), -EINVAL);
        ASSERT_ERR(ntfs_parse_u64("4x", 100, &v), -EINVAL);
        ASSERT_ERR(ntfs_parse_u64("", 100, &v), -EINVAL);
}

TEST(room_for) {
        uint64_t *a = NULL;
        size_t cap = 0;
        for (size_t n = 0; n < 1000; n++) {
                ASSERT_OK(NTFS_ROOM_FOR(a, cap, n));
                ASSERT(cap > n);
                a[n] = n * 3;
        }
        ASSERT_EQ(cap, 1024); /* 64 doubled */
        for (size_t n = 0; n < 1000; n++)
                ASSERT_EQ(a[n], n * 3);
        uint64_t *before = a;
        ASSERT_OK(NTFS_ROOM_FOR(a, cap, 1023)); /* room already: nothing moves */
        ASSERT(a == before);
        size_t huge = SIZE_MAX / 4;
        ASSERT_ERR(ntfs_room_for((void **)&a, &huge, huge, 8), -ENOMEM); /* would overflow */
        ASSERT(a == before);
        free(a);
}

TEST(errcodes) {
        ASSERT_STREQ(ntfs_errcode(-NTFS_ENOSESSION), "session_not_found");
        ASSERT_EQ(ntfs_http_status(-NTFS_ENOSESSION), 404);
        ASSERT_STREQ(ntfs_errcode(-ENOSPC), "no_space");
        ASSERT_STREQ(ntfs_errcode(-12345), "internal");
}

/* From the environment, "N+" fires at the Nth hit and at every one after
 * (mount.writepage:1+:sleep40 in test_fsx.py). The environment is read at
 * the first hit of the process, so in a child (run before any other
 * ntfs_fault call of this process). */
TEST(fault_env_every) {
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
                setenv("NTFS_FAULT", "t.every:2+:error", 1);
                bool ok = ntfs_fault("t.every") == 0 && ntfs_fault("t.other") == 0 &&
                          ntfs_fault("t.every") == -EIO && ntfs_fault("t.every") == -EIO &&
                          ntfs_fault("t.every") == -EIO && ntfs_fault_hits("t.every") == 4;
                _exit(ok ? 0 : 1);
        }
        int st = 0;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* An armed point fires at its nth hit only: ERROR returns -EIO there,
 * SLEEP pauses (1 s when armed from code) and returns 0. */
TEST(fault_actions) {
        unsetenv("NTFS_FAULT");
        ASSERT_EQ(ntfs_fault("t.point"), 0); /* nothing armed */
        ntfs_fault_arm("t.point", 2, NTFS_FAULT_ERROR);
        ASSERT_EQ(ntfs_fault("t.other"), 0);
        ASSERT_EQ(ntfs_fault("t.point"), 0);
        ASSERT_EQ(ntfs_fault("t.point"), -EIO);
        ASSERT_EQ(ntfs_fault("t.point"), 0);
        ASSERT_EQ(ntfs_fault_hits("t.point"), 3u);
        ntfs_fault_arm("t.point", 1, NTFS_FAULT_SLEEP);
        int64_t t0 = ntfs_mono_ns();
        ASSERT_EQ(ntfs_fault("t.point"), 0);
        int64_t slept = ntfs_mono_ns() - t0;
        ASSERT(slept >= 1000000000LL);
        t0 = ntfs_mono_ns();
        ASSERT_EQ(ntfs_fault("t.point"), 0); /* the 2nd hit does not sleep */
        ASSERT(ntfs_mono_ns() - t0 < 500000000LL);
        ntfs_fault_disarm();
        ASSERT_EQ(ntfs_fault_hits("t.point"), 0u);
}

int main(void) {
        RUN(fault_env_every); /* first: see there */
        RUN(names);
        RUN(hex_roundtrip);
        RUN(durable_write);
        RUN(parse_u64);
        RUN(room_for);
        RUN(errcodes);
        RUN(fault_actions);
        return tap_done();
}
