/* SPDX-License-Identifier: MIT
 * journal.c — open/close, schema, statement cache, transactions, redaction,
 * key derivation, meta, pins and the GC-root walk.
 */
#include "journal/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "journal/journal-internal.h"
#include "common/banned.h"

#define JR_APPLICATION_ID 0x6e746a31 /* "ntj1" */
#define JR_BUSY_TIMEOUT_MS 5000
#define JR_REDACTED "[REDACTED]"
#define JR_SECRET_MIN NTFS_JOURNAL_SECRET_MIN
#define JR_SECRET_MAX NTFS_JOURNAL_SECRET_MAX

static const char jr_schema_v1[] =
        "CREATE TABLE meta("
        "  key TEXT PRIMARY KEY NOT NULL,"
        "  value TEXT NOT NULL"
        ") WITHOUT ROWID;"
        "CREATE TABLE sessions("
        "  name TEXT PRIMARY KEY NOT NULL,"
        "  created_ns INTEGER NOT NULL,"
        "  ended_ns INTEGER,"
        "  uid INTEGER NOT NULL DEFAULT -1,"
        "  metadata TEXT NOT NULL DEFAULT '{}' CHECK(json_valid(metadata))"
        ");"
        "CREATE TABLE checkpoints("
        "  session TEXT NOT NULL REFERENCES sessions(name),"
        "  step INTEGER NOT NULL CHECK(step >= 0),"
        "  messages TEXT NOT NULL CHECK(json_valid(messages)),"
        "  cursor INTEGER NOT NULL,"
        "  commit_id TEXT CHECK(commit_id IS NULL OR length(commit_id) = 64),"
        "  created_ns INTEGER NOT NULL,"
        "  PRIMARY KEY(session, step)"
        ");"
        "CREATE TABLE effects("
        "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
        "  session TEXT NOT NULL REFERENCES sessions(name),"
        "  step INTEGER NOT NULL CHECK(step >= 0),"
        "  tool TEXT NOT NULL,"
        "  effect_class TEXT NOT NULL,"
        "  input TEXT NOT NULL CHECK(json_valid(input)),"
        "  idempotency_key TEXT NOT NULL,"
        "  status TEXT NOT NULL CHECK(status IN ('pending','done','failed','outcome_unknown')),"
        "  result TEXT CHECK(result IS NULL OR json_valid(result)),"
        "  commit_before TEXT CHECK(commit_before IS NULL OR length(commit_before) = 64),"
        "  commit_after TEXT CHECK(commit_after IS NULL OR length(commit_after) = 64),"
        "  started_ns INTEGER NOT NULL,"
        "  ended_ns INTEGER,"
        "  duration_ns INTEGER,"
        "  reason TEXT,"
        "  UNIQUE(session, idempotency_key)"
        ");"
        "CREATE INDEX effects_by_step ON effects(session, step, id);"
        "CREATE INDEX effects_pending ON effects(id) WHERE status = 'pending';"
        "CREATE TABLE snapshots("
        "  snapshot_id TEXT PRIMARY KEY NOT NULL,"
        "  session TEXT NOT NULL REFERENCES sessions(name),"
        "  step INTEGER NOT NULL CHECK(step >= 0),"
        "  commit_id TEXT NOT NULL CHECK(length(commit_id) = 64),"
        "  size_bytes INTEGER NOT NULL CHECK(size_bytes >= 0),"
        "  created_ns INTEGER NOT NULL"
        ");"
        "CREATE INDEX snapshots_by_session ON snapshots(session, created_ns);"
        "CREATE TABLE trunks("
        "  name TEXT NOT NULL,"
        "  version INTEGER NOT NULL CHECK(version >= 1),"
        "  commit_id TEXT NOT NULL CHECK(length(commit_id) = 64),"
        "  parent_version INTEGER CHECK(parent_version IS NULL OR parent_version = version - 1),"
        "  merged_from TEXT,"
        "  effect_cursor INTEGER NOT NULL DEFAULT 0,"
        "  created_ns INTEGER NOT NULL,"
        "  PRIMARY KEY(name, version)"
        ");"
        "CREATE TABLE forks("
        "  session TEXT PRIMARY KEY NOT NULL REFERENCES sessions(name),"
        "  trunk TEXT NOT NULL,"
        "  base_version INTEGER NOT NULL,"
        "  status TEXT NOT NULL CHECK(status IN ('active','committed','conflicted','aborted')),"
        "  created_ns INTEGER NOT NULL,"
        "  resolved_ns INTEGER,"
        "  FOREIGN KEY(trunk, base_version) REFERENCES trunks(name, version)"
        ");"
        "CREATE INDEX forks_by_trunk ON forks(trunk, status);"
        "CREATE TABLE quota_usage("
        "  session TEXT NOT NULL,"
        "  counter TEXT NOT NULL,"
        "  value INTEGER NOT NULL,"
        "  PRIMARY KEY(session, counter)"
        ") WITHOUT ROWID;"
        "CREATE TABLE pins("
        "  commit_id TEXT NOT NULL CHECK(length(commit_id) = 64),"
        "  owner TEXT NOT NULL,"
        "  created_ns INTEGER NOT NULL,"
        "  PRIMARY KEY(commit_id, owner)"
        ") WITHOUT ROWID;";

