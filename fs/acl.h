/* SPDX-License-Identifier: MIT
 * acl.h — POSIX ACLs in their xattr form (system.posix_acl_access /
 * system.posix_acl_default, the kernel's posix_acl_xattr layout: a
 * little-endian u32 version 2, then 8-byte entries {u16 tag, u16 perm,
 * u32 id}). Pure functions on a value in memory: the store keeps ACLs as
 * xattrs and uses these to keep the mode and the access ACL in step
 * (fs/ws.c, fs/ws-xattr.c, fs/ws-dir.c), and the archive code converts them
 * to and from libarchive's entries (fs/sync/archive.c). The rules are the
 * kernel's (fs/posix_acl.c), so the mount behaves as ext4 (docs/mount.md,
 * "POSIX ACLs").
 */
#ifndef NTFS_FS_ACL_H
#define NTFS_FS_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NTFS_ACL_ACCESS "system.posix_acl_access"
#define NTFS_ACL_DEFAULT "system.posix_acl_default"

#define NTFS_ACL_VERSION 2
#define NTFS_ACL_HDR 4
#define NTFS_ACL_ENTRY 8
#define NTFS_ACL_USER_OBJ 0x01
#define NTFS_ACL_USER 0x02
#define NTFS_ACL_GROUP_OBJ 0x04
#define NTFS_ACL_GROUP 0x08
#define NTFS_ACL_MASK 0x10
#define NTFS_ACL_OTHER 0x20
#define NTFS_ACL_UNDEFINED_ID 0xffffffffu
/* The most entries the store takes (ext4 holds about 500 in a block; the
 * kernel's FUSE client reads at most a page: (4096 - 4) / 8). */
#define NTFS_ACL_MAX_ENTRIES 511

/* 1 for system.posix_acl_access, 2 for system.posix_acl_default, else 0. */
int ntfs_acl_kind(const char *xattr_name);

/* Checks an ACL value as the kernel's posix_acl_valid() does: version 2,
 * whole entries, each tag once in order (USER_OBJ, USERs by ascending id,
 * GROUP_OBJ, GROUPs by ascending id, MASK, OTHER), a MASK when there are
 * named entries, perms within rwx. Returns the entry count (0 for a bare
 * header, which means "no ACL"), or -EINVAL. */
int ntfs_acl_check(const void *value, size_t size);

/* The permission bits (0777) an access ACL gives the file (the group bits
 * are the MASK's when there is one) and whether the ACL says no more than
 * those bits (*ret_equiv: only the three base entries). The value must
 * have passed ntfs_acl_check. */
void ntfs_acl_mode(const void *value, size_t size, uint32_t *ret_perm, bool *ret_equiv);

/* chmod of a file with an access ACL (the kernel's __posix_acl_chmod): the
 * USER_OBJ, OTHER and MASK (else GROUP_OBJ) entries of value (changed in
 * place) take the permission bits of mode. */
void ntfs_acl_chmod(void *value, size_t size, uint32_t mode);

/* A new node's access ACL from its parent's default ACL (value, changed in
 * place) and the mode the creator asked for (the kernel's
 * __posix_acl_create_masq): the entries are limited by the mode and the
 * mode by the entries; *mode's permission bits are replaced. Returns 1
 * when the result says more than the mode (it must be stored), 0 when it
 * is equivalent to the mode (nothing to store). */
int ntfs_acl_create_masq(void *value, size_t size, uint32_t *mode);

/* Entry i of a value of at least i + 1 entries. */
void ntfs_acl_get(const void *value, size_t i, uint16_t *tag, uint16_t *perm, uint32_t *id);
/* Writes the header (version 2) of a value. */
void ntfs_acl_put_header(void *value);
/* Writes entry i of a value of at least i + 1 entries. */
void ntfs_acl_put(void *value, size_t i, uint16_t tag, uint16_t perm, uint32_t id);
/* Sorts a value's entries into the kernel's order (by tag, then id), as
 * ntfs_acl_check wants them. */
void ntfs_acl_sort(void *value, size_t size);

#endif
