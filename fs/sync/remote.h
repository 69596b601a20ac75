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
 *   P/tags/<hex of session>/<hex of tag> a tag: 64 hex + " session|store\n",
 *                                       created once (If-None-Match: *)
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
#ifndef NTFS_FS_SYNC_REMOTE_H
#define NTFS_FS_SYNC_REMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "fs/store.h"

#define NTFS_REMOTE_PARALLEL 4
#define NTFS_REMOTE_PACK_MAX (8u << 20)
#define NTFS_REMOTE_FETCH_PACKS 3 /* packs a fetch keeps in memory */

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

/* A tag as kept at the remote: P/tags/<hex of session>/<hex of tag name>,
 * body "<64 hex commit> session|store\n", created once with If-None-Match: *
 * and never changed (docs/remote.md). */
struct ntfs_remote_tag {
        char name[NTFS_NAME_MAX + 1];
        ntfs_hash commit;
        bool store_scope; /* a store-scoped tag (else scoped to the session) */
};

/* Transfer progress of one push or fetch, shared with a reader thread: the
 * transfer updates the fields with __atomic builtins, a reader takes a
 * snapshot with ntfs_remote_progress_get. Totals are final once
 * totals_final is 1 (push: after a counting walk; fetch: an upper bound
 * taken from the remote's indexes, what the store lacks of everything they
 * list). bytes are pack bytes for push, object bytes for fetch. */
struct ntfs_remote_progress {
        uint64_t bytes, total_bytes, objects, total_objects, packs, total_packs;
        int totals_final;
};
void ntfs_remote_progress_get(const struct ntfs_remote_progress *p, struct ntfs_remote_progress *ret);

/* Uploads what the remote lacks of the closure of commit head (and of the
 * commits of tags[0..ntags)), then creates the tags at the remote (each by a
 * conditional PUT, If-None-Match: *), then moves the remote head of session
 * from what it was (must be an ancestor of head, else -NTFS_ECONFLICT "pull
 * first") to head by compare-and-swap (losing the race is -NTFS_ECONFLICT
 * too). A tag that exists at the remote with the same commit is fine; with
 * another commit it is -NTFS_ETAGEXISTS naming it, found before anything is
 * uploaded when possible, and then the head is NOT moved (tags created
 * before the conflict was seen stay: they are valid). *ret_old gets the
 * previous remote head (zero when none). Authentication failures:
 * -NTFS_ENOKEY. prog may be NULL (when given, a counting walk first). */
int ntfs_remote_push(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, const ntfs_hash *head,
                     const struct ntfs_remote_tag *tags, size_t ntags, ntfs_hash *ret_old,
                     struct ntfs_remote_stats *stats, struct ntfs_remote_progress *prog, char *msg, size_t msglen);

/* Reads the remote head of session (and, when ret_tags is non-NULL, the
 * remote's tags of session) and copies into st every object of their
 * closure that st lacks, each verified by hash and written once all it
 * refers to is (children first; memory bounded: one path of the walk plus
 * NTFS_REMOTE_FETCH_PACKS packs). On an error naming the missing or corrupt
 * object (-NTFS_ECORRUPT) the objects written so far stay, closed under
 * references and named by no ref (no ref moves here; no local tag is made).
 * -NTFS_ENOREF when the remote has no such session. *ret_tags (owned by the
 * caller: free()) gets *ret_ntags tags. prog may be NULL. */
int ntfs_remote_fetch(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, ntfs_hash *ret_head,
                      struct ntfs_remote_tag **ret_tags, size_t *ret_ntags, struct ntfs_remote_stats *stats,
                      struct ntfs_remote_progress *prog, char *msg, size_t msglen);

/* The remote's tags of session (one LIST plus one GET per tag): *ret (free())
 * gets *ret_n tags, sorted by name. No tags (or no bucket) is 0 with *ret_n 0. */
int ntfs_remote_list_tags(const struct ntfs_remote_cfg *cfg, const char *session, struct ntfs_remote_tag **ret,
                          size_t *ret_n, struct ntfs_remote_stats *stats, char *msg, size_t msglen);

/* Deletes the packs no index names (left by pushes that died before
 * writing their index) that are older than grace_s seconds (a younger one
 * may belong to a push in progress: its index comes after its packs).
 * Packs some index names are kept (they hold objects later pushes rely on).
 * dry_run: counts only. *ret_deleted: packs deleted (or that would be);
 * *ret_young: unnamed packs kept for being younger than the grace. */
int ntfs_remote_prune(const struct ntfs_remote_cfg *cfg, int64_t grace_s, bool dry_run, uint64_t *ret_deleted,
                      uint64_t *ret_young, struct ntfs_remote_stats *stats, char *msg, size_t msglen);

/* 1 when anc is desc or one of its ancestors (in st), 0 when not. */
int ntfs_remote_is_ancestor(ntfs_store *st, const ntfs_hash *anc, const ntfs_hash *desc);
/* The nearest common ancestor of a and b (breadth-first from both), in
 * *ret; -NTFS_ENOREF when they share none. */
int ntfs_remote_merge_base(ntfs_store *st, const ntfs_hash *a, const ntfs_hash *b, ntfs_hash *ret);

#endif