#define EFFECT_COLS                                                                                          \
        "id, session, step, tool, effect_class, input, idempotency_key, status, "                            \
        "result, commit_before, commit_after, started_ns, ended_ns, duration_ns, reason"
#define SESSION_COLS "name, created_ns, ended_ns, uid, metadata"
#define SNAPSHOT_COLS "snapshot_id, session, step, commit_id, size_bytes, created_ns"
#define TRUNK_COLS "name, version, commit_id, parent_version, merged_from, effect_cursor, created_ns"
#define FORK_COLS "session, trunk, base_version, status, created_ns, resolved_ns"
#define STATE_COLS "session, step, messages, cursor, commit_id, created_ns"

static const char *const jr_sql[JR_STMT_MAX] = {
        [JR_BEGIN] = "BEGIN IMMEDIATE",
        [JR_COMMIT] = "COMMIT",
        [JR_ROLLBACK] = "ROLLBACK",
        [JR_SESSION_EXISTS] = "SELECT 1 FROM sessions WHERE name = ?1",
        [JR_EFFECT_BY_ID] = "SELECT " EFFECT_COLS " FROM effects WHERE id = ?1",
        [JR_EFFECT_BY_KEY] =
                "SELECT " EFFECT_COLS " FROM effects WHERE session = ?1 AND idempotency_key = ?2",
        [JR_EFFECT_INSERT] = "INSERT INTO effects(session, step, tool, effect_class, input, "
                             "idempotency_key, status, commit_before, started_ns) "
                             "VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8)",
        [JR_EFFECT_FINISH] = "UPDATE effects SET status = ?2, result = ?3, commit_after = ?4, "
                             "reason = ?5, ended_ns = ?6, duration_ns = max(0, ?6 - started_ns) "
                             "WHERE id = ?1 AND status = 'pending'",
        [JR_EFFECT_STATUS] = "SELECT status FROM effects WHERE id = ?1",
        [JR_EFFECT_LIST] = "SELECT " EFFECT_COLS " FROM effects WHERE session = ?1 AND step >= ?2 "
                           "ORDER BY id LIMIT ?3 OFFSET ?4",
        [JR_EFFECT_COUNT] = "SELECT count(*) FROM effects WHERE session = ?1 AND step >= ?2",
        [JR_EFFECT_PENDING] = "SELECT " EFFECT_COLS " FROM effects WHERE status = 'pending' ORDER BY id",
        [JR_SESSION_INSERT] = "INSERT INTO sessions(name, created_ns, uid, metadata) "
                              "VALUES(?1, ?2, ?3, ?4)",
        [JR_SESSION_END] = "UPDATE sessions SET ended_ns = ?2 WHERE name = ?1 AND ended_ns IS NULL",
        [JR_SESSION_GET] = "SELECT " SESSION_COLS " FROM sessions WHERE name = ?1",
        [JR_SESSION_LIST] = "SELECT " SESSION_COLS " FROM sessions "
                            "WHERE ?1 OR ended_ns IS NULL ORDER BY created_ns, rowid",
        [JR_STATE_UPSERT] = "INSERT INTO checkpoints(session, step, messages, cursor, commit_id, "
                            "created_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6) "
                            "ON CONFLICT(session, step) DO UPDATE SET messages = excluded.messages, "
                            "cursor = excluded.cursor, commit_id = excluded.commit_id, "
                            "created_ns = excluded.created_ns",
        [JR_STATE_AT] = "SELECT " STATE_COLS " FROM checkpoints WHERE session = ?1 AND step = ?2",
        [JR_STATE_LATEST] = "SELECT " STATE_COLS " FROM checkpoints WHERE session = ?1 "
                            "ORDER BY step DESC LIMIT 1",
        [JR_SNAPSHOT_INSERT] = "INSERT INTO snapshots(" SNAPSHOT_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
        [JR_SNAPSHOT_GET] = "SELECT " SNAPSHOT_COLS " FROM snapshots WHERE snapshot_id = ?1",
        [JR_SNAPSHOT_LIST] = "SELECT " SNAPSHOT_COLS " FROM snapshots WHERE session = ?1 "
                             "ORDER BY created_ns, rowid",
        [JR_SNAPSHOT_LIST_ALL] = "SELECT " SNAPSHOT_COLS " FROM snapshots ORDER BY created_ns, rowid",
        [JR_TRUNK_HEAD] = "SELECT max(version) FROM trunks WHERE name = ?1",
        [JR_TRUNK_INSERT] = "INSERT INTO trunks(" TRUNK_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [JR_TRUNK_GET] = "SELECT " TRUNK_COLS " FROM trunks WHERE name = ?1 AND version = ?2",
        [JR_TRUNK_VERSIONS] = "SELECT " TRUNK_COLS " FROM trunks WHERE name = ?1 ORDER BY version",
        [JR_TRUNK_HEADS] = "SELECT " TRUNK_COLS " FROM trunks t WHERE version = "
                           "(SELECT max(version) FROM trunks u WHERE u.name = t.name) ORDER BY name",
        [JR_FORK_INSERT] = "INSERT INTO forks(" FORK_COLS ") VALUES(?1, ?2, ?3, 'active', ?4, NULL)",
        [JR_FORK_GET] = "SELECT " FORK_COLS " FROM forks WHERE session = ?1",
        [JR_FORK_LIST] = "SELECT " FORK_COLS " FROM forks WHERE (?1 IS NULL OR trunk = ?1) "
                         "AND (NOT ?2 OR status = 'active') ORDER BY created_ns, rowid",
        [JR_FORK_UPDATE] = "UPDATE forks SET status = ?2, resolved_ns = ?3, "
                           "base_version = coalesce(?4, base_version) WHERE session = ?1",
        [JR_QUOTA_GET] = "SELECT value FROM quota_usage WHERE session = ?1 AND counter = ?2",
        [JR_QUOTA_SET] = "INSERT INTO quota_usage(session, counter, value) VALUES(?1, ?2, ?3) "
                         "ON CONFLICT(session, counter) DO UPDATE SET value = excluded.value",
        [JR_QUOTA_ALL] = "SELECT counter, value FROM quota_usage WHERE session = ?1 ORDER BY counter",
        [JR_PIN_INSERT] = "INSERT OR IGNORE INTO pins(commit_id, owner, created_ns) VALUES(?1, ?2, ?3)",
        [JR_PIN_DELETE] = "DELETE FROM pins WHERE commit_id = ?1 AND owner = ?2",
        [JR_COMMITS] = "SELECT commit_before FROM effects WHERE commit_before IS NOT NULL "
                       "UNION SELECT commit_after FROM effects WHERE commit_after IS NOT NULL "
                       "UNION SELECT commit_id FROM checkpoints WHERE commit_id IS NOT NULL "
                       "UNION SELECT commit_id FROM snapshots "
                       "UNION SELECT commit_id FROM trunks "
                       "UNION SELECT commit_id FROM pins",
        [JR_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [JR_META_GET] = "SELECT value FROM meta WHERE key = ?1",
};

/* ---- errors, statements, transactions ------------------------------------ */

int jr_sqlite_err(sqlite3 *db, int rc) {
        switch (rc & 0xff) {
        case SQLITE_OK:
        case SQLITE_ROW:
        case SQLITE_DONE:
                return 0;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_CORRUPT:
                return -NTFS_ECORRUPT;
        case SQLITE_NOTADB:
        case SQLITE_FORMAT:
                return -NTFS_EBADFORMAT;
        case SQLITE_TOOBIG:
                return -NTFS_ETOOLARGE;
        case SQLITE_CONSTRAINT:
                if (rc == SQLITE_CONSTRAINT_CHECK)
                        return -NTFS_EBADREQ;
                if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
                        return -EEXIST;
                return -NTFS_ECONFLICT;
        case SQLITE_RANGE:
        case SQLITE_MISUSE:
        case SQLITE_MISMATCH:
                return -EINVAL;
        case SQLITE_CANTOPEN: {
                int e = db ? sqlite3_system_errno(db) : 0;
                return e > 0 ? -e : -ENOENT;
        }
        default:
                return -EIO;
        }
}

int jr_stmt(ntfs_journal *j, enum jr_stmt id, sqlite3_stmt **ret) {
        if (!j->stmts[id]) {
                int rc = sqlite3_prepare_v3(j->db, jr_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &j->stmts[id],
                                            NULL);
                if (rc != SQLITE_OK) {
                        log_debug("journal: prepare %d: %s", (int)id, sqlite3_errmsg(j->db));
                        return jr_sqlite_err(j->db, rc);
                }
        }
        *ret = j->stmts[id];
        return 0;
}

int jr_step_done(ntfs_journal *j, sqlite3_stmt *s) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE || rc == SQLITE_ROW)
                return 0;
        log_debug("journal: step: %s", sqlite3_errmsg(j->db));
        return jr_sqlite_err(j->db, sqlite3_extended_errcode(j->db));
}

