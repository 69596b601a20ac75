/* SPDX-License-Identifier: MIT
 * dio_coherence FILE — buffered reads after O_DIRECT writes see the new
 * bytes: a synchronous pwrite, then Linux AIO writes (io_submit, raw
 * syscalls: no libaio here) one at a time and 64 at once in sub-page and
 * 16 KiB pieces, each after a buffered read filled the page cache with the
 * old bytes. Prints one line per check; exit 0 when all hold, 1 on stale
 * data, 2 on a failed call. Built and run by test_posix_gaps.py. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SZ (1 << 20)

static int check(int bfd, char want, const char *what) {
        static char buf[SZ];
        if (pread(bfd, buf, SZ, 0) != SZ) { perror("pread"); return 1; }
        for (int i = 0; i < SZ; i++)
                if (buf[i] != want) { printf("%s: stale at %d: %c, want %c\n", what, i, buf[i], want); return 1; }
        printf("%s: ok\n", what);
        return 0;
}

int main(int argc, char **argv) {
        const char *p = argv[1];
        int bfd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (bfd < 0) { perror("open"); return 2; }
        char *old = malloc(SZ);
        memset(old, 'a', SZ);
        if (pwrite(bfd, old, SZ, 0) != SZ) { perror("pwrite"); return 2; }
        int dfd = open(p, O_RDWR | O_DIRECT);
        if (dfd < 0) { perror("open O_DIRECT"); return 2; }
        void *nb;
        if (posix_memalign(&nb, 4096, SZ)) return 2;
        int bad = 0;
        /* sync O_DIRECT pwrite after a buffered read filled the cache */
        bad |= check(bfd, 'a', "before");
        memset(nb, 'b', SZ);
        if (pwrite(dfd, nb, SZ, 0) != SZ) { perror("pwrite O_DIRECT"); return 2; }
        bad |= check(bfd, 'b', "after O_DIRECT pwrite");
        /* async: io_submit of an O_DIRECT write, waited for, then a buffered read */
        aio_context_t ctx = 0;
        if (syscall(SYS_io_setup, 8, &ctx) < 0) { perror("io_setup"); return 2; }
        for (int round = 0; round < 8; round++) {
                char c = (char)('c' + round);
                memset(nb, c, SZ);
                struct iocb cb = {0}, *cbs[1] = {&cb};
                cb.aio_fildes = (unsigned)dfd;
                cb.aio_lio_opcode = IOCB_CMD_PWRITE;
                cb.aio_buf = (unsigned long)nb;
                cb.aio_nbytes = SZ;
                cb.aio_offset = 0;
                if (syscall(SYS_io_submit, ctx, 1, cbs) != 1) { perror("io_submit"); return 2; }
                struct io_event ev;
                if (syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1) { perror("io_getevents"); return 2; }
                if ((long)ev.res != SZ) { printf("aio write: %lld\n", (long long)ev.res); return 2; }
                char what[64];
                snprintf(what, sizeof what, "after AIO O_DIRECT write %d", round);
                bad |= check(bfd, c, what);
        }
        /* many in flight at once, sub-page (512-byte) pieces at scattered offsets */
        for (int round = 0; round < 4; round++) {
                char c = (char)('m' + round);
                memset(nb, c, SZ);
                enum { N = 64 };
                struct iocb cb[N], *cbs[N];
                for (int i = 0; i < N; i++) {
                        memset(&cb[i], 0, sizeof cb[i]);
                        cb[i].aio_fildes = (unsigned)dfd;
                        cb[i].aio_lio_opcode = IOCB_CMD_PWRITE;
                        cb[i].aio_buf = (unsigned long)nb + (unsigned long)i * 16384;
                        cb[i].aio_nbytes = i % 2 ? 512 : 16384;
                        cb[i].aio_offset = (long long)i * 16384;
                        cbs[i] = &cb[i];
                }
                if (syscall(SYS_io_submit, ctx, N, cbs) != N) { perror("io_submit"); return 2; }
                struct io_event ev[N];
                int got = 0;
                while (got < N) {
                        long k = syscall(SYS_io_getevents, ctx, 1, N - got, ev, NULL);
                        if (k < 0) { perror("io_getevents"); return 2; }
                        got += (int)k;
                }
                static char buf[SZ];
                if (pread(bfd, buf, SZ, 0) != SZ) { perror("pread"); return 1; }
                for (int i = 0; i < N; i++) {
                        size_t n = i % 2 ? 512 : 16384;
                        for (size_t j = 0; j < n; j++)
                                if (buf[(size_t)i * 16384 + j] != c) { printf("scattered %d: stale at %zu\n", round, (size_t)i * 16384 + j); bad = 1; break; }
                }
                if (!bad) printf("scattered AIO round %d: ok\n", round);
        }
        syscall(SYS_io_destroy, ctx);
        return bad;
}
