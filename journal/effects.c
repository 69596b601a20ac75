/* SPDX-License-Identifier: MIT
 * effects.c — the write-ahead effect rows: begin (intent), finish, queries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "journal/journal-internal.h"
#include "common/banned.h"

static const char *const status_names[] = {
        [NTFS_EFFECT_PENDING] = "pending",
        [NTFS_EFFECT_DONE] = "done",
        [NTFS_EFFECT_FAILED] = "failed",
        [NTFS_EFFECT_OUTCOME_UNKNOWN] = "outcome_unknown",
};

const char *ntfs_effect_status_to_string(enum ntfs_effect_status s) {
        if ((unsigned)s >= ARRAY_SIZE(status_names))
                return NULL;
        return status_names[s];
}

int ntfs_effect_status_from_string(const char *s, enum ntfs_effect_status *ret) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ARRAY_SIZE(status_names); i++)
                if (strcmp(s, status_names[i]) == 0) {
                        *ret = (enum ntfs_effect_status)i;
                        return 0;
                }
        return -EINVAL;
}

bool ntfs_effect_class_valid(const char *cls) {
        static const char *const classes[] = {
                "no_side_effects", "replayable_fast", "replayable_expensive", "irreversible", "recorded",
        };
        if (!cls)
                return false;
        for (size_t i = 0; i < ARRAY_SIZE(classes); i++)
                if (strcmp(cls, classes[i]) == 0)
                        return true;
        return false;
}

void ntfs_effect_release(struct ntfs_effect *e) {
        if (!e)
                return;
        free(e->session);
        free(e->tool);
        free(e->effect_class);
        free(e->input_json);
        free(e->idempotency_key);
        free(e->result_json);
        free(e->commit_before);
        free(e->commit_after);
        free(e->reason);
        memset(e, 0, sizeof *e);
}

void ntfs_effects_free(struct ntfs_effect *arr, size_t n) {
        if (!arr)
                return;
        for (size_t i = 0; i < n; i++)
                ntfs_effect_release(&arr[i]);
        free(arr);
}

/* Reads a row selected with EFFECT_COLS (journal.c). */
static int read_effect(sqlite3_stmt *s, struct ntfs_effect *ret) {
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        int r;
        e.id = sqlite3_column_int64(s, 0);
        e.step = (uint64_t)sqlite3_column_int64(s, 2);
        if ((r = jr_col_strdup(s, 1, &e.session)) < 0 || (r = jr_col_strdup(s, 3, &e.tool)) < 0 ||
            (r = jr_col_strdup(s, 4, &e.effect_class)) < 0 || (r = jr_col_strdup(s, 5, &e.input_json)) < 0 ||
            (r = jr_col_strdup(s, 6, &e.idempotency_key)) < 0 ||
            (r = jr_col_strdup(s, 8, &e.result_json)) < 0 ||
            (r = jr_col_strdup(s, 9, &e.commit_before)) < 0 ||
            (r = jr_col_strdup(s, 10, &e.commit_after)) < 0 || (r = jr_col_strdup(s, 14, &e.reason)) < 0)
                return r;
        const unsigned char *st = sqlite3_column_text(s, 7);
        if (!st || ntfs_effect_status_from_string((const char *)st, &e.status) < 0)
                return -NTFS_ECORRUPT;
        e.started_ns = sqlite3_column_int64(s, 11);
        e.ended_ns = sqlite3_column_int64(s, 12);
        e.duration_ns = sqlite3_column_int64(s, 13);
        *ret = e;
        memset(&e, 0, sizeof e);
        return 0;
}

/* Looks a row up with a cached statement bound to (a, b); 0 = not found. */
static int lookup(ntfs_journal *j, enum jr_stmt id, const char *key_a, const char *key_b, int64_t rowid,
                  struct ntfs_effect *ret) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r = jr_stmt(j, id, &s);
        if (r < 0)
                return r;
        if (key_a) {
                if ((r = jr_bind_text(s, 1, key_a)) < 0 || (r = jr_bind_text(s, 2, key_b)) < 0)
                        return r;
        } else if ((r = jr_bind_i64(s, 1, rowid)) < 0)
                return r;
        if ((r = jr_step_row(j, s)) <= 0)
                return r;
        if ((r = read_effect(s, ret)) < 0)
                return r;
        return 1;
}

