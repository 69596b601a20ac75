/* SPDX-License-Identifier: MIT
 * journal.h — the effect journal: one SQLite database (WAL) per store.
 *
 * It records, durably and before anything runs, every effect a session asks
 * for (the write-ahead "intent" row), completes the row afterwards, and keeps
 * what a session needs to resume: agent checkpoints (messages + cursor +
 * commit), snapshots, trunk versions, forks, persistent quota counters and
 * the commit ids the store's GC must keep. The schema and the write order are
 * in docs/journal.md.
 *
 * Lifecycle: ntfs_journal_open() -> any calls, from any threads ->
 * ntfs_journal_close(). The handle owns one SQLite connection guarded by one
 * mutex: every call is serialized (SQLite serializes writers anyway) and
 * returns only after its transaction committed (synchronous=FULL: on disk).
 * Callbacks (ntfs_journal_pending, ntfs_journal_for_each_commit) run
 * WITHOUT the lock held, on a snapshot collected first, so they may call the
 * journal back.
 *
 * Errors: every function returns 0 (or a count) or a negative error:
 *   -EINVAL            bad argument (NULL, bad commit id, unknown class/status)
 *   -NTFS_EINVALNAME   session/trunk name fails ntfs_name_valid()
 *   -NTFS_EBADREQ      input/result/messages/metadata is not valid JSON
 *   -NTFS_ETOOLARGE    a JSON or text argument over NTFS_JOURNAL_MAX_JSON
 *   -NTFS_ENOSESSION   the named session does not exist
 *   -NTFS_ENOTFOUND    the effect/snapshot/trunk/fork/meta key does not exist
 *   -NTFS_ECONFLICT    a state transition that is not allowed (finish of a
 *                      row that is not pending), or a trunk head that moved
 *   -NTFS_EQUOTA       a quota counter would pass its limit (nothing added)
 *   -NTFS_EBADFORMAT   not an ntfs journal, or a newer schema version
 *   -EEXIST / -NTFS_ESESSEXISTS   the row to create exists
 *   -EIO, -ENOSPC, -EBUSY, -ENOMEM, -NTFS_ECORRUPT   SQLite failures
 *
 * Ownership: every char * and json_t * returned through a struct or a ret_
 * parameter is owned by the caller (free the struct with its _release or
 * _free function, json_t with json_decref). ret_ parameters are written only
 * on success (ntfs_journal_trunk_advance's ret_head is also written on
 * -NTFS_ECONFLICT, see there). Input strings are borrowed for the call.
 *
 * Secrets: every stored text (effect input, result, reason, agent messages,
 * session metadata) first has each configured secret replaced by
 * "[REDACTED]"; see ntfs_journal_set_secrets().
 */
#ifndef NTFS_JOURNAL_JOURNAL_H
#define NTFS_JOURNAL_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define NTFS_JOURNAL_SCHEMA_VERSION 1
/* Largest JSON text (input, result, messages, metadata) or reason accepted. */
#define NTFS_JOURNAL_MAX_JSON (64u << 20)
/* Longest idempotency key, tool name, effect class, snapshot id. */
#define NTFS_JOURNAL_MAX_KEY 255
/* At most this many secrets, each 4..4096 bytes (room for the policy's 64
 * credentials and the LLM key). */
#define NTFS_JOURNAL_MAX_SECRETS 128
#define NTFS_JOURNAL_SECRET_MIN 4
#define NTFS_JOURNAL_SECRET_MAX 4096

typedef struct ntfs_journal ntfs_journal;

/* Opens (creating if missing) the journal database at path: WAL mode,
 * synchronous=FULL, foreign keys on, busy timeout 5 s. A new file gets the
 * current schema; a file with another application id or a newer/unknown
 * user_version is -NTFS_EBADFORMAT (the file is not modified). */
int ntfs_journal_open(const char *path, ntfs_journal **ret);
/* Finalizes cached statements and closes. Accepts NULL. No call may be in
 * flight on another thread. */
