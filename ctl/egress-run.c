/* SPDX-License-Identifier: MIT
 * egress-run.c — the daemon's side of the egress proxy (policy/egress.h):
 * one proxy per jailed run of a tool whose policy says `egress = true`, its
 * socket under STORE/egress/, and every connection, allowed or refused,
 * made an effect row of the run's session (tool "egress", irreversible, at
 * the run's step, idempotency key egress-PARENT-N) in the journal.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "ctl/daemon.h"
#include "policy/egress.h"
#include "common/banned.h"

struct d_egress_run {
        struct ntfs_egress *proxy;
        char *session;
        int64_t parent; /* the effect id of the jailed call */
        uint64_t step;
};

static void journal_finish(void *ctx, int64_t id, bool ok, json_t *result, const char *reason) {
        (void)ctx;
        _cleanup_free_ char *s = result ? json_dumps(result, JSON_COMPACT) : NULL;
        int r = ntfs_journal_effect_finish(D.j, id, ok ? NTFS_EFFECT_DONE : NTFS_EFFECT_FAILED, s, NULL, reason);
        if (r < 0)
                log_warn("egress: journal finish of effect %" PRId64 ": %s", id, ntfs_strerror(r));
}

static int64_t journal_begin(void *ctx, unsigned n, const char *method, const char *host, unsigned port) {
        struct d_egress_run *run = ctx;
        char key[96];
        snprintf(key, sizeof key, "egress-%" PRId64 "-%u", run->parent, n);
        json_t *in = json_pack("{s:s, s:s, s:i, s:I}", "method", method, "host", host, "port", (int)port,
                               "parent_effect", (json_int_t)run->parent);
        _cleanup_free_ char *ins = in ? json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(in);
        if (!ins)
                return -ENOMEM;
        struct ntfs_effect_intent it = { .session = run->session, .step = run->step, .tool = "egress",
                                         .effect_class = "irreversible", .input_json = ins,
                                         .idempotency_key = key };
        struct ntfs_effect eff = { 0 };
        bool existing = false;
        int r = ntfs_journal_effect_begin(D.j, &it, &eff, &existing);
        int64_t id = r < 0 ? r : eff.id;
        ntfs_effect_release(&eff);
        if (r < 0)
                log_warn("egress: journal begin: %s", ntfs_strerror(r));
        return id;
}

void d_egress_run_end(struct d_egress_run *run) {
        if (!run)
                return;
        ntfs_egress_stop(run->proxy);
        free(run->session);
        free(run);
}

int d_egress_run_begin(const char *session, int64_t parent_effect, uint64_t step, struct d_egress_run **ret,
                       const char **ret_path) {
        struct d_egress_run *run = calloc(1, sizeof *run);
        if (!run)
                return -ENOMEM;
        run->parent = parent_effect;
        run->step = step;
        run->session = strdup(session);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/egress", D.store_dir);
        struct ntfs_egress_cfg cfg = { .pol = D.pol, .dir = dir, .id = parent_effect, .label = session,
                                       .rec = { .begin = journal_begin, .finish = journal_finish, .ctx = run } };
        int r = run->session ? ntfs_egress_start(&cfg, &run->proxy, ret_path) : -ENOMEM;
        if (r < 0) {
                d_egress_run_end(run);
                return r;
        }
        *ret = run;
        return 0;
}
