/* SPDX-License-Identifier: MIT
 * policy.h — the tool registry (effect classes) and the policy engine.
 *
 * The registry is the single source of truth for each tool's effect class,
 * network mode and workspace access (DESIGN.md's table). A policy file
 * (docs/policy.md) may override each tool's timeout, output limit and
 * checkpointing, and defines named rule sets (L1: allowed tools; L2: quotas),
 * the fetch allow-list and limits, host-side credentials and LLM settings.
 *
 * Lifecycle: ntfs_policy_new_default() or ntfs_policy_load()/_parse() give
 * an ntfs_policy owned by the caller, released with ntfs_policy_free()
 * (accepts NULL). A policy is immutable after creation, so it may be shared
 * by threads. Every pointer returned by an accessor (tool specs, host lists,
 * credential entries, strings) is borrowed and lives as long as the policy.
 *
 * The engine DECIDES; it does not store. Quota counters are persistent and
 * live in the journal; the caller passes their current values in
 * struct ntfs_quota_usage and, after the call, stores what
 * ntfs_quota_usage_charge() adds.
 *
 * Errors: negative errno, or -NTFS_EDENIED (policy_denied), -NTFS_EQUOTA
 * (quota_exceeded), -NTFS_ENOTFOUND (unknown tool), -NTFS_EBADREQ (a policy
 * file that does not parse; the message says which line and why).
 */
#ifndef NTFS_POLICY_POLICY_H
#define NTFS_POLICY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ntfs_policy ntfs_policy;

enum ntfs_effect_class {
        NTFS_CLASS_NO_SIDE_EFFECTS = 0, /* "no_side_effects" */
        NTFS_CLASS_REPLAYABLE_FAST,     /* "replayable_fast" */
        NTFS_CLASS_REPLAYABLE_EXPENSIVE, /* "replayable_expensive" */
        NTFS_CLASS_IRREVERSIBLE,        /* "irreversible" */
        NTFS_CLASS_RECORDED,            /* "recorded" */
};

enum ntfs_net_mode {
        NTFS_NET_NONE = 0,  /* jail: no network namespace interfaces but lo down */
        NTFS_NET_LOOPBACK,  /* jail: loopback only */
        NTFS_NET_HOST,      /* runs on the host (gateway), not in the jail */
};

enum ntfs_tool_kind {
        NTFS_TOOL_KIND_EXEC = 0, /* a command in the jail */
        NTFS_TOOL_KIND_FETCH,    /* ntfs_gateway_fetch */
        NTFS_TOOL_KIND_LLM,      /* ntfs_gateway_llm_generate */
};

/* Stable tool ids; the index into struct ntfs_quota_usage.calls. */
enum ntfs_tool_id {
        NTFS_TOOL_BASH_READ = 0,
        NTFS_TOOL_BASH_WRITE,
        NTFS_TOOL_BASH_BUILD,
        NTFS_TOOL_BASH_RUN,
        NTFS_TOOL_FETCH_URL,
        NTFS_TOOL_LLM_GENERATE,
        NTFS_TOOL_RUN_PYTHON,
        NTFS_TOOL_COUNT
};

struct ntfs_tool_spec {
        const char *name;               /* "bash_read" ... */
        enum ntfs_tool_id id;
        enum ntfs_tool_kind kind;
        enum ntfs_effect_class cls;
        enum ntfs_net_mode net;
        bool workspace_rw;              /* false: the workspace is mounted read-only for the call */
        bool checkpoint_after;          /* a checkpoint is taken when the call ends */
        uint64_t timeout_ms;            /* wall-clock limit of one call */
        uint64_t output_limit;          /* bytes captured/returned per stream (exec) or body (fetch, llm) */
        bool egress;                    /* the jail gets ntfsd's egress proxy (docs/gateway.md); only
                                         * tools with loopback network (bash_run); default off */
};

/* Stable snake_case name of a class ("irreversible"); never NULL. */
const char *ntfs_effect_class_name(enum ntfs_effect_class c);
/* "none", "loopback", "host". */
const char *ntfs_net_mode_name(enum ntfs_net_mode m);
/* True when the class changes the workspace (bash_write, bash_build, bash_run). */
bool ntfs_effect_class_changes_state(enum ntfs_effect_class c);

/* ---- construction --------------------------------------------------- */

/* The built-in registry, one permissive rule set "default" (every tool
 * allowed, no quotas), an EMPTY fetch allow-list (every fetch refused),
 * built-in fetch and LLM defaults. */
