/* SPDX-License-Identifier: MIT
 * ws-dir.c — a working state's names: create (mknod, mkdir, symlink),
 * readlink, unlink, rmdir, link, rename, and readdir. Moved out of ws.c
 * (issue 68); the per-call context and the lookup helpers they use are in
 * ws-internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "fs/acl.h"
#include "fs/store-internal.h"
#include "fs/ws-internal.h"
#include "common/banned.h"

/* ---- finding and removing an entry (unlink, rmdir, rename) ----------------------- */

/* Does the base tree of dir hold name? (then removal needs a whiteout) */
static int base_has(struct ctx *c, const struct ino_rec *drec, const char *name, bool *ret) {
        *ret = false;
        if (base_empty(c, &drec->base))
                return 0;
        MDB_val v;
        int r = obj_get_typed(c->st, &drec->base, OBJ_TREE, &v);
        if (r < 0)
                return r;
        struct tree_view tv;
        if ((r = tree_view_init(&tv, v.mv_data, v.mv_size)) < 0)
                return r;
        size_t nl = strlen(name);
        uint64_t h = ctx_name_hash(c, name, nl);
        uint32_t i = tree_view_seek(&tv, h, name, nl);
        if (i < tv.count) {
                struct tree_entry e;
                if ((r = tree_view_get(&tv, i, &e)) < 0)
                        return r;
                *ret = e.h == h && e.namelen == nl && memcmp(e.name, name, nl) == 0;
        }
        return 0;
}

/* ws_child_get for a removal (unlink, rmdir). When dir has no base tree,
 * the entry can only be the overlay's record, and *ret_cur is a cursor
 * left on it for dent_remove_at (to close with mdb_cursor_close before the
 * store is left; NULL otherwise): the entry is found once, not twice. */
static int child_get_at(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const char *name,
                        uint64_t *ret_ino, struct ino_rec *ret, MDB_cursor **ret_cur) {
        *ret_cur = NULL;
        if (!base_empty(c, &drec->base))
                return ws_child_get(c, dir, drec, name, ret_ino, ret);
        size_t nl = strlen(name);
        uint8_t k[24 + NTFS_NAME_MAX];
        size_t kl = ws_dent_key(k, c->wsid, dir, ctx_name_hash(c, name, nl), name, nl);
        MDB_val v;
        MDB_cursor *cur;
        int r = db_get_at(c->st, c->st->dent, k, kl, &v, &cur);
        if (r < 0)
                return r;
        struct dent_val dv;
        if (v.mv_size != sizeof dv)
                r = -NTFS_ECORRUPT;
        else {
                memcpy(&dv, v.mv_data, sizeof dv);
                r = dv.ino == 0 ? -ENOENT : ino_get(c->st, c->wsid, dv.ino, ret);
        }
        if (r < 0) {
                mdb_cursor_close(cur);
                return r;
        }
        *ret_ino = dv.ino;
        *ret_cur = cur;
        return 0;
}

/* Removes name from dir: a whiteout when the base has it, else deletion
 * (where *cur stands, when child_get_at left one there; it is closed and
 * *cur set to NULL). */
static int dent_remove_at(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const char *name,
                          MDB_cursor **cur) {
        if (cur && *cur) {
                int r = db_cursor_del(c->st, *cur);
                mdb_cursor_close(*cur);
                *cur = NULL;
                return r;
        }
        bool in_base;
        int r = base_has(c, drec, name, &in_base);
        if (r < 0)
                return r;
        if (in_base)
                return ws_dent_set(c, dir, name, 0, 0);
        size_t nl = strlen(name);
        uint8_t k[24 + NTFS_NAME_MAX];
        size_t kl = ws_dent_key(k, c->wsid, dir, ctx_name_hash(c, name, nl), name, nl);
        r = db_del(c->st, c->st->dent, k, kl);
        return r == -ENOENT ? 0 : r;
}

static int dent_remove(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const char *name) {
        return dent_remove_at(c, dir, drec, name, NULL);
}

/* ---- namespace ------------------------------------------------------------------------------ */

