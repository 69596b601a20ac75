/* SPDX-License-Identifier: MIT
 * Unit tests of libntfs-exec: the state codec, the JSON writer, and
 * ntfs_jail_run() against the real helper (those need root; skipped else).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "exec/jail-internal.h"
#include "exec/jail.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char ws[64];

static const char raw[] = "cwd=/workspace/src/a b\0"
                          "env=FOO=line1\nline2\0"
                          "env=BS=back\\slash\ttab\0"
                          "env=UTF=h\xc3\xa9llo\0"
                          "env=PWD=/workspace/src\0"
                          "env=SHLVL=1\0"
                          "env=bad-name=x\0"
                          "env=EMPTY=\0";

TEST(state_roundtrip) {
        _cleanup_free_ char *blob = NULL;
        size_t bl;
        ASSERT_OK(jail_state_from_raw(raw, sizeof raw - 1, &blob, &bl));
        ASSERT_EQ(strlen(blob), bl);
        /* ASCII only, one record per line. */
        for (size_t i = 0; i < bl; i++)
                ASSERT(blob[i] == '\n' || (blob[i] >= 0x20 && blob[i] < 0x7f));
        struct jail_state s;
        ASSERT_OK(jail_state_parse(blob, bl, &s));
        ASSERT_STREQ(s.cwd, "src/a b");
        ASSERT_EQ(s.n_vars, 4); /* PWD, SHLVL and the invalid name are dropped */
        ASSERT_STREQ(s.vars[0], "FOO=line1\nline2");
        ASSERT_STREQ(s.vars[1], "BS=back\\slash\ttab");
        ASSERT_STREQ(s.vars[2], "UTF=h\xc3\xa9llo");
        ASSERT_STREQ(s.vars[3], "EMPTY=");
        jail_state_release(&s);
}

TEST(state_cwd_outside_workspace) {
        static const char r1[] = "cwd=/tmp/x\0";
        static const char r2[] = "cwd=/workspacefoo\0";
        static const char r3[] = "cwd=/workspace\0";
        const char *raws[] = { r1, r2, r3 };
        size_t lens[] = { sizeof r1 - 1, sizeof r2 - 1, sizeof r3 - 1 };
        for (size_t i = 0; i < 3; i++) {
                _cleanup_free_ char *blob = NULL;
                ASSERT_OK(jail_state_from_raw(raws[i], lens[i], &blob, NULL));
                struct jail_state s;
                ASSERT_OK(jail_state_parse(blob, strlen(blob), &s));
                ASSERT_STREQ(s.cwd, "");
                jail_state_release(&s);
        }
}

TEST(state_parse_rejects) {
        struct jail_state s;
        const char *bad[] = {
                "",                                        /* no header */
                "ntfs-jail-state 2\n",                     /* unknown version */
                "ntfs-jail-state 1\ncwd ../etc\n",         /* climbs out */
                "ntfs-jail-state 1\ncwd a/../../x\n",      /* climbs out */
                "ntfs-jail-state 1\ncwd /etc\n",           /* absolute */
                "ntfs-jail-state 1\nenv 1X=y\n",           /* bad name */
                "ntfs-jail-state 1\nenv X\n",              /* no '=' */
                "ntfs-jail-state 1\nenv X=\\x0\n",         /* short escape */
                "ntfs-jail-state 1\nenv X=\\x00\n",        /* NUL */
                "ntfs-jail-state 1\nenv X=\\q41\n",        /* unknown escape */
                "ntfs-jail-state 1\nrm -rf /\n",           /* unknown record */
                "ntfs-jail-state 1\nenv X=a\tb\n",         /* raw control byte */
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                int r = jail_state_parse(bad[i], strlen(bad[i]), &s);
                if (r != -EINVAL)
                        FAIL("case %zu: got %d", i, r);
        }
        _cleanup_free_ char *big = malloc(JAIL_STATE_MAX + 2);
        ASSERT(big);
        memset(big, 'a', JAIL_STATE_MAX + 1);
        ASSERT_ERR(jail_state_parse(big, JAIL_STATE_MAX + 1, &s), -E2BIG);
        /* A good one with an escaped value. */
        const char *good = "ntfs-jail-state 1\ncwd d\\x20e\nenv X=a\\x0ab\n";
        ASSERT_OK(jail_state_parse(good, strlen(good), &s));
        ASSERT_STREQ(s.cwd, "d e");
        ASSERT_STREQ(s.vars[0], "X=a\nb");
        jail_state_release(&s);
}

