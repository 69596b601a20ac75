/* SPDX-License-Identifier: MIT
 * tcp-peer.h — the loopback TCP listener's checks (ntfsd --listen;
 * docs/protocol.md, "The loopback TCP listener").
 */
#ifndef NTFS_CTL_TCP_PEER_H
#define NTFS_CTL_TCP_PEER_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Parses "127.0.0.1:7878" or "[::1]:7878" into an address. -EINVAL when it
 * is not ADDRESS:PORT (port 1..65535, a numeric address); -EPERM when the
 * address is not a loopback one (127.0.0.0/8, ::1): the listener is never
 * reachable from another host. */
int ntfs_tcp_parse_listen(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len);

/* The uid that owns the client end of the accepted loopback TCP connection
 * fd, found through NETLINK_SOCK_DIAG. -EPERM when the peer is not on
 * loopback, -ENOENT when the kernel no longer knows the socket, or -errno. */
int ntfs_tcp_peer_uid(int fd, uid_t *ret);

/* May the owner of a loopback TCP client socket use a server whose Unix
 * socket only these may open: root, this process's uid, and with has_group
 * a member of group (primary or supplementary). */
bool ntfs_tcp_uid_allowed(uid_t uid, bool has_group, gid_t group);

/* Binds and listens on spec (ntfs_tcp_parse_listen's form); *ret_fd is the
 * non-blocking listening socket. */
int ntfs_tcp_listen(const char *spec, int *ret_fd);

#endif
