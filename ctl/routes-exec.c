/* SPDX-License-Identifier: MIT
 * routes-exec.c — jailed tool calls: policy, journal (write-ahead, by
 * idempotency key), the jail, and the checkpoint after a state change.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

/* ---- exec (jailed tools) ------------------------------------------------------------ */

/* The cgroup group of a session's calls (exec/jail.h, spec.group): one per
 * store and session, "ntfs-STORE-SESSION", where STORE hashes the store's
 * directory (two daemons, two stores, one cgroup) and a session name with
 * characters a cgroup name should not hold is hashed too. */
static void session_group(const char *session, char *buf, size_t len) {
        uint64_t hs = 1469598103934665603ULL, hn = 1469598103934665603ULL;
        for (const char *c = D.store_dir; c && *c; c++)
                hs = (hs ^ (unsigned char)*c) * 1099511628211ULL;
        size_t n = strlen(session);
        bool plain = n <= 64 && strspn(session, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
        if (plain) {
                snprintf(buf, len, "ntfs-%08llx-%s", (unsigned long long)(hs & 0xffffffffu), session);
                return;
        }
        for (const char *c = session; *c; c++)
                hn = (hn ^ (unsigned char)*c) * 1099511628211ULL;
        snprintf(buf, len, "ntfs-%08llx-h%016llx", (unsigned long long)(hs & 0xffffffffu), (unsigned long long)hn);
}

static char *shell_state_get(const char *session) {
        char *s = NULL;
        pthread_mutex_lock(&D.lock);
        for (struct shell_state *p = D.shells; p; p = p->next)
                if (strcmp(p->session, session) == 0 && p->state)
                        s = strdup(p->state);
        pthread_mutex_unlock(&D.lock);
        return s;
}

static void shell_state_set(const char *session, const char *state) {
        if (!state)
                return;
        pthread_mutex_lock(&D.lock);
        struct shell_state *p;
        for (p = D.shells; p; p = p->next)
                if (strcmp(p->session, session) == 0)
                        break;
        if (!p && (p = calloc(1, sizeof *p))) {
                p->session = strdup(session);
                p->next = D.shells;
                D.shells = p;
        }
        if (p) {
                free(p->state);
                p->state = strdup(state);
        }
        pthread_mutex_unlock(&D.lock);
}

/* The session's quota usage: persistent counters from the journal plus the
 * workspace's current size from the store. */
static void load_usage(const char *session, struct ntfs_quota_usage *u) {
        memset(u, 0, sizeof *u);
        json_t *counters = NULL;
        if (ntfs_journal_quota_get_all(D.j, session, &counters) == 0 && json_is_object(counters)) {
                const char *k;
                json_t *v;
                json_object_foreach(counters, k, v) {
                        if (json_is_integer(v) && json_integer_value(v) >= 0)
                                (void)ntfs_quota_usage_set(u, k, (uint64_t)json_integer_value(v));
                }
        }
        json_decref(counters);
        struct ntfs_session_info si;
        if (ntfs_session_get(D.st, session, &si) == 0) {
                u->workspace_bytes = si.bytes;
                u->workspace_inodes = si.inodes;
        }
}

/* L1 + L2 checks and the call's limits; the call counters to charge go to
 * charges (n_charges), for the caller to charge with its journal row. */
static int policy_check(const char *session, const char *tool, uint64_t *ret_timeout_ms, uint64_t *ret_output_limit,
                        struct ntfs_quota_charge charges[NTFS_POLICY_MAX_CALL_COUNTERS], size_t *n_charges,
                        char *why, size_t whylen) {
        struct ntfs_quota_usage usage;
        load_usage(session, &usage);
        int r = ntfs_policy_check_call(D.pol, NULL, tool, &usage, why, whylen);
        if (r < 0)
                return r;
        uint64_t t = 0, o = 0;
        if ((r = ntfs_policy_call_limits(D.pol, NULL, tool, &usage, &t, &o)) < 0) {
                snprintf(why, whylen, "policy: %s", ntfs_strerror(r));
                return r;
        }
        const char *ctr[NTFS_POLICY_MAX_CALL_COUNTERS];
        int n = ntfs_policy_call_counters(tool, ctr);
        *n_charges = 0;
        for (int i = 0; i < n && i < NTFS_POLICY_MAX_CALL_COUNTERS; i++)
                charges[(*n_charges)++] = (struct ntfs_quota_charge){ .counter = ctr[i], .delta = 1 };
        if (ret_timeout_ms)
                *ret_timeout_ms = t;
        if (ret_output_limit)
                *ret_output_limit = o;
        return 0;
}

int d_policy_admit(const char *session, const char *tool, uint64_t *ret_timeout_ms, uint64_t *ret_output_limit,
                   char *why, size_t whylen) {
        struct ntfs_quota_charge charges[NTFS_POLICY_MAX_CALL_COUNTERS];
        size_t n = 0;
        int r = policy_check(session, tool, ret_timeout_ms, ret_output_limit, charges, &n, why, whylen);
        if (r < 0)
                return r;
        /* Charge the call counters before it runs: a crash may over-count,
         * never under-count (docs/journal.md). */
        for (size_t i = 0; i < n; i++) {
                r = ntfs_journal_quota_add(D.j, session, charges[i].counter, charges[i].delta, -1, NULL);
                if (r < 0) {
                        snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                        return r;
                }
        }
        return 0;
}

void d_policy_charge(const char *session, uint64_t exec_ms, uint64_t output_bytes) {
        int r;
        if (exec_ms && (r = ntfs_journal_quota_add(D.j, session, "exec_ms", (int64_t)exec_ms, -1, NULL)) < 0)
                log_warn("journal: charging %" PRIu64 " ms to %s: %s", exec_ms, session, ntfs_strerror(r));
        if (output_bytes &&
            (r = ntfs_journal_quota_add(D.j, session, "output_bytes", (int64_t)output_bytes, -1, NULL)) < 0)
                log_warn("journal: charging %" PRIu64 " output bytes to %s: %s", output_bytes, session,
                         ntfs_strerror(r));
}

/* ---- state-changing commands in flight, and other writers' fsyncs ------- */

/* Recovery undoes an interrupted state-changing command by rolling its
 * session back to commit_before. A file fsync'd meanwhile through another
 * mount of the session would go with it, so such an fsync records the
 * session (journal meta D_EXT_FSYNC_KEY: session names, one per line)
 * before it returns, and recovery keeps those sessions' working states.
 * ext_lock serializes the table and the marker's writes. */
struct inflight {
        char *session;
        unsigned n;      /* commands in flight */
        bool marked;     /* in the durable marker */
        struct inflight *next;
};
static pthread_mutex_t ext_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inflight *inflights;

static struct inflight *inflight_find(const char *session) {
        for (struct inflight *f = inflights; f; f = f->next)
                if (strcmp(f->session, session) == 0)
                        return f;
        return NULL;
}

/* Writes the marker: the marked sessions, one per line (ext_lock held). */
static int marker_write(void) {
        size_t len = 1;
        for (struct inflight *f = inflights; f; f = f->next)
                if (f->marked)
                        len += strlen(f->session) + 1;
        _cleanup_free_ char *v = malloc(len);
        if (!v)
                return -ENOMEM;
        size_t o = 0;
        for (struct inflight *f = inflights; f; f = f->next)
                if (f->marked) {
                        size_t l = strlen(f->session);
                        memcpy(v + o, f->session, l);
                        v[o + l] = '\n';
                        o += l + 1;
                }
        v[o] = 0;
        return ntfs_journal_meta_set(D.j, D_EXT_FSYNC_KEY, v);
}

void d_inflight_enter(const char *session) {
        pthread_mutex_lock(&ext_lock);
        /* An entry is in the list exactly while n > 0. */
        struct inflight *f = inflight_find(session);
        if (!f && (f = calloc(1, sizeof *f))) {
                if ((f->session = strdup(session))) {
                        f->next = inflights;
                        inflights = f;
                } else {
                        free(f);
                        f = NULL;
                }
        }
        if (f)
                f->n++;
        else
                log_warn("out of memory tracking a command of %s: an fsync beside it is not protected", session);
        pthread_mutex_unlock(&ext_lock);
}

void d_inflight_leave(const char *session) {
        pthread_mutex_lock(&ext_lock);
        struct inflight **pp = &inflights;
        while (*pp && strcmp((*pp)->session, session) != 0)
                pp = &(*pp)->next;
        struct inflight *f = *pp;
        if (f && f->n > 0 && --f->n == 0) {
                bool was = f->marked;
                *pp = f->next;
                if (was) {
                        int r = marker_write(); /* without f: the command is over */
                        if (r < 0) /* a stale marker only makes recovery keep a working state */
                                log_warn("journal: clearing the fsync marker of %s: %s", session, ntfs_strerror(r));
                }
                free(f->session);
                free(f);
        }
        pthread_mutex_unlock(&ext_lock);
}

int d_ext_fsync(void *ud) {
        const struct dmount *m = ud;
        int r = 0;
        pthread_mutex_lock(&ext_lock);
        struct inflight *f = m->session ? inflight_find(m->session) : NULL;
        if (f && f->n > 0 && !f->marked) {
                f->marked = true;
                if ((r = marker_write()) < 0) {
                        f->marked = false;
                        log_error("journal: recording an fsync of %s beside a running command: %s", m->session,
                                  ntfs_strerror(r));
                        r = -EIO;
                }
        }
        pthread_mutex_unlock(&ext_lock);
        return r;
}

static void inflight_leavep(const char **session) {
        if (*session)
                d_inflight_leave(*session);
}

/* The answer to a call whose key the journal knows: its recorded result
 * (or its status, when it never finished), marked replayed. */
static json_t *recorded_result(const struct ntfs_effect *eff, const struct ntfs_tool_spec *spec) {
        json_t *res = eff->result_json ? json_loads(eff->result_json, 0, NULL) : NULL;
        if (!json_is_object(res)) {
                json_decref(res);
                res = json_pack("{s:s, s:s?}", "status", ntfs_effect_status_to_string(eff->status), "reason",
                                eff->reason);
        }
        json_object_set_new(res, "replayed", json_true());
        json_object_set_new(res, "effect", json_string(ntfs_effect_class_name(spec->cls)));
        json_object_set_new(res, "effect_id", json_integer(eff->id));
        return res;
}

/* Ends effect id as failed with why; a journal that cannot record it is
 * logged (the row stays pending: recovery settles it at the next start). */
static void effect_fail(int64_t id, const char *why) {
        int r = ntfs_journal_effect_finish(D.j, id, NTFS_EFFECT_FAILED, NULL, NULL, why);
        if (r < 0)
                log_error("journal: finishing effect %" PRId64 " as failed (%s): %s", id, why, ntfs_strerror(r));
}

/* Sets key to a stream's bytes in the result (docs/protocol.md, "Command
 * output"): the text when it is clean (no NUL, well-formed UTF-8), else
 * its lossy text plus key_b64, the exact bytes in base64. */
static int set_output(json_t *res, const char *key, const char *p, size_t n) {
        p = p ? p : "";
        if (ntfs_text_clean(p, n))
                return json_object_set_new(res, key, json_stringn(p, n)) < 0 ? -ENOMEM : 0;
        _cleanup_free_ char *text = NULL, *b64 = NULL;
        size_t tl = 0, bl = 0;
        int r;
        if ((r = ntfs_text_lossy(p, n, &text, &tl)) < 0 || (r = ntfs_base64_encode(p, n, &b64, &bl)) < 0)
                return r;
        char k[32];
        snprintf(k, sizeof k, "%s_b64", key);
        if (json_object_set_new(res, key, json_stringn(text, tl)) < 0 ||
            json_object_set_new(res, k, json_stringn(b64, bl)) < 0)
                return -ENOMEM;
        return 0;
}

/* Completes the effect row with its result. A result the journal refuses
 * (past NTFS_JOURNAL_MAX_JSON, say) is recorded without its output, marked
 * "output_not_recorded" (the caller still gets it whole); only a journal
 * that can record nothing leaves the row pending, and that is the error. */
static int finish_effect(const struct ntfs_effect *eff, int status, json_t *res, const char *after,
                         const char *reason, const struct ntfs_quota_charge *used, size_t n_used) {
        _cleanup_free_ char *res_s = json_dumps(res, JSON_COMPACT);
        int r = res_s ? ntfs_journal_effect_finish_charged(D.j, eff->id, status, res_s, after, reason, used, n_used)
                      : -ENOMEM;
        if (r >= 0)
                return 0;
        log_warn("journal: finishing effect %" PRId64 " with its result: %s; recording it without its output",
                 eff->id, ntfs_strerror(r));
        json_t *small = json_deep_copy(res);
        static const char *const drop[] = { "stdout", "stdout_b64", "stderr", "stderr_b64" };
        for (size_t i = 0; small && i < ARRAY_SIZE(drop); i++)
                json_object_del(small, drop[i]);
        if (small)
                json_object_set_new(small, "output_not_recorded", json_string(ntfs_strerror(r)));
        _cleanup_free_ char *small_s = small ? json_dumps(small, JSON_COMPACT) : NULL;
        json_decref(small);
        r = small_s ? ntfs_journal_effect_finish_charged(D.j, eff->id, status, small_s, after, reason, used, n_used)
                    : -ENOMEM;
        if (r < 0)
                log_error("journal: finishing effect %" PRId64 ": %s", eff->id, ntfs_strerror(r));
        return r;
}

/* run_python's result (ctl/run-python.c) with its stdout and stderr — the
 * code's own, from the driver's report — held to the same rule as any
 * command's: clean text, else lossy text plus the _b64 bytes. */
static int python_result(json_t *res) {
        (void)json_object_del(res, "stdout_b64");
        (void)json_object_del(res, "stderr_b64");
        d_python_result(res);
        static const char *const keys[] = { "stdout", "stderr" };
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                json_t *v = json_object_get(res, keys[i]);
                if (!json_is_string(v))
                        continue;
                size_t n = json_string_length(v);
                _cleanup_free_ char *copy = malloc(n + 1);
                if (!copy)
                        return -ENOMEM;
                memcpy(copy, json_string_value(v), n);
                copy[n] = 0;
                int r = set_output(res, keys[i], copy, n);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Runs one jailed tool call, journaled; *ret is the result object. cancel:
 * see h_exec_cancel (NULL: not cancellable). io: a streaming call's
 * (ctl/routes-exec-stream.c), or NULL. */
static int run_tool(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
                    const int *cancel, const struct d_exec_io *io, json_t **ret, char *why, size_t whylen) {
        /* Phase times of the call, logged at debug level (docs/jail.md,
         * "Speed": how a call's time is traced end to end). */
        int64_t t0 = ntfs_mono_ns(), t_begun = 0, t_spawn = 0, t_ran = 0;
        const struct ntfs_tool_spec *spec = ntfs_policy_tool(D.pol, tool);
        if (spec && spec->kind == NTFS_TOOL_KIND_FETCH && d_run_fetch)
                return d_run_fetch(session, command, key, ret, why, whylen);
        if (!spec || spec->kind != NTFS_TOOL_KIND_EXEC) {
                snprintf(why, whylen, "unknown or non-shell tool '%s'", tool);
                return -NTFS_ENOTFOUND;
        }
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, session, &si);
        if (r < 0) {
                snprintf(why, whylen, "session '%s': %s", session, ntfs_strerror(r));
                return r;
        }
        struct ntfs_effect eff = { 0 };
        /* A known key is served from the journal before anything else: a
         * retry is neither re-run nor charged against a quota. */
        if (key && ntfs_journal_effect_get_by_key(D.j, session, key, &eff) == 0) {
                *ret = recorded_result(&eff, spec);
                ntfs_effect_release(&eff);
                return 0;
        }
        uint64_t timeout_ms = 0, out_limit = 0;
        struct ntfs_quota_charge charges[NTFS_POLICY_MAX_CALL_COUNTERS];
        size_t n_charges = 0;
        if ((r = policy_check(session, tool, &timeout_ms, &out_limit, charges, &n_charges, why, whylen)) < 0)
                return r;
        (void)NTFS_FAULT("exec.admitted"); /* tests hold this window open (sleep) */
        /* Other mounts' fsyncs from here on are recorded (before the
         * pre-checkpoint: one between it and begin is not in commit_before). */
        _cleanup_(inflight_leavep) const char *inflight = NULL;
        if (spec->workspace_rw) {
                d_inflight_enter(session);
                inflight = session;
                /* Read the session again: a write fsync'd since the read
                 * above left no marker, so it must make the session dirty
                 * here and be in the checkpoint below (docs/recovery.md). */
                if ((r = ntfs_session_get(D.st, session, &si)) < 0) {
                        snprintf(why, whylen, "session '%s': %s", session, ntfs_strerror(r));
                        return r;
                }
        }
        /* commit_before must be the exact state the effect starts from, so a
         * state-changing call on a dirty session checkpoints it first (else
         * recovery's rollback would lose writes made through a mount). */
        if (spec->workspace_rw && si.dirty) {
                ntfs_hash h;
                bool changed;
                if ((r = d_checkpoint(session, "before tool call", NULL, &h, &changed)) < 0) {
                        snprintf(why, whylen, "checkpoint before the call: %s", ntfs_strerror(r));
                        return r;
                }
                si.head = h;
        }
        char before[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&si.head, before);
        json_t *input = json_pack("{s:s}", "command", command);
        _cleanup_free_ char *input_s = json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(input);
        uint64_t nprev = 0;
        if ((r = ntfs_journal_effect_count(D.j, session, 0, &nprev)) < 0) {
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        struct ntfs_effect_intent in = { .session = session, .step = nprev + 1, .tool = tool,
                                         .effect_class = ntfs_effect_class_name(spec->cls), .input_json = input_s,
                                         .idempotency_key = key, .commit_before = before,
                                         /* the call counters, charged with the row before it
                                          * runs: a crash may over-count, never under-count */
                                         .charges = charges, .n_charges = n_charges };
        bool existing = false;
        r = ntfs_journal_effect_begin(D.j, &in, &eff, &existing);
        /* Without a key of the caller's, the journal derives one from the
         * step: a row of that step that exists already is a concurrent call
         * of the session (the same command, counted at the same moment),
         * not this one. Take the next step. */
        for (int tries = 0; r == 0 && existing && !key && tries < 64; tries++) {
                ntfs_effect_release(&eff);
                if ((r = ntfs_journal_effect_count(D.j, session, 0, &nprev)) < 0)
                        break;
                in.step = nprev + 1 + (uint64_t)tries;
                existing = false;
                r = ntfs_journal_effect_begin(D.j, &in, &eff, &existing);
        }
        if (r < 0) {
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        if (existing) { /* the caller's key matched, or a racing retry of it */
                *ret = recorded_result(&eff, spec);
                ntfs_effect_release(&eff);
                return 0;
        }
        /* Crash-matrix fault points (docs/recovery.md): crash only; an armed
         * error is ignored here. */
        (void)NTFS_FAULT("exec.after_begin");
        t_begun = ntfs_mono_ns();
        _cleanup_free_ char *mp = NULL;
        r = d_session_mountpoint(session, &mp);
        if (r < 0) {
                snprintf(why, whylen, "cannot mount the workspace: %s", ntfs_strerror(r));
                effect_fail(eff.id, why);
                ntfs_effect_release(&eff);
                return r;
        }
        _cleanup_free_ char *state = shell_state_get(session);
        char group[128];
        session_group(session, group, sizeof group);
        const struct ntfs_session_limits *lim = ntfs_policy_limits(D.pol);
        _cleanup_free_ char *pycmd = NULL; /* run_python: the driver's command (ctl/run-python.c) */
        const char *const *pyenv = NULL;
        if (spec->id == NTFS_TOOL_RUN_PYTHON && (r = d_python_command(command, out_limit, &pycmd, &pyenv)) < 0) {
                snprintf(why, whylen, "run_python: %s", r == -E2BIG ? "the code is longer than 64 KiB" : ntfs_strerror(r));
                ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, NULL, NULL, why);
                ntfs_effect_release(&eff);
                return r == -E2BIG ? -NTFS_EBADREQ : r;
        }
        struct ntfs_jail_spec js = { .jail_binary = D.jail_bin, .workspace = mp,
                                     .workspace_ro = !spec->workspace_rw,
                                     .net = spec->net == NTFS_NET_LOOPBACK ? NTFS_JAIL_NET_LOOPBACK
                                                                           : NTFS_JAIL_NET_NONE,
                                     .command = pycmd ? pycmd : command, .env = pyenv, .state_in = state,
                                     .timeout_ms = timeout_s > 0 && (uint64_t)(timeout_s * 1000) < timeout_ms
                                                           ? (uint64_t)(timeout_s * 1000)
                                                           : timeout_ms,
                                     .output_limit = (size_t)out_limit, .group = group,
                                     .group_memory = lim->memory_bytes, .group_pids = lim->pids,
                                     .group_cpu = lim->cpu_percent, .tmp_bytes = lim->tmp_bytes };
        /* The egress proxy, when the policy gives it to this tool (ctl/egress-run.c, policy/egress.c). */
        struct d_egress_run *egress = NULL;
        if (spec->egress) {
                r = d_egress_run_begin ? d_egress_run_begin(session, eff.id, eff.step, &egress, &js.proxy_socket)
                                       : -ENOTSUP;
                if (r < 0) {
                        snprintf(why, whylen, "cannot start the egress proxy: %s", ntfs_strerror(r));
                        effect_fail(eff.id, why);
                        ntfs_effect_release(&eff);
                        return r;
                }
                js.proxy_port = NTFS_EGRESS_PORT;
        }
        js.cancel = cancel;
        js.io = io ? io->jail : NULL;
        js.watch_hangup = io && io->watch_hangup;
        js.hangup_fd = io ? io->hangup_fd : -1;
        struct ntfs_jail_result jr = { 0 };
        t_spawn = ntfs_mono_ns();
        r = ntfs_jail_run(&js, &jr);
        t_ran = ntfs_mono_ns();
        if (io && io->ended)
                io->ended(io->ud, &jr);
        if (egress)
                d_egress_run_end(egress);
        if (r < 0) {
                if (jr.cancelled || (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))) /* ended while starting */
                        snprintf(why, whylen, "cancelled");
                else
                        snprintf(why, whylen, "jail failed: %s", jr.reason ? jr.reason : ntfs_strerror(r));
                effect_fail(eff.id, why);
                ntfs_jail_result_release(&jr);
                ntfs_effect_release(&eff);
                return r;
        }
        (void)NTFS_FAULT("exec.after_run");
        shell_state_set(session, jr.state_out);
        /* exec time and output are charged with the finish (one commit) */
        const struct ntfs_quota_charge used[] = {
                { .counter = "exec_ms", .delta = (int64_t)(jr.duration_ns / 1000000) },
                { .counter = "output_bytes", .delta = (int64_t)(jr.out_len + jr.err_len) },
        };
        json_t *res = json_pack("{s:i, s:b, s:b, s:I, s:b, s:b, s:s, s:s}", "exit_code", jr.exit_code,
                                "stdout_truncated", jr.out_truncated, "stderr_truncated", jr.err_truncated,
                                "duration_ms", (json_int_t)(jr.duration_ns / 1000000), "timed_out", jr.timed_out,
                                "oom", jr.oom, "tool", tool, "effect", ntfs_effect_class_name(spec->cls));
        if (res && jr.cpu_ns >= 0)
                json_object_set_new(res, "cpu_ms", json_integer(jr.cpu_ns / 1000000));
        if (res && jr.oom) /* which limit: docs/policy.md, "Limits" */
                json_object_set_new(res, "limit", json_string("memory"));
        if (!res || (r = set_output(res, "stdout", jr.out, jr.out_len)) < 0 ||
            (r = set_output(res, "stderr", jr.err, jr.err_len)) < 0) {
                json_decref(res);
                snprintf(why, whylen, "out of memory building the result");
                effect_fail(eff.id, why);
                ntfs_jail_result_release(&jr);
                ntfs_effect_release(&eff);
                return -ENOMEM;
        }
        if (pycmd && (r = python_result(res)) < 0) {
                json_decref(res);
                snprintf(why, whylen, "out of memory building the result");
                effect_fail(eff.id, why);
                ntfs_jail_result_release(&jr);
                ntfs_effect_release(&eff);
                return r;
        }
        char after[NTFS_HEX_LEN + 1] = "";
        if (spec->checkpoint_after) {
                ntfs_hash h;
                bool changed;
                char msg[300], effid[32];
                snprintf(msg, sizeof msg, "%s: %.200s", tool, command);
                snprintf(effid, sizeof effid, "%" PRId64, eff.id);
                int cr = d_checkpoint(session, msg, effid, &h, &changed);
                if (cr == 0) {
                        ntfs_hash_hex(&h, after);
                        json_t *c = d_commit_json(&h, "checkpoint");
                        json_object_update(res, c);
                        json_decref(c);
                        json_object_set_new(res, "changed", json_boolean(changed));
                        /* bash_build: the checkpoint is also a snapshot record (the seed's
                         * snapshots table); any snapshot can be exported (ctl/routes-archive.c) */
                        struct ntfs_commit_info sci;
                        char *snap = NULL;
                        int sr = 0;
                        if (spec->cls == NTFS_CLASS_REPLAYABLE_EXPENSIVE &&
                            (sr = ntfs_commit_get(D.st, &h, &sci)) == 0 &&
                            (sr = ntfs_journal_snapshot_add(D.j, NULL, session, in.step, after, sci.bytes, &snap)) == 0)
                                json_object_set_new(res, "snapshot_id", json_string(snap));
                        if (sr < 0)
                                log_warn("snapshot record of %s step %" PRIu64 ": %s", session, (uint64_t)in.step,
                                         ntfs_strerror(sr));
                        free(snap);
                } else
                        log_warn("checkpoint after %s failed: %s", tool, ntfs_strerror(cr));
        }
        (void)NTFS_FAULT("exec.after_checkpoint");
        json_object_set_new(res, "replayed", json_false());
        json_object_set_new(res, "effect_id", json_integer(eff.id));
        bool cancelled = jr.cancelled || (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE));
        if (cancelled)
                json_object_set_new(res, "cancelled", json_true());
        bool ok = !jr.timed_out && jr.term_signal == 0 && !cancelled;
        const char *reason = ok             ? NULL
                             : cancelled    ? "cancelled"
                             : jr.timed_out ? "timeout"
                             : jr.oom       ? "oom: the memory limit of the call or of the session"
                                            : "killed";
        int fr = finish_effect(&eff, ok ? NTFS_EFFECT_DONE : NTFS_EFFECT_FAILED, res, after[0] ? after : NULL, reason,
                               used, ARRAY_SIZE(used));
        if (fr < 0) {
                snprintf(why, whylen, "journal: recording the result of effect %" PRId64 ": %s", eff.id,
                         ntfs_strerror(fr));
                json_decref(res);
                ntfs_jail_result_release(&jr);
                ntfs_effect_release(&eff);
                return fr;
        }
        ntfs_jail_result_release(&jr);
        ntfs_effect_release(&eff);
        *ret = res;
        if (ntfs_log_get_level() >= NTFS_LOG_DEBUG) {
                int64_t t_end = ntfs_mono_ns();
                log_debug("exec %s %s: admitted and begun %.3f ms, prepared %.3f ms, jail %.3f ms, finished %.3f ms",
                          session, tool, (double)(t_begun - t0) / 1e6, (double)(t_spawn - t_begun) / 1e6,
                          (double)(t_ran - t_spawn) / 1e6, (double)(t_end - t_ran) / 1e6);
        }
        return 0;
}