TEST(json_string) {
        struct jbuf b = { 0 };
        ASSERT_OK(jbuf_json_string(&b, "a\"b\\c\n\x01\xff\xc3\xa9\0z", 12));
        ASSERT_STREQ(b.p, "\"a\\\"b\\\\c\\n\\u0001\\ufffd\xc3\xa9\\u0000z\"");
        free(b.p);
        b = (struct jbuf){ 0 };
        /* Overlong encoding and a lone surrogate are invalid. */
        ASSERT_OK(jbuf_json_string(&b, "\xc0\xaf\xed\xa0\x80", 5));
        ASSERT_STREQ(b.p, "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"");
        free(b.p);
}

static void spec_init(struct ntfs_jail_spec *s, const char *cmd) {
        *s = (struct ntfs_jail_spec){ .jail_binary = NTFS_JAIL_BINARY, .workspace = ws, .command = cmd,
                                      .timeout_ms = 20000, .memory_bytes = 512ULL << 20, .pids = 128 };
}

TEST(bad_spec) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, NULL);
        ASSERT_ERR(ntfs_jail_run(&s, &r), -EINVAL);
        spec_init(&s, "true");
        s.workspace = "relative";
        ASSERT_ERR(ntfs_jail_run(&s, &r), -EINVAL);
        spec_init(&s, "true");
        const char *env[] = { "NOEQUALS", NULL };
        s.env = env;
        ASSERT_ERR(ntfs_jail_run(&s, &r), -EINVAL);
        spec_init(&s, "true");
        s.net = 7;
        ASSERT_ERR(ntfs_jail_run(&s, &r), -EINVAL);
        spec_init(&s, "true");
        s.jail_binary = "/nonexistent/ntfs-jail";
        ASSERT_ERR(ntfs_jail_run(&s, &r), -ENOENT);
        ntfs_jail_result_release(&r);
        ntfs_jail_result_release(&r); /* twice is fine */
}

TEST(run_basic) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "echo out; echo err >&2; printf 'a\\0b'; exit 3");
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT_EQ(r.exit_code, 3);
        ASSERT_EQ(r.term_signal, 0);
        ASSERT(!r.timed_out && !r.oom && !r.out_truncated && !r.err_truncated);
        ASSERT_EQ(r.out_len, 7);
        ASSERT(memcmp(r.out, "out\na\0b", 7) == 0);
        ASSERT_STREQ(r.err, "err\n");
        ASSERT(r.duration_ns > 0);
        ASSERT(r.state_out != NULL);
        ntfs_jail_result_release(&r);
}

TEST(run_binary_output) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "printf 'a\\0b\\377\\303('; printf '\\0' >&2");
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT_EQ(r.out_len, 6);
        ASSERT(memcmp(r.out, "a\0b\xff\xc3(", 6) == 0);
        ASSERT_EQ(r.err_len, 1);
        ASSERT_EQ(r.err[0], 0);
        ntfs_jail_result_release(&r);
}

/* Reads fd to EOF (or EIO, a pty master's end), on a thread of its own. */
struct reader {
        int fd;
        char *buf;
        size_t cap, len;
        pthread_t t;
};

static void *reader_main(void *arg) {
        struct reader *rd = arg;
        for (;;) {
                ssize_t k = read(rd->fd, rd->buf + rd->len, rd->cap - 1 - rd->len);
                if (k <= 0)
                        break;
                rd->len += (size_t)k;
        }
        rd->buf[rd->len] = 0;
        return NULL;
}

static void reader_start(struct reader *rd, int fd, size_t cap) {
        *rd = (struct reader){ .fd = fd, .cap = cap, .buf = malloc(cap) };
        ASSERT(rd->buf != NULL);
        ASSERT(pthread_create(&rd->t, NULL, reader_main, rd) == 0);
}

TEST(run_streams_and_stdin) {
        int o[2], e[2], in[2];
        ASSERT(pipe2(o, O_CLOEXEC) == 0 && pipe2(e, O_CLOEXEC) == 0 && pipe2(in, O_CLOEXEC) == 0);
        ASSERT(write(in[1], "from stdin\n", 11) == 11);
        close(in[1]);
        struct reader ro, re;
        reader_start(&ro, o[0], 4 << 20);
        reader_start(&re, e[0], 4096);
        struct ntfs_jail_io io = { .stdout_fd = o[1], .stderr_fd = e[1], .stdin_fd = in[0], .tty_fd = -1 };
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        /* the copy is all of it, the result keeps output_limit */
        spec_init(&s, "cat; head -c 3000000 /dev/zero; echo err >&2");
        s.output_limit = 1000;
        s.io = &io;
        ASSERT_OK(ntfs_jail_run(&s, &r));
        close(o[1]);
        close(e[1]);
        close(in[0]);
        pthread_join(ro.t, NULL);
        pthread_join(re.t, NULL);
        ASSERT_EQ(r.exit_code, 0);
        ASSERT(r.out_truncated);
        ASSERT_EQ(r.out_len, 1000);
        ASSERT_EQ(ro.len, 11 + 3000000);
        ASSERT(memcmp(ro.buf, "from stdin\n", 11) == 0);
        ASSERT_STREQ(re.buf, "err\n");
        ntfs_jail_result_release(&r);
        free(ro.buf);
        free(re.buf);
        close(o[0]);
        close(e[0]);
}