static int quota_inode(struct ctx *c) {
        if (!c->ws->session)
                return 0;
        if (c->sr.quota_inodes && c->sr.inodes + 1 > c->sr.quota_inodes)
                return -EDQUOT;
        return 0;
}

/* umask < 0: mode is taken as it is (merges, tests); else the new node
 * inherits the parent's default ACL or, without one, loses the umask's
 * bits, as a program's create does on ext4 (ntfs_ws_create). */
static int create_node(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev,
                       uint32_t uid, uint32_t gid, const char *target, int32_t umask, struct ntfs_attr *ret) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec d, existing;
        uint64_t eino;
        r = check_name(name);
        if (r == 0)
                r = dir_get(&c, parent, &d);
        if (r == 0) {
                r = ws_child_get(&c, parent, &d, name, &eino, &existing);
                if (r == 0)
                        r = -EEXIST;
                else if (r == -ENOENT)
                        r = 0;
        }
        if (r == 0)
                r = quota_inode(&c);
        if (r == 0)
                r = ws_check_space(&c, 0);
        _cleanup_free_ uint8_t *acl_access = NULL, *acl_default = NULL;
        size_t acl_len = 0;
        if (r == 0 && umask >= 0 && !target) {
                r = ws_acl_inherit_locked(&c, parent, &d, &mode, &acl_access, &acl_default, &acl_len);
                if (r == 1) {
                        mode &= ~((uint32_t)umask & 0777);
                        r = 0;
                }
        }
        struct ino_rec rec = { 0 };
        uint64_t ino = 0;
        if (r == 0) {
                int64_t now = now_ns();
                rec.mode = mode;
                rec.uid = uid;
                rec.gid = gid;
                rec.rdev = rdev;
                rec.nlink = S_ISDIR(mode) ? 2 : 1;
                rec.atime = rec.mtime = rec.ctime = now;
                rec.parent = parent;
                if (target) {
                        size_t tl = strlen(target);
                        _cleanup_free_ uint8_t *blob = malloc(tl + 1);
                        if (!blob)
                                r = -ENOMEM;
                        else {
                                blob[0] = OBJ_BLOB;
                                memcpy(blob + 1, target, tl);
                                r = obj_put(c.st, blob, tl + 1, &rec.base);
                                rec.size = tl;
                        }
                }
                if (r == 0 && S_ISDIR(mode)) {
                        /* an empty directory's base is the empty tree */
                        r = obj_put(c.st, obj_empty_tree, sizeof obj_empty_tree, &rec.base);
                }
                if (r == 0 && S_ISREG(mode)) {
                        /* the empty file object, put once (its hash is
                         * known; obj_put would hash it every time) */
                        if (!c.st->empty_file_ok &&
                            (r = obj_put(c.st, obj_empty_file, sizeof obj_empty_file, &rec.base)) == 0)
                                c.st->empty_file_ok = true;
                        rec.base = c.st->empty_file;
                }
                ino = ws_ino_alloc(&c, parent);
        }
        if (r == 0)
                r = NTFS_FAULT("store.create");
        if (r == 0 && acl_access)
                r = ws_xattr_put_locked(&c, ino, &rec, NTFS_ACL_ACCESS, acl_access, acl_len);
        if (r == 0 && acl_default)
                r = ws_xattr_put_locked(&c, ino, &rec, NTFS_ACL_DEFAULT, acl_default, acl_len);
        if (r == 0) /* writes rec, with DIRTY set */
                r = ws_mark_dirty(&c, ino, &rec);
        if (r == 0)
                r = ws_dent_set(&c, parent, name, ino, mode);
        if (r == 0) {
                if ((r = ino_get(c.st, c.wsid, parent, &d)) == 0) {
                        d.mtime = d.ctime = rec.ctime;
                        if (S_ISDIR(mode))
                                d.nlink++;
                        r = ws_mark_dirty(&c, parent, &d);
                }
        }
        if (r == 0 && c.ws->session) {
                c.sr.inodes++;
                c.sr_changed = true;
        }
        if (r == 0)
                ws_attr_from(ino, &rec, ret);
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_mknod(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                  uint32_t gid, struct ntfs_attr *ret) {
        if (!(S_ISREG(mode) || S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode) || S_ISBLK(mode)))
                return -EINVAL;
        if (!S_ISCHR(mode) && !S_ISBLK(mode))
                rdev = 0;
        return create_node(ws, parent, name, mode, rdev, uid, gid, NULL, -1, ret);
}