int ntfs_policy_new_default(ntfs_policy **ret);
/* Parses a policy file's text (need not be NUL-terminated). On a syntax or
 * semantic error returns -NTFS_EBADREQ and writes "line N: why" to why. */
int ntfs_policy_parse(const char *text, size_t len, ntfs_policy **ret, char *why, size_t whylen);
/* Reads path (at most NTFS_POLICY_MAX_FILE bytes; -EFBIG beyond) and parses it. */
int ntfs_policy_load(const char *path, ntfs_policy **ret, char *why, size_t whylen);
void ntfs_policy_free(ntfs_policy *p);

/* Parser bounds (documented in docs/policy.md). */
#define NTFS_POLICY_MAX_FILE (1024 * 1024)
#define NTFS_POLICY_MAX_LINE 4096
#define NTFS_POLICY_MAX_RULESETS 64
#define NTFS_POLICY_MAX_HOSTS 1024
#define NTFS_POLICY_MAX_PORTS 64
#define NTFS_POLICY_MAX_CREDENTIALS 64
/* Shortest secret (credential value, LLM key) accepted: the journal replaces
 * every occurrence of each secret in what it stores, and a value of 1-3
 * bytes would redact ordinary text (the journal refuses it: its
 * NTFS_JOURNAL_SECRET_MIN is the same 4). Longest: one policy line. */
#define NTFS_POLICY_SECRET_MIN 4
#define NTFS_POLICY_SECRET_MAX 4096
#define NTFS_POLICY_MAX_SECTIONS 512

/* ---- registry ------------------------------------------------------- */

/* The tool's spec (with this policy's overrides), or NULL for an unknown
 * name (callers report -NTFS_ENOTFOUND). */
const struct ntfs_tool_spec *ntfs_policy_tool(const ntfs_policy *p, const char *name);
const struct ntfs_tool_spec *ntfs_policy_tool_by_id(const ntfs_policy *p, enum ntfs_tool_id id);

/* ---- decisions (L1 + L2) -------------------------------------------- */

/* Persistent counters of one session, as stored by the journal. Counter
 * names (ntfs_quota_usage_set/get): "calls.<tool>", "irreversible_calls",
 * "exec_ms", "output_bytes", "workspace_bytes", "workspace_inodes".
 * workspace_* are not counters but the session's current usage (from the
 * store); the caller fills them in before asking. */
struct ntfs_quota_usage {
        uint64_t calls[NTFS_TOOL_COUNT];
        uint64_t irreversible_calls;
        uint64_t exec_ms;
        uint64_t output_bytes;
        uint64_t workspace_bytes;
        uint64_t workspace_inodes;
};

#define NTFS_QUOTA_UNLIMITED UINT64_MAX

/* May a session under rule set rules (NULL = "default") call tool now?
 * Returns 0, or
 *   -NTFS_ENOTFOUND  unknown tool ("unknown tool 'x'"),
 *   -NTFS_EDENIED    unknown rule set, or the tool is not allowed (L1),
 *   -NTFS_EQUOTA     a quota is reached (L2), e.g. "quota calls.bash_run=3 reached".
 * why (may be NULL) receives a message naming the rule. usage may be NULL
 * (all zero). Order: tool, rule set, L1, then the L2 quotas in the order
 * calls.<tool>, irreversible_calls, exec_seconds, output_bytes,
 * workspace_bytes, workspace_inodes (docs/policy.md). */
int ntfs_policy_check_call(const ntfs_policy *p, const char *rules, const char *tool,
                           const struct ntfs_quota_usage *usage, char *why, size_t whylen);

/* The limits to run an admitted call with: the tool's timeout and output
 * limit, lowered to what remains of the exec_seconds and output_bytes
 * quotas. Same errors as ntfs_policy_check_call for unknown names. */
int ntfs_policy_call_limits(const ntfs_policy *p, const char *rules, const char *tool,
                            const struct ntfs_quota_usage *usage, uint64_t *ret_timeout_ms,
                            uint64_t *ret_output_limit);

/* Names of the counters an admitted call of tool increments by one
 * ("calls.<tool>", plus "irreversible_calls" for irreversible tools).
 * Writes at most 2 borrowed static strings to ret; returns their number or
 * -NTFS_ENOTFOUND. */
#define NTFS_POLICY_MAX_CALL_COUNTERS 2
int ntfs_policy_call_counters(const char *tool, const char *ret[NTFS_POLICY_MAX_CALL_COUNTERS]);

