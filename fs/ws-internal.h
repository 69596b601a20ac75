/* SPDX-License-Identifier: MIT
 * ws-internal.h — private to the working state's files: ws.c (handles,
 * inodes, lookup, file content, setattr), ws-dir.c (names: create, remove,
 * link, rename; readdir) and ws-xattr.c (xattrs, POSIX ACLs). The
 * per-call context and the helpers they share; the small ones inline,
 * since lookup, getattr, read and write run through them.
 */
#ifndef NTFS_FS_WS_INTERNAL_H
#define NTFS_FS_WS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/store-internal.h"

/* ---- keys (ws.c) ---- */

static inline void key2(uint8_t *k, uint64_t a, uint64_t b) {
        ntfs_put_be64(k, a);
        ntfs_put_be64(k + 8, b);
}

struct dent_val {
        uint64_t ino; /* 0: whiteout of a base entry */
        uint32_t mode;
        uint32_t pad;
};

size_t ws_dent_key(uint8_t *k, uint64_t wsid, uint64_t dir, uint64_t h, const char *name, size_t nl);

/* ---- per-call context (ws.c) ---- */

struct ctx {
        ntfs_store *st;
        ntfs_ws *ws;
        bool write;
        uint64_t wsid;
        struct sess_rec sr; /* sessions only */
        bool sr_changed;
        bool took_block; /* ws_ino_alloc took a new block of inode numbers */
};

/* A name's hash (a SHA-256) through the store's cache: a LOOKUP, the
 * MKNOD after it and an UNLINK hash one name once (an unlink needs it to
 * find the name, to ask the base about it and to delete it). */
static inline uint64_t ctx_name_hash(struct ctx *c, const char *name, size_t len) {
        return store_name_hash(c->st, name, len);
}

/* Tells the name's hash, known from a directory entry. */
static inline void ctx_name_known(struct ctx *c, const char *name, size_t len, uint64_t h) {
        store_name_hash_known(c->st, name, len, h);
}

/* Is this base (a directory's) the empty tree, or none? Then it has no
 * entries, and no object needs reading to know it. */
static inline bool base_empty(struct ctx *c, const ntfs_hash *base) {
        return ntfs_hash_is_zero(base) || memcmp(base->b, c->st->empty_tree.b, NTFS_HASH_LEN) == 0;
}

/* reader: the store is entered with store_enter_reader() (a call that
 * changes nothing a copy in flight may read: ntfs_ws_read_iov) */
static inline int ctx_enter_as(ntfs_ws *ws, struct ctx *c, bool write, bool reader) {
        c->st = ws->st;
        c->ws = ws;
        c->write = write;
        c->sr_changed = false;
        c->took_block = false;
        int r = reader ? store_enter_reader(ws->st) : store_enter(ws->st);
        if (r < 0)
                return r;
        c->wsid = ws->wsid;
        if (write && ws->readonly) {
                store_leave(ws->st);
                return -EROFS;
        }
        if (ws->session) {
                r = sess_get(ws->st, ws->session, &c->sr);
                if (r < 0) {
                        store_leave(ws->st);
                        return r == -NTFS_ENOSESSION ? -ESTALE : r;
                }
        }
        return 0;
}

static inline int ctx_enter(ntfs_ws *ws, struct ctx *c, bool write) { return ctx_enter_as(ws, c, write, false); }

int ws_ctx_leave(struct ctx *c, int r);
uint64_t ws_ino_alloc(struct ctx *c, uint64_t dir);
static inline int64_t now_ns(void) { return ntfs_now_ns(); }

void ws_attr_from(uint64_t ino, const struct ino_rec *r, struct ntfs_attr *a);
int ws_mark_dirty(struct ctx *c, uint64_t ino, struct ino_rec *rec);
bool ws_name_ok(const char *name);

static inline int check_name(const char *name) {
        if (strnlen(name, NTFS_NAME_MAX + 1) > NTFS_NAME_MAX)
                return -ENAMETOOLONG;
        return ws_name_ok(name) ? 0 : -EINVAL;
}

/* ---- lookup and materialization (ws.c) ---- */

int ws_child_get(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const char *name,
                 uint64_t *ret_ino, struct ino_rec *ret);
int ws_dent_set(struct ctx *c, uint64_t dir, const char *name, uint64_t ino, uint32_t mode);

static inline int dir_get(struct ctx *c, uint64_t ino, struct ino_rec *ret) {
        int r = ino_get(c->st, c->wsid, ino, ret);
        if (r < 0)
                return r;
        if (!S_ISDIR(ret->mode))
                return -ENOTDIR;
        if (ret->nlink == 0)
                return -ENOENT;
        return 0;
}

/* ---- file content (ws.c) ---- */

int ws_check_space(struct ctx *c, uint64_t n);

/* ---- names (ws-dir.c) ---- */

int ws_ino_free(struct ctx *c, uint64_t ino, const struct ino_rec *rec);

/* ---- xattrs (ws-xattr.c) ---- */

/* A copy of ino's xattr name (malloc'd, the caller's: *ret, *ret_len);
 * -ENODATA when there is none. Moves a base xattr set into the xattr db
 * first (and writes rec with INO_XMAT), as every xattr call does. */
int ws_xattr_get_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec, const char *name, uint8_t **ret,
                        size_t *ret_len);
/* Sets ino's xattr name to value, or removes it when value is NULL (no
 * error if absent). Sets INO_XMAT in rec: the caller writes rec
 * (ws_mark_dirty). */
int ws_xattr_put_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec, const char *name, const void *value,
                        size_t len);
/* After a chmod (rec->mode already new): the access ACL's USER_OBJ, MASK
 * (else GROUP_OBJ) and OTHER entries follow the mode, if there is one. */
int ws_acl_chmod_locked(struct ctx *c, uint64_t ino, struct ino_rec *rec);
/* A node made in parent with *mode (type and bits the creator asked for)
 * inherits parent's default ACL, as on ext4 (posix_acl_create): returns 1
 * when parent has none (the caller applies the umask), else 0 with *mode's
 * permission bits limited by the ACL and the ACLs to store on the new node
 * (each malloc'd or NULL; both *ret_len bytes long): an access ACL when it
 * says more than the mode, and for a directory the default ACL itself. */
int ws_acl_inherit_locked(struct ctx *c, uint64_t parent, struct ino_rec *prec, uint32_t *mode,
                          uint8_t **ret_access, uint8_t **ret_default, size_t *ret_len);

#endif