int ntfs_ws_mkdir(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                  struct ntfs_attr *ret) {
        return create_node(ws, parent, name, S_IFDIR | (mode & 07777), 0, uid, gid, NULL, -1, ret);
}

int ntfs_ws_create(ntfs_ws *ws, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                   uint32_t gid, uint32_t umask, struct ntfs_attr *ret) {
        if (S_ISDIR(mode))
                return create_node(ws, parent, name, S_IFDIR | (mode & 07777), 0, uid, gid, NULL,
                                   (int32_t)(umask & 0777), ret);
        if (!(S_ISREG(mode) || S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode) || S_ISBLK(mode)))
                return -EINVAL;
        if (!S_ISCHR(mode) && !S_ISBLK(mode))
                rdev = 0;
        return create_node(ws, parent, name, mode, rdev, uid, gid, NULL, (int32_t)(umask & 0777), ret);
}

int ntfs_ws_symlink(ntfs_ws *ws, uint64_t parent, const char *name, const char *target, uint32_t uid,
                    uint32_t gid, struct ntfs_attr *ret) {
        size_t tl = strnlen(target, 4097);
        if (tl == 0)
                return -ENOENT;
        if (tl > 4095)
                return -ENAMETOOLONG;
        return create_node(ws, parent, name, S_IFLNK | 0777, 0, uid, gid, target, -1, ret);
}

ssize_t ntfs_ws_readlink(ntfs_ws *ws, uint64_t ino, char *buf, size_t size) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct ino_rec rec;
        ssize_t n = 0;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && !S_ISLNK(rec.mode))
                r = -EINVAL;
        MDB_val v;
        if (r == 0)
                r = obj_get_typed(c.st, &rec.base, OBJ_BLOB, &v);
        if (r == 0) {
                size_t len = v.mv_size - 1;
                if (len > size)
                        len = size;
                memcpy(buf, (const uint8_t *)v.mv_data + 1, len);
                n = (ssize_t)len;
        }
        r = ws_ctx_leave(&c, r);
        return r < 0 ? r : n;
}

/* Frees an inode that has no names left (content, xattrs, record). */
int ws_ino_free(struct ctx *c, uint64_t ino, const struct ino_rec *rec) {
        uint8_t k[16];
        key2(k, c->wsid, ino);
        int r = chunks_drop(c->st, c->wsid, ino, 0);
        /* xattr rows exist only once materialized, dlink rows only for
         * hard-link group members */
        if (r >= 0 && (rec->flags & INO_XMAT))
                r = db_del_prefix(c->st, c->st->xattr, k, 16);
        if (r >= 0 && S_ISDIR(rec->mode))
                r = db_del_prefix(c->st, c->st->dent, k, 16);
        if (r >= 0 && rec->linkid) {
                r = db_del(c->st, c->st->dlink, k, 16);
                if (r == -ENOENT)
                        r = 0;
        }
        if (r >= 0) {
                r = db_del(c->st, c->st->orph, k, 16);
                if (r == -ENOENT)
                        r = 0;
        }
        if (r >= 0 && rec->linkid) {
                uint8_t lk[16];
                key2(lk, c->wsid, rec->linkid);
                r = db_del(c->st, c->st->lmap, lk, 16);
                if (r == -ENOENT)
                        r = 0;
                /* the group leaves the link table at the next checkpoint */
                if (r == 0)
                        r = db_put(c->st, c->st->dlink, k, 16, "", 0);
                if (r == 0) {
                        struct ino_rec dead = *rec;
                        dead.nlink = 0;
                        dead.flags |= INO_DIRTY;
                        return ino_put(c->st, c->wsid, ino, &dead);
                }
        }
        if (r >= 0)
                r = ino_del(c->st, c->wsid, ino);
        return r < 0 ? r : 0;
}

