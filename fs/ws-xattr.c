/* SPDX-License-Identifier: MIT
 * ws-xattr.c — a working state's extended attributes: set, get, list,
 * remove. An inode's xattrs live in the base's xattr object until the
 * first change copies them into the xattr database (xattr_materialize).
 * Moved out of ws.c (issue 68); the per-call context is in ws-internal.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "fs/acl.h"
#include "fs/store-internal.h"
#include "fs/ws-internal.h"
#include "common/banned.h"

#define XATTR_VALUE_MAX (64 * 1024)
#define XATTR_LIST_MAX_BYTES (64 * 1024)

/* ---- xattrs ----------------------------------------------------------------------------------- */

/* Loads a base xattr set into the xattr db (once per inode). */
static int xattr_materialize(struct ctx *c, uint64_t ino, struct ino_rec *rec) {
        if (rec->flags & INO_XMAT)
                return 0;
        int r;
        if (!ntfs_hash_is_zero(&rec->xattr)) {
                MDB_val v;
                if ((r = obj_get_typed(c->st, &rec->xattr, OBJ_XATTR, &v)) < 0)
                        return r;
                if ((r = object_check(v.mv_data, v.mv_size, NULL, NULL)) < 0)
                        return r;
                const uint8_t *p = (const uint8_t *)v.mv_data + 1;
                uint32_t n = ntfs_get_be32(p);
                p += 4;
                for (uint32_t i = 0; i < n; i++) {
                        uint16_t nl = (uint16_t)(p[0] << 8 | p[1]);
                        const char *name = (const char *)p + 2;
                        uint32_t vl = ntfs_get_be32(p + 2 + nl);
                        const uint8_t *val = p + 6 + nl;
                        uint8_t k[16 + 256];
                        if (nl > 255)
                                return -NTFS_ECORRUPT;
                        key2(k, c->wsid, ino);
                        memcpy(k + 16, name, nl);
                        /* copy: the value points into the map, which the put may move */
                        _cleanup_free_ uint8_t *copy = malloc(vl ? vl : 1);
                        if (!copy)
                                return -ENOMEM;
                        memcpy(copy, val, vl);
                        if ((r = db_put(c->st, c->st->xattr, k, 16 + nl, copy, vl)) < 0)
                                return r;
                        p = val + vl;
                        /* re-fetch the object: LMDB pages may have moved */
                        if (i + 1 < n) {
                                size_t off = (size_t)(p - (const uint8_t *)v.mv_data);
                                if ((r = obj_get_typed(c->st, &rec->xattr, OBJ_XATTR, &v)) < 0)
                                        return r;
                                p = (const uint8_t *)v.mv_data + off;
                        }
                }
        }
        rec->flags |= INO_XMAT;
        return 0;
}

static void xattr_key(uint8_t *k, struct ctx *c, uint64_t ino, const char *name, size_t nl) {
        key2(k, c->wsid, ino);
        memcpy(k + 16, name, nl);
}

int ws_xattr_get_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec, const char *name, uint8_t **ret,
                        size_t *ret_len) {
        size_t nl = strnlen(name, 256);
        if (nl == 0 || nl > 255)
                return -ERANGE;
        if (!(rec->flags & INO_XMAT) && ntfs_hash_is_zero(&rec->xattr))
                return -ENODATA;
        int r;
        if (!(rec->flags & INO_XMAT)) {
                if ((r = xattr_materialize(c, ino, rec)) < 0 || (r = ino_put(c->st, c->wsid, ino, rec)) < 0)
                        return r;
        }
        uint8_t k[16 + 256];
        xattr_key(k, c, ino, name, nl);
        MDB_val v;
        r = db_get(c->st, c->st->xattr, k, 16 + nl, &v);
        if (r < 0)
                return r == -ENOENT ? -ENODATA : r;
        uint8_t *copy = malloc(v.mv_size ? v.mv_size : 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, v.mv_data, v.mv_size);
        *ret = copy;
        *ret_len = v.mv_size;
        return 0;
}

int ws_xattr_put_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec, const char *name, const void *value,
                        size_t len) {
        size_t nl = strnlen(name, 256);
        if (nl == 0 || nl > 255)
                return -ERANGE;
        int r = xattr_materialize(c, ino, rec);
        if (r < 0)
                return r;
        uint8_t k[16 + 256];
        xattr_key(k, c, ino, name, nl);
        if (value)
                return db_put(c->st, c->st->xattr, k, 16 + nl, value, len);
        r = db_del(c->st, c->st->xattr, k, 16 + nl);
        return r == -ENOENT ? 0 : r;
}