int jr_step_row(ntfs_journal *j, sqlite3_stmt *s) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        log_debug("journal: step: %s", sqlite3_errmsg(j->db));
        return jr_sqlite_err(j->db, sqlite3_extended_errcode(j->db));
}

static int exec_cached(ntfs_journal *j, enum jr_stmt id) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r = jr_stmt(j, id, &s);
        if (r < 0)
                return r;
        return jr_step_done(j, s);
}

int jr_txn_begin(ntfs_journal *j, struct jr_txn *t) {
        t->j = j;
        t->open = false;
        int r = exec_cached(j, JR_BEGIN);
        if (r < 0)
                return r;
        t->open = true;
        return 0;
}

int jr_txn_commit(struct jr_txn *t, const char *fault_point) {
        int r = NTFS_FAULT(fault_point);
        if (r < 0)
                return r; /* the guard rolls back */
        r = exec_cached(t->j, JR_COMMIT);
        if (r < 0) {
                /* A failed COMMIT may leave the transaction open (SQLITE_BUSY)
                 * or already rolled back; the guard handles both. */
                if (sqlite3_get_autocommit(t->j->db))
                        t->open = false;
                return r;
        }
        t->open = false;
        return 0;
}

void jr_txn_rollbackp(struct jr_txn *t) {
        if (!t->j || !t->open)
                return;
        if (!sqlite3_get_autocommit(t->j->db))
                (void)exec_cached(t->j, JR_ROLLBACK);
        t->open = false;
}

