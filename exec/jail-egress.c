/* SPDX-License-Identifier: MIT
 * jail-egress.c — P3, the egress forwarder (only with --proxy-socket):
 * accepts on 127.0.0.1:PORT in the jail's network namespace and relays each
 * connection, in a child of its own, to the host's proxy socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "exec/jail-helper.h"
#include "common/banned.h"

static bool relay_copy(int from, int to) {
        char buf[65536];
        ssize_t n = read(from, buf, sizeof buf);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN;
        if (n == 0)
                return false;
        const char *p = buf;
        while (n > 0) {
                ssize_t w = write(to, p, (size_t)n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return false;
                }
                p += w;
                n -= w;
        }
        return true;
}

/* One connection: client (in the jail) <-> the host's proxy socket. */
static _Noreturn void relay_one(int client, const char *upath) {
        int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (up < 0 || strlen(upath) >= sizeof sa.sun_path)
                _exit(1);
        memcpy(sa.sun_path, upath, strlen(upath) + 1);
        while (connect(up, (struct sockaddr *)&sa, sizeof sa) < 0)
                if (errno != EINTR)
                        _exit(1);
        bool c_open = true, u_open = true;
        while (c_open || u_open) {
                struct pollfd pf[2] = { { c_open ? client : -1, POLLIN, 0 }, { u_open ? up : -1, POLLIN, 0 } };
                if (poll(pf, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (pf[0].revents && !relay_copy(client, up)) {
                        c_open = false;
                        shutdown(up, SHUT_WR);
                }
                if (pf[1].revents && !relay_copy(up, client)) {
                        u_open = false;
                        shutdown(client, SHUT_WR);
                        break; /* the proxy is done: nothing more can come back */
                }
        }
        _exit(0);
}

/* Keeps only lfd (as 3) and the socket's directory (as 4); accepts forever.
 * It dies with the pid namespace when P1 exits. */
_Noreturn void run_forwarder(int lfd, int dirfd, const char *name) {
        report_fd = -1;
        /* Out of the way first, so neither dup2 below clobbers the other. */
        int l = fcntl(lfd, F_DUPFD_CLOEXEC, 64), d = fcntl(dirfd, F_DUPFD_CLOEXEC, 64);
        if (l < 0 || d < 0 || dup2(l, 3) < 0 || dup2(d, 4) < 0)
                _exit(1);
        close_range(5, ~0U, 0);
        signal(SIGCHLD, SIG_IGN); /* connection children reap themselves */
        char upath[sizeof(((struct sockaddr_un *)0)->sun_path)];
        if (snprintf(upath, sizeof upath, "/proc/self/fd/4/%s", name) >= (int)sizeof upath)
                _exit(1);
        for (;;) {
                int c = accept4(3, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
                            errno == ENOBUFS || errno == ENOMEM)
                                continue;
                        _exit(1);
                }
                pid_t pid = fork();
                if (pid == 0) {
                        close(3);
                        relay_one(c, upath);
                }
                close(c);
        }
}