/* system.posix_acl_access / _default (kind 1 / 2), as the kernel's
 * set_posix_acl() and posix_acl_update_mode() on ext4: checked; an access
 * ACL sets the mode's permission bits and is stored only when it says more
 * than they do; a default ACL only on a directory; an empty one (a bare
 * header) removes the ACL. (Clearing setgid for a caller outside the
 * file's group is the mount's: only it knows the caller.) */
static int acl_set(ntfs_ws *ws, uint64_t ino, int kind, const void *value, size_t size) {
        int n = ntfs_acl_check(value, size);
        if (n < 0)
                return n;
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && S_ISLNK(rec.mode))
                r = -EOPNOTSUPP;
        if (r == 0 && kind == 2 && !S_ISDIR(rec.mode))
                r = n == 0 ? 0 : -EACCES;
        else if (r == 0 && kind == 2) {
                r = ws_xattr_put_locked(&c, ino, &rec, NTFS_ACL_DEFAULT, n ? value : NULL, size);
        } else if (r == 0) {
                uint32_t perm = 0;
                bool equiv = true;
                if (n > 0) {
                        ntfs_acl_mode(value, size, &perm, &equiv);
                        rec.mode = (rec.mode & ~(uint32_t)0777) | perm;
                }
                r = ws_xattr_put_locked(&c, ino, &rec, NTFS_ACL_ACCESS, equiv ? NULL : value, size);
        }
        if (r == 0) {
                rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        return ws_ctx_leave(&c, r);
}

int ws_acl_chmod_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec) {
        if (S_ISLNK(rec->mode) || (!(rec->flags & INO_XMAT) && ntfs_hash_is_zero(&rec->xattr)))
                return 0;
        _cleanup_free_ uint8_t *v = NULL;
        size_t len = 0;
        int r = ws_xattr_get_locked(c, ino, rec, NTFS_ACL_ACCESS, &v, &len);
        if (r == -ENODATA)
                return 0;
        if (r < 0)
                return r;
        if (ntfs_acl_check(v, len) <= 0)
                return 0; /* not one the store checked (an import of an older store): left alone */
        ntfs_acl_chmod(v, len, rec->mode);
        return ws_xattr_put_locked(c, ino, rec, NTFS_ACL_ACCESS, v, len);
}

int ws_acl_inherit_locked(struct ctx *c, uint64_t parent, struct ino_rec *prec, uint32_t *mode,
                          uint8_t **ret_access, uint8_t **ret_default, size_t *ret_len) {
        *ret_access = *ret_default = NULL;
        *ret_len = 0;
        if (!(prec->flags & INO_XMAT) && ntfs_hash_is_zero(&prec->xattr))
                return 1;
        _cleanup_free_ uint8_t *dflt = NULL;
        size_t len = 0;
        int r = ws_xattr_get_locked(c, parent, prec, NTFS_ACL_DEFAULT, &dflt, &len);
        if (r == -ENODATA)
                return 1;
        if (r < 0)
                return r;
        if (ntfs_acl_check(dflt, len) <= 0)
                return 1;
        _cleanup_free_ uint8_t *access = malloc(len);
        if (!access)
                return -ENOMEM;
        memcpy(access, dflt, len);
        if (ntfs_acl_create_masq(access, len, mode) > 0)
                *ret_access = TAKE_PTR(access);
        if (S_ISDIR(*mode))
                *ret_default = TAKE_PTR(dflt);
        *ret_len = len;
        return 0;
}

