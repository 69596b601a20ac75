/* SPDX-License-Identifier: MIT
 * objects-io.c — raw object export/import (store.h, "raw objects"): what a
 * transport (fs/sync/remote.c) needs to copy objects between stores by hash.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/store-internal.h"
#include "common/banned.h"

int ntfs_object_get(ntfs_store *st, const ntfs_hash *h, uint8_t **ret, size_t *ret_len) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        MDB_val v;
        r = db_get(st, st->obj, h->b, NTFS_HASH_LEN, &v);
        uint8_t *copy = NULL;
        if (r == 0 && v.mv_size == 0)
                r = -NTFS_ECORRUPT;
        if (r == 0) {
                copy = malloc(v.mv_size);
                if (!copy)
                        r = -ENOMEM;
                else
                        memcpy(copy, v.mv_data, v.mv_size);
        }
        store_leave(st);
        if (r < 0)
                return r;
        *ret = copy;
        *ret_len = v.mv_size;
        return 0;
}

int ntfs_object_has(ntfs_store *st, const ntfs_hash *h) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        MDB_val v;
        r = db_get(st, st->obj, h->b, NTFS_HASH_LEN, &v);
        store_leave(st);
        if (r == -ENOENT)
                return 0;
        return r < 0 ? r : 1;
}

static int ignore_ref(const ntfs_hash *h, void *ud) {
        (void)h, (void)ud;
        return 0;
}

int ntfs_object_refs(const void *data, size_t len, int (*cb)(const ntfs_hash *, void *), void *ud) {
        return object_check(data, len, cb ? cb : ignore_ref, ud);
}

int ntfs_object_put_verified(ntfs_store *st, const void *data, size_t len, const ntfs_hash *expected) {
        if (!data || len == 0)
                return -NTFS_ECORRUPT;
        ntfs_hash h;
        ntfs_sha256(data, len, h.b);
        if (memcmp(h.b, expected->b, NTFS_HASH_LEN) != 0)
                return -NTFS_ECORRUPT;
        int r = object_check(data, len, ignore_ref, NULL);
        if (r < 0)
                return r == -ENOMEM ? r : -NTFS_ECORRUPT;
        if ((r = store_enter(st)) < 0)
                return r;
        r = obj_put(st, data, len, &h);
        store_leave(st);
        return r;
}

/* ---- walk: a visited set of hashes (open addressing) and a stack ---------- */

struct hset {
        ntfs_hash *slots;
        uint8_t *used;
        size_t cap, n;
};

static uint64_t hslot(const ntfs_hash *h) {
        uint64_t v;
        memcpy(&v, h->b, sizeof v);
        return v;
}

static int hset_add(struct hset *s, const ntfs_hash *h) { /* 1 added, 0 present */
        if ((s->n + 1) * 2 > s->cap) {
                size_t ncap = s->cap ? s->cap * 2 : 1024;
                ntfs_hash *ns = calloc(ncap, sizeof *ns);
                uint8_t *nu = calloc(ncap, 1);
                if (!ns || !nu) {
                        free(ns);
                        free(nu);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < s->cap; i++)
                        if (s->used[i]) {
                                size_t j = hslot(&s->slots[i]) & (ncap - 1);
                                while (nu[j])
                                        j = (j + 1) & (ncap - 1);
                                nu[j] = 1;
                                ns[j] = s->slots[i];
                        }
                free(s->slots);
                free(s->used);
                s->slots = ns;
                s->used = nu;
                s->cap = ncap;
        }
        size_t j = hslot(h) & (s->cap - 1);
        while (s->used[j]) {
                if (memcmp(s->slots[j].b, h->b, NTFS_HASH_LEN) == 0)
                        return 0;
                j = (j + 1) & (s->cap - 1);
        }
        s->used[j] = 1;
        s->slots[j] = *h;
        s->n++;
        return 1;
}

struct walk {
        struct hset seen;
        ntfs_hash *stack;
        size_t n, cap;
};

static int walk_push(const ntfs_hash *h, void *ud) {
        struct walk *w = ud;
        int r = hset_add(&w->seen, h);
        if (r <= 0)
                return r;
        if (w->n == w->cap) {
                size_t ncap = w->cap ? w->cap * 2 : 256;
                ntfs_hash *ns = realloc(w->stack, ncap * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                w->stack = ns;
                w->cap = ncap;
        }
        w->stack[w->n++] = *h;
        return 0;
}

int ntfs_object_walk(ntfs_store *st, const ntfs_hash *commit,
                     int (*cb)(const ntfs_hash *h, const void *data, size_t len, void *ud), void *ud) {
        struct walk w = { 0 };
        int r = walk_push(commit, &w);
        while (r == 0 && w.n > 0) {
                ntfs_hash h = w.stack[--w.n];
                _cleanup_free_ uint8_t *data = NULL;
                size_t len = 0;
                r = ntfs_object_get(st, &h, &data, &len);
                if (r == -ENOENT)
                        r = -NTFS_ECORRUPT;
                if (r < 0)
                        break;
                r = cb(&h, data, len, ud);
                if (r < 0)
                        break;
                if (r == 1) {
                        r = 0;
                        continue;
                }
                r = object_check(data, len, walk_push, &w);
        }
        free(w.seen.slots);
        free(w.seen.used);
        free(w.stack);
        return r;
}