int jr_bind_text(sqlite3_stmt *s, int idx, const char *v) {
        int rc = v ? sqlite3_bind_text(s, idx, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, idx);
        return rc == SQLITE_OK ? 0 : jr_sqlite_err(NULL, rc);
}

int jr_bind_i64(sqlite3_stmt *s, int idx, int64_t v) {
        int rc = sqlite3_bind_int64(s, idx, v);
        return rc == SQLITE_OK ? 0 : jr_sqlite_err(NULL, rc);
}

int jr_col_strdup(sqlite3_stmt *s, int i, char **ret) {
        if (sqlite3_column_type(s, i) == SQLITE_NULL) {
                *ret = NULL;
                return 0;
        }
        const unsigned char *t = sqlite3_column_text(s, i);
        if (!t)
                return -ENOMEM;
        *ret = strdup((const char *)t);
        return *ret ? 0 : -ENOMEM;
}

bool jr_commit_valid(const char *c) {
        if (!c)
                return true;
        size_t n = strnlen(c, NTFS_HEX_LEN + 1);
        if (n != NTFS_HEX_LEN)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((c[i] >= '0' && c[i] <= '9') || (c[i] >= 'a' && c[i] <= 'f')))
                        return false;
        return true;
}

static bool has_secret_locked(ntfs_journal *j, const char *s);

int jr_check_name(ntfs_journal *j, const char *name) {
        if (!name || !ntfs_name_valid(name))
                return -NTFS_EINVALNAME;
        return has_secret_locked(j, name) ? -NTFS_EINVALNAME : 0;
}

int jr_check_label(ntfs_journal *j, const char *s) {
        if (!s || has_secret_locked(j, s))
                return -EINVAL;
        size_t n = strnlen(s, NTFS_JOURNAL_MAX_KEY + 1);
        if (n == 0 || n > NTFS_JOURNAL_MAX_KEY)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                        return -EINVAL;
        return 0;
}

int jr_session_exists(ntfs_journal *j, const char *name) {
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r = jr_stmt(j, JR_SESSION_EXISTS, &s);
        if (r < 0)
                return r;
        if ((r = jr_bind_text(s, 1, name)) < 0)
                return r;
        return jr_step_row(j, s);
}

/* ---- redaction ----------------------------------------------------------- */

/* Replaces every occurrence of needle in hay by JR_REDACTED. *ret NULL when
 * nothing matched. */
static int replace_all(const char *hay, const char *needle, char **ret) {
        size_t nl = strlen(needle), rl = strlen(JR_REDACTED), count = 0;
        *ret = NULL;
        for (const char *p = strstr(hay, needle); p; p = strstr(p + nl, needle))
                count++;
        if (count == 0)
                return 0;
        size_t hl = strlen(hay);
        /* rl < 4096 and count <= hl / nl, so this cannot overflow on 64-bit. */
        size_t out_len = hl - count * nl + count * rl;
        char *out = malloc(out_len + 1), *o = out;
        if (!out)
                return -ENOMEM;
        const char *p = hay;
        for (const char *m = strstr(p, needle); m; m = strstr(p, needle)) {
                memcpy(o, p, (size_t)(m - p));
                o += m - p;
                memcpy(o, JR_REDACTED, rl);
                o += rl;
                p = m + nl;
        }
        size_t tail = strlen(p);
        memcpy(o, p, tail + 1);
        *ret = out;
        return 1;
}

