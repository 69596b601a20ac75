/* SPDX-License-Identifier: MIT
 * records.c — sessions, agent checkpoints, snapshots, trunks, forks, quotas.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "journal/journal-internal.h"
#include "common/banned.h"

/* Grows *arr (of elem-sized items) to hold one more; returns the new slot. */
static void *grow(void **arr, size_t *cap, size_t n, size_t elem) {
        if (n == *cap) {
                size_t nc = *cap ? *cap * 2 : 16;
                void *p = realloc(*arr, nc * elem);
                if (!p)
                        return NULL;
                *arr = p;
                *cap = nc;
        }
        void *slot = (char *)*arr + n * elem;
        memset(slot, 0, elem);
        return slot;
}

/* Runs a query and reads each row with read(); frees with release() on error. */
#define COLLECT(j, s, type, read, release, ret, ret_n)                                                       \
        ({                                                                                                   \
                type *_arr = NULL;                                                                           \
                size_t _n = 0, _cap = 0;                                                                     \
                int _r;                                                                                      \
                while ((_r = jr_step_row(j, s)) > 0) {                                                       \
                        type *_slot = grow((void **)&_arr, &_cap, _n, sizeof(type));                         \
                        if (!_slot) {                                                                        \
                                _r = -ENOMEM;                                                                \
                                break;                                                                       \
                        }                                                                                    \
                        if ((_r = read(s, _slot)) < 0)                                                       \
                                break;                                                                       \
                        _n++;                                                                                \
                }                                                                                            \
                if (_r < 0) {                                                                                \
                        for (size_t _i = 0; _i < _n; _i++)                                                   \
                                release(&_arr[_i]);                                                          \
                        free(_arr);                                                                          \
                } else {                                                                                     \
                        *(ret) = _arr;                                                                       \
                        *(ret_n) = _n;                                                                       \
                }                                                                                            \
                _r;                                                                                          \
        })

/* ---- sessions ------------------------------------------------------------ */

void ntfs_jsession_release(struct ntfs_jsession *s) {
        if (!s)
                return;
        free(s->name);
        free(s->metadata_json);
        memset(s, 0, sizeof *s);
}

void ntfs_jsessions_free(struct ntfs_jsession *arr, size_t n) {
        if (!arr)
                return;
        for (size_t i = 0; i < n; i++)
                ntfs_jsession_release(&arr[i]);
        free(arr);
}

static int read_session(sqlite3_stmt *s, struct ntfs_jsession *ret) {
        _cleanup_(ntfs_jsession_release) struct ntfs_jsession v = {};
        int r;
        if ((r = jr_col_strdup(s, 0, &v.name)) < 0 || (r = jr_col_strdup(s, 4, &v.metadata_json)) < 0)
                return r;
        v.created_ns = sqlite3_column_int64(s, 1);
        v.ended_ns = sqlite3_column_int64(s, 2);
        v.uid = sqlite3_column_int64(s, 3);
        *ret = v;
        memset(&v, 0, sizeof v);
        return 0;
}

int ntfs_journal_session_create(ntfs_journal *j, const char *name, int64_t uid, const char *metadata_json) {
        int r;
        if (!j)
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_free_ char *meta = NULL;
        if ((r = jr_json_normalize(j, metadata_json ? metadata_json : "{}", &meta)) < 0)
                return r;
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_SESSION_INSERT, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
                    (r = jr_bind_i64(s, 2, ntfs_now_ns())) < 0 || (r = jr_bind_i64(s, 3, uid)) < 0 ||
                    (r = jr_bind_text(s, 4, meta)) < 0)
                        return r;
                if ((r = jr_step_done(j, s)) < 0)
                        return r == -EEXIST ? -NTFS_ESESSEXISTS : r;
        }
        return jr_txn_commit(&t, "journal.session");
}

