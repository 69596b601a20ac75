/* SPDX-License-Identifier: MIT
 * fuzz_journal.c — libFuzzer target: arbitrary bytes as JSON inputs, results,
 * reasons, messages, metadata, keys and counter names, recorded through the
 * public API. Invariants checked after each call (abort on violation):
 *   - a call either fails cleanly or stores text that is valid JSON;
 *   - the configured secret never comes back from the journal;
 *   - a known idempotency key returns the same row and writes nothing.
 *
 * Built as `fuzz_journal` with -Dfuzz=true (CC=clang); the corpus in
 * tests/fuzz/journal/ is replayed by test_journal_corpus in every build.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "journal/journal.h"
#include "common/banned.h"

#define FUZZ_SECRET "hunter2-s3cr3t"
#define FUZZ_SESSION "fz"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_journal_teardown(void);

static ntfs_journal *fj;
static char fdir[64], fpath[96];
static uint64_t fstep;

static void check(bool ok, const char *what);

static void check(bool ok, const char *what) {
        if (!ok) {
                fprintf(stderr, "fuzz_journal: invariant violated: %s\n", what);
                abort();
        }
}

static bool json_ok(const char *s) {
        if (!s)
                return true;
        json_error_t err;
        json_t *v = json_loads(s, JSON_DECODE_ANY, &err);
        json_decref(v);
        return v != NULL;
}

static bool clean(const char *s) {
        return !s || !strstr(s, FUZZ_SECRET);
}

static void teardown_atexit(void) {
        check(fuzz_journal_teardown() == 0, "secret absent from the database bytes");
}

static void setup(void) {
        if (fj)
                return;
        snprintf(fdir, sizeof fdir, "/tmp/ntfs-fuzz-journal-XXXXXX");
        check(mkdtemp(fdir) != NULL, "mkdtemp");
        snprintf(fpath, sizeof fpath, "%s/journal.db", fdir);
        check(ntfs_journal_open(fpath, &fj) == 0, "open");
        const char *secrets[] = {FUZZ_SECRET, NULL};
        check(ntfs_journal_set_secrets(fj, secrets) == 0, "set_secrets");
        check(ntfs_journal_session_create(fj, FUZZ_SESSION, 0, NULL) == 0, "session");
        atexit(teardown_atexit);
}

/* Closes and removes the database; returns how many times the secret
 * appears in its bytes (must be 0). */
