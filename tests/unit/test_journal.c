/* SPDX-License-Identifier: MIT
 * test_journal.c — unit tests of journal/: every API, idempotency (also
 * raced from 8 threads), write-ahead durability across kill -9 of a child at
 * each fault point, error injection at each write step, quotas across
 * reopen, redaction checked on the database bytes, trunk CAS races, schema
 * version checks and malformed JSON.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/util.h"
#include "journal/journal.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define C1 "1111111111111111111111111111111111111111111111111111111111111111"
#define C2 "2222222222222222222222222222222222222222222222222222222222222222"
#define C3 "3333333333333333333333333333333333333333333333333333333333333333"
#define C4 "4444444444444444444444444444444444444444444444444444444444444444"
#define C5 "5555555555555555555555555555555555555555555555555555555555555555"

static char tdir[64], tpath[128];

static void tmp_setup(void) {
        snprintf(tdir, sizeof tdir, "/tmp/ntfs-test-journal-XXXXXX");
        if (!mkdtemp(tdir))
                abort();
        snprintf(tpath, sizeof tpath, "%s/journal.db", tdir);
}

static void tmp_cleanup(void) {
        const char *sfx[] = {"", "-wal", "-shm", "-journal"};
        for (size_t i = 0; i < ARRAY_SIZE(sfx); i++) {
                char p[160];
                snprintf(p, sizeof p, "%s%s", tpath, sfx[i]);
                unlink(p);
        }
        rmdir(tdir);
}

static void journal_closep(ntfs_journal **j) {
        ntfs_journal_close(*j);
        *j = NULL;
}
#define _cleanup_journal_ _cleanup_(journal_closep)

/* A fresh journal in a fresh directory with session "s". */
static ntfs_journal *fresh(void) {
        tmp_setup();
        ntfs_journal *j = NULL;
        if (ntfs_journal_open(tpath, &j) < 0 || ntfs_journal_session_create(j, "s", 1000, NULL) < 0)
                abort();
        return j;
}

static struct ntfs_effect_intent intent(const char *key, uint64_t step, const char *input) {
        return (struct ntfs_effect_intent){
                .session = "s",
                .step = step,
                .tool = "bash_run",
                .effect_class = "irreversible",
                .input_json = input,
                .idempotency_key = key,
                .commit_before = C1,
        };
}

/* Runs sql on the raw database; returns the first column of the first row as
 * an integer (or -1). */
static long long raw_int(const char *sql) {
        sqlite3 *db = NULL;
        long long v = -1;
        if (sqlite3_open_v2(tpath, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
                sqlite3_stmt *s = NULL;
                if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
                        v = sqlite3_column_int64(s, 0);
                sqlite3_finalize(s);
        }
        sqlite3_close(db);
        return v;
}

static void raw_exec(const char *sql) {
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(tpath, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK ||
            sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
                abort();
        sqlite3_close(db);
}

/* PRAGMA integrity_check and foreign_key_check both clean. */
static bool db_consistent(void) {
        sqlite3 *db = NULL;
        bool ok = false;
        if (sqlite3_open_v2(tpath, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
                sqlite3_stmt *s = NULL;
                if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL) == SQLITE_OK &&
                    sqlite3_step(s) == SQLITE_ROW)
                        ok = strcmp((const char *)sqlite3_column_text(s, 0), "ok") == 0;
                sqlite3_finalize(s);
                s = NULL;
                if (ok && sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &s, NULL) == SQLITE_OK)
                        ok = sqlite3_step(s) == SQLITE_DONE;
                sqlite3_finalize(s);
        }
        sqlite3_close(db);
        return ok;
}

/* ---- open, schema -------------------------------------------------------- */

TEST(open_reopen_schema) {
        tmp_setup();
        ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        ASSERT_OK(ntfs_journal_session_create(j, "a", -1, NULL));
        ntfs_journal_close(j);
        j = NULL;
        ASSERT_EQ(raw_int("PRAGMA user_version"), NTFS_JOURNAL_SCHEMA_VERSION);
        struct stat st;
        ASSERT_OK(stat(tpath, &st));
        ASSERT_EQ(st.st_mode & 0077, 0); /* private to the daemon's user */
        ASSERT(raw_int("SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'") == 1);
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        _cleanup_(ntfs_jsession_release) struct ntfs_jsession si = {};
        ASSERT_OK(ntfs_journal_session_get(j, "a", &si));
        ASSERT_STREQ(si.name, "a");
        ntfs_journal_close(j);
        ASSERT_ERR(ntfs_journal_open("/nonexistent-dir/x/journal.db", &j), -ENOENT);
        ASSERT_ERR(ntfs_journal_open(NULL, &j), -EINVAL);
        tmp_cleanup();
}

TEST(schema_version_mismatch) {
        tmp_setup();
        ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        ntfs_journal_close(j);
        j = NULL;
        /* A newer schema: refused, and the file left as it was. */
        raw_exec("PRAGMA user_version = 99");
        ASSERT_ERR(ntfs_journal_open(tpath, &j), -NTFS_EBADFORMAT);
        ASSERT(j == NULL);
        ASSERT_EQ(raw_int("PRAGMA user_version"), 99);
        tmp_cleanup();

        /* Another application's database. */
        tmp_setup();
        raw_exec("PRAGMA journal_mode=DELETE; CREATE TABLE x(a); INSERT INTO x VALUES(1);");
        ASSERT_ERR(ntfs_journal_open(tpath, &j), -NTFS_EBADFORMAT);
        ASSERT_EQ(raw_int("SELECT count(*) FROM x"), 1);
        ASSERT_EQ(raw_int("SELECT count(*) FROM sqlite_master"), 1);
        tmp_cleanup();

        /* Not SQLite at all. */
        tmp_setup();
        ASSERT_OK(ntfs_write_file_durable(tpath, "this is not a database, not at all.....", 40, 0600));
        ASSERT_ERR(ntfs_journal_open(tpath, &j), -NTFS_EBADFORMAT);
        tmp_cleanup();
}

/* ---- sessions ------------------------------------------------------------ */

TEST(sessions) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        ASSERT_ERR(ntfs_journal_session_create(j, "s", 0, NULL), -NTFS_ESESSEXISTS);
        ASSERT_ERR(ntfs_journal_session_create(j, "a/b", 0, NULL), -NTFS_EINVALNAME);
        ASSERT_ERR(ntfs_journal_session_create(j, "t", 0, "{bad"), -NTFS_EBADREQ);
        ASSERT_OK(ntfs_journal_session_create(j, "t", 42, "{\"model\":\"m\",\"a\":1}"));
        _cleanup_(ntfs_jsession_release) struct ntfs_jsession si = {};
        ASSERT_OK(ntfs_journal_session_get(j, "t", &si));
        ASSERT_EQ(si.uid, 42);
        ASSERT_EQ(si.ended_ns, 0);
        ASSERT_STREQ(si.metadata_json, "{\"a\":1,\"model\":\"m\"}");
        ASSERT(si.created_ns > 0);
        ASSERT_ERR(ntfs_journal_session_get(j, "nope", &si), -NTFS_ENOSESSION);

        ASSERT_OK(ntfs_journal_session_end(j, "t"));
        ntfs_jsession_release(&si);
        ASSERT_OK(ntfs_journal_session_get(j, "t", &si));
        int64_t ended = si.ended_ns;
        ASSERT(ended > 0);
        ASSERT_OK(ntfs_journal_session_end(j, "t")); /* idempotent, time kept */
        ntfs_jsession_release(&si);
        ASSERT_OK(ntfs_journal_session_get(j, "t", &si));
        ASSERT_EQ(si.ended_ns, ended);
        ASSERT_ERR(ntfs_journal_session_end(j, "nope"), -NTFS_ENOSESSION);

        struct ntfs_jsession *arr = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_journal_session_list(j, false, &arr, &n));
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(arr[0].name, "s");
        ntfs_jsessions_free(arr, n);
        ASSERT_OK(ntfs_journal_session_list(j, true, &arr, &n));
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(arr[1].name, "t");
        ntfs_jsessions_free(arr, n);
        tmp_cleanup();
}

