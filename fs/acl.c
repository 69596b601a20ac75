/* SPDX-License-Identifier: MIT
 * acl.c — POSIX ACLs in their xattr form (fs/acl.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/acl.h"
#include "common/banned.h"

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
}

int ntfs_acl_kind(const char *name) {
        if (strcmp(name, NTFS_ACL_ACCESS) == 0)
                return 1;
        if (strcmp(name, NTFS_ACL_DEFAULT) == 0)
                return 2;
        return 0;
}

int ntfs_acl_check(const void *value, size_t size) {
        const uint8_t *v = value;
        if (size < NTFS_ACL_HDR || (size - NTFS_ACL_HDR) % NTFS_ACL_ENTRY != 0)
                return -EINVAL;
        if (get32(v) != NTFS_ACL_VERSION)
                return -EINVAL;
        size_t n = (size - NTFS_ACL_HDR) / NTFS_ACL_ENTRY;
        if (n > NTFS_ACL_MAX_ENTRIES)
                return -EINVAL;
        if (n == 0)
                return 0;
        /* the state machine of posix_acl_valid() */
        unsigned state = NTFS_ACL_USER_OBJ;
        bool needs_mask = false, have_prev = false;
        uint32_t prev = 0;
        for (size_t i = 0; i < n; i++) {
                const uint8_t *e = v + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
                uint16_t tag = get16(e), perm = get16(e + 2);
                uint32_t id = get32(e + 4);
                if (perm & ~7u)
                        return -EINVAL;
                switch (tag) {
                case NTFS_ACL_USER_OBJ:
                        if (state != NTFS_ACL_USER_OBJ)
                                return -EINVAL;
                        state = NTFS_ACL_USER;
                        have_prev = false;
                        break;
                case NTFS_ACL_USER:
                case NTFS_ACL_GROUP:
                        if (state != tag || id == NTFS_ACL_UNDEFINED_ID)
                                return -EINVAL;
                        if (have_prev && id <= prev)
                                return -EINVAL;
                        prev = id;
                        have_prev = true;
                        needs_mask = true;
                        break;
                case NTFS_ACL_GROUP_OBJ:
                        if (state != NTFS_ACL_USER)
                                return -EINVAL;
                        state = NTFS_ACL_GROUP;
                        have_prev = false;
                        break;
                case NTFS_ACL_MASK:
                        if (state != NTFS_ACL_GROUP)
                                return -EINVAL;
                        state = NTFS_ACL_OTHER;
                        break;
                case NTFS_ACL_OTHER:
                        if (state == NTFS_ACL_OTHER || (state == NTFS_ACL_GROUP && !needs_mask))
                                state = 0;
                        else
                                return -EINVAL;
                        break;
                default:
                        return -EINVAL;
                }
        }
        return state == 0 ? (int)n : -EINVAL;
}

void ntfs_acl_mode(const void *value, size_t size, uint32_t *ret_perm, bool *ret_equiv) {
        const uint8_t *v = value;
        size_t n = size >= NTFS_ACL_HDR ? (size - NTFS_ACL_HDR) / NTFS_ACL_ENTRY : 0;
        uint32_t mode = 0;
        bool equiv = true, mask = false;
        for (size_t i = 0; i < n; i++) {
                const uint8_t *e = v + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
                uint32_t perm = get16(e + 2) & 7u;
                switch (get16(e)) {
                case NTFS_ACL_USER_OBJ: mode |= perm << 6; break;
                case NTFS_ACL_GROUP_OBJ:
                        if (!mask)
                                mode = (mode & ~070u) | perm << 3;
                        break;
                case NTFS_ACL_MASK:
                        mask = true;
                        mode = (mode & ~070u) | perm << 3;
                        equiv = false;
                        break;
                case NTFS_ACL_OTHER: mode |= perm; break;
                default: equiv = false; break;
                }
        }
        *ret_perm = mode;
        *ret_equiv = equiv;
}