void ntfs_journal_close(ntfs_journal *j);

/* Replaces the list of secrets (NULL-terminated; NULL or empty clears it).
 * Applies to every later write; rows already stored are not rewritten.
 * -EINVAL for a secret shorter than 4 bytes (it would redact everything) or
 * longer than 4096, or more than NTFS_JOURNAL_MAX_SECRETS. */
int ntfs_journal_set_secrets(ntfs_journal *j, const char *const *secrets);

/* ---- effects ------------------------------------------------------------ */

enum ntfs_effect_status {
        NTFS_EFFECT_PENDING = 0,
        NTFS_EFFECT_DONE,
        NTFS_EFFECT_FAILED,
        NTFS_EFFECT_OUTCOME_UNKNOWN,
};
/* "pending", "done", "failed", "outcome_unknown"; NULL if out of range. */
const char *ntfs_effect_status_to_string(enum ntfs_effect_status s);
int ntfs_effect_status_from_string(const char *s, enum ntfs_effect_status *ret);
/* True for the classes of DESIGN.md: no_side_effects, replayable_fast,
 * replayable_expensive, irreversible, recorded. */
bool ntfs_effect_class_valid(const char *cls);

/* A quota counter increment made in the same transaction as an effect's
 * begin or finish, so a call costs one durable commit at each end instead of
 * one per counter (no limit check here: admission checks limits first). */
struct ntfs_quota_charge {
        const char *counter; /* 1..255 bytes, no control characters */
        int64_t delta;
};
#define NTFS_JOURNAL_MAX_CHARGES 8

struct ntfs_effect_intent {
        const char *session;         /* existing session */
        uint64_t step;               /* the session's step number */
        const char *tool;            /* 1..255 bytes */
        const char *effect_class;    /* see ntfs_effect_class_valid() */
        const char *input_json;      /* JSON text (any JSON value) */
        const char *idempotency_key; /* client's key (tool_use_id); NULL: derived */
        const char *commit_before;   /* 64 hex, or NULL */
        /* Counters charged with the new row, atomically (none when the key is
         * already journaled: a retry is not charged). At most
         * NTFS_JOURNAL_MAX_CHARGES. */
        const struct ntfs_quota_charge *charges;
        size_t n_charges;
};

/* A journal row. Strings are owned by the struct (NULL when the column is
 * NULL); release with ntfs_effect_release(). */
struct ntfs_effect {
        int64_t id; /* > 0, increasing in begin order */
        char *session;
        uint64_t step;
        char *tool;
        char *effect_class;
        char *input_json; /* redacted, compact, keys sorted */
        char *idempotency_key;
        enum ntfs_effect_status status;
        char *result_json; /* NULL until finished (or finished without one) */
        char *commit_before;
        char *commit_after;
        int64_t started_ns; /* CLOCK_REALTIME at begin */
        int64_t ended_ns;   /* 0 while pending */
        int64_t duration_ns;
        char *reason; /* why failed/outcome_unknown; NULL otherwise */
};
/* Frees the strings and zeroes *e. Accepts a zeroed struct; usable as
 * _cleanup_(ntfs_effect_release). */
void ntfs_effect_release(struct ntfs_effect *e);
void ntfs_effects_free(struct ntfs_effect *arr, size_t n);
/* The row as a JSON object (input/result parsed back to JSON values).
 * Returns NULL on allocation failure. */
json_t *ntfs_effect_to_json(const struct ntfs_effect *e);

/* Idempotency key derived from session, step, tool and the canonical form of
 * input_json (compact, keys sorted): SHA-256 hex of a length-prefixed
 * encoding ("ntfs-effect-key/1", session, step, tool, input). out gets 64 hex
 * digits + NUL. -NTFS_EBADREQ if input_json is not JSON. */
int ntfs_journal_derive_key(const char *session, uint64_t step, const char *tool, const char *input_json,
                            char out[65]);