int d_run_tool(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
               json_t **ret, char *why, size_t whylen) {
        return run_tool(session, tool, command, key, timeout_s, NULL, NULL, ret, why, whylen);
}

int d_run_tool_io(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
                  const int *cancel, const struct d_exec_io *io, json_t **ret, char *why, size_t whylen) {
        return run_tool(session, tool, command, key, timeout_s, cancel, io, ret, why, whylen);
}

/* ---- cancellation (ntfs-mcp's notifications/cancelled, docs/mcp.md) ------------------
 * An exec request may carry a `cancel_token` (the client's own random
 * string); while it runs, POST /v1/sessions/NAME/exec/cancel {cancel_token}
 * sets its flag and the jail is ended (exec/jail.h: spec.cancel). A client
 * that closes its connection stops its command too: the jail call polls
 * the connection's socket for the hang-up (exec/jail.h, spec.hangup_fd). */
#define CANCEL_TOKEN_MAX 128

struct exec_cancel {
        struct exec_cancel *next;
        const char *session, *token; /* borrowed from the running request */
        int flag;
};

static pthread_mutex_t cancel_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exec_cancel *cancels;

static struct exec_cancel *cancel_find(const char *session, const char *token) {
        for (struct exec_cancel *c = cancels; c; c = c->next)
                if (strcmp(c->session, session) == 0 && strcmp(c->token, token) == 0)
                        return c;
        return NULL;
}