/* Drops one name of a non-directory. The inode is freed when its last name
 * goes, unless the kernel may still use it (then it is an orphan, freed on
 * forget or at the next open). */
static int drop_link(struct ctx *c, uint64_t ino, struct ino_rec *rec) {
        rec->nlink--;
        rec->ctime = now_ns();
        int r;
        if (rec->nlink == 1 && rec->linkid && (rec->flags & INO_ONEDIR)) {
                /* The group's last name is in `parent` and no link table
                 * holds the group: a plain inode again (git's link() +
                 * unlink() of every object it writes). Its directory entry
                 * is a plain one from here on; ws_mark_dirty marks the
                 * directory. */
                uint8_t k[16];
                key2(k, c->wsid, rec->linkid);
                r = db_del(c->st, c->st->lmap, k, 16);
                key2(k, c->wsid, ino);
                if (r == 0 || r == -ENOENT)
                        r = db_del(c->st, c->st->dlink, k, 16);
                if (r < 0 && r != -ENOENT)
                        return r;
                rec->linkid = 0;
                rec->flags &= ~(uint32_t)INO_ONEDIR;
        }
        if (rec->nlink > 0)
                return ws_mark_dirty(c, ino, rec);
        if (c->ws->session) {
                c->sr.inodes--;
                if (S_ISREG(rec->mode))
                        c->sr.bytes -= rec->size;
                c->sr_changed = true;
        }
        if (rec->linkid) {
                if ((r = ws_mark_dirty(c, ino, rec)) < 0)
                        return r;
        } else if ((r = ino_put(c->st, c->wsid, ino, rec)) < 0)
                return r;
        uint8_t k[16];
        key2(k, c->wsid, ino);
        return db_put(c->st, c->st->orph, k, 16, "", 0);
}

static int dir_is_empty(struct ctx *c, uint64_t ino, const struct ino_rec *rec, bool *ret);

/* A removal's checks have passed: tells the caller (ntfs_ws_unlink_then).
 * The fault point stands for a record write that fails after that: it
 * breaks the batch as a failed LMDB write does. */
static int removal_checked(struct ctx *c, void (*checked)(void *), void *arg) {
        if (checked) {
                checked(arg);
                store_hold_brief(c->st);
        }
        int r = NTFS_FAULT("store.remove");
        if (r < 0)
                c->st->txn_broken = true;
        return r;
}

int ntfs_ws_unlink(ntfs_ws *ws, uint64_t parent, const char *name) {
        return ntfs_ws_unlink_then(ws, parent, name, NULL, NULL);
}

int ntfs_ws_unlink_then(ntfs_ws *ws, uint64_t parent, const char *name, void (*checked)(void *), void *arg) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec d, rec;
        uint64_t ino;
        MDB_cursor *at = NULL;
        r = check_name(name);
        if (r == 0)
                r = dir_get(&c, parent, &d);
        if (r == 0)
                r = child_get_at(&c, parent, &d, name, &ino, &rec, &at);
        if (r == 0 && S_ISDIR(rec.mode))
                r = -EISDIR;
        if (r == 0)
                r = NTFS_FAULT("store.unlink");
        if (r == 0)
                r = removal_checked(&c, checked, arg);
        if (r == 0)
                r = dent_remove_at(&c, parent, &d, name, &at);
        if (at) /* not reached the removal */
                mdb_cursor_close(at);
        if (r == 0)
                r = drop_link(&c, ino, &rec);
        if (r == 0 && (r = ino_get(c.st, c.wsid, parent, &d)) == 0) {
                d.mtime = d.ctime = now_ns();
                r = ws_mark_dirty(&c, parent, &d);
        }
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_rmdir(ntfs_ws *ws, uint64_t parent, const char *name) {
        return ntfs_ws_rmdir_then(ws, parent, name, NULL, NULL);
}

