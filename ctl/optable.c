/* SPDX-License-Identifier: MIT
 * optable.c — running operations that a client follows by an id it chose
 * (archive export/import, remote push/pull/clone): one table per route
 * module, read by its progress route (ctl/daemon.h).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "ctl/daemon.h"
#include "common/banned.h"

bool d_op_id_valid(const char *s) {
        size_t n = strnlen(s, D_OP_ID_MAX + 1);
        if (n == 0 || n > D_OP_ID_MAX)
                return false;
        for (const char *p = s; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                      *p == '_'))
                        return false;
        return true;
}

struct d_op *d_op_start(struct d_optable *t, const char *id, const char *kind, const char *session,
                        const void *prog, json_t *(*render)(const void *prog)) {
        if (!id || !d_op_id_valid(id))
                return NULL;
        struct d_op *slot = NULL;
        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n; i++) {
                if (t->slots[i].used && strcmp(t->slots[i].id, id) == 0) {
                        slot = NULL;
                        break;
                }
                if (!t->slots[i].used && !slot)
                        slot = &t->slots[i];
        }
        if (slot) {
                *slot = (struct d_op){ .used = true, .kind = kind, .started_ns = ntfs_now_ns(), .prog = prog,
                                       .render = render };
                snprintf(slot->id, sizeof slot->id, "%s", id);
                snprintf(slot->session, sizeof slot->session, "%s", session);
        }
        pthread_mutex_unlock(&t->lock);
        return slot;
}

void d_op_end(struct d_optable *t, struct d_op *o) {
        if (!o)
                return;
        pthread_mutex_lock(&t->lock);
        o->used = false;
        pthread_mutex_unlock(&t->lock);
}

json_t *d_op_progress(struct d_optable *t, const char *id, bool *ret_found) {
        json_t *o = NULL;
        bool found = false;
        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n && !found; i++) {
                const struct d_op *op = &t->slots[i];
                if (!op->used || strcmp(op->id, id) != 0)
                        continue;
                found = true;
                /* prog lives until d_op_end, which waits for this lock */
                json_t *fields = op->render(op->prog);
                o = json_pack("{s:s, s:s, s:s}", "id", op->id, "kind", op->kind, "session", op->session);
                if (o && fields && json_object_update(o, fields) == 0 &&
                    json_object_set_new(o, "elapsed", json_real((double)(ntfs_now_ns() - op->started_ns) / 1e9)) ==
                            0) {
                        json_decref(fields);
                        break;
                }
                json_decref(fields);
                json_decref(o);
                o = NULL;
        }
        pthread_mutex_unlock(&t->lock);
        *ret_found = found;
        return o;
}
