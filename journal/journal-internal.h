/* SPDX-License-Identifier: MIT
 * journal-internal.h — private to the journal/ sources: the handle, the statement
 * cache, the transaction and lock guards, redaction and column helpers.
 */
#ifndef NTFS_JOURNAL_INTERNAL_H
#define NTFS_JOURNAL_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>

#include "journal/journal.h"

/* Every cached statement; SQL text in journal.c (jr_sql[]). */
enum jr_stmt {
        JR_BEGIN,
        JR_COMMIT,
        JR_ROLLBACK,
        JR_SESSION_EXISTS,
        JR_EFFECT_BY_ID,
        JR_EFFECT_BY_KEY,
        JR_EFFECT_INSERT,
        JR_EFFECT_FINISH,
        JR_EFFECT_STATUS,
        JR_EFFECT_LIST,
        JR_EFFECT_COUNT,
        JR_EFFECT_PENDING,
        JR_SESSION_INSERT,
        JR_SESSION_END,
        JR_SESSION_GET,
        JR_SESSION_LIST,
        JR_STATE_UPSERT,
        JR_STATE_AT,
        JR_STATE_LATEST,
        JR_SNAPSHOT_INSERT,
        JR_SNAPSHOT_GET,
        JR_SNAPSHOT_LIST,
        JR_SNAPSHOT_LIST_ALL,
        JR_TRUNK_HEAD,
        JR_TRUNK_INSERT,
        JR_TRUNK_GET,
        JR_TRUNK_VERSIONS,
        JR_TRUNK_HEADS,
        JR_FORK_INSERT,
        JR_FORK_GET,
        JR_FORK_LIST,
        JR_FORK_UPDATE,
        JR_QUOTA_GET,
        JR_QUOTA_SET,
        JR_QUOTA_ALL,
        JR_PIN_INSERT,
        JR_PIN_DELETE,
        JR_COMMITS,
        JR_META_SET,
        JR_META_GET,
        JR_STMT_MAX,
};

struct ntfs_journal {
        pthread_mutex_t lock; /* guards everything below */
        sqlite3 *db;
        sqlite3_stmt *stmts[JR_STMT_MAX];
        char **secrets; /* NULL-terminated, owned */
        size_t n_secrets;
};

/* SQLite result code -> negative errno / -NTFS_E*. */
int jr_sqlite_err(sqlite3 *db, int rc);

/* Returns the cached statement (prepared on first use). */
int jr_stmt(ntfs_journal *j, enum jr_stmt id, sqlite3_stmt **ret);
/* Cleanup for a cached statement: reset + clear bindings, never finalize. */
static inline void jr_stmt_resetp(sqlite3_stmt **s) {
        if (*s) {
                sqlite3_reset(*s);
                sqlite3_clear_bindings(*s);
        }
}
#define _cleanup_stmt_ __attribute__((cleanup(jr_stmt_resetp)))

/* Lock guard: _cleanup_unlock_ ntfs_journal *l = jr_lock(j); */
static inline ntfs_journal *jr_lock(ntfs_journal *j) {
        pthread_mutex_lock(&j->lock);
        return j;
}
static inline void jr_unlockp(ntfs_journal **j) {
        if (*j)
                pthread_mutex_unlock(&(*j)->lock);
}
#define _cleanup_unlock_ __attribute__((cleanup(jr_unlockp), unused))

/* Write transaction guard: BEGIN IMMEDIATE; rolled back at scope exit unless
 * jr_txn_commit() succeeded. Declare it after the lock guard and before the
 * statements, so statements are reset first, then the rollback, then unlock. */
struct jr_txn {
        ntfs_journal *j;
        bool open;
};
int jr_txn_begin(ntfs_journal *j, struct jr_txn *t);
/* Hits fault point (an armed ERROR aborts the transaction with -EIO), then
 * COMMIT (durable: synchronous=FULL). */
int jr_txn_commit(struct jr_txn *t, const char *fault_point);
void jr_txn_rollbackp(struct jr_txn *t);
#define _cleanup_txn_ __attribute__((cleanup(jr_txn_rollbackp)))

/* Steps a statement expected to finish (INSERT/UPDATE/DELETE). */
int jr_step_done(ntfs_journal *j, sqlite3_stmt *s);
/* Steps a query: 1 = a row, 0 = done, < 0 error. */
int jr_step_row(ntfs_journal *j, sqlite3_stmt *s);

/* Binds text (NULL binds SQL NULL). The pointer must outlive the statement's
 * use in the current call (SQLITE_STATIC). */
int jr_bind_text(sqlite3_stmt *s, int idx, const char *v);
int jr_bind_i64(sqlite3_stmt *s, int idx, int64_t v);
/* Copies column i (NULL stays NULL). -ENOMEM. */
int jr_col_strdup(sqlite3_stmt *s, int i, char **ret);

/* Validation. */
bool jr_commit_valid(const char *c); /* NULL or 64 lowercase hex */
/* Names and labels are stored as given (they are keys), so one that contains
 * a configured secret is refused rather than redacted: the journal's database
 * never holds a secret (j may be NULL: no secret check). */
/* Adds delta to (session, counter) inside the caller's transaction, lock
 * held; limit < 0: none. */
int jr_quota_add_locked(ntfs_journal *j, const char *session, const char *counter, int64_t delta, int64_t limit,
                        int64_t *ret_new);
/* Validates a charge list (labels, count). */
int jr_check_charges(ntfs_journal *j, const struct ntfs_quota_charge *c, size_t n);
int jr_check_name(ntfs_journal *j, const char *name); /* 0 or -NTFS_EINVALNAME */
int jr_check_label(ntfs_journal *j, const char *s);   /* 1..255 bytes, no control chars; -EINVAL */

/* Redaction and normalization (caller holds the lock: reads j->secrets).
 * jr_json_normalize: parses json (any value), replaces secrets in every string
 * and key, dumps compact with sorted keys. -NTFS_EBADREQ if not JSON,
 * -NTFS_ETOOLARGE if over the limit. *ret is the caller's. */
int jr_json_normalize(ntfs_journal *j, const char *json, char **ret);
/* Replaces every secret in plain text. *ret is the caller's. */
int jr_redact_text(ntfs_journal *j, const char *text, char **ret);

/* Random 128-bit id as 32 hex digits + NUL. */
int jr_random_id(char out[33]);

/* Session row exists? 0/1 or < 0. */
int jr_session_exists(ntfs_journal *j, const char *name);

#endif
