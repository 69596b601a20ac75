/* SPDX-License-Identifier: MIT
 * tcp-peer.c — the loopback TCP listener's two checks (ctl/tcp-peer.h):
 * the address it may bind, and who is at the other end of a connection.
 *
 * TCP carries no credentials, but on loopback both ends are sockets of this
 * kernel: the client's socket, looked up by its four-tuple through
 * NETLINK_SOCK_DIAG (inet_diag, the interface `ss -e` uses), names the uid
 * that made it.
 */
#include "ctl/tcp-peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "common/banned.h"

static bool loopback(const struct sockaddr_storage *a) {
        if (a->ss_family == AF_INET) {
                const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
                return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
        }
        if (a->ss_family == AF_INET6) {
                const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
                return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
        }
        return false;
}

int ntfs_tcp_parse_listen(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len) {
        if (!spec || strlen(spec) > 64)
                return -EINVAL;
        char host[72];
        const char *port;
        if (spec[0] == '[') {
                const char *end = strchr(spec, ']');
                if (!end || end[1] != ':')
                        return -EINVAL;
                size_t n = (size_t)(end - spec - 1);
                memcpy(host, spec + 1, n);
                host[n] = 0;
                port = end + 2;
        } else {
                const char *colon = strrchr(spec, ':');
                if (!colon || strchr(spec, ':') != colon)
                        return -EINVAL;
                size_t n = (size_t)(colon - spec);
                memcpy(host, spec, n);
                host[n] = 0;
                port = colon + 1;
        }
        uint64_t p;
        if (ntfs_parse_u64(port, 65535, &p) < 0 || p == 0)
                return -EINVAL;
        memset(ret, 0, sizeof *ret);
        struct sockaddr_in *v4 = (struct sockaddr_in *)ret;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ret;
        if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
                v4->sin_family = AF_INET;
                v4->sin_port = htons((uint16_t)p);
                *ret_len = sizeof *v4;
        } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
                v6->sin6_family = AF_INET6;
                v6->sin6_port = htons((uint16_t)p);
                *ret_len = sizeof *v6;
        } else {
                return -EINVAL;
        }
        return loopback(ret) ? 0 : -EPERM;
}

bool ntfs_tcp_uid_allowed(uid_t uid, bool has_group, gid_t group) {
        if (uid == 0 || uid == geteuid())
                return true;
        if (!has_group)
                return false;
        struct passwd pw, *pwp = NULL;
        char buf[4096];
        if (getpwuid_r(uid, &pw, buf, sizeof buf, &pwp) != 0 || !pwp)
                return false;
        if (pw.pw_gid == group)
                return true;
        gid_t groups[256];
        int n = 256;
        if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
                return false;
        for (int i = 0; i < n; i++)
                if (groups[i] == group)
                        return true;
        return false;
}

int ntfs_tcp_listen(const char *spec, int *ret_fd) {
        struct sockaddr_storage a;
        socklen_t al;
        int r = ntfs_tcp_parse_listen(spec, &a, &al);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, al) < 0 || listen(fd, 128) < 0)
                return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int ntfs_tcp_peer_uid(int fd, uid_t *ret) {
        struct sockaddr_storage me, peer;
        socklen_t ml = sizeof me, pl = sizeof peer;
        if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
                return -errno;
        if (me.ss_family != peer.ss_family || !loopback(&peer))
                return -EPERM;
        struct {
                struct nlmsghdr nh;
                struct inet_diag_req_v2 r;
        } q = { 0 };
        q.nh.nlmsg_len = sizeof q;
        q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
        q.nh.nlmsg_flags = NLM_F_REQUEST;
        q.r.sdiag_family = (uint8_t)peer.ss_family;
        q.r.sdiag_protocol = IPPROTO_TCP;
        q.r.idiag_states = ~0u;
        /* The client's socket: its source is our peer, its destination us. */
        q.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
        q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
        if (peer.ss_family == AF_INET) {
                const struct sockaddr_in *p4 = (const struct sockaddr_in *)&peer, *m4 = (const struct sockaddr_in *)&me;
                q.r.id.idiag_sport = p4->sin_port;
                q.r.id.idiag_dport = m4->sin_port;
                memcpy(q.r.id.idiag_src, &p4->sin_addr, 4);
                memcpy(q.r.id.idiag_dst, &m4->sin_addr, 4);
        } else {
                const struct sockaddr_in6 *p6 = (const struct sockaddr_in6 *)&peer,
                                          *m6 = (const struct sockaddr_in6 *)&me;
                q.r.id.idiag_sport = p6->sin6_port;
                q.r.id.idiag_dport = m6->sin6_port;
                memcpy(q.r.id.idiag_src, &p6->sin6_addr, 16);
                memcpy(q.r.id.idiag_dst, &m6->sin6_addr, 16);
        }
        _cleanup_close_ int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (nl < 0)
                return -errno;
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        if (sendto(nl, &q, sizeof q, 0, (struct sockaddr *)&kernel, sizeof kernel) != (ssize_t)sizeof q)
                return -errno;
        union {
                char buf[8192];
                struct nlmsghdr align;
        } u;
        for (;;) {
                ssize_t n = recv(nl, u.buf, sizeof u.buf, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                for (struct nlmsghdr *h = &u.align; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(h);
                                return e->error ? e->error : -ENOENT;
                        }
                        if (h->nlmsg_type == NLMSG_DONE)
                                return -ENOENT;
                        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                                continue;
                        const struct inet_diag_msg *m = NLMSG_DATA(h);
                        *ret = (uid_t)m->idiag_uid;
                        return 0;
                }
        }
}