int ntfs_ws_rmdir_then(ntfs_ws *ws, uint64_t parent, const char *name, void (*checked)(void *), void *arg) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec d, rec;
        uint64_t ino;
        bool empty = false;
        r = strcmp(name, ".") == 0 ? -EINVAL : strcmp(name, "..") == 0 ? -ENOTEMPTY : check_name(name);
        if (r == 0)
                r = dir_get(&c, parent, &d);
        MDB_cursor *at = NULL;
        if (r == 0)
                r = child_get_at(&c, parent, &d, name, &ino, &rec, &at);
        if (r == 0 && !S_ISDIR(rec.mode))
                r = -ENOTDIR;
        if (r == 0)
                r = dir_is_empty(&c, ino, &rec, &empty);
        if (r == 0 && !empty)
                r = -ENOTEMPTY;
        if (r == 0)
                r = removal_checked(&c, checked, arg);
        if (r == 0)
                r = dent_remove_at(&c, parent, &d, name, &at);
        if (at) /* not reached the removal */
                mdb_cursor_close(at);
        if (r == 0) {
                rec.nlink = 0;
                rec.ctime = now_ns();
                uint8_t k[16];
                key2(k, c.wsid, ino);
                r = db_del_prefix(c.st, c.st->dent, k, 16);
                if (r >= 0)
                        r = ino_put(c.st, c.wsid, ino, &rec);
                if (r >= 0)
                        r = db_put(c.st, c.st->orph, k, 16, "", 0);
        }
        if (r == 0 && (r = ino_get(c.st, c.wsid, parent, &d)) == 0) {
                d.nlink--;
                d.mtime = d.ctime = now_ns();
                r = ws_mark_dirty(&c, parent, &d);
        }
        if (r == 0 && c.ws->session) {
                c.sr.inodes--;
                c.sr_changed = true;
        }
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_link(ntfs_ws *ws, uint64_t ino, uint64_t newparent, const char *newname, struct ntfs_attr *ret) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec, d, ex;
        uint64_t eino;
        r = check_name(newname);
        if (r == 0)
                r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && S_ISDIR(rec.mode))
                r = -EPERM;
        if (r == 0 && rec.nlink == 0)
                r = -ENOENT;
        if (r == 0 && rec.nlink >= 65000)
                r = -EMLINK;
        if (r == 0)
                r = dir_get(&c, newparent, &d);
        if (r == 0) {
                r = ws_child_get(&c, newparent, &d, newname, &eino, &ex);
                r = r == 0 ? -EEXIST : r == -ENOENT ? 0 : r;
        }
        if (r == 0 && rec.linkid == 0) {
                /* The file joins a hard-link group: its entry in its
                 * current directory becomes a reference to the group. */
                if (!c.ws->session)
                        r = -EROFS;
                else {
                        if (rec.parent && rec.parent == newparent)
                                rec.flags |= INO_ONEDIR;
                        rec.linkid = c.sr.next_linkid++;
                        c.sr_changed = true;
                        uint8_t lk[16];
                        key2(lk, c.wsid, rec.linkid);
                        r = db_put(c.st, c.st->lmap, lk, 16, &ino, 8);
                        struct ino_rec p;
                        if (r == 0 && rec.parent && (r = ino_get(c.st, c.wsid, rec.parent, &p)) == 0)
                                r = ws_mark_dirty(&c, rec.parent, &p);
                }
        }
        if (r == 0) {
                if (newparent != rec.parent)
                        rec.flags &= ~(uint32_t)INO_ONEDIR; /* names in two directories */
                rec.nlink++;
                rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        if (r == 0)
                r = ws_dent_set(&c, newparent, newname, ino, rec.mode);
        if (r == 0 && (r = ino_get(c.st, c.wsid, newparent, &d)) == 0) {
                d.mtime = d.ctime = now_ns();
                r = ws_mark_dirty(&c, newparent, &d);
        }
        if (r == 0)
                ws_attr_from(ino, &rec, ret);
        return ws_ctx_leave(&c, r);
}

/* Is a an ancestor of (or equal to) b? */
static int is_ancestor(struct ctx *c, uint64_t a, uint64_t b, bool *ret) {
        *ret = false;
        for (int depth = 0; b && depth < 100000; depth++) {
                if (a == b) {
                        *ret = true;
                        return 0;
                }
                struct ino_rec r;
                int rc = ino_get(c->st, c->wsid, b, &r);
                if (rc < 0)
                        return rc;
                b = r.parent;
        }
        return 0;
}