/* ---- effects ------------------------------------------------------------- */

TEST(derive_key) {
        char a[65], b[65], c[65];
        ASSERT_OK(ntfs_journal_derive_key("s", 3, "bash_run", "{\"command\":\"ls\",\"x\":[1,2]}", a));
        ASSERT_OK(ntfs_journal_derive_key("s", 3, "bash_run", " { \"x\" : [1, 2], \"command\":\"ls\"}", b));
        ASSERT_EQ(strlen(a), 64);
        ASSERT_STREQ(a, b); /* canonical: key order and spaces do not matter */
        ASSERT_OK(ntfs_journal_derive_key("s", 4, "bash_run", "{\"command\":\"ls\",\"x\":[1,2]}", c));
        ASSERT(strcmp(a, c) != 0);
        ASSERT_OK(ntfs_journal_derive_key("s", 3, "bash_write", "{\"command\":\"ls\",\"x\":[1,2]}", c));
        ASSERT(strcmp(a, c) != 0);
        ASSERT_OK(ntfs_journal_derive_key("t", 3, "bash_run", "{\"command\":\"ls\",\"x\":[1,2]}", c));
        ASSERT(strcmp(a, c) != 0);
        /* Field boundaries are length-prefixed: "ab"+"c" differs from "a"+"bc". */
        ASSERT_OK(ntfs_journal_derive_key("ab", 0, "c", "1", a));
        ASSERT_OK(ntfs_journal_derive_key("a", 0, "bc", "1", b));
        ASSERT(strcmp(a, b) != 0);
        ASSERT_ERR(ntfs_journal_derive_key("s", 3, "t", "{\"command\":", a), -NTFS_EBADREQ);
}

TEST(effect_begin_finish) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        struct ntfs_effect_intent in = intent("toolu_1", 1, "{\"command\": \"curl x\"}");
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        bool existing = true;
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, &existing));
        ASSERT(!existing);
        ASSERT(e.id > 0);
        ASSERT_EQ(e.status, NTFS_EFFECT_PENDING);
        ASSERT_STREQ(e.input_json, "{\"command\":\"curl x\"}");
        ASSERT_STREQ(e.idempotency_key, "toolu_1");
        ASSERT_STREQ(e.commit_before, C1);
        ASSERT(e.commit_after == NULL && e.result_json == NULL);
        ASSERT_STREQ(e.effect_class, "irreversible");
        ASSERT_EQ(e.ended_ns, 0);

        ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{\"exit\":0,\"out\":\"hi\"}", C2,
                                             NULL));
        _cleanup_(ntfs_effect_release) struct ntfs_effect g = {};
        ASSERT_OK(ntfs_journal_effect_get(j, e.id, &g));
        ASSERT_EQ(g.status, NTFS_EFFECT_DONE);
        ASSERT_STREQ(g.result_json, "{\"exit\":0,\"out\":\"hi\"}");
        ASSERT_STREQ(g.commit_after, C2);
        ASSERT(g.ended_ns >= g.started_ns && g.duration_ns >= 0);
        ntfs_effect_release(&g);
        ASSERT_OK(ntfs_journal_effect_get_by_key(j, "s", "toolu_1", &g));
        ASSERT_EQ(g.id, e.id);
        ASSERT_ERR(ntfs_journal_effect_get_by_key(j, "s", "toolu_2", &g), -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_journal_effect_get(j, 9999, &g), -NTFS_ENOTFOUND);

        /* Completion happens once. */
        ASSERT_ERR(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_FAILED, NULL, NULL, "x"), -NTFS_ECONFLICT);
        ASSERT_ERR(ntfs_journal_effect_mark_unknown(j, e.id, "x"), -NTFS_ECONFLICT);
        ASSERT_ERR(ntfs_journal_effect_finish(j, 9999, NTFS_EFFECT_DONE, NULL, NULL, NULL), -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_PENDING, NULL, NULL, NULL), -EINVAL);

        /* Rejected inputs write nothing. */
        long long before = 0;
        struct ntfs_effect *arr = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_journal_effect_list(j, "s", 0, 0, 0, &arr, &n));
        before = (long long)n;
        ntfs_effects_free(arr, n);
        struct ntfs_effect_intent bad = intent("k2", 2, "{\"command\": ");
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -NTFS_EBADREQ);
        bad = intent("k2", 2, "{\"a\":1} trailing");
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -NTFS_EBADREQ);
        bad = intent("k2", 2, "");
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -NTFS_EBADREQ);
        bad = intent("k2", 2, "{}");
        bad.effect_class = "dangerous";
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -EINVAL);
        bad = intent("k2", 2, "{}");
        bad.commit_before = "abc";
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -EINVAL);
        bad = intent("k2", 2, "{}");
        bad.session = "ghost";
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -NTFS_ENOSESSION);
        bad = intent("k\n2", 2, "{}");
        ASSERT_ERR(ntfs_journal_effect_begin(j, &bad, NULL, NULL), -EINVAL);
        ASSERT_ERR(ntfs_journal_effect_finish(j, e.id + 1, NTFS_EFFECT_DONE, "{x", NULL, NULL),
                   -NTFS_EBADREQ);
        ASSERT_OK(ntfs_journal_effect_list(j, "s", 0, 0, 0, &arr, &n));
        ASSERT_EQ((long long)n, before);
        ntfs_effects_free(arr, n);
        tmp_cleanup();
}

TEST(idempotency) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        struct ntfs_effect_intent in = intent("toolu_A", 1, "{\"url\":\"http://127.0.0.1/\"}");
        in.tool = "fetch_url";
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {}, again = {}, d1 = {}, d2 = {};
        bool existing;
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, &existing));
        ASSERT(!existing);
        ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{\"status\":200}", NULL, NULL));
        /* The retry (even at another step, with other input) gets the recorded row. */
        in.step = 7;
        in.input_json = "{\"url\":\"http://other/\"}";
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &again, &existing));
        ASSERT(existing);
        ASSERT_EQ(again.id, e.id);
        ASSERT_EQ(again.status, NTFS_EFFECT_DONE);
        ASSERT_STREQ(again.result_json, "{\"status\":200}");
        /* Same key in another session is another effect. */
        ASSERT_OK(ntfs_journal_session_create(j, "s2", 0, NULL));
        in.session = "s2";
        ntfs_effect_release(&again);
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &again, &existing));
        ASSERT(!existing);
        ASSERT(again.id != e.id);

        /* Derived keys: same (session, step, tool, input) is the same effect. */
        struct ntfs_effect_intent dv = intent(NULL, 5, "{\"command\":\"date\",\"cwd\":\"/\"}");
        ASSERT_OK(ntfs_journal_effect_begin(j, &dv, &d1, &existing));
        ASSERT(!existing);
        char key[65];
        ASSERT_OK(ntfs_journal_derive_key("s", 5, "bash_run", dv.input_json, key));
        ASSERT_STREQ(d1.idempotency_key, key);
        dv.input_json = "{\"cwd\":\"/\",\"command\":\"date\"}";
        ASSERT_OK(ntfs_journal_effect_begin(j, &dv, &d2, &existing));
        ASSERT(existing);
        ASSERT_EQ(d2.id, d1.id);
        ASSERT_EQ(raw_int("SELECT count(*) FROM effects"), 3);
        tmp_cleanup();
}