/* Adds one finished call of tool to u: the call counters above, plus
 * exec_ms and output_bytes (saturating). */
int ntfs_quota_usage_charge(struct ntfs_quota_usage *u, const char *tool, uint64_t exec_ms,
                            uint64_t output_bytes);
/* Set/get a counter by its stable name; -EINVAL for an unknown name. */
int ntfs_quota_usage_set(struct ntfs_quota_usage *u, const char *counter, uint64_t value);
int ntfs_quota_usage_get(const struct ntfs_quota_usage *u, const char *counter, uint64_t *ret);

/* ---- fetch rules (used by the gateway) ------------------------------ */

struct ntfs_fetch_rules {
        const char *const *allow_hosts;   /* NULL-terminated; "host" or "*.suffix" */
        const uint16_t *allow_ports;      /* n_ports entries; n_ports == 0: 80 and 443 */
        size_t n_ports;
        bool any_port;                    /* allow_ports = * */
        bool allow_private;               /* every private/loopback/link-local address allowed */
        const char *const *private_hosts; /* NULL-terminated URL hosts allowed to reach private addresses */
        uint64_t max_response_bytes;
        uint64_t timeout_ms;
        unsigned max_redirects;
};

struct ntfs_credential {
        const char *host;       /* exact URL host (lower case) */
        const char *header;     /* e.g. "Authorization" */
        const char *value;      /* literal value, or NULL when value_env is used */
        const char *value_env;  /* name of the environment (.env) variable holding the value */
        bool allow_insecure;    /* also send it over plain http (default: https only) */
};

struct ntfs_llm_settings {
        const char *base_url;   /* NULL: environment, .env, then https://api.anthropic.com */
        const char *model;      /* NULL: LLM_MODEL, then NTFS_LLM_DEFAULT_MODEL */
        const char *env_file;   /* .env-style file to read ANTHROPIC_* from, or NULL */
        uint64_t max_tokens;    /* used when a request names none */
        uint64_t timeout_ms;    /* per attempt */
        unsigned max_attempts;  /* total attempts, >= 1 */
        uint64_t max_total_ms;  /* across attempts and waits */
        uint64_t retry_base_ms; /* first backoff; doubles, capped at 30 s */
};

const struct ntfs_fetch_rules *ntfs_policy_fetch_rules(const ntfs_policy *p);
/* The credential configured for host (exact, case-insensitive), or NULL. */
const struct ntfs_credential *ntfs_policy_credential(const ntfs_policy *p, const char *host);
/* All credentials; returns their number and sets *ret to a borrowed array. */
size_t ntfs_policy_credentials(const ntfs_policy *p, const struct ntfs_credential **ret);
const struct ntfs_llm_settings *ntfs_policy_llm(const ntfs_policy *p);

/* A session's resources ([limits]; docs/policy.md "Limits"), on by default.
 * 0 means no limit for that resource. */
struct ntfs_session_limits {
        uint64_t memory_bytes;     /* every concurrent call of a session together (one cgroup) */
        uint64_t pids;             /* the same, processes and threads */
        unsigned cpu_percent;      /* the same, CPU time: 100 = one core */
        uint64_t tmp_bytes;        /* each call's private /tmp (never 0) */
        uint64_t workspace_bytes;  /* the store's quota a new session starts with */
        uint64_t workspace_inodes;
};
#define NTFS_LIMITS_DEFAULT_MEMORY (4ULL << 30)
#define NTFS_LIMITS_DEFAULT_PIDS 1024
#define NTFS_LIMITS_DEFAULT_CPU 100
#define NTFS_LIMITS_DEFAULT_TMP (64ULL << 20)
#define NTFS_LIMITS_DEFAULT_WORKSPACE_BYTES (10ULL << 30)
#define NTFS_LIMITS_DEFAULT_WORKSPACE_INODES 1000000
const struct ntfs_session_limits *ntfs_policy_limits(const ntfs_policy *p);

/* Host allow-list match: exact (case-insensitive) or "*.suffix" (matches any
 * name ending in ".suffix" with at least one more label; not the suffix
 * itself). A host with a trailing dot is refused. */
bool ntfs_policy_host_allowed(const ntfs_policy *p, const char *host);
bool ntfs_policy_port_allowed(const ntfs_policy *p, unsigned port);
/* True when host is listed in private_hosts (or allow_private is set). */
bool ntfs_policy_private_allowed(const ntfs_policy *p, const char *host);

#endif
