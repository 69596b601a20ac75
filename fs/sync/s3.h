/* SPDX-License-Identifier: MIT
 * s3.h — the small S3 client under remote.c (internal to fs/sync/):
 * one signed request (libcurl, CURLOPT_AWS_SIGV4), the response's body,
 * ETag and S3 error code, a session's head key and its read, and key
 * listing. Nothing here prints; errors come with a message in msg, and the
 * secret is never put in it.
 */
#ifndef NTFS_FS_SYNC_S3_H
#define NTFS_FS_SYNC_S3_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "fs/sync/remote.h"

/* ---- growing buffer -------------------------------------------------------------------- */

struct buf {
        uint8_t *p;
        size_t n, cap;
};
static inline int buf_add(struct buf *b, const void *d, size_t n) {
        if (b->n + n > b->cap) {
                size_t nc = b->cap ? b->cap : 4096;
                while (nc < b->n + n)
                        nc *= 2;
                uint8_t *np = realloc(b->p, nc);
                if (!np)
                        return -ENOMEM;
                b->p = np;
                b->cap = nc;
        }
        if (n)
                memcpy(b->p + b->n, d, n);
        b->n += n;
        return 0;
}
static inline void buf_free(struct buf *b) {
        free(b->p);
        *b = (struct buf){ 0 };
}

/* ---- S3 client -------------------------------------------------------------------------- */

struct s3 {
        const struct ntfs_remote_cfg *cfg;
        char endpoint[512], bucket[256], prefix[512];
        char sigv4[128], userpwd[520];
        struct ntfs_remote_stats *stats;
        pthread_mutex_t *stats_lock;
        struct ntfs_remote_progress *prog; /* NULL: nobody watches */
};

static inline void prog_add(struct ntfs_remote_progress *p, uint64_t *field_of_p, uint64_t v) {
        if (p)
                __atomic_add_fetch(field_of_p, v, __ATOMIC_RELAXED);
}
#define PROG_ADD(p, field, v) prog_add((p), (p) ? &(p)->field : NULL, (v))

struct s3_resp {
        long status;
        struct buf body;
        char etag[130];
        size_t body_max;
        bool too_big;
};

/* One request. key: object key below the bucket (already URL-safe), or NULL
 * for the bucket itself; query: sorted and encoded (libcurl 7.88 signs it
 * as given). Transport failures: -NTFS_EUPSTREAM with msg. */
int s3_req(struct s3 *s, CURL *c, const char *method, const char *key, const char *query, const void *body,
           size_t blen, const char *cond_header, struct s3_resp *out, char *msg, size_t msglen);
/* Maps an unexpected status to an error with a message. */
int s3_fail(struct s3 *s, const char *what, const struct s3_resp *r, char *msg, size_t msglen);
void s3_resp_free(struct s3_resp *r);
int s3_init(struct s3 *s, const struct ntfs_remote_cfg *cfg, struct ntfs_remote_stats *stats,
            pthread_mutex_t *lock, char *msg, size_t msglen);
void s3_done(struct s3 *s);
void s3_head_key(const struct s3 *s, const char *session, char *out, size_t olen);
/* Reads the remote head: 0 with *ret and etag, -NTFS_ENOREF when absent
 * (*no_bucket set when the bucket itself is missing). */
int s3_get_head(struct s3 *s, CURL *c, const char *session, ntfs_hash *ret, char *etag, size_t elen,
                bool *no_bucket, char *msg, size_t msglen);
/* Lists keys under prefix pfx (full key prefix): calls cb(key, mtime)
 * (mtime: LastModified in seconds since the epoch, -1 when absent). */
int s3_list_keys(struct s3 *s, CURL *c, const char *pfx, int (*cb)(const char *key, int64_t mtime, void *),
                 void *ud, char *msg, size_t msglen);

#endif
