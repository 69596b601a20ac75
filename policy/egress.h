/* SPDX-License-Identifier: MIT
 * egress.h — the egress proxy for jailed programs (docs/gateway.md,
 * "Egress proxy"), beside the gateway whose checks it shares.
 *
 * One proxy per jailed run: ntfs_egress_start() binds a Unix socket
 * DIR/ID.sock (mode 0600, DIR made 0700 when missing) and starts its accept
 * thread; ntfs-jail relays 127.0.0.1:PORT inside the jail to it. Each
 * connection (CONNECT host:port, or one plain-HTTP request with an absolute
 * http:// URL) is checked against the policy (fetch.allow_hosts,
 * allow_ports, private addresses) and is recorded through the caller's
 * recorder, allowed or refused: begin() before anything is sent to the host,
 * finish() with its outcome. The proxy knows no journal: the daemon's
 * recorder makes each connection an effect row (ctl/egress-run.c).
 * ntfs_egress_stop() stops accepting, cuts the connections still open and
 * waits for their threads.
 */
#ifndef NTFS_POLICY_EGRESS_H
#define NTFS_POLICY_EGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "policy/policy.h"

struct ntfs_egress_recorder {
        /* The n-th connection of the run (n from 1) starts: returns the id
         * of its record (> 0), or <= 0 when none was made (then finish() is
         * not called for it). */
        int64_t (*begin)(void *ctx, unsigned n, const char *method, const char *host, unsigned port);
        /* Its outcome: ok, a JSON result (borrowed), and why it failed. */
        void (*finish)(void *ctx, int64_t id, bool ok, json_t *result, const char *reason);
        void *ctx;
};

struct ntfs_egress_cfg {
        const ntfs_policy *pol;   /* borrowed; outlives the proxy */
        const char *dir;          /* where the socket is made */
        int64_t id;               /* names the socket: DIR/ID.sock */
        const char *label;        /* for log lines (the session's name) */
        struct ntfs_egress_recorder rec;
};

struct ntfs_egress;

/* 0 with *ret and *ret_path (borrowed from the proxy), or a negative errno. */
int ntfs_egress_start(const struct ntfs_egress_cfg *cfg, struct ntfs_egress **ret, const char **ret_path);
/* Accepts NULL. */
void ntfs_egress_stop(struct ntfs_egress *e);

#endif
