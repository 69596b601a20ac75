/* SPDX-License-Identifier: MIT
 * err.h — the project's error space.
 *
 * Every library function returns 0 (or a positive count) on success and a
 * NEGATIVE error on failure: either -errno, or -NTFS_E* for conditions errno
 * cannot name. ntfs_errcode() gives the stable machine code used by the
 * control protocol ("session_not_found"), ntfs_strerror() a human message,
 * ntfs_http_status() the matching HTTP status.
 */
#ifndef NTFS_COMMON_ERR_H
#define NTFS_COMMON_ERR_H

enum {
        NTFS_EBASE = 4096,
        NTFS_ENOSESSION,   /* session_not_found */
        NTFS_ENOREF,       /* ref_not_found: commit, tag or prefix unknown */
        NTFS_EAMBIGUOUS,   /* ambiguous_ref: short id matches several commits */
        NTFS_ETAGEXISTS,   /* tag_exists */
        NTFS_ESESSEXISTS,  /* session_exists */
        NTFS_EINVALNAME,   /* invalid_name */
        NTFS_ECORRUPT,     /* corrupt_object */
        NTFS_ESTOREBUSY,   /* store_in_use: another daemon holds the store */
        NTFS_EFLOOR,       /* rollback_floor: below the session's first checkpoint */
        NTFS_ECONFLICT,    /* conflict */
        NTFS_EBADREQ,      /* bad_request */
        NTFS_ETOOLARGE,    /* payload_too_large */
        NTFS_EQUOTA,       /* quota_exceeded */
        NTFS_EDENIED,      /* policy_denied */
        NTFS_EBADFORMAT,   /* bad_format: version/magic mismatch */
        NTFS_ENOTFOUND,    /* not_found (generic: route, effect, mount) */
        NTFS_EMOUNTED,     /* already_mounted */
        NTFS_EUPSTREAM,    /* upstream_error: gateway peer failed */
        NTFS_ETIMEOUT,     /* timeout */
        NTFS_ENOKEY,       /* no_credentials */
        NTFS_ELAST
};

/* Stable snake_case code for err (negative or positive; sign ignored). */
const char *ntfs_errcode(int err);
/* Human message for err. Never NULL. */
const char *ntfs_strerror(int err);
/* HTTP status matching err. */
int ntfs_http_status(int err);

#endif