TEST(run_on_a_terminal) {
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        ASSERT(m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0);
        int sl = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        ASSERT(sl >= 0);
        struct winsize w = { .ws_row = 33, .ws_col = 101 };
        ASSERT(ioctl(m, TIOCSWINSZ, &w) == 0);
        struct reader rm;
        reader_start(&rm, m, 4096);
        struct ntfs_jail_io io = { .stdout_fd = -1, .stderr_fd = -1, .stdin_fd = -1, .tty_fd = sl };
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "test -t 0 && test -t 1 && test -t 2 && echo TTY; stty size; echo err >&2");
        s.io = &io;
        ASSERT_OK(ntfs_jail_run(&s, &r));
        close(sl);
        pthread_join(rm.t, NULL);
        ASSERT_EQ(r.exit_code, 0);
        ASSERT_EQ(r.out_len, 0);
        ASSERT_STREQ(rm.buf, "TTY\r\n33 101\r\nerr\r\n");
        ntfs_jail_result_release(&r);
        free(rm.buf);
        close(m);
        /* a terminal and a stdin pipe at once is a bad spec */
        io.stdin_fd = 0;
        io.tty_fd = 1;
        ASSERT_ERR(ntfs_jail_run(&s, &r), -EINVAL);
}

TEST(run_signal_and_env) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        const char *env[] = { "GREETING=hello world", "HOME=/tmp", NULL };
        spec_init(&s, "echo \"$GREETING:$HOME\"; kill -SEGV $$");
        s.env = env;
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT_STREQ(r.out, "hello world:/tmp\n");
        ASSERT_EQ(r.term_signal, 11);
        ASSERT_EQ(r.exit_code, 128 + 11);
        ntfs_jail_result_release(&r);
}

TEST(run_timeout) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "setsid sleep 100 & sleep 100");
        s.timeout_ms = 300;
        int64_t t0 = ntfs_mono_ns();
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT(r.timed_out);
        ASSERT_EQ(r.exit_code, 124);
        ASSERT(ntfs_mono_ns() - t0 < 5LL * 1000000000);
        ASSERT(r.state_out == NULL);
        ntfs_jail_result_release(&r);
}

/* The peer of a socketpair, closed (or only shut for writing) after a delay. */
struct hangup_peer {
        int fd;
        bool only_shut_wr;
};

static void *hang_up_later(void *arg) {
        struct hangup_peer *p = arg;
        usleep(300 * 1000);
        if (p->only_shut_wr)
                (void)shutdown(p->fd, SHUT_WR);
        else
                close(p->fd);
        return NULL;
}

TEST(run_hangup) {
        /* the client closing its connection ends the run, every process of it */
        int sv[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct hangup_peer peer = { .fd = sv[1] };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, hang_up_later, &peer), 0);
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "setsid sleep 100 & sleep 100");
        s.watch_hangup = true;
        s.hangup_fd = sv[0];
        int64_t t0 = ntfs_mono_ns();
        int rr = ntfs_jail_run(&s, &r);
        int64_t took = ntfs_mono_ns() - t0;
        pthread_join(t, NULL);
        ASSERT(rr >= 0 || r.cancelled);
        ASSERT(r.cancelled);
        ASSERT(!r.timed_out);
        ASSERT(took < 5LL * 1000000000);
        ntfs_jail_result_release(&r);
        close(sv[0]);

        /* a peer that only stops sending is still there: the run goes on */
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        peer = (struct hangup_peer){ .fd = sv[1], .only_shut_wr = true };
        ASSERT_EQ(pthread_create(&t, NULL, hang_up_later, &peer), 0);
        spec_init(&s, "sleep 0.8; echo fine");
        s.watch_hangup = true;
        s.hangup_fd = sv[0];
        ASSERT_OK(ntfs_jail_run(&s, &r));
        pthread_join(t, NULL);
        ASSERT(!r.cancelled);
        ASSERT_EQ(r.exit_code, 0);
        ASSERT_STREQ(r.out, "fine\n");
        ntfs_jail_result_release(&r);
        close(sv[0]);
        close(sv[1]);

        /* the cancel flag reports the same way */
        static int flag = 1;
        spec_init(&s, "sleep 100");
        s.cancel = &flag;
        ASSERT(ntfs_jail_run(&s, &r) >= 0 || r.cancelled);
        ASSERT(r.cancelled);
        ntfs_jail_result_release(&r);
}