int ntfs_journal_effect_begin(ntfs_journal *j, const struct ntfs_effect_intent *in, struct ntfs_effect *ret,
                              bool *ret_existing) {
        int r;
        if (!j || !in || !in->input_json)
                return -EINVAL;
        if ((r = jr_check_name(j, in->session)) < 0)
                return r;
        if (jr_check_label(j, in->tool) < 0 || !ntfs_effect_class_valid(in->effect_class) ||
            !jr_commit_valid(in->commit_before) || in->step > INT64_MAX)
                return -EINVAL;
        if (in->idempotency_key && jr_check_label(j, in->idempotency_key) < 0)
                return -EINVAL;
        if (jr_check_charges(j, in->charges, in->n_charges) < 0)
                return -EINVAL;
        char derived[NTFS_HEX_LEN + 1];
        const char *key = in->idempotency_key;
        if (!key) {
                r = ntfs_journal_derive_key(in->session, in->step, in->tool, in->input_json, derived);
                if (r < 0)
                        return r;
                key = derived;
        }

        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_free_ char *input = NULL;
        if ((r = jr_json_normalize(j, in->input_json, &input)) < 0)
                return r;
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        r = lookup(j, JR_EFFECT_BY_KEY, in->session, key, 0, &e);
        if (r < 0)
                return r;
        if (r > 0) {
                /* Known key: the recorded row, nothing written (the guard
                 * ends the read-only transaction). */
                if (ret) {
                        *ret = e;
                        memset(&e, 0, sizeof e);
                }
                if (ret_existing)
                        *ret_existing = true;
                return 0;
        }
        if ((r = jr_session_exists(j, in->session)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOSESSION;
        int64_t id;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_EFFECT_INSERT, &s)) < 0 || (r = jr_bind_text(s, 1, in->session)) < 0 ||
                    (r = jr_bind_i64(s, 2, (int64_t)in->step)) < 0 ||
                    (r = jr_bind_text(s, 3, in->tool)) < 0 ||
                    (r = jr_bind_text(s, 4, in->effect_class)) < 0 || (r = jr_bind_text(s, 5, input)) < 0 ||
                    (r = jr_bind_text(s, 6, key)) < 0 || (r = jr_bind_text(s, 7, in->commit_before)) < 0 ||
                    (r = jr_bind_i64(s, 8, ntfs_now_ns())) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
                id = sqlite3_last_insert_rowid(j->db);
        }
        for (size_t i = 0; i < in->n_charges; i++)
                if (in->charges[i].delta && (r = jr_quota_add_locked(j, in->session, in->charges[i].counter,
                                                                     in->charges[i].delta, -1, NULL)) < 0)
                        return r;
        /* Read back inside the transaction: if that fails nothing is kept. */
        if (ret && (r = lookup(j, JR_EFFECT_BY_ID, NULL, NULL, id, &e)) <= 0)
                return r < 0 ? r : -EIO;
        if ((r = jr_txn_commit(&t, "journal.begin")) < 0)
                return r;
        { /* the thread's log lines name the effect from here on */
                char eid[24];
                snprintf(eid, sizeof eid, "%lld", (long long)id);
                ntfs_log_ctx_effect(eid);
        }
        if (ret) {
                *ret = e;
                memset(&e, 0, sizeof e);
        }
        if (ret_existing)
                *ret_existing = false;
        return 0;
}

int ntfs_journal_effect_finish(ntfs_journal *j, int64_t id, enum ntfs_effect_status status,
                               const char *result_json, const char *commit_after, const char *reason) {
        return ntfs_journal_effect_finish_charged(j, id, status, result_json, commit_after, reason, NULL, 0);
}

