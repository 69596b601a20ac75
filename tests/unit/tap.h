/* SPDX-License-Identifier: MIT
 * tap.h — tiny TAP test helpers for meson (protocol: 'tap').
 *
 *   TEST(name) { ASSERT_OK(f()); ASSERT_EQ(a, b); }
 *   int main(void) { RUN(name); return tap_done(); }
 *
 * An ASSERT failure prints where and why and aborts the current test
 * (longjmp), which is reported "not ok"; exit status is 1 if any failed.
 * Return 77 from main to skip (meson convention).
 */
#ifndef NTFS_TEST_TAP_H
#define NTFS_TEST_TAP_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static int tap_n, tap_failed;
static jmp_buf tap_jmp;

#define TEST(name) static void test_##name(void)
#define RUN(name)                                                       \
        do {                                                            \
                tap_n++;                                                \
                if (setjmp(tap_jmp) == 0) {                             \
                        test_##name();                                  \
                        printf("ok %d - %s\n", tap_n, #name);           \
                } else {                                                \
                        tap_failed++;                                   \
                        printf("not ok %d - %s\n", tap_n, #name);       \
                }                                                       \
                fflush(stdout);                                         \
        } while (0)

static inline int tap_done(void) {
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}

#define FAIL(...)                                                              \
        do {                                                                   \
                printf("# %s:%d: ", __FILE__, __LINE__);                       \
                printf(__VA_ARGS__);                                           \
                printf("\n");                                                  \
                fflush(stdout);                                                \
                longjmp(tap_jmp, 1);                                           \
        } while (0)

#define ASSERT(c)                                                              \
        do {                                                                   \
                if (!(c))                                                      \
                        FAIL("assertion failed: %s", #c);                      \
        } while (0)
#define ASSERT_OK(e)                                                           \
        do {                                                                   \
                long _r = (long)(e);                                           \
                if (_r < 0)                                                    \
                        FAIL("%s failed: %ld (%s: %s)", #e, _r,                \
                             ntfs_errcode((int)_r), ntfs_strerror((int)_r));   \
        } while (0)
#define ASSERT_ERR(e, want)                                                    \
        do {                                                                   \
                long _r = (long)(e);                                           \
                if (_r != (long)(want))                                        \
                        FAIL("%s returned %ld (%s), want %ld (%s)", #e, _r,    \
                             ntfs_errcode((int)_r), (long)(want),              \
                             ntfs_errcode((int)(want)));                       \
        } while (0)
#define ASSERT_EQ(a, b)                                                        \
        do {                                                                   \
                long long _a = (long long)(a), _b = (long long)(b);            \
                if (_a != _b)                                                  \
                        FAIL("%s == %s: %lld != %lld", #a, #b, _a, _b);        \
        } while (0)
#define ASSERT_STREQ(a, b)                                                     \
        do {                                                                   \
                const char *_a = (a), *_b = (b);                               \
                if (!_a || !_b || strcmp(_a, _b) != 0)                         \
                        FAIL("%s == %s: '%s' != '%s'", #a, #b, _a ? _a : "(null)", \
                             _b ? _b : "(null)");                              \
        } while (0)

#endif