struct race {
        ntfs_journal *j;
        pthread_barrier_t *bar;
        int64_t id;
        bool existing;
        int r;
};

static void *race_begin(void *p) {
        struct race *r = p;
        struct ntfs_effect_intent in = intent("toolu_race", 1, "{\"command\":\"curl -X POST x\"}");
        struct ntfs_effect e = {};
        pthread_barrier_wait(r->bar);
        r->r = ntfs_journal_effect_begin(r->j, &in, &e, &r->existing);
        r->id = e.id;
        ntfs_effect_release(&e);
        return NULL;
}

TEST(idempotency_race_8_threads) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        /* Half the threads use a second connection to the same file, so the
         * race also goes through SQLite's locking, not only the handle's mutex. */
        _cleanup_journal_ ntfs_journal *j2 = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j2));
        for (int round = 0; round < 5; round++) {
                pthread_barrier_t bar;
                pthread_barrier_init(&bar, NULL, 8);
                struct race rs[8];
                pthread_t th[8];
                for (int i = 0; i < 8; i++) {
                        rs[i] = (struct race){.j = i % 2 ? j2 : j, .bar = &bar};
                        ASSERT_EQ(pthread_create(&th[i], NULL, race_begin, &rs[i]), 0);
                }
                int fresh_rows = 0;
                for (int i = 0; i < 8; i++) {
                        pthread_join(th[i], NULL);
                        ASSERT_OK(rs[i].r);
                        ASSERT_EQ(rs[i].id, rs[0].id);
                        fresh_rows += !rs[i].existing;
                }
                pthread_barrier_destroy(&bar);
                /* First round: exactly one thread wrote; later rounds: none. */
                ASSERT_EQ(fresh_rows, round == 0 ? 1 : 0);
                ASSERT_EQ(raw_int("SELECT count(*) FROM effects WHERE idempotency_key = 'toolu_race'"), 1);
        }
        tmp_cleanup();
}

TEST(effect_list) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        for (int i = 0; i < 10; i++) {
                char key[16], input[64];
                snprintf(key, sizeof key, "k%d", i);
                snprintf(input, sizeof input, "{\"i\":%d}", i);
                struct ntfs_effect_intent in = intent(key, (uint64_t)i, input);
                ASSERT_OK(ntfs_journal_effect_begin(j, &in, NULL, NULL));
        }
        struct ntfs_effect *arr = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_journal_effect_list(j, "s", 0, 0, 0, &arr, &n));
        ASSERT_EQ(n, 10);
        for (size_t i = 1; i < n; i++)
                ASSERT(arr[i].id > arr[i - 1].id);
        ntfs_effects_free(arr, n);
        ASSERT_OK(ntfs_journal_effect_list(j, "s", 4, 3, 1, &arr, &n));
        ASSERT_EQ(n, 3);
        ASSERT_EQ(arr[0].step, 5);
        ASSERT_EQ(arr[2].step, 7);
        ntfs_effects_free(arr, n);
        ASSERT_OK(ntfs_journal_effect_list(j, "s", 100, 0, 0, &arr, &n));
        ASSERT_EQ(n, 0);
        ntfs_effects_free(arr, n);
        ASSERT_ERR(ntfs_journal_effect_list(j, "ghost", 0, 0, 0, &arr, &n), -NTFS_ENOSESSION);
        uint64_t cnt = 0;
        ASSERT_OK(ntfs_journal_effect_count(j, "s", 0, &cnt));
        ASSERT_EQ(cnt, 10);
        ASSERT_OK(ntfs_journal_effect_count(j, "s", 4, &cnt));
        ASSERT_EQ(cnt, 6);
        ASSERT_OK(ntfs_journal_effect_count(j, "s", 100, &cnt));
        ASSERT_EQ(cnt, 0);
        ASSERT_ERR(ntfs_journal_effect_count(j, "ghost", 0, &cnt), -NTFS_ENOSESSION);

        json_t *a = NULL;
        ASSERT_OK(ntfs_journal_effect_list_json(j, "s", 9, 0, 0, &a));
        ASSERT_EQ(json_array_size(a), 1);
        json_t *o = json_array_get(a, 0);
        ASSERT_EQ(json_integer_value(json_object_get(json_object_get(o, "input"), "i")), 9);
        ASSERT_STREQ(json_string_value(json_object_get(o, "status")), "pending");
        ASSERT_STREQ(json_string_value(json_object_get(o, "commit_before")), C1);
        ASSERT(json_is_null(json_object_get(o, "result")));
        ASSERT(json_is_null(json_object_get(o, "ended_ns")));
        json_decref(a);
        tmp_cleanup();
}

struct pend {
        int n;
        int64_t ids[16];
};

static int pend_cb(const struct ntfs_effect *e, void *u) {
        struct pend *p = u;
        if (e->status != NTFS_EFFECT_PENDING || p->n >= 16)
                return -EINVAL;
        p->ids[p->n++] = e->id;
        return 0;
}

static int stop_cb(const struct ntfs_effect *e, void *u) {
        return -ECANCELED;
}

TEST(pending_and_unknown) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        int64_t ids[4];
        for (int i = 0; i < 4; i++) {
                char key[8];
                snprintf(key, sizeof key, "p%d", i);
                struct ntfs_effect_intent in = intent(key, (uint64_t)i, "{}");
                _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
                ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, NULL));
                ids[i] = e.id;
        }
        ASSERT_OK(ntfs_journal_effect_finish(j, ids[1], NTFS_EFFECT_FAILED, "{\"exit\":137}", C2,
                                             "killed: timeout"));
        struct pend p = {};
        ASSERT_EQ(ntfs_journal_pending(j, pend_cb, &p), 3);
        ASSERT_EQ(p.n, 3);
        ASSERT_EQ(p.ids[0], ids[0]);
        ASSERT_EQ(p.ids[1], ids[2]);
        ASSERT_EQ(p.ids[2], ids[3]);
        ASSERT_ERR(ntfs_journal_pending(j, stop_cb, NULL), -ECANCELED);
        ASSERT_OK(ntfs_journal_effect_mark_unknown(j, ids[0], "in flight at crash"));
        _cleanup_(ntfs_effect_release) struct ntfs_effect g = {};
        ASSERT_OK(ntfs_journal_effect_get(j, ids[0], &g));
        ASSERT_EQ(g.status, NTFS_EFFECT_OUTCOME_UNKNOWN);
        ASSERT_STREQ(g.reason, "in flight at crash");
        ASSERT(g.result_json == NULL);
        ntfs_effect_release(&g);
        ASSERT_OK(ntfs_journal_effect_get(j, ids[1], &g));
        ASSERT_EQ(g.status, NTFS_EFFECT_FAILED);
        ASSERT_STREQ(g.reason, "killed: timeout");
        p = (struct pend){};
        ASSERT_EQ(ntfs_journal_pending(j, pend_cb, &p), 2);
        enum ntfs_effect_status st;
        ASSERT_OK(ntfs_effect_status_from_string("outcome_unknown", &st));
        ASSERT_EQ(st, NTFS_EFFECT_OUTCOME_UNKNOWN);
        ASSERT_ERR(ntfs_effect_status_from_string("bogus", &st), -EINVAL);
        tmp_cleanup();
}

/* ---- agent state, snapshots ---------------------------------------------- */