/* Write-ahead. If (session, key) is already journaled, *ret is that row and
 * *ret_existing is true: nothing was written and the caller must run nothing
 * (serve the recorded result, or report the status). Otherwise a `pending`
 * row is inserted and committed durably (fsync'd) before this returns, *ret is
 * the new row and *ret_existing false. The key is matched regardless of the
 * tool/input of the new call (keys are matched, never positions).
 * ret may be NULL. Fault point: journal.begin (before COMMIT). */
int ntfs_journal_effect_begin(ntfs_journal *j, const struct ntfs_effect_intent *in, struct ntfs_effect *ret,
                              bool *ret_existing);

/* Completes a pending row: status done|failed|outcome_unknown, result_json
 * (JSON text or NULL), commit_after (64 hex or NULL), reason (text or NULL).
 * Sets ended_ns and duration_ns. -NTFS_ENOTFOUND if no such id,
 * -NTFS_ECONFLICT if the row is not pending. Fault point: journal.finish. */
int ntfs_journal_effect_finish(ntfs_journal *j, int64_t id, enum ntfs_effect_status status,
                               const char *result_json, const char *commit_after, const char *reason);
/* The same, also charging the effect's session's counters in the same
 * transaction (zero deltas are skipped). */
int ntfs_journal_effect_finish_charged(ntfs_journal *j, int64_t id, enum ntfs_effect_status status,
                                       const char *result_json, const char *commit_after, const char *reason,
                                       const struct ntfs_quota_charge *charges, size_t n_charges);
/* pending -> outcome_unknown with reason (recovery of an irreversible effect
 * that was in flight). Same errors as finish. */
int ntfs_journal_effect_mark_unknown(ntfs_journal *j, int64_t id, const char *reason);

int ntfs_journal_effect_get(ntfs_journal *j, int64_t id, struct ntfs_effect *ret);
int ntfs_journal_effect_get_by_key(ntfs_journal *j, const char *session, const char *key,
                                   struct ntfs_effect *ret);

/* A session's effects with step >= since_step, in id order, skipping offset
 * rows, at most limit rows (0: no limit). The array is the caller's
 * (ntfs_effects_free); *ret_n may be 0 (and *ret NULL). */
int ntfs_journal_effect_list(ntfs_journal *j, const char *session, uint64_t since_step, size_t limit,
                             size_t offset, struct ntfs_effect **ret, size_t *ret_n);
/* How many effects of session have step >= since_step. */
int ntfs_journal_effect_count(ntfs_journal *j, const char *session, uint64_t since_step, uint64_t *ret);
/* Same rows as a JSON array of ntfs_effect_to_json() objects. */
int ntfs_journal_effect_list_json(ntfs_journal *j, const char *session, uint64_t since_step, size_t limit,
                                  size_t offset, json_t **ret);

/* Calls cb for every pending row of every session, in id order (startup
 * reconciliation). e is borrowed for the call. A negative return from cb
 * stops the walk and is returned. Returns the number of rows visited. */
typedef int (*ntfs_journal_effect_cb)(const struct ntfs_effect *e, void *userdata);
int ntfs_journal_pending(ntfs_journal *j, ntfs_journal_effect_cb cb, void *userdata);

/* ---- sessions and agent checkpoints -------------------------------------- */

struct ntfs_jsession {
        char *name;
        int64_t created_ns;
        int64_t ended_ns; /* 0 while active */
        int64_t uid;      /* -1: unknown */
        char *metadata_json;
};
void ntfs_jsession_release(struct ntfs_jsession *s);
void ntfs_jsessions_free(struct ntfs_jsession *arr, size_t n);

/* metadata_json NULL means {}. -NTFS_ESESSEXISTS if the name is taken
 * (even by an ended session). Fault point: journal.session. */
int ntfs_journal_session_create(ntfs_journal *j, const char *name, int64_t uid, const char *metadata_json);
/* Marks ended (first end time kept; ending twice is 0). */
int ntfs_journal_session_end(ntfs_journal *j, const char *name);
int ntfs_journal_session_get(ntfs_journal *j, const char *name, struct ntfs_jsession *ret);
/* By creation order. */
int ntfs_journal_session_list(ntfs_journal *j, bool include_ended, struct ntfs_jsession **ret,
                              size_t *ret_n);