int ntfs_ws_setxattr(ntfs_ws *ws, uint64_t ino, const char *name, const void *value, size_t size, int flags) {
        size_t nl = strnlen(name, 256);
        if (nl == 0 || nl > 255)
                return -ERANGE;
        if (size > XATTR_VALUE_MAX)
                return -E2BIG;
        int kind = ntfs_acl_kind(name);
        if (kind)
                return acl_set(ws, ino, kind, value, size);
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0)
                r = xattr_materialize(&c, ino, &rec);
        uint8_t k[16 + 256];
        key2(k, c.wsid, ino);
        memcpy(k + 16, name, nl);
        if (r == 0) {
                MDB_val v;
                int e = db_get(c.st, c.st->xattr, k, 16 + nl, &v);
                if (e < 0 && e != -ENOENT)
                        r = e;
                else if ((flags & XATTR_CREATE) && e == 0)
                        r = -EEXIST;
                else if ((flags & XATTR_REPLACE) && e == -ENOENT)
                        r = -ENODATA;
        }
        if (r == 0)
                r = db_put(c.st, c.st->xattr, k, 16 + nl, value, size);
        if (r == 0) {
                rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        return ws_ctx_leave(&c, r);
}

ssize_t ntfs_ws_getxattr(ntfs_ws *ws, uint64_t ino, const char *name, void *buf, size_t size) {
        size_t nl = strnlen(name, 256);
        if (nl == 0 || nl > 255)
                return -ERANGE;
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct ino_rec rec;
        ssize_t len = 0;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && !(rec.flags & INO_XMAT) && ntfs_hash_is_zero(&rec.xattr))
                r = -ENODATA;
        else if (r == 0) {
                /* Read-only views materialize into their ephemeral state too. */
                if (!(rec.flags & INO_XMAT)) {
                        r = xattr_materialize(&c, ino, &rec);
                        if (r == 0)
                                r = ino_put(c.st, c.wsid, ino, &rec);
                }
                uint8_t k[16 + 256];
                key2(k, c.wsid, ino);
                memcpy(k + 16, name, nl);
                MDB_val v;
                if (r == 0)
                        r = db_get(c.st, c.st->xattr, k, 16 + nl, &v);
                if (r == -ENOENT)
                        r = -ENODATA;
                if (r == 0) {
                        len = (ssize_t)v.mv_size;
                        if (size && v.mv_size > size)
                                r = -ERANGE;
                        else if (size)
                                memcpy(buf, v.mv_data, v.mv_size);
                }
        }
        r = ws_ctx_leave(&c, r);
        return r < 0 ? r : len;
}

ssize_t ntfs_ws_listxattr(ntfs_ws *ws, uint64_t ino, char *buf, size_t size) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct ino_rec rec;
        size_t len = 0;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && !(rec.flags & INO_XMAT) && !ntfs_hash_is_zero(&rec.xattr)) {
                r = xattr_materialize(&c, ino, &rec);
                if (r == 0)
                        r = ino_put(c.st, c.wsid, ino, &rec);
        }
        if (r == 0 && (rec.flags & INO_XMAT)) {
                uint8_t k[16];
                key2(k, c.wsid, ino);
                MDB_cursor *cur;
                int rc = mdb_cursor_open(c.st->txn, c.st->xattr, &cur);
                if (rc)
                        r = lmdb_err(rc);
                else {
                        MDB_val kk = { 16, k }, v;
                        for (rc = mdb_cursor_get(cur, &kk, &v, MDB_SET_RANGE);
                             rc == 0 && kk.mv_size > 16 && memcmp(kk.mv_data, k, 16) == 0;
                             rc = mdb_cursor_get(cur, &kk, &v, MDB_NEXT)) {
                                size_t nl = kk.mv_size - 16;
                                if (size) {
                                        if (len + nl + 1 > size) {
                                                r = -ERANGE;
                                                break;
                                        }
                                        memcpy(buf + len, (const uint8_t *)kk.mv_data + 16, nl);
                                        buf[len + nl] = 0;
                                }
                                len += nl + 1;
                        }
                        mdb_cursor_close(cur);
                }
        }
        r = ws_ctx_leave(&c, r);
        return r < 0 ? r : (ssize_t)len;
}

int ntfs_ws_removexattr(ntfs_ws *ws, uint64_t ino, const char *name) {
        size_t nl = strnlen(name, 256);
        if (nl == 0 || nl > 255)
                return -ERANGE;
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0)
                r = xattr_materialize(&c, ino, &rec);
        if (r == 0) {
                uint8_t k[16 + 256];
                key2(k, c.wsid, ino);
                memcpy(k + 16, name, nl);
                r = db_del(c.st, c.st->xattr, k, 16 + nl);
                if (r == -ENOENT)
                        r = -ENODATA;
        }
        if (r == 0) {
                rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        return ws_ctx_leave(&c, r);
}