TEST(agent_state) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        _cleanup_(ntfs_agent_state_release) struct ntfs_agent_state st = {};
        ASSERT_ERR(ntfs_journal_state_load(j, "s", true, 0, &st), -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_journal_state_load(j, "ghost", true, 0, &st), -NTFS_ENOSESSION);
        ASSERT_OK(ntfs_journal_state_save(j, "s", 1, "[{\"role\":\"user\",\"content\":\"hi\"}]", 1, C1));
        ASSERT_OK(ntfs_journal_state_save(j, "s", 2, "[1,2]", 2, NULL));
        ASSERT_OK(ntfs_journal_state_save(j, "s", 2, "[1,2,3]", 3, C2)); /* replaces step 2 */
        ASSERT_ERR(ntfs_journal_state_save(j, "s", 3, "[1,", 3, NULL), -NTFS_EBADREQ);
        ASSERT_ERR(ntfs_journal_state_save(j, "ghost", 3, "[]", 3, NULL), -NTFS_ENOSESSION);
        ASSERT_ERR(ntfs_journal_state_save(j, "s", 3, "[]", 3, "zz"), -EINVAL);
        ASSERT_OK(ntfs_journal_state_load(j, "s", true, 0, &st));
        ASSERT_EQ(st.step, 2);
        ASSERT_EQ(st.cursor, 3);
        ASSERT_STREQ(st.messages_json, "[1,2,3]");
        ASSERT_STREQ(st.commit, C2);
        ntfs_agent_state_release(&st);
        ASSERT_OK(ntfs_journal_state_load(j, "s", false, 1, &st));
        ASSERT_STREQ(st.messages_json, "[{\"content\":\"hi\",\"role\":\"user\"}]");
        ASSERT_STREQ(st.commit, C1);
        ntfs_agent_state_release(&st);
        ASSERT_ERR(ntfs_journal_state_load(j, "s", false, 9, &st), -NTFS_ENOTFOUND);
        tmp_cleanup();
}

TEST(snapshots) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        _cleanup_free_ char *id = NULL;
        ASSERT_OK(ntfs_journal_snapshot_add(j, "snap-1", "s", 3, C1, 4096, NULL));
        ASSERT_OK(ntfs_journal_snapshot_add(j, NULL, "s", 5, C2, 8192, &id));
        ASSERT_EQ(strlen(id), 32);
        ASSERT_ERR(ntfs_journal_snapshot_add(j, "snap-1", "s", 6, C3, 1, NULL), -EEXIST);
        ASSERT_ERR(ntfs_journal_snapshot_add(j, "snap-2", "ghost", 6, C3, 1, NULL), -NTFS_ENOSESSION);
        ASSERT_ERR(ntfs_journal_snapshot_add(j, "snap-2", "s", 6, "x", 1, NULL), -EINVAL);
        _cleanup_(ntfs_snapshot_release) struct ntfs_snapshot sn = {};
        ASSERT_OK(ntfs_journal_snapshot_get(j, id, &sn));
        ASSERT_EQ(sn.step, 5);
        ASSERT_EQ(sn.size_bytes, 8192);
        ASSERT_STREQ(sn.commit, C2);
        ASSERT_STREQ(sn.session, "s");
        ASSERT_ERR(ntfs_journal_snapshot_get(j, "nope", &sn), -NTFS_ENOTFOUND);
        struct ntfs_snapshot *arr = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_journal_snapshot_list(j, "s", &arr, &n));
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(arr[0].snapshot_id, "snap-1");
        ntfs_snapshots_free(arr, n);
        ASSERT_OK(ntfs_journal_snapshot_list(j, NULL, &arr, &n));
        ASSERT_EQ(n, 2);
        ntfs_snapshots_free(arr, n);
        tmp_cleanup();
}

/* ---- trunks, forks ------------------------------------------------------- */

TEST(trunks_and_forks) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        ASSERT_OK(ntfs_journal_trunk_init(j, "main", C1, 0));
        ASSERT_ERR(ntfs_journal_trunk_init(j, "main", C1, 0), -EEXIST);
        _cleanup_(ntfs_trunk_version_release) struct ntfs_trunk_version tv = {};
        ASSERT_OK(ntfs_journal_trunk_get(j, "main", 0, &tv));
        ASSERT_EQ(tv.version, 1);
        ASSERT_EQ(tv.parent_version, 0);
        ASSERT_STREQ(tv.commit, C1);
        ASSERT_ERR(ntfs_journal_trunk_get(j, "nope", 0, &tv), -NTFS_ENOTFOUND);

        ASSERT_OK(ntfs_journal_session_create(j, "f1", 0, NULL));
        ASSERT_OK(ntfs_journal_session_create(j, "f2", 0, NULL));
        ASSERT_OK(ntfs_journal_fork_create(j, "f1", "main", 1));
        ASSERT_OK(ntfs_journal_fork_create(j, "f2", "main", 1));
        ASSERT_ERR(ntfs_journal_fork_create(j, "f1", "main", 1), -EEXIST);
        ASSERT_ERR(ntfs_journal_fork_create(j, "s", "main", 2), -NTFS_ENOTFOUND);
        ASSERT_ERR(ntfs_journal_fork_create(j, "ghost", "main", 1), -NTFS_ENOSESSION);

        /* f1 commits first; f2's CAS from the same base conflicts. */
        uint64_t head = 0;
        ASSERT_OK(ntfs_journal_trunk_advance(j, "main", 1, C2, "f1", 10, &head));
        ASSERT_EQ(head, 2);
        ASSERT_OK(ntfs_journal_fork_set_status(j, "f1", NTFS_FORK_COMMITTED, 0));
        ASSERT_ERR(ntfs_journal_trunk_advance(j, "main", 1, C3, "f2", 11, &head), -NTFS_ECONFLICT);
        ASSERT_EQ(head, 2);
        ASSERT_OK(ntfs_journal_fork_set_status(j, "f2", NTFS_FORK_CONFLICTED, 0));
        /* f2 rebases onto version 2 and retries. */
        ASSERT_OK(ntfs_journal_fork_set_status(j, "f2", NTFS_FORK_ACTIVE, 2));
        ASSERT_OK(ntfs_journal_trunk_advance(j, "main", 2, C3, "f2", 11, &head));
        ASSERT_EQ(head, 3);
        ASSERT_OK(ntfs_journal_fork_set_status(j, "f2", NTFS_FORK_COMMITTED, 0));
        ASSERT_ERR(ntfs_journal_fork_set_status(j, "f2", NTFS_FORK_ABORTED, 0), -NTFS_ECONFLICT);
        ASSERT_ERR(ntfs_journal_trunk_advance(j, "nope", 1, C3, NULL, 0, &head), -NTFS_ENOTFOUND);

        _cleanup_(ntfs_fork_release) struct ntfs_fork f = {};
        ASSERT_OK(ntfs_journal_fork_get(j, "f2", &f));
        ASSERT_EQ(f.status, NTFS_FORK_COMMITTED);
        ASSERT_EQ(f.base_version, 2);
        ASSERT(f.resolved_ns > 0);
        ASSERT_STREQ(ntfs_fork_status_to_string(f.status), "committed");
        ASSERT_ERR(ntfs_journal_fork_get(j, "s", &f), -NTFS_ENOTFOUND);

        ntfs_trunk_version_release(&tv);
        ASSERT_OK(ntfs_journal_trunk_get(j, "main", 2, &tv));
        ASSERT_STREQ(tv.merged_from, "f1");
        ASSERT_EQ(tv.parent_version, 1);
        ASSERT_EQ(tv.effect_cursor, 10);

        struct ntfs_trunk_version *arr = NULL;
        size_t n = 0;
        ASSERT_OK(ntfs_journal_trunk_list(j, "main", &arr, &n));
        ASSERT_EQ(n, 3);
        ASSERT_STREQ(arr[2].commit, C3);
        ntfs_trunk_versions_free(arr, n);
        ASSERT_OK(ntfs_journal_trunk_init(j, "other", C4, 0));
        ASSERT_OK(ntfs_journal_trunk_list(j, NULL, &arr, &n));
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(arr[0].name, "main");
        ASSERT_EQ(arr[0].version, 3);
        ASSERT_STREQ(arr[1].name, "other");
        ntfs_trunk_versions_free(arr, n);

        struct ntfs_fork *fa = NULL;
        ASSERT_OK(ntfs_journal_session_create(j, "f3", 0, NULL));
        ASSERT_OK(ntfs_journal_fork_create(j, "f3", "main", 3));
        ASSERT_OK(ntfs_journal_fork_list(j, "main", true, &fa, &n));
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(fa[0].session, "f3");
        ntfs_forks_free(fa, n);
        ASSERT_OK(ntfs_journal_fork_list(j, NULL, false, &fa, &n));
        ASSERT_EQ(n, 3);
        ntfs_forks_free(fa, n);
        tmp_cleanup();
}