int ntfs_journal_effect_finish_charged(ntfs_journal *j, int64_t id, enum ntfs_effect_status status,
                                       const char *result_json, const char *commit_after, const char *reason,
                                       const struct ntfs_quota_charge *charges, size_t n_charges) {
        int r;
        if (!j || id <= 0 || !ntfs_effect_status_to_string(status) || status == NTFS_EFFECT_PENDING ||
            !jr_commit_valid(commit_after) || jr_check_charges(j, charges, n_charges) < 0)
                return -EINVAL;
        if (reason && strnlen(reason, (size_t)NTFS_JOURNAL_MAX_JSON + 1) > NTFS_JOURNAL_MAX_JSON)
                return -NTFS_ETOOLARGE;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_free_ char *result = NULL, *why = NULL;
        if (result_json && (r = jr_json_normalize(j, result_json, &result)) < 0)
                return r;
        if (reason && (r = jr_redact_text(j, reason, &why)) < 0)
                return r;
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_EFFECT_FINISH, &s)) < 0 || (r = jr_bind_i64(s, 1, id)) < 0 ||
                    (r = jr_bind_text(s, 2, ntfs_effect_status_to_string(status))) < 0 ||
                    (r = jr_bind_text(s, 3, result)) < 0 || (r = jr_bind_text(s, 4, commit_after)) < 0 ||
                    (r = jr_bind_text(s, 5, why)) < 0 || (r = jr_bind_i64(s, 6, ntfs_now_ns())) < 0 ||
                    (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        if (sqlite3_changes(j->db) == 0) {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_EFFECT_STATUS, &s)) < 0 || (r = jr_bind_i64(s, 1, id)) < 0 ||
                    (r = jr_step_row(j, s)) < 0)
                        return r;
                return r == 0 ? -NTFS_ENOTFOUND : -NTFS_ECONFLICT;
        }
        if (n_charges) {
                _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
                if ((r = lookup(j, JR_EFFECT_BY_ID, NULL, NULL, id, &e)) <= 0)
                        return r < 0 ? r : -NTFS_ENOTFOUND;
                for (size_t i = 0; i < n_charges; i++)
                        if (charges[i].delta &&
                            (r = jr_quota_add_locked(j, e.session, charges[i].counter, charges[i].delta, -1, NULL)) < 0)
                                return r;
        }
        return jr_txn_commit(&t, "journal.finish");
}

int ntfs_journal_effect_mark_unknown(ntfs_journal *j, int64_t id, const char *reason) {
        return ntfs_journal_effect_finish(j, id, NTFS_EFFECT_OUTCOME_UNKNOWN, NULL, NULL, reason);
}

int ntfs_journal_effect_get(ntfs_journal *j, int64_t id, struct ntfs_effect *ret) {
        if (!j || !ret)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        int r = lookup(j, JR_EFFECT_BY_ID, NULL, NULL, id, ret);
        return r < 0 ? r : r == 0 ? -NTFS_ENOTFOUND : 0;
}

int ntfs_journal_effect_get_by_key(ntfs_journal *j, const char *session, const char *key,
                                   struct ntfs_effect *ret) {
        if (!j || !ret || !session || !key)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        int r = lookup(j, JR_EFFECT_BY_KEY, session, key, 0, ret);
        return r < 0 ? r : r == 0 ? -NTFS_ENOTFOUND : 0;
}

/* Appends the rows of an executed query. */
static int collect(ntfs_journal *j, sqlite3_stmt *s, struct ntfs_effect **ret, size_t *ret_n) {
        struct ntfs_effect *arr = NULL;
        size_t n = 0, cap = 0;
        int r;
        while ((r = jr_step_row(j, s)) > 0) {
                if (n == cap) {
                        size_t nc = cap ? cap * 2 : 16;
                        struct ntfs_effect *p = realloc(arr, nc * sizeof *arr);
                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        arr = p;
                        cap = nc;
                }
                if ((r = read_effect(s, &arr[n])) < 0)
                        break;
                n++;
        }
        if (r < 0) {
                ntfs_effects_free(arr, n);
                return r;
        }
        *ret = arr;
        *ret_n = n;
        return 0;
}

int ntfs_journal_effect_list(ntfs_journal *j, const char *session, uint64_t since_step, size_t limit,
                             size_t offset, struct ntfs_effect **ret, size_t *ret_n) {
        if (!j || !session || !ret || !ret_n || since_step > INT64_MAX || offset > INT64_MAX ||
            limit > INT64_MAX)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        int r = jr_session_exists(j, session);
        if (r <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_EFFECT_LIST, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
            (r = jr_bind_i64(s, 2, (int64_t)since_step)) < 0 ||
            (r = jr_bind_i64(s, 3, limit ? (int64_t)limit : -1)) < 0 ||
            (r = jr_bind_i64(s, 4, (int64_t)offset)) < 0)
                return r;
        return collect(j, s, ret, ret_n);
}