/* A semantic checkpoint: what an agent needs to continue at step. */
struct ntfs_agent_state {
        char *session;
        uint64_t step;
        char *messages_json; /* redacted */
        int64_t cursor;
        char *commit; /* NULL if none */
        int64_t created_ns;
};
void ntfs_agent_state_release(struct ntfs_agent_state *s);

/* Saves (or replaces) the checkpoint row (session, step). messages_json must
 * be JSON (usually an array); commit is 64 hex or NULL. Fault: journal.state. */
int ntfs_journal_state_save(ntfs_journal *j, const char *session, uint64_t step, const char *messages_json,
                            int64_t cursor, const char *commit);
/* Loads the checkpoint at step, or the latest one if latest is true (step is
 * then ignored). -NTFS_ENOTFOUND if none, -NTFS_ENOSESSION if no session. */
int ntfs_journal_state_load(ntfs_journal *j, const char *session, bool latest, uint64_t step,
                            struct ntfs_agent_state *ret);

/* ---- snapshots ----------------------------------------------------------- */

struct ntfs_snapshot {
        char *snapshot_id;
        char *session;
        uint64_t step;
        char *commit;
        uint64_t size_bytes;
        int64_t created_ns;
};
void ntfs_snapshot_release(struct ntfs_snapshot *s);
void ntfs_snapshots_free(struct ntfs_snapshot *arr, size_t n);

/* snapshot_id NULL: a random 32-hex id is made. ret_id (may be NULL) gets a
 * copy of the id. -EEXIST if the id is taken. Fault point: journal.snapshot. */
int ntfs_journal_snapshot_add(ntfs_journal *j, const char *snapshot_id, const char *session, uint64_t step,
                              const char *commit, uint64_t size_bytes, char **ret_id);
int ntfs_journal_snapshot_get(ntfs_journal *j, const char *snapshot_id, struct ntfs_snapshot *ret);
/* A session's snapshots (session NULL: all), by creation order. */
int ntfs_journal_snapshot_list(ntfs_journal *j, const char *session, struct ntfs_snapshot **ret,
                               size_t *ret_n);

/* ---- trunks and forks ---------------------------------------------------- */

struct ntfs_trunk_version {
        char *name;
        uint64_t version; /* 1, 2, ... */
        char *commit;
        uint64_t parent_version; /* 0 for the first version */
        char *merged_from;       /* fork session merged in, or NULL */
        int64_t effect_cursor;
        int64_t created_ns;
};
void ntfs_trunk_version_release(struct ntfs_trunk_version *t);
void ntfs_trunk_versions_free(struct ntfs_trunk_version *arr, size_t n);

/* Creates trunk name at version 1. -EEXIST if it exists. Fault: journal.trunk. */
int ntfs_journal_trunk_init(ntfs_journal *j, const char *name, const char *commit, int64_t effect_cursor);
/* version 0: the head. */
int ntfs_journal_trunk_get(ntfs_journal *j, const char *name, uint64_t version,
                           struct ntfs_trunk_version *ret);
/* Compare-and-swap, in one transaction: if the head of name is
 * expected_version, appends version expected_version+1 (commit, merged_from
 * may be NULL, effect_cursor) and sets *ret_head to it; otherwise returns
 * -NTFS_ECONFLICT and sets *ret_head to the current head. ret_head may be
 * NULL. Fault point: journal.trunk. */
int ntfs_journal_trunk_advance(ntfs_journal *j, const char *name, uint64_t expected_version,
                               const char *new_commit, const char *merged_from, int64_t effect_cursor,
                               uint64_t *ret_head);
/* name NULL: the head version of every trunk (by name); else every version
 * of that trunk, oldest first. */
int ntfs_journal_trunk_list(ntfs_journal *j, const char *name, struct ntfs_trunk_version **ret,
                            size_t *ret_n);