int jr_redact_text(ntfs_journal *j, const char *text, char **ret) {
        _cleanup_free_ char *cur = strdup(text);
        if (!cur)
                return -ENOMEM;
        for (size_t i = 0; i < j->n_secrets; i++) {
                char *next;
                int r = replace_all(cur, j->secrets[i], &next);
                if (r < 0)
                        return r;
                if (r > 0) {
                        free(cur);
                        cur = next;
                }
        }
        *ret = TAKE_PTR(cur);
        return 0;
}

static bool has_secret(ntfs_journal *j, const char *s) {
        for (size_t i = 0; i < j->n_secrets; i++)
                if (strstr(s, j->secrets[i]))
                        return true;
        return false;
}

/* For the name checks, which run before the caller takes the lock; the
 * secrets may be replaced at any time (ntfs_journal_set_secrets). */
static bool has_secret_locked(ntfs_journal *j, const char *s) {
        if (!j)
                return false;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        return has_secret(j, s);
}

/* A base64 value (the exact bytes of a command's output, under a key
 * ending in "_b64", docs/protocol.md): the secrets are looked for in the
 * decoded bytes, replaced there, and the value encoded again. A value
 * that is not base64 is redacted as text. */
static int redact_b64(ntfs_journal *j, json_t *v) {
        _cleanup_free_ char *raw = NULL;
        size_t n = 0;
        int r = ntfs_base64_decode(json_string_value(v), json_string_length(v), &raw, &n);
        if (r == -EINVAL)
                return 1;
        if (r < 0)
                return r;
        bool found = false;
        for (size_t i = 0; i < j->n_secrets; i++) {
                size_t sl = strlen(j->secrets[i]), rl = strlen(JR_REDACTED), o = 0;
                if (!memmem(raw, n, j->secrets[i], sl))
                        continue;
                found = true;
                /* the result is never longer than count * rl + n */
                size_t count = 0;
                for (const char *p = raw; (p = memmem(p, n - (size_t)(p - raw), j->secrets[i], sl)); p += sl)
                        count++;
                char *out = malloc(n + count * rl + 1);
                if (!out)
                        return -ENOMEM;
                for (size_t k = 0; k < n;) {
                        if (n - k >= sl && memcmp(raw + k, j->secrets[i], sl) == 0) {
                                memcpy(out + o, JR_REDACTED, rl);
                                o += rl;
                                k += sl;
                        } else
                                out[o++] = raw[k++];
                }
                free(raw);
                raw = out;
                n = o;
        }
        if (!found)
                return 0;
        _cleanup_free_ char *b64 = NULL;
        if ((r = ntfs_base64_encode(raw, n, &b64, NULL)) < 0)
                return r;
        return json_string_set(v, b64) < 0 ? -ENOMEM : 0;
}