int ntfs_journal_session_end(ntfs_journal *j, const char *name) {
        int r;
        if (!j)
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        if ((r = jr_session_exists(j, name)) <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_SESSION_END, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
                    (r = jr_bind_i64(s, 2, ntfs_now_ns())) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        return jr_txn_commit(&t, "journal.session");
}

int ntfs_journal_session_get(ntfs_journal *j, const char *name, struct ntfs_jsession *ret) {
        int r;
        if (!j || !ret)
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_SESSION_GET, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
            (r = jr_step_row(j, s)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOSESSION;
        return read_session(s, ret);
}

int ntfs_journal_session_list(ntfs_journal *j, bool include_ended, struct ntfs_jsession **ret,
                              size_t *ret_n) {
        int r;
        if (!j || !ret || !ret_n)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_SESSION_LIST, &s)) < 0 || (r = jr_bind_i64(s, 1, include_ended)) < 0)
                return r;
        return COLLECT(j, s, struct ntfs_jsession, read_session, ntfs_jsession_release, ret, ret_n);
}

/* ---- agent checkpoints --------------------------------------------------- */

void ntfs_agent_state_release(struct ntfs_agent_state *s) {
        if (!s)
                return;
        free(s->session);
        free(s->messages_json);
        free(s->commit);
        memset(s, 0, sizeof *s);
}

int ntfs_journal_state_save(ntfs_journal *j, const char *session, uint64_t step, const char *messages_json,
                            int64_t cursor, const char *commit) {
        int r;
        if (!j || !messages_json || step > INT64_MAX || !jr_commit_valid(commit))
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_free_ char *msgs = NULL;
        if ((r = jr_json_normalize(j, messages_json, &msgs)) < 0)
                return r;
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        if ((r = jr_session_exists(j, session)) <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_STATE_UPSERT, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
                    (r = jr_bind_i64(s, 2, (int64_t)step)) < 0 || (r = jr_bind_text(s, 3, msgs)) < 0 ||
                    (r = jr_bind_i64(s, 4, cursor)) < 0 || (r = jr_bind_text(s, 5, commit)) < 0 ||
                    (r = jr_bind_i64(s, 6, ntfs_now_ns())) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        return jr_txn_commit(&t, "journal.state");
}

int ntfs_journal_state_load(ntfs_journal *j, const char *session, bool latest, uint64_t step,
                            struct ntfs_agent_state *ret) {
        int r;
        if (!j || !ret || step > INT64_MAX)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        if ((r = jr_session_exists(j, session)) <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, latest ? JR_STATE_LATEST : JR_STATE_AT, &s)) < 0 ||
            (r = jr_bind_text(s, 1, session)) < 0)
                return r;
        if (!latest && (r = jr_bind_i64(s, 2, (int64_t)step)) < 0)
                return r;
        if ((r = jr_step_row(j, s)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOTFOUND;
        _cleanup_(ntfs_agent_state_release) struct ntfs_agent_state v = {};
        if ((r = jr_col_strdup(s, 0, &v.session)) < 0 || (r = jr_col_strdup(s, 2, &v.messages_json)) < 0 ||
            (r = jr_col_strdup(s, 4, &v.commit)) < 0)
                return r;
        v.step = (uint64_t)sqlite3_column_int64(s, 1);
        v.cursor = sqlite3_column_int64(s, 3);
        v.created_ns = sqlite3_column_int64(s, 5);
        *ret = v;
        memset(&v, 0, sizeof v);
        return 0;
}

/* ---- snapshots ----------------------------------------------------------- */

void ntfs_snapshot_release(struct ntfs_snapshot *s) {
        if (!s)
                return;
        free(s->snapshot_id);
        free(s->session);
        free(s->commit);
        memset(s, 0, sizeof *s);
}

void ntfs_snapshots_free(struct ntfs_snapshot *arr, size_t n) {
        if (!arr)
                return;
        for (size_t i = 0; i < n; i++)
                ntfs_snapshot_release(&arr[i]);
        free(arr);
}

static int read_snapshot(sqlite3_stmt *s, struct ntfs_snapshot *ret) {
        _cleanup_(ntfs_snapshot_release) struct ntfs_snapshot v = {};
        int r;
        if ((r = jr_col_strdup(s, 0, &v.snapshot_id)) < 0 || (r = jr_col_strdup(s, 1, &v.session)) < 0 ||
            (r = jr_col_strdup(s, 3, &v.commit)) < 0)
                return r;
        v.step = (uint64_t)sqlite3_column_int64(s, 2);
        v.size_bytes = (uint64_t)sqlite3_column_int64(s, 4);
        v.created_ns = sqlite3_column_int64(s, 5);
        *ret = v;
        memset(&v, 0, sizeof v);
        return 0;
}

int ntfs_journal_snapshot_add(ntfs_journal *j, const char *snapshot_id, const char *session, uint64_t step,
                              const char *commit, uint64_t size_bytes, char **ret_id) {
        int r;
        if (!j || !commit || !jr_commit_valid(commit) || step > INT64_MAX || size_bytes > INT64_MAX)
                return -EINVAL;
        if (snapshot_id && jr_check_label(j, snapshot_id) < 0)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        char gen[33];
        if (!snapshot_id) {
                if ((r = jr_random_id(gen)) < 0)
                        return r;
                snapshot_id = gen;
        }
        _cleanup_free_ char *copy = NULL;
        if (ret_id && !(copy = strdup(snapshot_id)))
                return -ENOMEM;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        if ((r = jr_session_exists(j, session)) <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_SNAPSHOT_INSERT, &s)) < 0 ||
                    (r = jr_bind_text(s, 1, snapshot_id)) < 0 || (r = jr_bind_text(s, 2, session)) < 0 ||
                    (r = jr_bind_i64(s, 3, (int64_t)step)) < 0 || (r = jr_bind_text(s, 4, commit)) < 0 ||
                    (r = jr_bind_i64(s, 5, (int64_t)size_bytes)) < 0 ||
                    (r = jr_bind_i64(s, 6, ntfs_now_ns())) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        if ((r = jr_txn_commit(&t, "journal.snapshot")) < 0)
                return r;
        if (ret_id)
                *ret_id = TAKE_PTR(copy);
        return 0;
}

