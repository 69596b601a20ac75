/* SPDX-License-Identifier: MIT */
#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

struct errinfo {
        int err;
        const char *code;
        const char *msg;
        int status;
};

static const struct errinfo table[] = {
        { NTFS_ENOSESSION, "session_not_found", "no such session", 404 },
        { NTFS_ENOREF, "ref_not_found", "no such commit or tag", 404 },
        { NTFS_EAMBIGUOUS, "ambiguous_ref", "short commit id is ambiguous", 409 },
        { NTFS_ETAGEXISTS, "tag_exists", "a tag of that name exists", 409 },
        { NTFS_ESESSEXISTS, "session_exists", "a session of that name exists", 409 },
        { NTFS_EINVALNAME, "invalid_name", "invalid name", 400 },
        { NTFS_ECORRUPT, "corrupt_object", "store object is corrupt", 500 },
        { NTFS_ESTOREBUSY, "store_in_use", "store is in use by another process", 409 },
        { NTFS_EFLOOR, "rollback_floor", "cannot roll back past the session's first checkpoint", 409 },
        { NTFS_ECONFLICT, "conflict", "conflict", 409 },
        { NTFS_EBADREQ, "bad_request", "bad request", 400 },
        { NTFS_ETOOLARGE, "payload_too_large", "payload too large", 413 },
        { NTFS_EQUOTA, "quota_exceeded", "quota exceeded", 429 },
        { NTFS_EDENIED, "policy_denied", "refused by policy", 403 },
        { NTFS_EBADFORMAT, "bad_format", "unsupported store format", 500 },
        { NTFS_ENOTFOUND, "not_found", "not found", 404 },
        { NTFS_EMOUNTED, "already_mounted", "already mounted", 409 },
        { NTFS_EUPSTREAM, "upstream_error", "upstream server failed", 502 },
        { NTFS_ETIMEOUT, "timeout", "timed out", 504 },
        { NTFS_ENOKEY, "no_credentials", "no credentials configured", 503 },
        { ENOENT, "not_found", NULL, 404 },
        { EEXIST, "exists", NULL, 409 },
        { EINVAL, "invalid_argument", NULL, 400 },
        { ENOSPC, "no_space", NULL, 507 },
        { EDQUOT, "quota_exceeded", NULL, 429 },
        { ENOMEM, "out_of_memory", NULL, 503 },
        { EBUSY, "busy", NULL, 409 },
        { EROFS, "read_only", NULL, 409 },
        { EACCES, "permission_denied", NULL, 403 },
        { EPERM, "permission_denied", NULL, 403 },
        { ENOTDIR, "not_a_directory", NULL, 400 },
        { EISDIR, "is_a_directory", NULL, 400 },
        { ENAMETOOLONG, "invalid_name", NULL, 400 },
        { E2BIG, "payload_too_large", NULL, 413 },
        { ETIMEDOUT, "timeout", NULL, 504 },
        { EIO, "io_error", NULL, 500 },
};

static const struct errinfo *lookup(int err) {
        if (err < 0)
                err = -err;
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
                if (table[i].err == err)
                        return &table[i];
        return NULL;
}

const char *ntfs_errcode(int err) {
        const struct errinfo *e = lookup(err);
        return e ? e->code : "internal";
}

const char *ntfs_strerror(int err) {
        const struct errinfo *e = lookup(err);
        if (e && e->msg)
                return e->msg;
        if (err < 0)
                err = -err;
        if (err > 0 && err < NTFS_EBASE)
                return strerror(err);
        return "internal error";
}

int ntfs_http_status(int err) {
        const struct errinfo *e = lookup(err);
        return e ? e->status : 500;
}