static int redact_value(ntfs_journal *j, json_t *v) {
        if (json_is_string(v)) {
                const char *s = json_string_value(v);
                if (!has_secret(j, s))
                        return 0;
                _cleanup_free_ char *red = NULL;
                int r = jr_redact_text(j, s, &red);
                if (r < 0)
                        return r;
                /* A byte-level match can split a UTF-8 sequence; then the
                 * whole string goes. */
                if (json_string_set(v, red) < 0 && json_string_set(v, JR_REDACTED) < 0)
                        return -ENOMEM;
                return 0;
        }
        if (json_is_array(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) {
                        int r = redact_value(j, e);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        if (json_is_object(v)) {
                const char *k;
                json_t *e;
                bool keys = false;
                json_object_foreach(v, k, e) {
                        size_t kl = strlen(k);
                        int r = json_is_string(e) && kl > 4 && strcmp(k + kl - 4, "_b64") == 0 ? redact_b64(j, e)
                                                                                                 : 1;
                        if (r > 0)
                                r = redact_value(j, e);
                        if (r < 0)
                                return r;
                        if (has_secret(j, k))
                                keys = true;
                }
                while (keys) {
                        keys = false;
                        json_object_foreach(v, k, e) {
                                if (!has_secret(j, k))
                                        continue;
                                _cleanup_free_ char *red = NULL;
                                int r = jr_redact_text(j, k, &red);
                                if (r < 0)
                                        return r;
                                json_incref(e);
                                json_object_del(v, k);
                                if (json_object_set_new(v, red, e) < 0 &&
                                    json_object_set(v, JR_REDACTED, e) < 0)
                                        return -ENOMEM;
                                keys = true; /* iteration invalidated: restart */
                                break;
                        }
                }
                return 0;
        }
        return 0;
}

int jr_json_normalize(ntfs_journal *j, const char *json, char **ret) {
        if (!json)
                return -EINVAL;
        size_t n = strnlen(json, (size_t)NTFS_JOURNAL_MAX_JSON + 1);
        if (n > NTFS_JOURNAL_MAX_JSON)
                return -NTFS_ETOOLARGE;
        json_error_t err;
        json_t *v = json_loadb(json, n, JSON_DECODE_ANY, &err);
        if (!v)
                return -NTFS_EBADREQ;
        int r = j ? redact_value(j, v) : 0;
        char *out = r < 0 ? NULL : json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        json_decref(v);
        if (r < 0)
                return r;
        if (!out)
                return -ENOMEM;
        if (j && has_secret(j, out)) {
                /* A secret inside a number or spanning an escape: redact the
                 * text; if that broke the JSON, keep nothing of it. */
                _cleanup_free_ char *raw = out;
                out = NULL;
                r = jr_redact_text(j, raw, &out);
                if (r < 0)
                        return r;
                json_t *chk = json_loads(out, JSON_DECODE_ANY, &err);
                if (!chk) {
                        free(out);
                        out = strdup("\"" JR_REDACTED "\"");
                        if (!out)
                                return -ENOMEM;
                }
                json_decref(chk);
        }
        *ret = out;
        return 0;
}

int ntfs_journal_set_secrets(ntfs_journal *j, const char *const *secrets) {
        if (!j)
                return -EINVAL;
        size_t n = 0;
        if (secrets)
                for (; secrets[n]; n++) {
                        if (n >= NTFS_JOURNAL_MAX_SECRETS)
                                return -EINVAL;
                        size_t l = strnlen(secrets[n], JR_SECRET_MAX + 1);
                        if (l < JR_SECRET_MIN || l > JR_SECRET_MAX)
                                return -EINVAL;
                }
        char **copy = calloc(n + 1, sizeof(char *));
        if (!copy)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                copy[i] = strdup(secrets[i]);
                if (!copy[i]) {
                        for (size_t k = 0; k < i; k++)
                                free(copy[k]);
                        free(copy);
                        return -ENOMEM;
                }
        }
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        for (size_t i = 0; i < j->n_secrets; i++)
                free(j->secrets[i]);
        free(j->secrets);
        j->secrets = copy;
        j->n_secrets = n;
        return 0;
}

/* ---- key derivation ------------------------------------------------------ */

static void put_field(uint8_t *buf, size_t *off, const void *p, size_t len) {
        ntfs_put_be64(buf + *off, len);
        *off += 8;
        memcpy(buf + *off, p, len);
        *off += len;
}

int ntfs_journal_derive_key(const char *session, uint64_t step, const char *tool, const char *input_json,
                            char out[65]) {
        if (!session || !tool || !input_json || !out)
                return -EINVAL;
        _cleanup_free_ char *canon = NULL;
        int r = jr_json_normalize(NULL, input_json, &canon);
        if (r < 0)
                return r;
        static const char tag[] = "ntfs-effect-key/1";
        size_t sl = strnlen(session, NTFS_NAME_MAX + 1), tl = strnlen(tool, NTFS_JOURNAL_MAX_KEY + 1);
        if (sl > NTFS_NAME_MAX || tl > NTFS_JOURNAL_MAX_KEY)
                return -EINVAL;
        size_t cl = strlen(canon);
        size_t total = 5 * 8 + (sizeof tag - 1) + sl + 8 + tl + cl;
        _cleanup_free_ uint8_t *buf = malloc(total);
        if (!buf)
                return -ENOMEM;
        size_t off = 0;
        uint8_t be[8];
        ntfs_put_be64(be, step);
        put_field(buf, &off, tag, sizeof tag - 1);
        put_field(buf, &off, session, sl);
        put_field(buf, &off, be, 8);
        put_field(buf, &off, tool, tl);
        put_field(buf, &off, canon, cl);
        uint8_t h[NTFS_HASH_LEN];
        ntfs_sha256(buf, off, h);
        ntfs_hex(h, NTFS_HASH_LEN, out);
        return 0;
}

/* ---- open/close ---------------------------------------------------------- */

static int pragma_int(sqlite3 *db, const char *sql, int64_t *ret) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
        if (rc != SQLITE_OK)
                return jr_sqlite_err(db, rc);
        rc = sqlite3_step(s);
        int r = 0;
        if (rc == SQLITE_ROW)
                *ret = sqlite3_column_int64(s, 0);
        else
                r = rc == SQLITE_DONE ? -EIO : jr_sqlite_err(db, sqlite3_extended_errcode(db));
        sqlite3_finalize(s);
        return r;
}

static int exec_sql(sqlite3 *db, const char *sql) {
        char *msg = NULL;
        int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
                log_debug("journal: %s: %s", sql, msg ? msg : "?");
                sqlite3_free(msg);
                return jr_sqlite_err(db, sqlite3_extended_errcode(db));
        }
        return 0;
}