struct cas {
        ntfs_journal *j;
        int ok, conflicts, err;
};

static void *cas_worker(void *p) {
        struct cas *c = p;
        for (int i = 0; i < 25; i++) {
                struct ntfs_trunk_version tv = {};
                if (ntfs_journal_trunk_get(c->j, "main", 0, &tv) < 0) {
                        c->err++;
                        continue;
                }
                uint64_t head;
                int r = ntfs_journal_trunk_advance(c->j, "main", tv.version, C5, NULL, 0, &head);
                if (r == 0)
                        c->ok++;
                else if (r == -NTFS_ECONFLICT && head > tv.version)
                        c->conflicts++;
                else
                        c->err++;
                ntfs_trunk_version_release(&tv);
        }
        return NULL;
}

TEST(trunk_cas_race) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        ASSERT_OK(ntfs_journal_trunk_init(j, "main", C1, 0));
        struct cas cs[8];
        pthread_t th[8];
        for (int i = 0; i < 8; i++) {
                cs[i] = (struct cas){.j = j};
                ASSERT_EQ(pthread_create(&th[i], NULL, cas_worker, &cs[i]), 0);
        }
        int ok = 0, conflicts = 0;
        for (int i = 0; i < 8; i++) {
                pthread_join(th[i], NULL);
                ASSERT_EQ(cs[i].err, 0);
                ok += cs[i].ok;
                conflicts += cs[i].conflicts;
        }
        ASSERT_EQ(ok + conflicts, 200);
        _cleanup_(ntfs_trunk_version_release) struct ntfs_trunk_version tv = {};
        ASSERT_OK(ntfs_journal_trunk_get(j, "main", 0, &tv));
        /* Every success made exactly one version; no version was lost or doubled. */
        ASSERT_EQ(tv.version, (uint64_t)ok + 1);
        ASSERT_EQ(raw_int("SELECT count(*) FROM trunks WHERE name = 'main'"), ok + 1);
        printf("# trunk CAS race: %d advances, %d conflicts\n", ok, conflicts);
        tmp_cleanup();
}

/* ---- quotas, pins, meta -------------------------------------------------- */

TEST(quotas) {
        tmp_setup();
        ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        int64_t v = -1;
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "calls.bash_run", &v));
        ASSERT_EQ(v, 0);
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "calls.bash_run", 1, 3, &v));
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "calls.bash_run", 2, 3, &v));
        ASSERT_EQ(v, 3);
        v = -1;
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "calls.bash_run", 1, 3, &v), -NTFS_EQUOTA);
        ASSERT_EQ(v, -1); /* untouched on error */
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "calls.bash_run", &v));
        ASSERT_EQ(v, 3);
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "output_bytes", 1000000, -1, &v)); /* no limit */
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "exec_seconds", 5, 10, NULL));
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "exec_seconds", -2, 1, &v)); /* refunds pass */
        ASSERT_EQ(v, 3);
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "big", INT64_MAX, -1, NULL), 0);
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "big", 1, -1, NULL), -ERANGE);
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "", 1, -1, NULL), -EINVAL);
        ntfs_journal_close(j);
        j = NULL;

        /* Persisted across a restart. */
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "calls.bash_run", 1, 3, &v), -NTFS_EQUOTA);
        json_t *all = NULL;
        ASSERT_OK(ntfs_journal_quota_get_all(j, "s", &all));
        ASSERT_EQ(json_object_size(all), 4);
        ASSERT_EQ(json_integer_value(json_object_get(all, "calls.bash_run")), 3);
        ASSERT_EQ(json_integer_value(json_object_get(all, "output_bytes")), 1000000);
        ASSERT_EQ(json_integer_value(json_object_get(all, "exec_seconds")), 3);
        json_decref(all);
        ntfs_journal_close(j);
        tmp_cleanup();
}

/* Counters charged with an effect's begin and finish: in the same
 * transaction (a failed begin charges nothing), never for a known key. */
TEST(charges_with_begin_and_finish) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        const struct ntfs_quota_charge calls[] = { { "calls", 1 }, { "calls.bash_read", 1 } };
        struct ntfs_effect_intent in = intent("c1", 1, "{\"command\":\"true\"}");
        in.charges = calls;
        in.n_charges = ARRAY_SIZE(calls);
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {}, again = {};
        bool existing = true;
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, &existing));
        ASSERT(!existing);
        int64_t v = 0;
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "calls.bash_read", &v));
        ASSERT_EQ(v, 1);
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &again, &existing)); /* a retry */
        ASSERT(existing);
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "calls", &v));
        ASSERT_EQ(v, 1);
        const struct ntfs_quota_charge used[] = { { "exec_ms", 12 }, { "output_bytes", 0 } };
        ASSERT_OK(ntfs_journal_effect_finish_charged(j, e.id, NTFS_EFFECT_DONE, "{}", NULL, NULL, used,
                                                     ARRAY_SIZE(used)));
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "exec_ms", &v));
        ASSERT_EQ(v, 12);
        json_t *all = NULL;
        ASSERT_OK(ntfs_journal_quota_get_all(j, "s", &all));
        ASSERT_EQ(json_object_size(all), 3); /* a zero delta writes no counter */
        json_decref(all);
        /* A finish that fails (not pending any more) charges nothing. */
        ASSERT_ERR(ntfs_journal_effect_finish_charged(j, e.id, NTFS_EFFECT_DONE, "{}", NULL, NULL, used, 1),
                   -NTFS_ECONFLICT);
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "exec_ms", &v));
        ASSERT_EQ(v, 12);
        /* A bad counter refuses the whole begin: no row, no charge. */
        const struct ntfs_quota_charge bad[] = { { "calls", 1 }, { "", 1 } };
        struct ntfs_effect_intent in2 = intent("c2", 2, "{}");
        in2.charges = bad;
        in2.n_charges = ARRAY_SIZE(bad);
        ASSERT_ERR(ntfs_journal_effect_begin(j, &in2, NULL, NULL), -EINVAL);
        struct ntfs_effect none = {};
        ASSERT_ERR(ntfs_journal_effect_get_by_key(j, "s", "c2", &none), -NTFS_ENOTFOUND);
        ASSERT_OK(ntfs_journal_quota_get(j, "s", "calls", &v));
        ASSERT_EQ(v, 1);
        /* A begin whose insert fails (unknown session) charges nothing. */
        struct ntfs_effect_intent in3 = intent("c3", 3, "{}");
        in3.session = "nobody";
        in3.charges = calls;
        in3.n_charges = 1;
        ASSERT_ERR(ntfs_journal_effect_begin(j, &in3, NULL, NULL), -NTFS_ENOSESSION);
        ASSERT_OK(ntfs_journal_quota_get(j, "nobody", "calls", &v));
        ASSERT_EQ(v, 0);
        tmp_cleanup();
}

struct seen {
        int n;
        char ids[16][65];
};

