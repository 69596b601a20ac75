/* SPDX-License-Identifier: MIT
 * daemon.h — private to ntfsd: the daemon's state and the helpers its route
 * modules share. Each ctl/routes-*.c file registers its routes with one
 * routes_*_register() call; optional modules are weak symbols, linked in
 * when their file exists (ctl/meson.build).
 */
#ifndef NTFS_CTL_DAEMON_H
#define NTFS_CTL_DAEMON_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctl/http.h"
#include "ctl/router.h"
#include "exec/jail.h"
#include "fs/mount.h"
#include "fs/store.h"
#include "journal/journal.h"
#include "policy/gateway.h"
#include "policy/policy.h"

#define NTFSD_VERSION "0.1.0"

struct dmount {
        char *mountpoint;
        char *session; /* NULL for a read-only view */
        char *at;      /* the ref of a view */
        bool ro, internal;
        bool relatime; /* atime kept as ext4's relatime (docs/mount.md, "atime") */
        ntfs_ws *ws;
        ntfs_mount *m;
        double auto_idle, auto_max;
        uint64_t last_changes;
        int64_t last_change_ns, last_ckpt_ns;
        bool pending_changes;
        /* set by the mount's loop thread when it was unmounted from outside
         * (fusermount3 -u, umount): the mount is dead, no longer listed or
         * used, and reaped by d_mounts_reap() */
        atomic_bool exited;
        bool held; /* its WRITEs held off (d_hold_session_mounts), under D.lock */
        struct dmount *next;
};

/* A mount in the making (mountpoint set) or a session being ended
 * (mountpoint NULL): held in D.claims under D.lock, so that mount, unmount
 * and session end are serialized per mountpoint and per session. */
struct dclaim {
        char *mountpoint;
        char *session;
        struct dclaim *next;
};

struct shell_state {
        char *session;
        char *state;
        struct shell_state *next;
};

struct daemon {
        ntfs_store *st;
        ntfs_journal *j;
        ntfs_policy *pol;
        ntfs_gateway *gw;
        char *store_dir, *socket_path, *jail_bin;
        pthread_mutex_t lock; /* mounts, claims, shell states */
        struct dmount *mounts;
        struct dclaim *claims;
        pthread_cond_t claims_cv; /* a claim ended */
        struct shell_state *shells;
        pthread_t auto_thread;
        bool stopping;
        ntfs_router *router;
        ntfs_http_server *srv;
        struct ntfs_jail_caps caps;
};

/* The one daemon of this process (ntfsd.c). */
extern struct daemon D;


/* ---- helpers (ntfsd.c) ---- */
/* {key: full hex, "short": unique prefix} */
json_t *d_commit_json(const ntfs_hash *h, const char *key);
/* Answers err as "what: message"; returns err. */
int d_fail(ntfs_http_response *resp, int err, const char *what);
const char *d_param(const ntfs_http_request *req, const char *name);
/* Sends body (stolen); NULL body answers out_of_memory. */
int d_reply(ntfs_http_response *resp, int status, json_t *body);
const char *d_jstr(const json_t *o, const char *k);
/* Unknown fields and wrong types answer 400; return 0 or the error. */
int d_check_keys(const ntfs_http_request *req, ntfs_http_response *resp, const char *const *allowed);
int d_want_string(const ntfs_http_request *req, ntfs_http_response *resp, const char *key, bool required,
                  const char **ret);
/* The optional "idempotency_key": NULL when absent; 400 bad_request unless
 * 1..NTFS_JOURNAL_MAX_KEY bytes (the journal's bound, said before it is asked). */
int d_want_key(const ntfs_http_request *req, ntfs_http_response *resp, const char **ret);
int d_session_info_json(const struct ntfs_session_info *si, json_t **ret);
json_t *d_mounts_json(void);

/* mounts */
void d_mount_free(struct dmount *m);
int d_mount_stop(struct dmount *m);
/* Mounts session (or the ref at, read-only) at mp; relatime: atime kept
 * (else noatime). *ret_mp (optional, caller frees): the canonical
 * mountpoint. Nothing else of the mount is handed back: once listed, it may
 * be unmounted and freed by another request. */
int d_mount_add(const char *session, const char *at, const char *mp, bool ro, bool internal, double idle,
                double maxi, bool relatime, char **ret_mp);