static int set_wal(sqlite3 *db) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
        if (rc != SQLITE_OK)
                return jr_sqlite_err(db, rc);
        int r = -EIO;
        if (sqlite3_step(s) == SQLITE_ROW) {
                const unsigned char *m = sqlite3_column_text(s, 0);
                r = m && strcmp((const char *)m, "wal") == 0 ? 0 : -EIO;
        } else
                r = jr_sqlite_err(db, sqlite3_extended_errcode(db));
        sqlite3_finalize(s);
        return r;
}

/* Checks the header of an existing database, or creates the schema in a new
 * one. Nothing is written to a file that is not ours. */
static int setup_schema(sqlite3 *db) {
        int64_t app = 0, ver = 0, tables = 0;
        int r = pragma_int(db, "PRAGMA application_id", &app);
        if (r < 0)
                return r;
        if ((r = pragma_int(db, "PRAGMA user_version", &ver)) < 0)
                return r;
        if ((r = pragma_int(db, "SELECT count(*) FROM sqlite_master", &tables)) < 0)
                return r;
        if (app == JR_APPLICATION_ID && ver == NTFS_JOURNAL_SCHEMA_VERSION) {
                r = set_wal(db);
                return r < 0 ? r : 0;
        }
        if (app == JR_APPLICATION_ID && ver > NTFS_JOURNAL_SCHEMA_VERSION) {
                log_debug("journal: schema version %lld is newer than %d", (long long)ver,
                          NTFS_JOURNAL_SCHEMA_VERSION);
                return -NTFS_EBADFORMAT;
        }
        if (app != 0 || ver != 0 || tables != 0)
                return -NTFS_EBADFORMAT; /* another application's database */
        if ((r = set_wal(db)) < 0)
                return r;
        if ((r = exec_sql(db, "BEGIN IMMEDIATE")) < 0)
                return r;
        /* Re-check under the write lock: another opener may have won. */
        if ((r = pragma_int(db, "SELECT count(*) FROM sqlite_master", &tables)) < 0 || tables != 0) {
                exec_sql(db, "ROLLBACK");
                return r < 0 ? r : setup_schema(db);
        }
        char hdr[128];
        snprintf(hdr, sizeof hdr, "PRAGMA application_id=%d; PRAGMA user_version=%d;", JR_APPLICATION_ID,
                 NTFS_JOURNAL_SCHEMA_VERSION);
        if ((r = exec_sql(db, jr_schema_v1)) < 0 || (r = exec_sql(db, hdr)) < 0 ||
            (r = NTFS_FAULT("journal.schema")) < 0 || (r = exec_sql(db, "COMMIT")) < 0) {
                exec_sql(db, "ROLLBACK");
                return r;
        }
        return 1; /* created */
}

/* fsync the directory holding path, so a new database file's name is
 * durable (SQLite syncs the directory for its WAL, not for the main file). */
static int sync_parent_dir(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        if (!slash)
                dir[0] = '.', dir[1] = 0;
        else if (slash == dir)
                dir[1] = 0;
        else
                *slash = 0;
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fsync(fd) < 0)
                return -errno;
        return 0;
}

int ntfs_journal_open(const char *path, ntfs_journal **ret) {
        if (!path || !*path || !ret)
                return -EINVAL;
        ntfs_journal *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        pthread_mutex_init(&j->lock, NULL);
        int r = 0;
        /* Create the file 0600 ourselves (SQLite would use 0644 & ~umask);
         * SQLite gives the -wal and -shm files the same mode. */
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                r = -errno;
                goto fail;
        }
        close(fd);
        int rc = sqlite3_open_v2(path, &j->db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                                         SQLITE_OPEN_EXRESCODE,
                                 NULL);
        if (rc != SQLITE_OK) {
                r = jr_sqlite_err(j->db, rc);
                goto fail;
        }
        sqlite3_extended_result_codes(j->db, 1);
        sqlite3_busy_timeout(j->db, JR_BUSY_TIMEOUT_MS);
        if ((r = setup_schema(j->db)) < 0)
                goto fail;
        if (r > 0 && (r = sync_parent_dir(path)) < 0)
                goto fail;
        /* synchronous=FULL: in WAL mode every COMMIT fsyncs the WAL, so an
         * intent row is on disk before ntfs_journal_effect_begin returns. */
        if ((r = exec_sql(j->db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")) < 0)
                goto fail;
        int64_t fk = 0;
        if ((r = pragma_int(j->db, "PRAGMA foreign_keys", &fk)) < 0)
                goto fail;
        if (fk != 1) {
                r = -EIO;
                goto fail;
        }
        *ret = j;
        return 0;
fail:
        ntfs_journal_close(j);
        return r;
}

void ntfs_journal_close(ntfs_journal *j) {
        if (!j)
                return;
        for (size_t i = 0; i < JR_STMT_MAX; i++)
                sqlite3_finalize(j->stmts[i]);
        if (j->db)
                sqlite3_close(j->db);
        for (size_t i = 0; i < j->n_secrets; i++)
                free(j->secrets[i]);
        free(j->secrets);
        pthread_mutex_destroy(&j->lock);
        free(j);
}

/* ---- meta ---------------------------------------------------------------- */

int ntfs_journal_meta_set(ntfs_journal *j, const char *key, const char *value) {
        if (!j || jr_check_label(j, key) < 0 || !value)
                return -EINVAL;
        if (strnlen(value, (size_t)NTFS_JOURNAL_MAX_JSON + 1) > NTFS_JOURNAL_MAX_JSON)
                return -NTFS_ETOOLARGE;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        int r = jr_txn_begin(j, &t);
        if (r < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, JR_META_SET, &s)) < 0 || (r = jr_bind_text(s, 1, key)) < 0 ||
                    (r = jr_bind_text(s, 2, value)) < 0 || (r = jr_step_done(j, s)) < 0)
                        return r;
        }
        return jr_txn_commit(&t, "journal.meta");
}