static int commit_cb(const char *c, void *u) {
        struct seen *s = u;
        if (s->n >= 16)
                return -E2BIG;
        snprintf(s->ids[s->n++], 65, "%s", c);
        return 0;
}

static bool seen_has(const struct seen *s, const char *c) {
        for (int i = 0; i < s->n; i++)
                if (strcmp(s->ids[i], c) == 0)
                        return true;
        return false;
}

TEST(pins_and_gc_roots) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        struct seen s = {};
        ASSERT_EQ(ntfs_journal_for_each_commit(j, commit_cb, &s), 0);
        struct ntfs_effect_intent in = intent("g1", 1, "{}"); /* before = C1 */
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, NULL));
        ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{}", C2, NULL));
        ASSERT_OK(ntfs_journal_state_save(j, "s", 1, "[]", 0, C2)); /* duplicate of C2 */
        ASSERT_OK(ntfs_journal_snapshot_add(j, "sn", "s", 1, C3, 1, NULL));
        ASSERT_OK(ntfs_journal_trunk_init(j, "main", C4, 0));
        ASSERT_OK(ntfs_journal_pin(j, C5, "tag:release"));
        ASSERT_OK(ntfs_journal_pin(j, C5, "tag:release")); /* idempotent */
        ASSERT_ERR(ntfs_journal_pin(j, "bad", "x"), -EINVAL);
        ASSERT_EQ(ntfs_journal_for_each_commit(j, commit_cb, &s), 5);
        ASSERT(seen_has(&s, C1) && seen_has(&s, C2) && seen_has(&s, C3) && seen_has(&s, C4) &&
               seen_has(&s, C5));
        ASSERT_OK(ntfs_journal_unpin(j, C5, "tag:release"));
        ASSERT_ERR(ntfs_journal_unpin(j, C5, "tag:release"), -NTFS_ENOTFOUND);
        s = (struct seen){};
        ASSERT_EQ(ntfs_journal_for_each_commit(j, commit_cb, &s), 4);
        ASSERT(!seen_has(&s, C5));
        tmp_cleanup();
}

TEST(meta) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        _cleanup_free_ char *v = NULL;
        ASSERT_ERR(ntfs_journal_meta_get(j, "store.id", &v), -NTFS_ENOTFOUND);
        ASSERT_OK(ntfs_journal_meta_set(j, "store.id", "abc"));
        ASSERT_OK(ntfs_journal_meta_set(j, "store.id", "def"));
        ASSERT_OK(ntfs_journal_meta_get(j, "store.id", &v));
        ASSERT_STREQ(v, "def");
        ASSERT_ERR(ntfs_journal_meta_set(j, "", "x"), -EINVAL);
        tmp_cleanup();
}

/* ---- redaction ----------------------------------------------------------- */

#define SECRET "sk-ant-api03-SECRETSECRET"
#define SECRET2 "ghp_tokentokentoken"

static long count_in_file(const char *path, const char *needle) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (ntfs_read_file(path, 64u << 20, &buf, &len) < 0)
                return 0;
        long n = 0;
        size_t nl = strlen(needle);
        for (size_t i = 0; i + nl <= len; i++)
                if (memcmp(buf + i, needle, nl) == 0)
                        n++;
        return n;
}

TEST(redaction) {
        ntfs_journal *j = fresh();
        const char *too_short[] = {"abc", NULL};
        ASSERT_ERR(ntfs_journal_set_secrets(j, too_short), -EINVAL);
        const char *secrets[] = {SECRET, SECRET2, NULL};
        ASSERT_OK(ntfs_journal_set_secrets(j, secrets));
        struct ntfs_effect_intent in = intent("r1", 1,
                                              "{\"command\":\"curl -H 'x-api-key: " SECRET
                                              "' http://x\",\"" SECRET2 "\":[\"" SECRET2 "\"]}");
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {}, g = {};
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, NULL));
        ASSERT(!strstr(e.input_json, SECRET) && !strstr(e.input_json, SECRET2));
        ASSERT(strstr(e.input_json, "x-api-key: [REDACTED]"));
        ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_FAILED, "{\"out\":\"key=" SECRET "\\n\"}",
                                             NULL, "upstream said: bad key " SECRET));
        ASSERT_OK(ntfs_journal_effect_get(j, e.id, &g));
        ASSERT_STREQ(g.result_json, "{\"out\":\"key=[REDACTED]\\n\"}");
        ASSERT_STREQ(g.reason, "upstream said: bad key [REDACTED]");
        /* Inside a _b64 value (a command's exact output): found in the
         * decoded bytes, replaced there, encoded again; a value that is not
         * base64 is redacted as text. */
        {
                static const char raw[] = "\0" SECRET "\xff";
                _cleanup_free_ char *b64 = NULL, *res = NULL, *dec = NULL;
                ASSERT_OK(ntfs_base64_encode(raw, sizeof raw - 1, &b64, NULL));
                ASSERT(asprintf(&res, "{\"stdout_b64\":\"%s\",\"x_b64\":\"not base64 " SECRET "\"}", b64) > 0);
                struct ntfs_effect_intent inb = intent("rb", 9, "{}");
                _cleanup_(ntfs_effect_release) struct ntfs_effect eb = {}, gb = {};
                ASSERT_OK(ntfs_journal_effect_begin(j, &inb, &eb, NULL));
                ASSERT_OK(ntfs_journal_effect_finish(j, eb.id, NTFS_EFFECT_DONE, res, NULL, NULL));
                ASSERT_OK(ntfs_journal_effect_get(j, eb.id, &gb));
                json_t *o = json_loads(gb.result_json, 0, NULL);
                json_t *v = json_object_get(o, "stdout_b64");
                size_t dl = 0;
                ASSERT_OK(ntfs_base64_decode(json_string_value(v), json_string_length(v), &dec, &dl));
                ASSERT_EQ(dl, 12);
                ASSERT(memcmp(dec, "\0[REDACTED]\xff", 12) == 0);
                ASSERT_STREQ(json_string_value(json_object_get(o, "x_b64")), "not base64 [REDACTED]");
                json_decref(o);
        }
        /* A secret written with JSON escapes is still found (decoded first). */
        struct ntfs_effect_intent in2 = intent("r2", 2, "{\"t\":\"\\u0073k-ant-api03-SECRETSECRET\"}");
        _cleanup_(ntfs_effect_release) struct ntfs_effect e2 = {};
        ASSERT_OK(ntfs_journal_effect_begin(j, &in2, &e2, NULL));
        ASSERT_STREQ(e2.input_json, "{\"t\":\"[REDACTED]\"}");
        /* A secret made of digits inside a number. */
        const char *numeric[] = {"12345678", NULL};
        ASSERT_OK(ntfs_journal_set_secrets(j, numeric));
        struct ntfs_effect_intent in3 = intent("r3", 3, "{\"pin\":123456789}");
        _cleanup_(ntfs_effect_release) struct ntfs_effect e3 = {};
        ASSERT_OK(ntfs_journal_effect_begin(j, &in3, &e3, NULL));
        ASSERT(!strstr(e3.input_json, "12345678"));
        ASSERT_OK(ntfs_journal_set_secrets(j, secrets));
        ASSERT_OK(ntfs_journal_state_save(j, "s", 1, "[{\"content\":\"my key is " SECRET "\"}]", 1, NULL));
        ASSERT_OK(ntfs_journal_session_create(j, "t", 0, "{\"token\":\"" SECRET2 "\"}"));
        /* Names and labels are keys, stored as given: one that contains a
         * secret is refused, never stored (found by fuzz_journal). */
        ASSERT_ERR(ntfs_journal_session_create(j, "s-" SECRET2, 0, NULL), -NTFS_EINVALNAME);
        ASSERT_ERR(ntfs_journal_quota_add(j, "t", "calls." SECRET2, 1, -1, NULL), -EINVAL);
        ASSERT_ERR(ntfs_journal_meta_set(j, "k" SECRET2, "v"), -EINVAL);
        struct ntfs_effect_intent in4 = intent("t", 4, "{}");
        in4.tool = "tool-" SECRET2;
        _cleanup_(ntfs_effect_release) struct ntfs_effect e4 = {};
        ASSERT_ERR(ntfs_journal_effect_begin(j, &in4, &e4, NULL), -EINVAL);
        ntfs_journal_close(j);

        /* Nothing in the database files, WAL included. */
        char p[160];
        long hits = 0;
        const char *sfx[] = {"", "-wal", "-shm"};
        for (size_t i = 0; i < ARRAY_SIZE(sfx); i++) {
                snprintf(p, sizeof p, "%s%s", tpath, sfx[i]);
                hits += count_in_file(p, SECRET) + count_in_file(p, SECRET2) + count_in_file(p, "12345678");
        }
        ASSERT_EQ(hits, 0);
        snprintf(p, sizeof p, "%s-wal", tpath);
        long red = count_in_file(p, "[REDACTED]") + count_in_file(tpath, "[REDACTED]");
        ASSERT(red > 0); /* the rows are there, redacted */
        tmp_cleanup();
}