enum ntfs_fork_status {
        NTFS_FORK_ACTIVE = 0,
        NTFS_FORK_COMMITTED,
        NTFS_FORK_CONFLICTED,
        NTFS_FORK_ABORTED,
};
const char *ntfs_fork_status_to_string(enum ntfs_fork_status s);

struct ntfs_fork {
        char *session; /* the fork's own session */
        char *trunk;
        uint64_t base_version;
        enum ntfs_fork_status status;
        int64_t created_ns;
        int64_t resolved_ns; /* 0 while active */
};
void ntfs_fork_release(struct ntfs_fork *f);
void ntfs_forks_free(struct ntfs_fork *arr, size_t n);

/* Records that session works on trunk from base_version (which must exist).
 * -EEXIST if session already has a fork row. Fault point: journal.fork. */
int ntfs_journal_fork_create(ntfs_journal *j, const char *session, const char *trunk, uint64_t base_version);
int ntfs_journal_fork_get(ntfs_journal *j, const char *session, struct ntfs_fork *ret);
/* trunk NULL: all trunks. */
int ntfs_journal_fork_list(ntfs_journal *j, const char *trunk, bool active_only, struct ntfs_fork **ret,
                           size_t *ret_n);
/* active|conflicted -> any status (base_version updated when new_base > 0,
 * for a rebase); committed and aborted are final (-NTFS_ECONFLICT). */
int ntfs_journal_fork_set_status(ntfs_journal *j, const char *session, enum ntfs_fork_status status,
                                 uint64_t new_base);

/* ---- quotas -------------------------------------------------------------- */

/* Atomically: new = value(session, counter) + delta; if limit >= 0 and
 * new > limit, returns -NTFS_EQUOTA and changes nothing; else stores it and
 * sets *ret_new (may be NULL). Counters start at 0 and persist across
 * restarts. session is any valid name (it need not be a session row, so a
 * store-wide counter can use a reserved name); counter is 1..255 bytes.
 * A delta <= 0 (a refund) is always applied, whatever the limit.
 * -ERANGE on overflow. Fault point: journal.quota. */
int ntfs_journal_quota_add(ntfs_journal *j, const char *session, const char *counter, int64_t delta,
                           int64_t limit, int64_t *ret_new);
/* 0 if the counter was never touched. */
int ntfs_journal_quota_get(ntfs_journal *j, const char *session, const char *counter, int64_t *ret);
/* {"counter": value, ...} for session. */
int ntfs_journal_quota_get_all(ntfs_journal *j, const char *session, json_t **ret);

/* ---- GC roots ------------------------------------------------------------ */

/* Explicit pins (a commit the daemon wants kept with no journal row naming
 * it). owner is a free label ("tag:foo"); (commit, owner) is unique.
 * Fault point: journal.pin. */
int ntfs_journal_pin(ntfs_journal *j, const char *commit, const char *owner);
int ntfs_journal_unpin(ntfs_journal *j, const char *commit, const char *owner);

/* Calls cb once for every distinct commit id referenced by an effect (before
 * and after), a checkpoint, a snapshot, a trunk version or a pin: the store's
 * GC roots. A negative return from cb stops and is returned; otherwise the
 * number of commits. */
typedef int (*ntfs_journal_commit_cb)(const char *commit, void *userdata);
int ntfs_journal_for_each_commit(ntfs_journal *j, ntfs_journal_commit_cb cb, void *userdata);

/* ---- meta (small key/value) ---------------------------------------------- */

/* Keys 1..255 bytes; values any text up to NTFS_JOURNAL_MAX_JSON (not
 * redacted: do not store secrets here). Fault point: journal.meta. */
int ntfs_journal_meta_set(ntfs_journal *j, const char *key, const char *value);
/* *ret is the caller's. -NTFS_ENOTFOUND if unset. */
int ntfs_journal_meta_get(ntfs_journal *j, const char *key, char **ret);

#endif