int ntfs_journal_effect_count(ntfs_journal *j, const char *session, uint64_t since_step, uint64_t *ret) {
        if (!j || !session || !ret || since_step > INT64_MAX)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        int r = jr_session_exists(j, session);
        if (r <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_EFFECT_COUNT, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
            (r = jr_bind_i64(s, 2, (int64_t)since_step)) < 0)
                return r;
        int rc = sqlite3_step(s);
        if (rc != SQLITE_ROW)
                return jr_sqlite_err(j->db, rc);
        *ret = (uint64_t)sqlite3_column_int64(s, 0);
        return 0;
}

static json_t *json_str_or_null(const char *s) {
        return s ? json_string(s) : json_null();
}

static json_t *json_parsed_or_null(const char *s) {
        if (!s)
                return json_null();
        json_error_t err;
        json_t *v = json_loads(s, JSON_DECODE_ANY, &err);
        /* Stored text is always JSON; a row edited by hand shows as text. */
        return v ? v : json_string(s);
}

json_t *ntfs_effect_to_json(const struct ntfs_effect *e) {
        if (!e)
                return NULL;
        json_t *o = json_object();
        if (!o)
                return NULL;
        const char *st = ntfs_effect_status_to_string(e->status);
        int bad = 0;
        bad |= json_object_set_new(o, "id", json_integer(e->id));
        bad |= json_object_set_new(o, "session", json_str_or_null(e->session));
        bad |= json_object_set_new(o, "step", json_integer((json_int_t)e->step));
        bad |= json_object_set_new(o, "tool", json_str_or_null(e->tool));
        bad |= json_object_set_new(o, "effect_class", json_str_or_null(e->effect_class));
        bad |= json_object_set_new(o, "input", json_parsed_or_null(e->input_json));
        bad |= json_object_set_new(o, "idempotency_key", json_str_or_null(e->idempotency_key));
        bad |= json_object_set_new(o, "status", json_str_or_null(st));
        bad |= json_object_set_new(o, "result", json_parsed_or_null(e->result_json));
        bad |= json_object_set_new(o, "commit_before", json_str_or_null(e->commit_before));
        bad |= json_object_set_new(o, "commit_after", json_str_or_null(e->commit_after));
        bad |= json_object_set_new(o, "started_ns", json_integer(e->started_ns));
        bad |= json_object_set_new(o, "ended_ns", e->ended_ns ? json_integer(e->ended_ns) : json_null());
        bad |= json_object_set_new(o, "duration_ns",
                                   e->ended_ns ? json_integer(e->duration_ns) : json_null());
        bad |= json_object_set_new(o, "reason", json_str_or_null(e->reason));
        if (bad) {
                json_decref(o);
                return NULL;
        }
        return o;
}

int ntfs_journal_effect_list_json(ntfs_journal *j, const char *session, uint64_t since_step, size_t limit,
                                  size_t offset, json_t **ret) {
        if (!ret)
                return -EINVAL;
        struct ntfs_effect *arr = NULL;
        size_t n = 0;
        int r = ntfs_journal_effect_list(j, session, since_step, limit, offset, &arr, &n);
        if (r < 0)
                return r;
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++) {
                json_t *o = ntfs_effect_to_json(&arr[i]);
                if (!o || json_array_append_new(a, o) < 0) {
                        json_decref(a);
                        a = NULL;
                }
        }
        ntfs_effects_free(arr, n);
        if (!a)
                return -ENOMEM;
        *ret = a;
        return 0;
}

int ntfs_journal_pending(ntfs_journal *j, ntfs_journal_effect_cb cb, void *userdata) {
        if (!j || !cb)
                return -EINVAL;
        struct ntfs_effect *arr = NULL;
        size_t n = 0;
        {
                _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                int r = jr_stmt(j, JR_EFFECT_PENDING, &s);
                if (r < 0)
                        return r;
                if ((r = collect(j, s, &arr, &n)) < 0)
                        return r;
        }
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = cb(&arr[i], userdata);
        ntfs_effects_free(arr, n);
        return r < 0 ? r : (int)NTFS_MIN(n, (size_t)INT32_MAX);
}