static void cancel_unregister(struct exec_cancel *e) {
        pthread_mutex_lock(&cancel_lock);
        for (struct exec_cancel **p = &cancels; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        pthread_mutex_unlock(&cancel_lock);
}

static int h_exec_cancel(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "cancel_token", NULL };
        const char *name = d_param(req, "name"), *token;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "cancel_token", true, &token)) < 0)
                return r;
        pthread_mutex_lock(&cancel_lock);
        struct exec_cancel *e = cancel_find(name, token);
        if (e)
                __atomic_store_n(&e->flag, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&cancel_lock);
        if (!e)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no running command of session '%s' has this cancel_token",
                                       name);
        return d_reply(resp, 200, json_pack("{s:b}", "cancelled", 1));
}

static int h_exec(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "command", "tool", "timeout", "idempotency_key", "cancel_token", NULL };
        const char *name = d_param(req, "name"), *cmd, *tool, *key, *token;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "command", true, &cmd)) < 0 ||
            (r = d_want_string(req, resp, "tool", false, &tool)) < 0 ||
            (r = d_want_key(req, resp, &key)) < 0 ||
            (r = d_want_string(req, resp, "cancel_token", false, &token)) < 0)
                return r;
        json_t *t = json_object_get(req->json, "timeout");
        if (t && (!json_is_number(t) || json_number_value(t) <= 0 || json_number_value(t) > 86400))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'timeout' must be seconds in (0, 86400]");
        if (token && (!*token || strlen(token) > CANCEL_TOKEN_MAX))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'cancel_token' must be 1..%d bytes", CANCEL_TOKEN_MAX);
        struct exec_cancel ce = { .session = name, .token = token };
        if (token) {
                pthread_mutex_lock(&cancel_lock);
                bool dup = cancel_find(name, token) != NULL;
                if (!dup) {
                        ce.next = cancels;
                        cancels = &ce;
                }
                pthread_mutex_unlock(&cancel_lock);
                if (dup)
                        return ntfs_http_error(resp, -NTFS_ECONFLICT, "a command with this cancel_token is running");
        }
        char why[512] = "";
        json_t *res;
        /* The client hanging up ends the command (a keep-alive client that
         * sends its next request meanwhile does not). */
        const struct d_exec_io io = { .watch_hangup = req->fd >= 0, .hangup_fd = req->fd };
        r = run_tool(name, tool ? tool : "bash_write", cmd, key, t ? json_number_value(t) : 0, token ? &ce.flag : NULL,
                     &io, &res, why, sizeof why);
        if (token)
                cancel_unregister(&ce);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return d_reply(resp, 200, res);
}

static int h_effects(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        char ls[32];
        uint64_t limit = 0;
        if (ntfs_http_request_query(req, "limit", ls, sizeof ls) >= 0 && ls[0] &&
            ntfs_parse_u64(ls, 1000000, &limit) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'limit' must be a number");
        /* limit: the latest rows (as tail and git log -n), still in id order */
        uint64_t total = 0;
        int r = limit ? ntfs_journal_effect_count(D.j, name, 0, &total) : 0;
        if (r < 0)
                return d_fail(resp, r, "effects");
        json_t *arr;
        r = ntfs_journal_effect_list_json(D.j, name, 0, (size_t)limit, total > limit ? (size_t)(total - limit) : 0,
                                          &arr);
        if (r < 0)
                return d_fail(resp, r, "effects");
        return d_reply(resp, 200, json_pack("{s:o}", "effects", arr));
}

int routes_exec_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /v1/sessions/{name}/exec", h_exec, 0 },
                { "POST /v1/sessions/{name}/exec/cancel", h_exec_cancel, 0 },
                { "POST /v1/sessions/{name}/exec/stream", d_h_exec_stream, 0 },
                { "GET /v1/sessions/{name}/effects", h_effects, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