TEST(run_truncate) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "head -c 300000 /dev/zero | tr '\\0' x; echo done >&2");
        s.output_limit = 1000;
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT_EQ(r.exit_code, 0);
        ASSERT(r.out_truncated);
        ASSERT_EQ(r.out_len, 1000);
        ASSERT(!r.err_truncated);
        ASSERT_STREQ(r.err, "done\n");
        ntfs_jail_result_release(&r);
}

TEST(run_state_carries) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r1, r2;
        spec_init(&s, "mkdir -p sub/dir && cd sub/dir && export V=$'two\\nlines' W='a b'");
        ASSERT_OK(ntfs_jail_run(&s, &r1));
        ASSERT_EQ(r1.exit_code, 0);
        ASSERT(r1.state_out);
        spec_init(&s, "pwd; printf '[%s][%s]' \"$V\" \"$W\"");
        s.state_in = r1.state_out;
        ASSERT_OK(ntfs_jail_run(&s, &r2));
        ASSERT_STREQ(r2.out, "/workspace/sub/dir\n[two\nlines][a b]");
        ntfs_jail_result_release(&r1);
        ntfs_jail_result_release(&r2);
        /* A malformed blob is refused by the helper, not run. */
        spec_init(&s, "true");
        s.state_in = "garbage";
        ASSERT_ERR(ntfs_jail_run(&s, &r1), -EIO);
        ASSERT(r1.reason && strstr(r1.reason, "state"));
        ntfs_jail_result_release(&r1);
}

TEST(run_readonly) {
        struct ntfs_jail_spec s;
        struct ntfs_jail_result r;
        spec_init(&s, "echo x > /workspace/f 2>&1; echo rc=$?");
        s.workspace_ro = true;
        ASSERT_OK(ntfs_jail_run(&s, &r));
        ASSERT(strstr(r.err, "Read-only file system"));
        ASSERT_STREQ(r.out, "rc=1\n");
        ntfs_jail_result_release(&r);
}

static void *thread_run(void *arg) {
        intptr_t i = (intptr_t)arg;
        char cmd[64];
        snprintf(cmd, sizeof cmd, "echo job%d", (int)i);
        struct ntfs_jail_spec s;
        spec_init(&s, cmd);
        struct ntfs_jail_result r;
        intptr_t ok = ntfs_jail_run(&s, &r) == 0 && r.exit_code == 0;
        char want[64];
        snprintf(want, sizeof want, "job%d\n", (int)i);
        ok = ok && r.out && strcmp(r.out, want) == 0;
        ntfs_jail_result_release(&r);
        return (void *)ok;
}

TEST(run_concurrent) {
        pthread_t t[6];
        for (intptr_t i = 0; i < 6; i++)
                ASSERT_EQ(pthread_create(&t[i], NULL, thread_run, (void *)i), 0);
        int good = 0;
        for (int i = 0; i < 6; i++) {
                void *ok;
                pthread_join(t[i], &ok);
                good += ok ? 1 : 0;
        }
        ASSERT_EQ(good, 6);
}

TEST(probe) {
        struct ntfs_jail_caps c;
        ASSERT_OK(ntfs_jail_probe(&c));
        ASSERT(c.seccomp);
        if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0)
                ASSERT(c.cgroup_memory && c.cgroup_pids);
        printf("# cgroup v%d memory=%d pids=%d cpu=%d userns=%d\n", c.cgroup_version, c.cgroup_memory,
               c.cgroup_pids, c.cgroup_cpu, c.userns);
}

int main(void) {
        RUN(state_roundtrip);
        RUN(state_cwd_outside_workspace);
        RUN(state_parse_rejects);
        RUN(json_string);
        snprintf(ws, sizeof ws, "/tmp/ntfs-jail-unit-XXXXXX");
        if (!mkdtemp(ws))
                return 1;
        RUN(bad_spec);
        if (geteuid() != 0) {
                printf("# not root: skipping the runs of the real helper\n");
                rmdir(ws);
                return tap_done();
        }
        RUN(run_basic);
        RUN(run_binary_output);
        RUN(run_streams_and_stdin);
        RUN(run_on_a_terminal);
        RUN(run_signal_and_env);
        RUN(run_timeout);
        RUN(run_hangup);
        RUN(run_truncate);
        RUN(run_state_carries);
        RUN(run_readonly);
        RUN(run_concurrent);
        RUN(probe);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", ws);
        if (system(cmd) != 0)
                printf("# could not remove %s\n", ws);
        return tap_done();
}