struct dmount *d_mount_take(const char *mp);
void d_unmount_session(const char *session);
/* Session end, serialized with mounts: d_session_end_begin() waits for the
 * mounts of session in the making, and until d_session_end_done() every new
 * mount of it answers session_not_found. */
void d_session_end_begin(const char *session);
void d_session_end_done(const char *session);
/* Shutdown: no new mount starts; waits for those in the making. */
void d_mounts_close(void);
/* Forgets (stops and frees) the mounts unmounted from outside. */
void d_mounts_reap(void);
/* A read-write mount of session for the jail (made under the store if none). */
int d_session_mountpoint(const char *session, char **ret);
void d_flush_session_mounts(const char *session);
void d_hold_session_mounts(const char *session);
void d_release_session_mounts(const char *session);
/* The journal's record of a session made or ended by a store operation
 * that already succeeded: a failure to record it is logged (the session's
 * rows are metadata: its effects are journaled by their own calls). */
void d_journal_session_created(const char *name, int64_t uid);
void d_journal_session_ended(const char *name);
int d_checkpoint(const char *name, const char *msg, const char *effect, ntfs_hash *h, bool *changed);
/* The same; with always, a commit is made even when nothing changed (a
 * named checkpoint: fs/store.h ntfs_checkpoint_always). */
int d_checkpoint_always(const char *name, const char *msg, const char *effect, bool always, ntfs_hash *h,
                        bool *changed);

/* Policy L1 + L2 for one call of tool in session: checks the persistent
 * counters (journal) and the workspace size (store), charges the call
 * counters, and gives the limits to run it with. -NTFS_EDENIED,
 * -NTFS_EQUOTA (why names the rule), -NTFS_ENOTFOUND. */
/* The daemon-wide current seed session (the last /session/start's; a copy,
 * or NULL): ctl/routes-seed.c. */
char *d_seed_current(void);
int d_policy_admit(const char *session, const char *tool, uint64_t *ret_timeout_ms, uint64_t *ret_output_limit,
                   char *why, size_t whylen);
/* State-changing commands in flight, and fsyncs made meanwhile through the
 * session's other mounts (ctl/routes-exec.c, docs/recovery.md): recovery
 * must not roll back a session whose other writer fsync'd while a command
 * ran. d_inflight_enter before the command's pre-checkpoint, _leave after
 * its finish. d_ext_fsync is the on_fsync hook of a non-internal rw mount:
 * while a command of the session is in flight it records the session in
 * the journal (meta key D_EXT_FSYNC_KEY), durably, before the fsync
 * returns. */
#define D_EXT_FSYNC_KEY "ext_fsync_during_effect"
void d_inflight_enter(const char *session);
void d_inflight_leave(const char *session);
int d_ext_fsync(void *dmount);
/* Running operations followed by a client-chosen progress id (ctl/optable.c):
 * each route module has its own table (D_OPTABLE), so ids are looked up per
 * module. The caller owns prog, which must outlive d_op_end; render turns it
 * into the progress route's fields (a new JSON object, NULL on failure). */