static int touch_dir(struct ctx *c, uint64_t dir, int nlink_delta) {
        struct ino_rec d;
        int r = ino_get(c->st, c->wsid, dir, &d);
        if (r < 0)
                return r;
        d.nlink = (uint32_t)((int)d.nlink + nlink_delta);
        d.mtime = d.ctime = now_ns();
        return ws_mark_dirty(c, dir, &d);
}

int ntfs_ws_rename(ntfs_ws *ws, uint64_t parent, const char *name, uint64_t newparent, const char *newname,
                   unsigned flags) {
        if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
                return -EINVAL;
        if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
                return -EINVAL;
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec pd, nd, src, dst;
        uint64_t sino = 0, dino = 0;
        bool have_dst = false;
        r = check_name(name);
        if (r == 0)
                r = check_name(newname);
        if (r == 0)
                r = dir_get(&c, parent, &pd);
        if (r == 0)
                r = dir_get(&c, newparent, &nd);
        if (r == 0)
                r = ws_child_get(&c, parent, &pd, name, &sino, &src);
        if (r == 0) {
                r = ws_child_get(&c, newparent, &nd, newname, &dino, &dst);
                if (r == 0)
                        have_dst = true;
                else if (r == -ENOENT)
                        r = 0;
        }
        if (r == 0 && have_dst && (flags & RENAME_NOREPLACE))
                r = -EEXIST;
        if (r == 0 && !have_dst && (flags & RENAME_EXCHANGE))
                r = -ENOENT;
        if (r < 0)
                return ws_ctx_leave(&c, r);
        if (have_dst && dino == sino) /* same inode: nothing to do */
                return ws_ctx_leave(&c, 0);
        /* A directory may not move into itself or its own subtree. */
        bool loop = false;
        if (S_ISDIR(src.mode) && (r = is_ancestor(&c, sino, newparent, &loop)) == 0 && loop)
                r = -EINVAL;
        if (r == 0 && have_dst && (flags & RENAME_EXCHANGE) && S_ISDIR(dst.mode) &&
            (r = is_ancestor(&c, dino, parent, &loop)) == 0 && loop)
                r = -EINVAL;
        if (r < 0)
                return ws_ctx_leave(&c, r);

        if (flags & RENAME_EXCHANGE) {
                r = ws_dent_set(&c, parent, name, dino, dst.mode);
                if (r == 0)
                        r = ws_dent_set(&c, newparent, newname, sino, src.mode);
                if (r == 0 && parent != newparent && S_ISDIR(src.mode) != S_ISDIR(dst.mode)) {
                        int delta = S_ISDIR(src.mode) ? 1 : -1;
                        if ((r = touch_dir(&c, newparent, delta)) == 0)
                                r = touch_dir(&c, parent, -delta);
                } else if (r == 0) {
                        if ((r = touch_dir(&c, parent, 0)) == 0 && parent != newparent)
                                r = touch_dir(&c, newparent, 0);
                }
                if (r == 0 && (r = ino_get(c.st, c.wsid, sino, &src)) == 0) {
                        if (!src.linkid)
                                src.parent = newparent;
                        else if (parent != newparent)
                                src.flags &= ~(uint32_t)INO_ONEDIR;
                        src.ctime = now_ns();
                        r = ws_mark_dirty(&c, sino, &src);
                }
                if (r == 0 && (r = ino_get(c.st, c.wsid, dino, &dst)) == 0) {
                        if (!dst.linkid)
                                dst.parent = parent;
                        else if (parent != newparent)
                                dst.flags &= ~(uint32_t)INO_ONEDIR;
                        dst.ctime = now_ns();
                        r = ws_mark_dirty(&c, dino, &dst);
                }
                return ws_ctx_leave(&c, r);
        }

        if (have_dst) {
                if (S_ISDIR(src.mode) && !S_ISDIR(dst.mode))
                        r = -ENOTDIR;
                else if (!S_ISDIR(src.mode) && S_ISDIR(dst.mode))
                        r = -EISDIR;
                else if (S_ISDIR(dst.mode)) {
                        bool empty;
                        r = dir_is_empty(&c, dino, &dst, &empty);
                        if (r == 0 && !empty)
                                r = -ENOTEMPTY;
                        if (r == 0) {
                                uint8_t k[16];
                                key2(k, c.wsid, dino);
                                r = db_del_prefix(c.st, c.st->dent, k, 16);
                                dst.nlink = 0;
                                if (r >= 0)
                                        r = ino_put(c.st, c.wsid, dino, &dst);
                                if (r >= 0)
                                        r = db_put(c.st, c.st->orph, k, 16, "", 0);
                                if (r == 0)
                                        r = touch_dir(&c, newparent, -1);
                                if (r == 0 && c.ws->session) {
                                        c.sr.inodes--;
                                        c.sr_changed = true;
                                }
                        }
                } else
                        r = drop_link(&c, dino, &dst);
        }
        if (r == 0 && (r = ino_get(c.st, c.wsid, parent, &pd)) == 0)
                r = dent_remove(&c, parent, &pd, name);
        if (r == 0)
                r = ws_dent_set(&c, newparent, newname, sino, src.mode);
        if (r == 0) {
                int delta = S_ISDIR(src.mode) && parent != newparent ? 1 : 0;
                r = touch_dir(&c, parent, -delta);
                if (r == 0 && parent != newparent)
                        r = touch_dir(&c, newparent, delta);
        }
        if (r == 0 && (r = ino_get(c.st, c.wsid, sino, &src)) == 0) {
                if (!src.linkid)
                        src.parent = newparent;
                else if (parent != newparent)
                        src.flags &= ~(uint32_t)INO_ONEDIR;
                src.ctime = now_ns();
                r = ws_mark_dirty(&c, sino, &src);
        }
        return ws_ctx_leave(&c, r);
}