/* ---- fault injection: I/O errors ------------------------------------------ */

TEST(fault_error_each_write) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        ASSERT_OK(ntfs_journal_trunk_init(j, "main", C1, 0));
        ASSERT_OK(ntfs_journal_session_create(j, "f", 0, NULL));
        struct ntfs_effect_intent in = intent("fe", 1, "{}");

        ntfs_fault_arm("journal.begin", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_effect_begin(j, &in, NULL, NULL), -EIO);
        ASSERT_EQ(raw_int("SELECT count(*) FROM effects"), 0);
        ntfs_fault_disarm();
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        bool existing = true;
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, &existing));
        ASSERT(!existing); /* the failed attempt left no row behind */

        ntfs_fault_arm("journal.finish", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{}", C2, NULL), -EIO);
        ASSERT_EQ(raw_int("SELECT count(*) FROM effects WHERE status = 'pending' AND result IS NULL "
                          "AND commit_after IS NULL"),
                  1);
        ntfs_fault_disarm();
        ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{}", C2, NULL));

        ntfs_fault_arm("journal.session", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_session_create(j, "x", 0, NULL), -EIO);
        ntfs_fault_arm("journal.state", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_state_save(j, "s", 1, "[]", 0, C1), -EIO);
        ntfs_fault_arm("journal.snapshot", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_snapshot_add(j, "sn", "s", 1, C1, 1, NULL), -EIO);
        ntfs_fault_arm("journal.trunk", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_trunk_advance(j, "main", 1, C2, NULL, 0, NULL), -EIO);
        ntfs_fault_arm("journal.fork", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_fork_create(j, "f", "main", 1), -EIO);
        ntfs_fault_arm("journal.quota", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_quota_add(j, "s", "c", 1, 10, NULL), -EIO);
        ntfs_fault_arm("journal.pin", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_pin(j, C3, "o"), -EIO);
        ntfs_fault_arm("journal.meta", 1, NTFS_FAULT_ERROR);
        ASSERT_ERR(ntfs_journal_meta_set(j, "k", "v"), -EIO);
        ntfs_fault_disarm();

        /* Nothing of the failed writes is visible; the same calls now work. */
        ASSERT_EQ(raw_int("SELECT count(*) FROM sessions WHERE name = 'x'"), 0);
        ASSERT_EQ(raw_int("SELECT count(*) FROM checkpoints"), 0);
        ASSERT_EQ(raw_int("SELECT count(*) FROM snapshots"), 0);
        ASSERT_EQ(raw_int("SELECT max(version) FROM trunks"), 1);
        ASSERT_EQ(raw_int("SELECT count(*) FROM forks"), 0);
        ASSERT_EQ(raw_int("SELECT count(*) FROM quota_usage"), 0);
        ASSERT_EQ(raw_int("SELECT count(*) FROM pins"), 0);
        ASSERT_EQ(raw_int("SELECT count(*) FROM meta"), 0);
        ASSERT(db_consistent());
        ASSERT_OK(ntfs_journal_session_create(j, "x", 0, NULL));
        ASSERT_OK(ntfs_journal_state_save(j, "s", 1, "[]", 0, C1));
        ASSERT_OK(ntfs_journal_snapshot_add(j, "sn", "s", 1, C1, 1, NULL));
        ASSERT_OK(ntfs_journal_trunk_advance(j, "main", 1, C2, NULL, 0, NULL));
        ASSERT_OK(ntfs_journal_fork_create(j, "f", "main", 1));
        ASSERT_OK(ntfs_journal_quota_add(j, "s", "c", 1, 10, NULL));
        ASSERT_OK(ntfs_journal_pin(j, C3, "o"));
        ASSERT_OK(ntfs_journal_meta_set(j, "k", "v"));
        tmp_cleanup();
}

/* ---- crash injection: kill -9 a child at each point ------------------------ */

enum crash_step { AFTER_BEGIN, AT_BEGIN, AT_FINISH, AFTER_FINISH, AT_OTHER };

/* Child: opens the journal, runs the scenario, and dies by SIGKILL (from
 * the armed fault point, or explicitly after a returned call). */
static void crash_child(enum crash_step step, const char *point) {
        ntfs_journal *j = NULL;
        if (ntfs_journal_open(tpath, &j) < 0)
                _exit(10);
        struct ntfs_effect_intent in = intent("crash-key", 1, "{\"command\":\"curl -X POST x\"}");
        struct ntfs_effect e = {};
        if (step == AT_BEGIN)
                ntfs_fault_arm("journal.begin", 1, NTFS_FAULT_CRASH);
        if (step != AT_OTHER && ntfs_journal_effect_begin(j, &in, &e, NULL) < 0)
                _exit(11);
        if (step == AFTER_BEGIN)
                raise(SIGKILL); /* the effect would run now */
        if (step == AT_FINISH)
                ntfs_fault_arm("journal.finish", 1, NTFS_FAULT_CRASH);
        if (step == AT_FINISH || step == AFTER_FINISH) {
                if (ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{\"exit\":0}", C2, NULL) < 0)
                        _exit(12);
                raise(SIGKILL);
        }
        if (step == AT_OTHER) {
                ntfs_fault_arm(point, 1, NTFS_FAULT_CRASH);
                if (strcmp(point, "journal.session") == 0)
                        ntfs_journal_session_create(j, "x", 0, NULL);
                else if (strcmp(point, "journal.state") == 0)
                        ntfs_journal_state_save(j, "s", 1, "[]", 0, C1);
                else if (strcmp(point, "journal.snapshot") == 0)
                        ntfs_journal_snapshot_add(j, "sn", "s", 1, C1, 1, NULL);
                else if (strcmp(point, "journal.trunk") == 0)
                        ntfs_journal_trunk_advance(j, "main", 1, C2, NULL, 0, NULL);
                else if (strcmp(point, "journal.fork") == 0)
                        ntfs_journal_fork_create(j, "f", "main", 1);
                else if (strcmp(point, "journal.quota") == 0)
                        ntfs_journal_quota_add(j, "s", "c", 1, 10, NULL);
                else if (strcmp(point, "journal.pin") == 0)
                        ntfs_journal_pin(j, C3, "o");
                else if (strcmp(point, "journal.meta") == 0)
                        ntfs_journal_meta_set(j, "k", "v");
                else if (strcmp(point, "journal.schema") == 0) {
                        ntfs_journal_close(j);
                        unlink(tpath);
                        char p[160];
                        snprintf(p, sizeof p, "%s-wal", tpath);
                        unlink(p);
                        snprintf(p, sizeof p, "%s-shm", tpath);
                        unlink(p);
                        ntfs_journal_open(tpath, &j);
                }
        }
        _exit(20); /* the fault point did not fire */
}