#define D_OP_ID_MAX 64
struct d_op {
        bool used;
        char id[D_OP_ID_MAX + 1];
        const char *kind;
        char session[NTFS_NAME_MAX + 1];
        int64_t started_ns;
        const void *prog;
        json_t *(*render)(const void *prog);
};
struct d_optable {
        pthread_mutex_t lock;
        size_t n;
        struct d_op *slots;
};
#define D_OPTABLE(name, max)                      \
        static struct d_op name##_slots[max];     \
        static struct d_optable name = { PTHREAD_MUTEX_INITIALIZER, max, name##_slots }
/* 1..D_OP_ID_MAX of [A-Za-z0-9_-]. */
bool d_op_id_valid(const char *s);
/* A slot for id, or NULL (id NULL or invalid, taken, or the table full): the
 * operation then runs untracked. */
struct d_op *d_op_start(struct d_optable *t, const char *id, const char *kind, const char *session,
                        const void *prog, json_t *(*render)(const void *prog));
void d_op_end(struct d_optable *t, struct d_op *o);
/* {"id","kind","session", render's fields..., "elapsed"} of the running
 * operation id; *ret_found false when there is none. NULL with *ret_found
 * true: out of memory. */
json_t *d_op_progress(struct d_optable *t, const char *id, bool *ret_found);
/* Adds a finished call's exec time and output to the session's counters. */
void d_policy_charge(const char *session, uint64_t exec_ms, uint64_t output_bytes);
int d_run_tool(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
               json_t **ret, char *why, size_t whylen);
/* A call's I/O: the client connection to watch (exec), or a streaming
 * call's jail fds (ctl/routes-exec-stream.c); ended (may be NULL), called
 * once the jail has run (whatever ntfs_jail_run returned)
 * and before the result is built and journaled: it may complete jr (a
 * terminal's output, which the helper never sees). */
struct d_exec_io {
        const struct ntfs_jail_io *jail;  /* NULL: no streaming */
        bool watch_hangup;                /* end the run when hangup_fd hangs up */
        int hangup_fd;                    /* (exec/jail.h, spec.hangup_fd) */
        void (*ended)(void *ud, struct ntfs_jail_result *jr);
        void *ud;
};
/* d_run_tool with a cancel flag (exec/jail.h, spec.cancel; NULL: none)
 * and a streaming call's I/O (NULL: none). */
int d_run_tool_io(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
                  const int *cancel, const struct d_exec_io *io, json_t **ret, char *why, size_t whylen);
/* POST /v1/sessions/{name}/exec/stream (ctl/routes-exec-stream.c). */
int d_h_exec_stream(void *ud, const ntfs_http_request *req, ntfs_http_response *resp);
void d_conn_free(void *ud, void *data);
/* The run_python tool (ctl/run-python.c, docs/python.md). d_python_command:
 * the jail command running code (at most D_PYTHON_CODE_MAX bytes, else
 * -E2BIG) under the embedded driver, *ret_command to free, *ret_env static;
 * d_python_result: merges the driver's report (the jail's stdout) into res. */
#define D_PYTHON_CODE_MAX (64 * 1024)
int d_python_command(const char *code, size_t output_limit, char **ret_command, const char *const **ret_env);
void d_python_result(json_t *res);
/* fetch_url through the gateway, journaled as irreversible (ctl/routes-fetch.c);
 * d_run_tool calls it for tools of kind FETCH, with the URL as `command`. */
int d_run_fetch(const char *session, const char *url, const char *key, json_t **ret, char *why, size_t whylen)
        __attribute__((weak));

/* The egress proxy of one jailed run (ctl/egress-run.c over policy/egress.h,
 * docs/gateway.md): a Unix socket the jail relays 127.0.0.1:NTFS_EGRESS_PORT
 * to; each connection is journaled in session at step, under parent_effect. *ret_path is borrowed
 * from the run; d_egress_run_end() (after the jail) cuts what is left. */
#define NTFS_EGRESS_PORT 3128
struct d_egress_run;
int d_egress_run_begin(const char *session, int64_t parent_effect, uint64_t step, struct d_egress_run **ret,
                       const char **ret_path) __attribute__((weak));
void d_egress_run_end(struct d_egress_run *run) __attribute__((weak));

/* ---- route modules ---- */
int routes_store_register(ntfs_router *r);
int routes_exec_register(ntfs_router *r);
int routes_seed_register(ntfs_router *r);
/* optional modules: defined when their ctl/routes-NAME.c exists */
int routes_fetch_register(ntfs_router *r) __attribute__((weak));
int routes_agent_register(ntfs_router *r) __attribute__((weak));
int routes_replay_register(ntfs_router *r) __attribute__((weak));
int routes_trunk_register(ntfs_router *r) __attribute__((weak));
int routes_archive_register(ntfs_router *r) __attribute__((weak));
int routes_remote_register(ntfs_router *r) __attribute__((weak));
int routes_persession_register(ntfs_router *r) __attribute__((weak));
/* Closes the per-session socket of session (NULL: all of them). */
void d_persession_close(const char *session) __attribute__((weak));
/* Startup reconciliation of the journal with the store (ctl/recovery.c),
 * run before the socket opens; and shutdown hooks of optional modules. */
int d_recovery_run(void) __attribute__((weak));
int d_extra_start(void) __attribute__((weak));
void d_extra_stop(void) __attribute__((weak));

#endif
