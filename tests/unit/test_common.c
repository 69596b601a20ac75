/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
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

TEST(text_and_base64) {
        ASSERT(ntfs_text_clean("caf\xc3\xa9\n", 6));
        ASSERT(!ntfs_text_clean("a\0b", 3));
        ASSERT(!ntfs_text_clean("a\xff" "b", 3));
        ASSERT(!ntfs_text_clean("\xed\xa0\x80", 3)); /* a surrogate */
        _cleanup_free_ char *lossy = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_text_lossy("a\0b\xff\xc3(", 6, &lossy, &n)); /* NUL, 0xff, a cut lead byte */
        ASSERT_STREQ(lossy, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd(");
        ASSERT_EQ(n, strlen(lossy));
        /* RFC 4648's vectors, and bytes with NULs both ways */
        static const char *const vec[][2] = { { "", "" },         { "f", "Zg==" },     { "fo", "Zm8=" },
                                              { "foo", "Zm9v" },  { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" },
                                              { "foobar", "Zm9vYmFy" } };
        for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
                _cleanup_free_ char *e = NULL, *d = NULL;
                size_t el = 0, dl = 0;
                ASSERT_OK(ntfs_base64_encode(vec[i][0], strlen(vec[i][0]), &e, &el));
                ASSERT_STREQ(e, vec[i][1]);
                ASSERT_OK(ntfs_base64_decode(e, el, &d, &dl));
                ASSERT_EQ(dl, strlen(vec[i][0]));
                ASSERT(memcmp(d, vec[i][0], dl) == 0);
        }
        _cleanup_free_ char *e = NULL, *d = NULL;
        size_t dl = 0;
        ASSERT_OK(ntfs_base64_encode("\0\xff\0", 3, &e, NULL));
        ASSERT_OK(ntfs_base64_decode(e, strlen(e), &d, &dl));
        ASSERT(dl == 3 && d[0] == 0 && (unsigned char)d[1] == 0xff && d[2] == 0);
        char *bad = NULL;
        ASSERT_ERR(ntfs_base64_decode("Zm9", 3, &bad, NULL), -EINVAL);
        ASSERT_ERR(ntfs_base64_decode("Zm=v", 4, &bad, NULL), -EINVAL);
        ASSERT_ERR(ntfs_base64_decode("Zm9v\n", 5, &bad, NULL), -EINVAL);
        ASSERT_ERR(ntfs_base64_decode("=AAA", 4, &bad, NULL), -EINVAL);
        ASSERT_ERR(ntfs_base64_decode("Zg==Zg==", 8, &bad, NULL), -EINVAL);
}

/* sd_notify's protocol: one datagram to $NOTIFY_SOCKET, a path or an
 * abstract name ("@..."); nothing when unset; a relative name refused. */
TEST(sd_notify) {
        ASSERT_EQ(unsetenv("NOTIFY_SOCKET"), 0);
        ASSERT_EQ(ntfs_sd_notify("READY=1"), 0);
        char name[64];
        snprintf(name, sizeof name, "@ntfs-test-notify-%d", (int)getpid());
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT(fd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(name);
        memcpy(sa.sun_path, name, n);
        sa.sun_path[0] = 0;
        ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)), 0);
        ASSERT_EQ(setenv("NOTIFY_SOCKET", name, 1), 0);
        ASSERT_EQ(ntfs_sd_notify("READY=1"), 0);
        char buf[32] = "";
        ASSERT_EQ(recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT), 7);
        ASSERT(strcmp(buf, "READY=1") == 0);
        ASSERT_EQ(setenv("NOTIFY_SOCKET", "relative/path", 1), 0);
        ASSERT_EQ(ntfs_sd_notify("READY=1"), -EINVAL);
        ASSERT_EQ(setenv("NOTIFY_SOCKET", "/nonexistent/ntfs-notify", 1), 0);
        ASSERT_EQ(ntfs_sd_notify("READY=1"), -ENOENT);
        ASSERT_EQ(unsetenv("NOTIFY_SOCKET"), 0);
}

/* The journal's native protocol: one datagram, KEY=VALUE lines, MESSAGE
 * in the binary form (a length, so that a newline in it is kept), and the
 * thread's context as SESSION, REQUEST_ID, EFFECT_ID; the file sink gets
 * the same message with its context, and is reopened at its path. */
TEST(log_sinks) {
        char dir[] = "/tmp/ntfs-test-log-XXXXXX";
        ASSERT(mkdtemp(dir) != NULL);
        char sock[128], file[128];
        snprintf(sock, sizeof sock, "%s/j.sock", dir);
        snprintf(file, sizeof file, "%s/f.log", dir);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT(fd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        ASSERT_ERR(ntfs_log_open_journal(file, "t"), -ENOENT); /* not there yet: not a socket */
        ASSERT_OK(ntfs_log_open_journal(sock, "t"));
        ASSERT_OK(ntfs_log_open_file(file));
        ntfs_log_ctx_request(7);
        ntfs_log_ctx_session("alpha");
        ntfs_log_ctx_effect("12");
        log_warn("two\nlines");
        ntfs_log_ctx_clear();
        log_info("plain");
        char buf[2048];
        ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        ASSERT(n > 0);
        buf[n] = 0;
        ASSERT(memmem(buf, (size_t)n, "PRIORITY=4\n", 11) != NULL);
        ASSERT(memmem(buf, (size_t)n, "SYSLOG_IDENTIFIER=t\n", 20) != NULL);
        ASSERT(memmem(buf, (size_t)n, "MESSAGE\n\x09\0\0\0\0\0\0\0two\nlines\n", 8 + 8 + 10) != NULL);
        ASSERT(memmem(buf, (size_t)n, "SESSION=alpha\n", 14) != NULL);
        ASSERT(memmem(buf, (size_t)n, "REQUEST_ID=7\n", 13) != NULL);
        ASSERT(memmem(buf, (size_t)n, "EFFECT_ID=12\n", 13) != NULL);
        n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        ASSERT(n > 0);
        ASSERT(memmem(buf, (size_t)n, "SESSION=", 8) == NULL && memmem(buf, (size_t)n, "REQUEST_ID=", 11) == NULL);
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        ASSERT_OK(ntfs_read_file(file, 1 << 16, &text, &len));
        ASSERT(strstr(text, " ntfs warn: two\nlines {request=7 session=alpha effect=12}\n") != NULL);
        ASSERT(strstr(text, " ntfs info: plain\n") != NULL);
        /* rotated away: the reopen makes a new file at the path */
        char old[160];
        snprintf(old, sizeof old, "%s.1", file);
        ASSERT_EQ(rename(file, old), 0);
        ASSERT_OK(ntfs_log_reopen());
        log_info("after");
        _cleanup_free_ char *text2 = NULL;
        ASSERT_OK(ntfs_read_file(file, 1 << 16, &text2, &len));
        ASSERT(strstr(text2, " ntfs info: after\n") != NULL && strstr(text2, "plain") == NULL);
        ntfs_log_close();
        ASSERT_EQ(unlink(old), 0);
        ASSERT_EQ(unlink(file), 0);
        ASSERT_EQ(unlink(sock), 0);
        ASSERT_EQ(rmdir(dir), 0);
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
        RUN(text_and_base64);
        RUN(sd_notify);
        RUN(log_sinks);
        return tap_done();
}