int fuzz_journal_teardown(void) {
        if (!fj)
                return 0;
        ntfs_journal_close(fj);
        fj = NULL;
        int hits = 0;
        const char *sfx[] = {"", "-wal", "-shm"};
        for (size_t i = 0; i < 3; i++) {
                char p[128];
                snprintf(p, sizeof p, "%s%s", fpath, sfx[i]);
                FILE *f = fopen(p, "rbe");
                if (f) {
                        static char buf[1 << 16];
                        size_t keep = 0, n;
                        const size_t sl = strlen(FUZZ_SECRET);
                        while ((n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
                                size_t len = keep + n;
                                for (size_t k = 0; k + sl <= len; k++)
                                        if (memcmp(buf + k, FUZZ_SECRET, sl) == 0)
                                                hits++;
                                keep = len < sl - 1 ? len : sl - 1;
                                memmove(buf, buf + len - keep, keep);
                        }
                        fclose(f);
                }
                unlink(p);
        }
        rmdir(fdir);
        return hits;
}

static void test_effect(const char *a, const char *b, const char *c, bool with_key) {
        struct ntfs_effect_intent in = {
                .session = FUZZ_SESSION,
                .step = fstep++,
                .tool = "bash_write",
                .effect_class = "replayable_fast",
                .input_json = a,
                .idempotency_key = with_key ? b : NULL,
        };
        _cleanup_(ntfs_effect_release) struct ntfs_effect e = {};
        bool existing = true;
        int r = ntfs_journal_effect_begin(fj, &in, &e, &existing);
        if (r < 0) {
                check(r == -NTFS_EBADREQ || r == -EINVAL || r == -NTFS_ETOOLARGE, "begin error code");
                return;
        }
        check(json_ok(e.input_json), "stored input is JSON");
        check(clean(e.input_json), "input redacted");
        /* The same key again: the same row, nothing new. */
        _cleanup_(ntfs_effect_release) struct ntfs_effect again = {};
        bool existing2 = false;
        in.step = e.step;
        in.idempotency_key = e.idempotency_key;
        check(ntfs_journal_effect_begin(fj, &in, &again, &existing2) == 0, "begin again");
        check(existing2 && again.id == e.id, "same key, same row");
        if (existing)
                return;
        r = ntfs_journal_effect_finish(fj, e.id, NTFS_EFFECT_DONE, b, NULL, c);
        if (r < 0) {
                check(r == -NTFS_EBADREQ || r == -NTFS_ETOOLARGE, "finish error code");
                r = ntfs_journal_effect_finish(fj, e.id, NTFS_EFFECT_FAILED, NULL, NULL, c);
                check(r == 0, "finish without result");
        }
        _cleanup_(ntfs_effect_release) struct ntfs_effect got = {};
        check(ntfs_journal_effect_get(fj, e.id, &got) == 0, "get");
        check(got.status != NTFS_EFFECT_PENDING, "finished");
        check(json_ok(got.result_json), "stored result is JSON");
        check(clean(got.result_json) && clean(got.reason), "result/reason redacted");
        check(ntfs_journal_effect_finish(fj, e.id, NTFS_EFFECT_DONE, NULL, NULL, NULL) == -NTFS_ECONFLICT,
              "finish twice refused");
}

static void test_state(const char *a) {
        uint64_t step = fstep++;
        int r = ntfs_journal_state_save(fj, FUZZ_SESSION, step, a, (int64_t)step, NULL);
        if (r < 0) {
                check(r == -NTFS_EBADREQ || r == -NTFS_ETOOLARGE, "state error code");
                return;
        }
        _cleanup_(ntfs_agent_state_release) struct ntfs_agent_state st = {};
        check(ntfs_journal_state_load(fj, FUZZ_SESSION, false, step, &st) == 0, "state load");
        check(json_ok(st.messages_json) && clean(st.messages_json), "messages JSON, redacted");
}

static void test_session(const char *a, const char *b) {
        int r = ntfs_journal_session_create(fj, a, 0, b);
        if (r < 0) {
                check(r == -NTFS_EINVALNAME || r == -NTFS_EBADREQ || r == -NTFS_ESESSEXISTS ||
                              r == -NTFS_ETOOLARGE,
                      "session error code");
                return;
        }
        _cleanup_(ntfs_jsession_release) struct ntfs_jsession si = {};
        check(ntfs_journal_session_get(fj, a, &si) == 0, "session get");
        check(json_ok(si.metadata_json) && clean(si.metadata_json), "metadata JSON, redacted");
}

static void test_quota(const char *a, size_t blen) {
        int64_t before = 0, after = 0, v = 0;
        int r = ntfs_journal_quota_get(fj, FUZZ_SESSION, a, &before);
        if (r < 0) {
                check(r == -EINVAL, "quota error code");
                return;
        }
        r = ntfs_journal_quota_add(fj, FUZZ_SESSION, a, (int64_t)blen, 100, &v);
        check(r == 0 || r == -NTFS_EQUOTA, "quota add");
        check(ntfs_journal_quota_get(fj, FUZZ_SESSION, a, &after) == 0, "quota get");
        check(after <= 100 || blen == 0, "quota limit holds");
        check(r == 0 ? after == before + (int64_t)blen : after == before, "quota arithmetic");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1 || size > (1u << 20))
                return 0;
        setup();
        /* op byte, then up to three fields separated by 0x1f. */
        char *buf = malloc(size);
        if (!buf)
                return 0;
        memcpy(buf, data + 1, size - 1);
        buf[size - 1] = 0;
        char *f[3] = {buf, (char *)"", (char *)""};
        size_t nf = 1;
        for (char *p = buf; *p && nf < 3; p++)
                if (*p == 0x1f) {
                        *p = 0;
                        f[nf++] = p + 1;
                }
        switch (data[0] % 5) {
        case 0:
                test_effect(f[0], f[1], f[2], false);
                break;
        case 1:
                test_effect(f[0], f[1], f[2], true);
                break;
        case 2:
                test_state(f[0]);
                break;
        case 3:
                test_session(f[0], f[1]);
                break;
        case 4:
                test_quota(f[0], strlen(f[1]));
                break;
        }
        free(buf);
        return 0;
}