static void run_crash(enum crash_step step, const char *point) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
                FAIL("fork: %m");
        if (pid == 0)
                crash_child(step, point);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        FAIL("waitpid: %m");
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
                FAIL("child did not die by SIGKILL (status 0x%x)", status);
}

/* A store prepared for the crash children: session s, session f, trunk main. */
static void crash_setup(void) {
        tmp_setup();
        ntfs_journal *j = NULL;
        if (ntfs_journal_open(tpath, &j) < 0 || ntfs_journal_session_create(j, "s", 0, NULL) < 0 ||
            ntfs_journal_session_create(j, "f", 0, NULL) < 0 || ntfs_journal_trunk_init(j, "main", C1, 0) < 0)
                abort();
        ntfs_journal_close(j);
}

static int count_pending(const struct ntfs_effect *e, void *u) {
        (*(int *)u)++;
        return 0;
}

TEST(crash_after_begin_row_is_pending) {
        crash_setup();
        run_crash(AFTER_BEGIN, NULL);
        ASSERT(db_consistent());
        _cleanup_journal_ ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        ASSERT_OK(ntfs_journal_effect_get_by_key(j, "s", "crash-key", &e));
        ASSERT_EQ(e.status, NTFS_EFFECT_PENDING);
        ASSERT_STREQ(e.commit_before, C1);
        int n = 0;
        ASSERT_EQ(ntfs_journal_pending(j, count_pending, &n), 1);
        /* Recovery: the retry with the same key is told, not re-run. */
        struct ntfs_effect_intent in = intent("crash-key", 1, "{\"command\":\"curl -X POST x\"}");
        bool existing = false;
        _cleanup_(ntfs_effect_release) struct ntfs_effect again = {};
        ASSERT_OK(ntfs_journal_effect_begin(j, &in, &again, &existing));
        ASSERT(existing && again.id == e.id && again.status == NTFS_EFFECT_PENDING);
        ASSERT_OK(ntfs_journal_effect_mark_unknown(j, e.id, "in flight when ntfsd died"));
        tmp_cleanup();
}

TEST(crash_at_begin_leaves_no_row) {
        crash_setup();
        run_crash(AT_BEGIN, NULL);
        ASSERT(db_consistent());
        ASSERT_EQ(raw_int("SELECT count(*) FROM effects"), 0);
        _cleanup_journal_ ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        int n = 0;
        ASSERT_EQ(ntfs_journal_pending(j, count_pending, &n), 0);
        tmp_cleanup();
}

TEST(crash_at_finish_stays_pending) {
        crash_setup();
        run_crash(AT_FINISH, NULL);
        ASSERT(db_consistent());
        ASSERT_EQ(raw_int("SELECT count(*) FROM effects WHERE status = 'pending' AND result IS NULL "
                          "AND commit_after IS NULL AND ended_ns IS NULL"),
                  1);
        tmp_cleanup();
}

TEST(crash_after_finish_is_done) {
        crash_setup();
        run_crash(AFTER_FINISH, NULL);
        ASSERT(db_consistent());
        _cleanup_journal_ ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        ASSERT_OK(ntfs_journal_effect_get_by_key(j, "s", "crash-key", &e));
        ASSERT_EQ(e.status, NTFS_EFFECT_DONE);
        ASSERT_STREQ(e.commit_after, C2);
        ASSERT_STREQ(e.result_json, "{\"exit\":0}");
        tmp_cleanup();
}

TEST(crash_at_every_other_write) {
        static const struct {
                const char *point, *check;
                long long want;
        } cases[] = {
                {"journal.session", "SELECT count(*) FROM sessions WHERE name = 'x'", 0},
                {"journal.state", "SELECT count(*) FROM checkpoints", 0},
                {"journal.snapshot", "SELECT count(*) FROM snapshots", 0},
                {"journal.trunk", "SELECT max(version) FROM trunks", 1},
                {"journal.fork", "SELECT count(*) FROM forks", 0},
                {"journal.quota", "SELECT count(*) FROM quota_usage", 0},
                {"journal.pin", "SELECT count(*) FROM pins", 0},
                {"journal.meta", "SELECT count(*) FROM meta", 0},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                crash_setup();
                run_crash(AT_OTHER, cases[i].point);
                if (!db_consistent())
                        FAIL("%s: database inconsistent", cases[i].point);
                if (raw_int(cases[i].check) != cases[i].want)
                        FAIL("%s: partial write visible", cases[i].point);
                ntfs_journal *j = NULL;
                ASSERT_OK(ntfs_journal_open(tpath, &j));
                ntfs_journal_close(j);
                tmp_cleanup();
        }
        /* A crash while creating the schema leaves a file that opens. */
        crash_setup();
        run_crash(AT_OTHER, "journal.schema");
        ntfs_journal *j = NULL;
        ASSERT_OK(ntfs_journal_open(tpath, &j));
        ASSERT_OK(ntfs_journal_session_create(j, "s", 0, NULL));
        ntfs_journal_close(j);
        tmp_cleanup();
}

/* ---- figures ------------------------------------------------------------- */

TEST(figures_durable_begin_finish) {
        _cleanup_journal_ ntfs_journal *j = fresh();
        const int n = 200;
        int64_t t0 = ntfs_mono_ns();
        for (int i = 0; i < n; i++) {
                char key[16];
                snprintf(key, sizeof key, "b%d", i);
                struct ntfs_effect_intent in = intent(key, (uint64_t)i, "{\"command\":\"true\"}");
                _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
                ASSERT_OK(ntfs_journal_effect_begin(j, &in, &e, NULL));
                ASSERT_OK(ntfs_journal_effect_finish(j, e.id, NTFS_EFFECT_DONE, "{\"exit\":0}", C2, NULL));
        }
        int64_t t1 = ntfs_mono_ns();
        for (int i = 0; i < n; i++) {
                char key[16];
                snprintf(key, sizeof key, "b%d", i);
                struct ntfs_effect_intent in = intent(key, (uint64_t)i, "{\"command\":\"true\"}");
                bool existing = false;
                ASSERT_OK(ntfs_journal_effect_begin(j, &in, NULL, &existing));
                ASSERT(existing);
        }
        int64_t t2 = ntfs_mono_ns();
        printf("# figures: durable begin+finish %.1f us/effect; repeated-key lookup %.1f us\n",
               (double)(t1 - t0) / n / 1000.0, (double)(t2 - t1) / n / 1000.0);
        tmp_cleanup();
}

int main(void) {
        RUN(open_reopen_schema);
        RUN(schema_version_mismatch);
        RUN(sessions);
        RUN(derive_key);
        RUN(effect_begin_finish);
        RUN(idempotency);
        RUN(idempotency_race_8_threads);
        RUN(effect_list);
        RUN(pending_and_unknown);
        RUN(agent_state);
        RUN(snapshots);
        RUN(trunks_and_forks);
        RUN(trunk_cas_race);
        RUN(quotas);
        RUN(charges_with_begin_and_finish);
        RUN(pins_and_gc_roots);
        RUN(meta);
        RUN(redaction);
        RUN(fault_error_each_write);
        RUN(crash_after_begin_row_is_pending);
        RUN(crash_at_begin_leaves_no_row);
        RUN(crash_at_finish_stays_pending);
        RUN(crash_after_finish_is_done);
        RUN(crash_at_every_other_write);
        RUN(figures_durable_begin_finish);
        return tap_done();
}