int ntfs_journal_snapshot_get(ntfs_journal *j, const char *snapshot_id, struct ntfs_snapshot *ret) {
        int r;
        if (!j || !ret || jr_check_label(j, snapshot_id) < 0)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_SNAPSHOT_GET, &s)) < 0 || (r = jr_bind_text(s, 1, snapshot_id)) < 0 ||
            (r = jr_step_row(j, s)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOTFOUND;
        return read_snapshot(s, ret);
}

int ntfs_journal_snapshot_list(ntfs_journal *j, const char *session, struct ntfs_snapshot **ret,
                               size_t *ret_n) {
        int r;
        if (!j || !ret || !ret_n)
                return -EINVAL;
        if (session && (r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, session ? JR_SNAPSHOT_LIST : JR_SNAPSHOT_LIST_ALL, &s)) < 0)
                return r;
        if (session && (r = jr_bind_text(s, 1, session)) < 0)
                return r;
        return COLLECT(j, s, struct ntfs_snapshot, read_snapshot, ntfs_snapshot_release, ret, ret_n);
}

/* ---- trunks -------------------------------------------------------------- */

void ntfs_trunk_version_release(struct ntfs_trunk_version *t) {
        if (!t)
                return;
        free(t->name);
        free(t->commit);
        free(t->merged_from);
        memset(t, 0, sizeof *t);
}

void ntfs_trunk_versions_free(struct ntfs_trunk_version *arr, size_t n) {
        if (!arr)
                return;
        for (size_t i = 0; i < n; i++)
                ntfs_trunk_version_release(&arr[i]);
        free(arr);
}

static int read_trunk(sqlite3_stmt *s, struct ntfs_trunk_version *ret) {
        _cleanup_(ntfs_trunk_version_release) struct ntfs_trunk_version v = {};
        int r;
        if ((r = jr_col_strdup(s, 0, &v.name)) < 0 || (r = jr_col_strdup(s, 2, &v.commit)) < 0 ||
            (r = jr_col_strdup(s, 4, &v.merged_from)) < 0)
                return r;
        v.version = (uint64_t)sqlite3_column_int64(s, 1);
        v.parent_version = (uint64_t)sqlite3_column_int64(s, 3);
        v.effect_cursor = sqlite3_column_int64(s, 5);
        v.created_ns = sqlite3_column_int64(s, 6);
        *ret = v;
        memset(&v, 0, sizeof v);
        return 0;
}