/* ---- readdir -------------------------------------------------------------------------------- */

struct rd_item {
        uint64_t h;
        uint64_t ino; /* the overlay's entry: its inode; 0: the base tree's, not yet materialized */
        uint32_t mode;
        char name[NTFS_NAME_MAX + 1];
};

/* Collects up to max live entries of dir with hash >= from, in order. */
static int dir_collect(struct ctx *c, uint64_t dir, const struct ino_rec *drec, uint64_t from,
                       struct rd_item *items, size_t max, size_t *ret_n) {
        size_t n = 0;
        int r;
        struct tree_view tv = { 0 };
        uint32_t ti = 0;
        if (!base_empty(c, &drec->base)) {
                MDB_val v;
                if ((r = obj_get_typed(c->st, &drec->base, OBJ_TREE, &v)) < 0)
                        return r;
                if ((r = tree_view_init(&tv, v.mv_data, v.mv_size)) < 0)
                        return r;
                ti = tree_view_seek(&tv, from, "", 0);
        }
        MDB_cursor *cur;
        int rc = mdb_cursor_open(c->st->txn, c->st->dent, &cur);
        if (rc)
                return lmdb_err(rc);
        uint8_t k0[24];
        ws_dent_key(k0, c->wsid, dir, from, "", 0);
        MDB_val k = { 24, k0 }, v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        bool ov = rc == 0 && k.mv_size >= 24 && memcmp(k.mv_data, k0, 16) == 0;
        r = 0;
        while (n < max) {
                struct tree_entry te;
                bool tb = ti < tv.count;
                if (tb && (r = tree_view_get(&tv, ti, &te)) < 0)
                        break;
                if (!tb && !ov)
                        break;
                int cmp;
                const uint8_t *kd = ov ? k.mv_data : NULL;
                uint64_t oh = ov ? ntfs_get_be64(kd + 16) : 0;
                const char *on = ov ? (const char *)kd + 24 : NULL;
                size_t onl = ov ? k.mv_size - 24 : 0;
                if (!ov)
                        cmp = -1;
                else if (!tb)
                        cmp = 1;
                else
                        cmp = entry_cmp(te.h, te.name, te.namelen, oh, on, onl);
                if (cmp < 0) {
                        items[n].h = te.h;
                        items[n].ino = 0;
                        items[n].mode = 0;
                        memcpy(items[n].name, te.name, te.namelen);
                        items[n].name[te.namelen] = 0;
                        n++;
                        ti++;
                        continue;
                }
                /* overlay entry (cmp == 0: it replaces the base entry) */
                if (v.mv_size == sizeof(struct dent_val) && onl <= NTFS_NAME_MAX) {
                        struct dent_val dv;
                        memcpy(&dv, v.mv_data, sizeof dv);
                        if (dv.ino) {
                                items[n].h = oh;
                                items[n].ino = dv.ino;
                                items[n].mode = dv.mode;
                                memcpy(items[n].name, on, onl);
                                items[n].name[onl] = 0;
                                n++;
                        }
                }
                if (cmp == 0)
                        ti++;
                rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
                ov = rc == 0 && k.mv_size >= 24 && memcmp(k.mv_data, k0, 16) == 0;
        }
        mdb_cursor_close(cur);
        *ret_n = n;
        return r;
}