void ntfs_acl_chmod(void *value, size_t size, uint32_t mode) {
        uint8_t *v = value;
        size_t n = size >= NTFS_ACL_HDR ? (size - NTFS_ACL_HDR) / NTFS_ACL_ENTRY : 0;
        uint8_t *group_obj = NULL, *mask = NULL;
        for (size_t i = 0; i < n; i++) {
                uint8_t *e = v + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
                switch (get16(e)) {
                case NTFS_ACL_USER_OBJ: put16(e + 2, (uint16_t)((mode >> 6) & 7)); break;
                case NTFS_ACL_GROUP_OBJ: group_obj = e; break;
                case NTFS_ACL_MASK: mask = e; break;
                case NTFS_ACL_OTHER: put16(e + 2, (uint16_t)(mode & 7)); break;
                default: break;
                }
        }
        if (mask)
                put16(mask + 2, (uint16_t)((mode >> 3) & 7));
        else if (group_obj)
                put16(group_obj + 2, (uint16_t)((mode >> 3) & 7));
}

int ntfs_acl_create_masq(void *value, size_t size, uint32_t *mode_p) {
        uint8_t *v = value;
        size_t n = size >= NTFS_ACL_HDR ? (size - NTFS_ACL_HDR) / NTFS_ACL_ENTRY : 0;
        uint32_t mode = *mode_p & 0777;
        uint8_t *group_obj = NULL, *mask = NULL;
        int not_equiv = 0;
        for (size_t i = 0; i < n; i++) {
                uint8_t *e = v + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
                uint32_t perm = get16(e + 2);
                switch (get16(e)) {
                case NTFS_ACL_USER_OBJ:
                        perm &= (mode >> 6) & 7;
                        put16(e + 2, (uint16_t)perm);
                        mode &= (perm << 6) | ~0700u;
                        break;
                case NTFS_ACL_USER:
                case NTFS_ACL_GROUP: not_equiv = 1; break;
                case NTFS_ACL_GROUP_OBJ: group_obj = e; break;
                case NTFS_ACL_OTHER:
                        perm &= mode & 7;
                        put16(e + 2, (uint16_t)perm);
                        mode &= perm | ~07u;
                        break;
                case NTFS_ACL_MASK:
                        mask = e;
                        not_equiv = 1;
                        break;
                default: break;
                }
        }
        uint8_t *g = mask ? mask : group_obj;
        if (g) {
                uint32_t perm = get16(g + 2) & ((mode >> 3) & 7);
                put16(g + 2, (uint16_t)perm);
                mode &= (perm << 3) | ~070u;
        }
        *mode_p = (*mode_p & ~0777u) | (mode & 0777);
        return not_equiv;
}

void ntfs_acl_get(const void *value, size_t i, uint16_t *tag, uint16_t *perm, uint32_t *id) {
        const uint8_t *e = (const uint8_t *)value + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
        *tag = get16(e);
        *perm = get16(e + 2);
        *id = get32(e + 4);
}

void ntfs_acl_put_header(void *value) {
        uint8_t *v = value;
        v[0] = NTFS_ACL_VERSION;
        v[1] = v[2] = v[3] = 0;
}

void ntfs_acl_put(void *value, size_t i, uint16_t tag, uint16_t perm, uint32_t id) {
        uint8_t *e = (uint8_t *)value + NTFS_ACL_HDR + i * NTFS_ACL_ENTRY;
        put16(e, tag);
        put16(e + 2, perm);
        e[4] = (uint8_t)id;
        e[5] = (uint8_t)(id >> 8);
        e[6] = (uint8_t)(id >> 16);
        e[7] = (uint8_t)(id >> 24);
}

static int entry_cmp(const void *a, const void *b) {
        const uint8_t *x = a, *y = b;
        uint16_t tx = get16(x), ty = get16(y);
        if (tx != ty)
                return tx < ty ? -1 : 1;
        uint32_t ix = get32(x + 4), iy = get32(y + 4);
        return ix < iy ? -1 : ix > iy;
}

void ntfs_acl_sort(void *value, size_t size) {
        if (size < NTFS_ACL_HDR)
                return;
        qsort((uint8_t *)value + NTFS_ACL_HDR, (size - NTFS_ACL_HDR) / NTFS_ACL_ENTRY, NTFS_ACL_ENTRY, entry_cmp);
}