/* Head version of trunk name, 0 if it has none. Caller holds the lock. */
static int trunk_head(ntfs_journal *j, const char *name, uint64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r;
        if ((r = jr_stmt(j, JR_TRUNK_HEAD, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
            (r = jr_step_row(j, s)) < 0)
                return r;
        *ret = r > 0 ? (uint64_t)sqlite3_column_int64(s, 0) : 0;
        return 0;
}

static int trunk_insert(ntfs_journal *j, const char *name, uint64_t version, const char *commit,
                        const char *merged_from, int64_t effect_cursor) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r;
        if ((r = jr_stmt(j, JR_TRUNK_INSERT, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
            (r = jr_bind_i64(s, 2, (int64_t)version)) < 0 || (r = jr_bind_text(s, 3, commit)) < 0)
                return r;
        if (version > 1 && (r = jr_bind_i64(s, 4, (int64_t)version - 1)) < 0)
                return r;
        if ((r = jr_bind_text(s, 5, merged_from)) < 0 || (r = jr_bind_i64(s, 6, effect_cursor)) < 0 ||
            (r = jr_bind_i64(s, 7, ntfs_now_ns())) < 0)
                return r;
        return jr_step_done(j, s);
}

int ntfs_journal_trunk_init(ntfs_journal *j, const char *name, const char *commit, int64_t effect_cursor) {
        int r;
        if (!j || !commit || !jr_commit_valid(commit))
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        if ((r = trunk_insert(j, name, 1, commit, NULL, effect_cursor)) < 0)
                return r;
        return jr_txn_commit(&t, "journal.trunk");
}

int ntfs_journal_trunk_get(ntfs_journal *j, const char *name, uint64_t version,
                           struct ntfs_trunk_version *ret) {
        int r;
        if (!j || !ret || version > INT64_MAX)
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        if (version == 0) {
                if ((r = trunk_head(j, name, &version)) < 0)
                        return r;
                if (version == 0)
                        return -NTFS_ENOTFOUND;
        }
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_TRUNK_GET, &s)) < 0 || (r = jr_bind_text(s, 1, name)) < 0 ||
            (r = jr_bind_i64(s, 2, (int64_t)version)) < 0 || (r = jr_step_row(j, s)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOTFOUND;
        return read_trunk(s, ret);
}

int ntfs_journal_trunk_advance(ntfs_journal *j, const char *name, uint64_t expected_version,
                               const char *new_commit, const char *merged_from, int64_t effect_cursor,
                               uint64_t *ret_head) {
        int r;
        if (!j || !new_commit || !jr_commit_valid(new_commit) || expected_version == 0 ||
            expected_version >= INT64_MAX)
                return -EINVAL;
        if ((r = jr_check_name(j, name)) < 0)
                return r;
        if (merged_from && (r = jr_check_name(j, merged_from)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        uint64_t head;
        if ((r = trunk_head(j, name, &head)) < 0)
                return r;
        if (head == 0)
                return -NTFS_ENOTFOUND;
        if (head != expected_version) {
                if (ret_head)
                        *ret_head = head;
                return -NTFS_ECONFLICT;
        }
        if ((r = trunk_insert(j, name, head + 1, new_commit, merged_from, effect_cursor)) < 0)
                return r;
        if ((r = jr_txn_commit(&t, "journal.trunk")) < 0)
                return r;
        if (ret_head)
                *ret_head = head + 1;
        return 0;
}

int ntfs_journal_trunk_list(ntfs_journal *j, const char *name, struct ntfs_trunk_version **ret,
                            size_t *ret_n) {
        int r;
        if (!j || !ret || !ret_n)
                return -EINVAL;
        if (name && (r = jr_check_name(j, name)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, name ? JR_TRUNK_VERSIONS : JR_TRUNK_HEADS, &s)) < 0)
                return r;
        if (name && (r = jr_bind_text(s, 1, name)) < 0)
                return r;
        return COLLECT(j, s, struct ntfs_trunk_version, read_trunk, ntfs_trunk_version_release, ret, ret_n);
}

/* ---- forks --------------------------------------------------------------- */

static const char *const fork_names[] = {
        [NTFS_FORK_ACTIVE] = "active",
        [NTFS_FORK_COMMITTED] = "committed",
        [NTFS_FORK_CONFLICTED] = "conflicted",
        [NTFS_FORK_ABORTED] = "aborted",
};

const char *ntfs_fork_status_to_string(enum ntfs_fork_status s) {
        if ((unsigned)s >= ARRAY_SIZE(fork_names))
                return NULL;
        return fork_names[s];
}

static int fork_status_from_string(const char *s, enum ntfs_fork_status *ret) {
        for (size_t i = 0; s && i < ARRAY_SIZE(fork_names); i++)
                if (strcmp(s, fork_names[i]) == 0) {
                        *ret = (enum ntfs_fork_status)i;
                        return 0;
                }
        return -NTFS_ECORRUPT;
}

void ntfs_fork_release(struct ntfs_fork *f) {
        if (!f)
                return;
        free(f->session);
        free(f->trunk);
        memset(f, 0, sizeof *f);
}

void ntfs_forks_free(struct ntfs_fork *arr, size_t n) {
        if (!arr)
                return;
        for (size_t i = 0; i < n; i++)
                ntfs_fork_release(&arr[i]);
        free(arr);
}

static int read_fork(sqlite3_stmt *s, struct ntfs_fork *ret) {
        _cleanup_(ntfs_fork_release) struct ntfs_fork v = {};
        int r;
        if ((r = jr_col_strdup(s, 0, &v.session)) < 0 || (r = jr_col_strdup(s, 1, &v.trunk)) < 0)
                return r;
        if ((r = fork_status_from_string((const char *)sqlite3_column_text(s, 3), &v.status)) < 0)
                return r;
        v.base_version = (uint64_t)sqlite3_column_int64(s, 2);
        v.created_ns = sqlite3_column_int64(s, 4);
        v.resolved_ns = sqlite3_column_int64(s, 5);
        *ret = v;
        memset(&v, 0, sizeof v);
        return 0;
}

/* Reads the fork row of session; 0 = none. Caller holds the lock. */
static int fork_lookup(ntfs_journal *j, const char *session, struct ntfs_fork *ret) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r;
        if ((r = jr_stmt(j, JR_FORK_GET, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
            (r = jr_step_row(j, s)) <= 0)
                return r;
        if ((r = read_fork(s, ret)) < 0)
                return r;
        return 1;
}

int ntfs_journal_fork_create(ntfs_journal *j, const char *session, const char *trunk, uint64_t base_version) {
        int r;
        if (!j || base_version == 0 || base_version > INT64_MAX)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0 || (r = jr_check_name(j, trunk)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        if ((r = jr_session_exists(j, session)) <= 0)
                return r < 0 ? r : -NTFS_ENOSESSION;
        uint64_t head;
        if ((r = trunk_head(j, trunk, &head)) < 0)
                return r;
        if (head < base_version)
                return -NTFS_ENOTFOUND;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_FORK_INSERT, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
                    (r = jr_bind_text(s, 2, trunk)) < 0 ||
                    (r = jr_bind_i64(s, 3, (int64_t)base_version)) < 0 ||
                    (r = jr_bind_i64(s, 4, ntfs_now_ns())) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        return jr_txn_commit(&t, "journal.fork");
}

int ntfs_journal_fork_get(ntfs_journal *j, const char *session, struct ntfs_fork *ret) {
        int r;
        if (!j || !ret)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        r = fork_lookup(j, session, ret);
        return r < 0 ? r : r == 0 ? -NTFS_ENOTFOUND : 0;
}

int ntfs_journal_fork_list(ntfs_journal *j, const char *trunk, bool active_only, struct ntfs_fork **ret,
                           size_t *ret_n) {
        int r;
        if (!j || !ret || !ret_n)
                return -EINVAL;
        if (trunk && (r = jr_check_name(j, trunk)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_FORK_LIST, &s)) < 0 || (r = jr_bind_text(s, 1, trunk)) < 0 ||
            (r = jr_bind_i64(s, 2, active_only)) < 0)
                return r;
        return COLLECT(j, s, struct ntfs_fork, read_fork, ntfs_fork_release, ret, ret_n);
}

int ntfs_journal_fork_set_status(ntfs_journal *j, const char *session, enum ntfs_fork_status status,
                                 uint64_t new_base) {
        int r;
        if (!j || !ntfs_fork_status_to_string(status) || new_base > INT64_MAX)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        _cleanup_(ntfs_fork_release) struct ntfs_fork cur = {};
        if ((r = fork_lookup(j, session, &cur)) <= 0)
                return r < 0 ? r : -NTFS_ENOTFOUND;
        if (cur.status == NTFS_FORK_COMMITTED || cur.status == NTFS_FORK_ABORTED)
                return -NTFS_ECONFLICT;
        if (new_base > 0) {
                uint64_t head;
                if ((r = trunk_head(j, cur.trunk, &head)) < 0)
                        return r;
                if (new_base > head)
                        return -NTFS_ENOTFOUND;
        }
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_FORK_UPDATE, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
                    (r = jr_bind_text(s, 2, ntfs_fork_status_to_string(status))) < 0)
                        return r;
                if (status != NTFS_FORK_ACTIVE && (r = jr_bind_i64(s, 3, ntfs_now_ns())) < 0)
                        return r;
                if (new_base > 0 && (r = jr_bind_i64(s, 4, (int64_t)new_base)) < 0)
                        return r;
                if ((r = jr_step_done(j, s)) < 0)
                        return r;
        }
        return jr_txn_commit(&t, "journal.fork");
}

/* ---- quotas -------------------------------------------------------------- */

static int quota_read(ntfs_journal *j, const char *session, const char *counter, int64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r;
        if ((r = jr_stmt(j, JR_QUOTA_GET, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
            (r = jr_bind_text(s, 2, counter)) < 0 || (r = jr_step_row(j, s)) < 0)
                return r;
        *ret = r > 0 ? sqlite3_column_int64(s, 0) : 0;
        return 0;
}

int ntfs_journal_quota_add(ntfs_journal *j, const char *session, const char *counter, int64_t delta,
                           int64_t limit, int64_t *ret_new) {
        int r;
        if (!j || jr_check_label(j, counter) < 0)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        if ((r = jr_txn_begin(j, &t)) < 0)
                return r;
        int64_t next;
        if ((r = jr_quota_add_locked(j, session, counter, delta, limit, &next)) < 0)
                return r;
        if ((r = jr_txn_commit(&t, "journal.quota")) < 0)
                return r;
        if (ret_new)
                *ret_new = next;
        return 0;
}

int jr_quota_add_locked(ntfs_journal *j, const char *session, const char *counter, int64_t delta, int64_t limit,
                        int64_t *ret_new) {
        int r;
        int64_t cur, next;
        if ((r = quota_read(j, session, counter, &cur)) < 0)
                return r;
        if (__builtin_add_overflow(cur, delta, &next))
                return -ERANGE;
        if (limit >= 0 && next > limit && delta > 0)
                return -NTFS_EQUOTA;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_QUOTA_SET, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0 ||
                    (r = jr_bind_text(s, 2, counter)) < 0 || (r = jr_bind_i64(s, 3, next)) < 0 ||
                    (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        if (ret_new)
                *ret_new = next;
        return 0;
}

int jr_check_charges(ntfs_journal *j, const struct ntfs_quota_charge *c, size_t n) {
        if (n > NTFS_JOURNAL_MAX_CHARGES || (n && !c))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (jr_check_label(j, c[i].counter) < 0)
                        return -EINVAL;
        return 0;
}

int ntfs_journal_quota_get(ntfs_journal *j, const char *session, const char *counter, int64_t *ret) {
        int r;
        if (!j || !ret || jr_check_label(j, counter) < 0)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        return quota_read(j, session, counter, ret);
}

int ntfs_journal_quota_get_all(ntfs_journal *j, const char *session, json_t **ret) {
        int r;
        if (!j || !ret)
                return -EINVAL;
        if ((r = jr_check_name(j, session)) < 0)
                return r;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        if ((r = jr_stmt(j, JR_QUOTA_ALL, &s)) < 0 || (r = jr_bind_text(s, 1, session)) < 0)
                return r;
        json_t *o = json_object();
        if (!o)
                return -ENOMEM;
        while ((r = jr_step_row(j, s)) > 0) {
                const unsigned char *k = sqlite3_column_text(s, 0);
                if (!k ||
                    json_object_set_new(o, (const char *)k, json_integer(sqlite3_column_int64(s, 1))) < 0) {
                        r = -ENOMEM;
                        break;
                }
        }
        if (r < 0) {
                json_decref(o);
                return r;
        }
        *ret = o;
        return 0;
}