int ntfs_journal_meta_get(ntfs_journal *j, const char *key, char **ret) {
        if (!j || jr_check_label(j, key) < 0 || !ret)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_stmt_ sqlite3_stmt *s = NULL;
        int r;
        if ((r = jr_stmt(j, JR_META_GET, &s)) < 0 || (r = jr_bind_text(s, 1, key)) < 0)
                return r;
        if ((r = jr_step_row(j, s)) < 0)
                return r;
        if (r == 0)
                return -NTFS_ENOTFOUND;
        return jr_col_strdup(s, 0, ret);
}

/* ---- pins and GC roots --------------------------------------------------- */

static int pin_write(ntfs_journal *j, enum jr_stmt id, const char *commit, const char *owner) {
        if (!j || !commit || !jr_commit_valid(commit) || jr_check_label(j, owner) < 0)
                return -EINVAL;
        _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
        _cleanup_txn_ struct jr_txn t = {};
        int r = jr_txn_begin(j, &t);
        if (r < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                if ((r = jr_stmt(j, id, &s)) < 0 || (r = jr_bind_text(s, 1, commit)) < 0 ||
                    (r = jr_bind_text(s, 2, owner)) < 0)
                        return r;
                if (id == JR_PIN_INSERT && (r = jr_bind_i64(s, 3, ntfs_now_ns())) < 0)
                        return r;
                if ((r = jr_step_done(j, s)) < 0)
                        return r;
                if (id == JR_PIN_DELETE && sqlite3_changes(j->db) == 0)
                        return -NTFS_ENOTFOUND;
        }
        return jr_txn_commit(&t, "journal.pin");
}

int ntfs_journal_pin(ntfs_journal *j, const char *commit, const char *owner) {
        return pin_write(j, JR_PIN_INSERT, commit, owner);
}

int ntfs_journal_unpin(ntfs_journal *j, const char *commit, const char *owner) {
        return pin_write(j, JR_PIN_DELETE, commit, owner);
}

int ntfs_journal_for_each_commit(ntfs_journal *j, ntfs_journal_commit_cb cb, void *userdata) {
        if (!j || !cb)
                return -EINVAL;
        /* Collect under the lock (one read transaction: a consistent set),
         * call back without it. */
        _cleanup_free_ char *ids = NULL;
        size_t n = 0, cap = 0;
        {
                _cleanup_unlock_ ntfs_journal *l = jr_lock(j);
                _cleanup_stmt_ sqlite3_stmt *s = NULL;
                int r = jr_stmt(j, JR_COMMITS, &s);
                if (r < 0)
                        return r;
                while ((r = jr_step_row(j, s)) > 0) {
                        const unsigned char *c = sqlite3_column_text(s, 0);
                        if (!c || !jr_commit_valid((const char *)c))
                                continue;
                        if (n == cap) {
                                size_t nc = cap ? cap * 2 : 64;
                                char *p = realloc(ids, nc * (NTFS_HEX_LEN + 1));
                                if (!p)
                                        return -ENOMEM;
                                ids = p;
                                cap = nc;
                        }
                        memcpy(ids + n * (NTFS_HEX_LEN + 1), c, NTFS_HEX_LEN + 1);
                        n++;
                }
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < n; i++) {
                int r = cb(ids + i * (NTFS_HEX_LEN + 1), userdata);
                if (r < 0)
                        return r;
        }
        return (int)NTFS_MIN(n, (size_t)INT32_MAX);
}

int jr_random_id(char out[33]) {
        uint8_t b[16];
        size_t got = 0;
        while (got < sizeof b) {
                ssize_t k = getrandom(b + got, sizeof b - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)k;
        }
        ntfs_hex(b, sizeof b, out);
        return 0;
}
