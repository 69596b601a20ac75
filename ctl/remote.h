/* SPDX-License-Identifier: MIT
 * remote.h — sessions pushed to and fetched from an S3-compatible bucket
 * (docs/remote.md): a tiny S3 client (libcurl, CURLOPT_AWS_SIGV4), a pack
 * format, and push/fetch through the store's raw-object API (fs/store.h).
 *
 * Bucket layout under URL's prefix P (objects never change once written):
 *   P/packs/<sha256 of the pack>.pack   many objects: "NTFSPAK1" then per object
 *                                       32-byte hash, u32 BE length, bytes
 *   P/idx/<sha256 of the index>.idx     one per completed push: where each of its
 *                                       objects lives (see remote.c)
 *   P/heads/<hex of session name>       the session's head: 64 hex + "\n";
 *                                       moved by conditional PUT (If-Match /
 *                                       If-None-Match: *), the compare-and-swap
 *
 * Invariant: an index is written only after every pack it names is stored,
 * and a head only after the index covering its closure; so the objects the
 * indexes list are closed under references and a head never names a
 * missing object.
 *
 * Threading: calls are independent; each makes its own curl handles and may
 * run uploads on up to NTFS_REMOTE_PARALLEL threads. Nothing here prints;
 * errors come with a message in msg. The secret is never put in msg.
 */
#ifndef NTFS_CTL_REMOTE_H
#define NTFS_CTL_REMOTE_H

#include <stdint.h>

#include "fs/store.h"

#define NTFS_REMOTE_PARALLEL 4
#define NTFS_REMOTE_PACK_MAX (8u << 20)

struct ntfs_remote_cfg {
        char name[NTFS_NAME_MAX + 1];
        char url[1024];        /* http[s]://host[:port]/bucket[/prefix] */
        char access_key[256];
        char secret_key[256];
        char region[64];       /* "" = us-east-1 */
};

struct ntfs_remote_stats {
        uint64_t requests, bytes_sent, bytes_received, objects, packs;
};

/* Checks a URL; fills endpoint ("http://host:port"), bucket, prefix ("" or
 * "a/b/" with the slash). 0 or -NTFS_EBADREQ. */
int ntfs_remote_parse_url(const char *url, char *endpoint, size_t elen, char *bucket, size_t blen, char *prefix,
                          size_t plen);

/* Uploads what the remote lacks of the closure of commit head, then moves
 * the remote head of session from what it was (must be an ancestor of
 * head, else -NTFS_ECONFLICT "pull first") to head by compare-and-swap
 * (losing the race is -NTFS_ECONFLICT too). *ret_old gets the previous
 * remote head (zero when none). Authentication failures: -NTFS_ENOKEY. */
int ntfs_remote_push(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, const ntfs_hash *head,
                     ntfs_hash *ret_old, struct ntfs_remote_stats *stats, char *msg, size_t msglen);

/* Reads the remote head of session and copies into st every object of its
 * closure that st lacks, each verified by hash; either all of them arrive
 * or the error names the missing or corrupt object (-NTFS_ECORRUPT) and
 * st gains nothing usable (no ref moves here). -NTFS_ENOREF when the remote
 * has no such session. */
int ntfs_remote_fetch(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, ntfs_hash *ret_head,
                      struct ntfs_remote_stats *stats, char *msg, size_t msglen);

/* 1 when anc is desc or one of its ancestors (in st), 0 when not. */
int ntfs_remote_is_ancestor(ntfs_store *st, const ntfs_hash *anc, const ntfs_hash *desc);
/* The nearest common ancestor of a and b (breadth-first from both), in
 * *ret; -NTFS_ENOREF when they share none. */
int ntfs_remote_merge_base(ntfs_store *st, const ntfs_hash *a, const ntfs_hash *b, ntfs_hash *ret);

#endif