static int dir_is_empty(struct ctx *c, uint64_t ino, const struct ino_rec *rec, bool *ret) {
        struct rd_item item;
        size_t n;
        int r = dir_collect(c, ino, rec, 0, &item, 1, &n);
        if (r == 0)
                *ret = n == 0;
        return r;
}

#define RD_BATCH 64

/* One listed entry's attributes (plus) or inode number and type. An
 * entry of the overlay names its inode: read directly, not looked up by
 * name a second time; without plus its directory entry's type is all that
 * is needed. A base tree's entry is materialized (stable inode numbers for
 * d_ino). */
static int rd_attr(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const struct rd_item *it,
                   bool plus, struct ntfs_attr *ret) {
        uint64_t cino = it->ino;
        uint32_t type = it->mode & S_IFMT;
        if (plus || !cino || !type) {
                struct ino_rec rec;
                int r;
                if (cino)
                        r = ino_get(c->st, c->wsid, cino, &rec);
                else {
                        ctx_name_known(c, it->name, strlen(it->name), it->h);
                        r = ws_child_get(c, dir, drec, it->name, &cino, &rec);
                }
                if (r < 0)
                        return r;
                ws_attr_from(cino, &rec, ret);
                if (plus)
                        return 0;
                type = ret->mode & S_IFMT;
        }
        memset(ret, 0, sizeof *ret);
        ret->ino = cino;
        ret->mode = type;
        return 0;
}

int ntfs_ws_readdir(ntfs_ws *ws, uint64_t ino, uint64_t cookie, bool plus, size_t max,
                    int (*cb)(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *),
                    void *ud) {
        _cleanup_free_ struct rd_item *items = malloc(RD_BATCH * sizeof *items);
        _cleanup_free_ struct ntfs_attr *attrs = malloc(RD_BATCH * sizeof *attrs);
        if (!items || !attrs)
                return -ENOMEM;
        size_t left = max ? max : SIZE_MAX;
        while (left) {
                size_t want = NTFS_MIN(left, (size_t)RD_BATCH);
                struct ctx c;
                int r = ctx_enter(ws, &c, false);
                if (r < 0)
                        return r;
                struct ino_rec d;
                size_t n = 0;
                r = dir_get(&c, ino, &d);
                if (r == 0)
                        r = dir_collect(&c, ino, &d, cookie, items, want, &n);
                for (size_t i = 0; r == 0 && i < n; i++)
                        r = rd_attr(&c, ino, &d, &items[i], plus, &attrs[i]);
                r = ws_ctx_leave(&c, r);
                if (r < 0)
                        return r;
                /* Call back without the store lock. */
                for (size_t i = 0; i < n; i++) {
                        if (cb(items[i].name, &attrs[i], items[i].h + 1, ud))
                                return 0;
                        cookie = items[i].h + 1;
                }
                if (n < want)
                        return 0;
                left -= n;
        }
        return 0;
}
