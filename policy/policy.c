/* SPDX-License-Identifier: MIT
 * policy.c — tool registry, policy file parser and call decisions.
 * The file format is described in docs/policy.md.
 */
#include "policy/policy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "common/banned.h"

struct ruleset {
        char *name;
        bool allowed[NTFS_TOOL_COUNT];
        uint64_t q_calls[NTFS_TOOL_COUNT];
        uint64_t q_irreversible;
        uint64_t q_exec_seconds;
        uint64_t q_output_bytes;
        uint64_t q_workspace_bytes;
        uint64_t q_workspace_inodes;
};

struct ntfs_policy {
        struct ntfs_tool_spec tools[NTFS_TOOL_COUNT];
        struct ruleset rules[NTFS_POLICY_MAX_RULESETS];
        size_t n_rules;
        char *hosts[NTFS_POLICY_MAX_HOSTS + 1];
        size_t n_hosts;
        char *private_hosts[NTFS_POLICY_MAX_HOSTS + 1];
        size_t n_private;
        uint16_t ports[NTFS_POLICY_MAX_PORTS];
        struct ntfs_fetch_rules fetch;
        struct ntfs_credential creds[NTFS_POLICY_MAX_CREDENTIALS];
        size_t n_creds;
        struct ntfs_llm_settings llm;
        struct ntfs_session_limits limits;
};

static const struct ntfs_tool_spec builtin_tools[NTFS_TOOL_COUNT] = {
        { "bash_read", NTFS_TOOL_BASH_READ, NTFS_TOOL_KIND_EXEC, NTFS_CLASS_NO_SIDE_EFFECTS, NTFS_NET_NONE,
          false, false, 60 * 1000, 1024 * 1024, false },
        { "bash_write", NTFS_TOOL_BASH_WRITE, NTFS_TOOL_KIND_EXEC, NTFS_CLASS_REPLAYABLE_FAST, NTFS_NET_NONE,
          true, true, 300 * 1000, 1024 * 1024, false },
        { "bash_build", NTFS_TOOL_BASH_BUILD, NTFS_TOOL_KIND_EXEC, NTFS_CLASS_REPLAYABLE_EXPENSIVE,
          NTFS_NET_NONE, true, true, 1800 * 1000, 4 * 1024 * 1024, false },
        { "bash_run", NTFS_TOOL_BASH_RUN, NTFS_TOOL_KIND_EXEC, NTFS_CLASS_IRREVERSIBLE, NTFS_NET_LOOPBACK,
          true, true, 600 * 1000, 1024 * 1024, false },
        { "fetch_url", NTFS_TOOL_FETCH_URL, NTFS_TOOL_KIND_FETCH, NTFS_CLASS_IRREVERSIBLE, NTFS_NET_HOST,
          false, false, 30 * 1000, 10 * 1024 * 1024, false },
        { "llm_generate", NTFS_TOOL_LLM_GENERATE, NTFS_TOOL_KIND_LLM, NTFS_CLASS_RECORDED, NTFS_NET_HOST,
          false, false, 300 * 1000, 8 * 1024 * 1024, false },
        { "run_python", NTFS_TOOL_RUN_PYTHON, NTFS_TOOL_KIND_EXEC, NTFS_CLASS_REPLAYABLE_FAST, NTFS_NET_NONE,
          true, true, 300 * 1000, 16 * 1024 * 1024, false },
};

static const char *const call_counter_names[NTFS_TOOL_COUNT] = {
        "calls.bash_read", "calls.bash_write", "calls.bash_build",
        "calls.bash_run",  "calls.fetch_url",  "calls.llm_generate", "calls.run_python",
};

const char *ntfs_effect_class_name(enum ntfs_effect_class c) {
        switch (c) {
        case NTFS_CLASS_NO_SIDE_EFFECTS:
                return "no_side_effects";
        case NTFS_CLASS_REPLAYABLE_FAST:
                return "replayable_fast";
        case NTFS_CLASS_REPLAYABLE_EXPENSIVE:
                return "replayable_expensive";
        case NTFS_CLASS_IRREVERSIBLE:
                return "irreversible";
        case NTFS_CLASS_RECORDED:
                return "recorded";
        }
        return "unknown";
}

const char *ntfs_net_mode_name(enum ntfs_net_mode m) {
        switch (m) {
        case NTFS_NET_NONE:
                return "none";
        case NTFS_NET_LOOPBACK:
                return "loopback";
        case NTFS_NET_HOST:
                return "host";
        }
        return "unknown";
}

bool ntfs_effect_class_changes_state(enum ntfs_effect_class c) {
        return c == NTFS_CLASS_REPLAYABLE_FAST || c == NTFS_CLASS_REPLAYABLE_EXPENSIVE ||
               c == NTFS_CLASS_IRREVERSIBLE;
}

static void ruleset_init_permissive(struct ruleset *r) {
        for (size_t i = 0; i < NTFS_TOOL_COUNT; i++) {
                r->allowed[i] = true;
                r->q_calls[i] = NTFS_QUOTA_UNLIMITED;
        }
        r->q_irreversible = r->q_exec_seconds = r->q_output_bytes = NTFS_QUOTA_UNLIMITED;
        r->q_workspace_bytes = r->q_workspace_inodes = NTFS_QUOTA_UNLIMITED;
}

static ntfs_policy *policy_alloc(void) {
        ntfs_policy *p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        memcpy(p->tools, builtin_tools, sizeof builtin_tools);
        p->fetch.allow_hosts = (const char *const *)p->hosts;
        p->fetch.private_hosts = (const char *const *)p->private_hosts;
        p->fetch.allow_ports = p->ports;
        p->fetch.max_redirects = 5;
        p->llm.max_tokens = 4096;
        p->llm.timeout_ms = 300 * 1000;
        p->llm.max_attempts = 4;
        p->llm.max_total_ms = 180 * 1000;
        p->llm.retry_base_ms = 1000;
        p->limits = (struct ntfs_session_limits){ .memory_bytes = NTFS_LIMITS_DEFAULT_MEMORY,
                                                  .pids = NTFS_LIMITS_DEFAULT_PIDS,
                                                  .cpu_percent = NTFS_LIMITS_DEFAULT_CPU,
                                                  .tmp_bytes = NTFS_LIMITS_DEFAULT_TMP,
                                                  .workspace_bytes = NTFS_LIMITS_DEFAULT_WORKSPACE_BYTES,
                                                  .workspace_inodes = NTFS_LIMITS_DEFAULT_WORKSPACE_INODES };
        return p;
}

/* fetch_url's spec and the fetch rules share the timeout and size limit. */
static void sync_fetch(ntfs_policy *p) {
        p->fetch.timeout_ms = p->tools[NTFS_TOOL_FETCH_URL].timeout_ms;
        p->fetch.max_response_bytes = p->tools[NTFS_TOOL_FETCH_URL].output_limit;
        p->llm.timeout_ms = p->tools[NTFS_TOOL_LLM_GENERATE].timeout_ms;
}

void ntfs_policy_free(ntfs_policy *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n_rules; i++)
                free(p->rules[i].name);
        for (size_t i = 0; i < p->n_hosts; i++)
                free(p->hosts[i]);
        for (size_t i = 0; i < p->n_private; i++)
                free(p->private_hosts[i]);
        for (size_t i = 0; i < p->n_creds; i++) {
                free((char *)p->creds[i].host);
                free((char *)p->creds[i].header);
                if (p->creds[i].value) {
                        /* A credential: wipe before freeing. */
                        explicit_bzero((char *)p->creds[i].value, strlen(p->creds[i].value));
                        free((char *)p->creds[i].value);
                }
                free((char *)p->creds[i].value_env);
        }
        free((char *)p->llm.base_url);
        free((char *)p->llm.model);
        free((char *)p->llm.env_file);
        free(p);
}

static inline void ntfs_policy_freep(ntfs_policy **p) {
        ntfs_policy_free(*p);
}

int ntfs_policy_new_default(ntfs_policy **ret) {
        ntfs_policy *p = policy_alloc();
        if (!p)
                return -ENOMEM;
        p->rules[0].name = strdup("default");
        if (!p->rules[0].name) {
                ntfs_policy_free(p);
                return -ENOMEM;
        }
        ruleset_init_permissive(&p->rules[0]);
        p->n_rules = 1;
        sync_fetch(p);
        *ret = p;
        return 0;
}

/* ---- parser ----------------------------------------------------------- */

enum section_kind { SEC_NONE, SEC_TOOL, SEC_RULES, SEC_FETCH, SEC_CREDENTIAL, SEC_LLM, SEC_LIMITS };

struct parser {
        ntfs_policy *p;
        unsigned line;
        enum section_kind sec;
        unsigned sec_line;
        struct ntfs_tool_spec *tool;
        struct ruleset *rules;
        struct ntfs_credential *cred;
        bool seen_fetch, seen_llm, seen_limits;
        bool seen_tool[NTFS_TOOL_COUNT];
        unsigned n_sections;
        char *why;
        size_t whylen;
};

__attribute__((format(printf, 2, 3))) static int perr(struct parser *ps, const char *fmt, ...) {
        if (ps->why && ps->whylen) {
                int n = snprintf(ps->why, ps->whylen, "line %u: ", ps->line);
                if (n >= 0 && (size_t)n < ps->whylen) {
                        va_list ap;
                        va_start(ap, fmt);
                        vsnprintf(ps->why + n, ps->whylen - (size_t)n, fmt, ap);
                        va_end(ap);
                }
        }
        return -NTFS_EBADREQ;
}

static char *trim(char *s) {
        while (*s == ' ' || *s == '\t')
                s++;
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
                s[--n] = 0;
        return s;
}

static int tool_index(const char *name) {
        for (int i = 0; i < NTFS_TOOL_COUNT; i++)
                if (strcmp(builtin_tools[i].name, name) == 0)
                        return i;
        return -1;
}

/* Unsigned integer with an optional unit suffix. mult pairs are {suffix, factor}. */
struct unit {
        const char *suffix;
        uint64_t factor;
};

static int parse_with_units(const char *s, const struct unit *units, size_t n_units, uint64_t max,
                            uint64_t *ret) {
        char num[32];
        size_t i = 0;
        while (s[i] >= '0' && s[i] <= '9') {
                if (i + 1 >= sizeof num)
                        return -ERANGE;
                num[i] = s[i];
                i++;
        }
        if (i == 0)
                return -EINVAL;
        num[i] = 0;
        const char *suf = s + i;
        while (*suf == ' ')
                suf++;
        uint64_t v, factor = 0;
        int r = ntfs_parse_u64(num, UINT64_MAX, &v);
        if (r < 0)
                return r;
        for (size_t k = 0; k < n_units; k++)
                if (strcasecmp(suf, units[k].suffix) == 0) {
                        factor = units[k].factor;
                        break;
                }
        if (!factor)
                return -EINVAL;
        if (v > max / factor)
                return -ERANGE;
        *ret = v * factor;
        return 0;
}

static const struct unit size_units[] = {
        { "", 1 },           { "b", 1 },
        { "k", 1024ULL },    { "kb", 1024ULL },    { "kib", 1024ULL },
        { "m", 1ULL << 20 }, { "mb", 1ULL << 20 }, { "mib", 1ULL << 20 },
        { "g", 1ULL << 30 }, { "gb", 1ULL << 30 }, { "gib", 1ULL << 30 },
        { "t", 1ULL << 40 }, { "tb", 1ULL << 40 }, { "tib", 1ULL << 40 },
};
/* Durations in milliseconds; a bare number is seconds. */
static const struct unit time_units[] = {
        { "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "min", 60 * 1000 }, { "h", 3600 * 1000 },
};

#define MAX_SIZE (1ULL << 50)
#define MAX_DURATION_MS (7ULL * 24 * 3600 * 1000)

static int get_size(struct parser *ps, const char *key, const char *v, uint64_t *ret) {
        if (parse_with_units(v, size_units, ARRAY_SIZE(size_units), MAX_SIZE, ret) < 0)
                return perr(ps, "%s: '%s' is not a size (N, NK, NM, NG; at most 1 PiB)", key, v);
        return 0;
}

static int get_duration(struct parser *ps, const char *key, const char *v, uint64_t *ret) {
        if (parse_with_units(v, time_units, ARRAY_SIZE(time_units), MAX_DURATION_MS, ret) < 0)
                return perr(ps, "%s: '%s' is not a duration (N[s], Nms, Nm, Nh; at most 7 days)", key, v);
        if (*ret == 0)
                return perr(ps, "%s: duration must be positive", key);
        return 0;
}

static int get_count(struct parser *ps, const char *key, const char *v, uint64_t max, uint64_t *ret) {
        if (ntfs_parse_u64(v, max, ret) < 0)
                return perr(ps, "%s: '%s' is not a number in 0..%llu", key, v, (unsigned long long)max);
        return 0;
}

static int get_bool(struct parser *ps, const char *key, const char *v, bool *ret) {
        if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1") || !strcasecmp(v, "on"))
                *ret = true;
        else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0") || !strcasecmp(v, "off"))
                *ret = false;
        else
                return perr(ps, "%s: '%s' is not a boolean (true/false)", key, v);
        return 0;
}

static int set_string(struct parser *ps, const char *key, const char *v, const char **slot) {
        if (*slot)
                return perr(ps, "%s: set twice", key);
        char *s = strdup(v);
        if (!s)
                return -ENOMEM;
        *slot = s;
        return 0;
}

/* A host name or address literal: lower-cased in place; brackets of an IPv6
 * literal removed. wildcard: a leading "*." is allowed. */
static int normalize_host(char *h, bool wildcard) {
        size_t n = strlen(h);
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
                memmove(h, h + 1, n - 2);
                h[n - 2] = 0;
                n -= 2;
        }
        if (n == 0 || n > 253)
                return -EINVAL;
        size_t start = 0;
        if (wildcard && n > 2 && h[0] == '*' && h[1] == '.')
                start = 2;
        if (h[start] == '.' || h[n - 1] == '.')
                return -EINVAL;
        for (size_t i = start; i < n; i++) {
                unsigned char c = (unsigned char)h[i];
                if (isalnum(c) || c == '-' || c == '.' || c == ':' || c == '_')
                        h[i] = (char)tolower(c);
                else
                        return -EINVAL;
        }
        return 0;
}

/* Splits v at commas and calls fn on each trimmed non-empty item. */
static int for_each_item(struct parser *ps, const char *key, char *v,
                         int (*fn)(struct parser *, const char *, char *)) {
        if (!*v)
                return perr(ps, "%s: empty list", key);
        for (char *tok = v;;) {
                char *comma = strchr(tok, ',');
                if (comma)
                        *comma = 0;
                char *item = trim(tok);
                if (!*item)
                        return perr(ps, "%s: empty list item", key);
                int r = fn(ps, key, item);
                if (r < 0)
                        return r;
                if (!comma)
                        return 0;
                tok = comma + 1;
        }
}

static int add_host_to(struct parser *ps, const char *key, char *item, char **arr, size_t *n, bool wildcard) {
        if (normalize_host(item, wildcard) < 0)
                return perr(ps, "%s: '%s' is not a host name%s", key, item, wildcard ? " or *.suffix" : "");
        if (*n >= NTFS_POLICY_MAX_HOSTS)
                return perr(ps, "%s: more than %d hosts", key, NTFS_POLICY_MAX_HOSTS);
        arr[*n] = strdup(item);
        if (!arr[*n])
                return -ENOMEM;
        (*n)++;
        arr[*n] = NULL;
        return 0;
}

static int add_allow_host(struct parser *ps, const char *key, char *item) {
        return add_host_to(ps, key, item, ps->p->hosts, &ps->p->n_hosts, true);
}

static int add_private_host(struct parser *ps, const char *key, char *item) {
        return add_host_to(ps, key, item, ps->p->private_hosts, &ps->p->n_private, false);
}

static int add_port(struct parser *ps, const char *key, char *item) {
        ntfs_policy *p = ps->p;
        if (strcmp(item, "*") == 0) {
                p->fetch.any_port = true;
                return 0;
        }
        uint64_t v;
        if (ntfs_parse_u64(item, 65535, &v) < 0 || v == 0)
                return perr(ps, "%s: '%s' is not a port (1..65535 or *)", key, item);
        if (p->fetch.n_ports >= NTFS_POLICY_MAX_PORTS)
                return perr(ps, "%s: more than %d ports", key, NTFS_POLICY_MAX_PORTS);
        p->ports[p->fetch.n_ports++] = (uint16_t)v;
        return 0;
}

static int add_allowed_tool(struct parser *ps, const char *key, char *item) {
        if (strcmp(item, "*") == 0) {
                for (size_t i = 0; i < NTFS_TOOL_COUNT; i++)
                        ps->rules->allowed[i] = true;
                return 0;
        }
        int t = tool_index(item);
        if (t < 0)
                return perr(ps, "%s: unknown tool '%s'", key, item);
        ps->rules->allowed[t] = true;
        return 0;
}

static bool header_name_valid(const char *s) {
        if (!*s || strlen(s) > 128)
                return false;
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (!isalnum(c) && c != '-' && c != '_')
                        return false;
        }
        return true;
}

static bool env_name_valid(const char *s) {
        if (!*s || strlen(s) > 128 || isdigit((unsigned char)*s))
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && *s != '_')
                        return false;
        return true;
}

static int end_section(struct parser *ps) {
        if (ps->sec == SEC_CREDENTIAL) {
                struct ntfs_credential *c = ps->cred;
                unsigned saved = ps->line;
                ps->line = ps->sec_line;
                int r = 0;
                if (!c->header)
                        r = perr(ps, "[credential %s]: no header", c->host);
                else if (!c->value == !c->value_env)
                        r = perr(ps, "[credential %s]: exactly one of value, value_env is required", c->host);
                ps->line = saved;
                if (r < 0)
                        return r;
        }
        ps->sec = SEC_NONE;
        return 0;
}

static int start_section(struct parser *ps, char *hdr) {
        ntfs_policy *p = ps->p;
        int r = end_section(ps);
        if (r < 0)
                return r;
        if (++ps->n_sections > NTFS_POLICY_MAX_SECTIONS)
                return perr(ps, "more than %d sections", NTFS_POLICY_MAX_SECTIONS);
        char *kind = trim(hdr), *arg = NULL;
        char *sp = strpbrk(kind, " \t");
        if (sp) {
                *sp = 0;
                arg = trim(sp + 1);
                if (!*arg)
                        arg = NULL;
        }
        ps->sec_line = ps->line;
        if (strcmp(kind, "tool") == 0) {
                if (!arg)
                        return perr(ps, "[tool] needs a tool name");
                int t = tool_index(arg);
                if (t < 0)
                        return perr(ps, "[tool %s]: unknown tool (custom tools are not supported)", arg);
                if (ps->seen_tool[t])
                        return perr(ps, "[tool %s]: section repeated", arg);
                ps->seen_tool[t] = true;
                ps->tool = &p->tools[t];
                ps->sec = SEC_TOOL;
        } else if (strcmp(kind, "rules") == 0) {
                if (!arg)
                        return perr(ps, "[rules] needs a name");
                if (!ntfs_name_valid(arg) || strpbrk(arg, " \t"))
                        return perr(ps, "[rules %s]: invalid name", arg);
                for (size_t i = 0; i < p->n_rules; i++)
                        if (strcmp(p->rules[i].name, arg) == 0)
                                return perr(ps, "[rules %s]: section repeated", arg);
                if (p->n_rules >= NTFS_POLICY_MAX_RULESETS)
                        return perr(ps, "more than %d rule sets", NTFS_POLICY_MAX_RULESETS);
                struct ruleset *rs = &p->rules[p->n_rules];
                ruleset_init_permissive(rs);
                rs->name = strdup(arg);
                if (!rs->name)
                        return -ENOMEM;
                p->n_rules++;
                ps->rules = rs;
                ps->sec = SEC_RULES;
        } else if (strcmp(kind, "fetch") == 0 || strcmp(kind, "llm") == 0) {
                bool fetch = kind[0] == 'f';
                if (arg)
                        return perr(ps, "[%s] takes no argument", kind);
                bool *seen = fetch ? &ps->seen_fetch : &ps->seen_llm;
                if (*seen)
                        return perr(ps, "[%s]: section repeated", kind);
                *seen = true;
                ps->sec = fetch ? SEC_FETCH : SEC_LLM;
        } else if (strcmp(kind, "limits") == 0) {
                if (arg)
                        return perr(ps, "[limits] takes no argument");
                if (ps->seen_limits)
                        return perr(ps, "[limits]: section repeated");
                ps->seen_limits = true;
                ps->sec = SEC_LIMITS;
        } else if (strcmp(kind, "credential") == 0) {
                if (!arg)
                        return perr(ps, "[credential] needs a host");
                if (normalize_host(arg, false) < 0)
                        return perr(ps, "[credential %s]: not a host name", arg);
                for (size_t i = 0; i < p->n_creds; i++)
                        if (strcmp(p->creds[i].host, arg) == 0)
                                return perr(ps, "[credential %s]: section repeated", arg);
                if (p->n_creds >= NTFS_POLICY_MAX_CREDENTIALS)
                        return perr(ps, "more than %d credentials", NTFS_POLICY_MAX_CREDENTIALS);
                struct ntfs_credential *c = &p->creds[p->n_creds];
                memset(c, 0, sizeof *c);
                c->host = strdup(arg);
                if (!c->host)
                        return -ENOMEM;
                p->n_creds++;
                ps->cred = c;
                ps->sec = SEC_CREDENTIAL;
        } else {
                return perr(ps, "unknown section [%s]", kind);
        }
        return 0;
}

static int kv_tool(struct parser *ps, const char *key, char *v) {
        struct ntfs_tool_spec *t = ps->tool;
        if (strcmp(key, "timeout") == 0)
                return get_duration(ps, key, v, &t->timeout_ms);
        if (strcmp(key, "output_limit") == 0)
                return get_size(ps, key, v, &t->output_limit);
        if (strcmp(key, "checkpoint_after") == 0) {
                if (t->kind != NTFS_TOOL_KIND_EXEC || !t->workspace_rw)
                        return perr(ps, "checkpoint_after: %s does not change the workspace", t->name);
                return get_bool(ps, key, v, &t->checkpoint_after);
        }
        if (strcmp(key, "egress") == 0) {
                if (t->kind != NTFS_TOOL_KIND_EXEC || t->net != NTFS_NET_LOOPBACK)
                        return perr(ps, "egress: %s has no network (only bash_run may use the egress proxy)",
                                    t->name);
                return get_bool(ps, key, v, &t->egress);
        }
        if (!strcmp(key, "class") || !strcmp(key, "network") || !strcmp(key, "workspace"))
                return perr(ps, "%s of built-in tool %s cannot be changed", key, t->name);
        return perr(ps, "unknown key '%s' in [tool %s]", key, t->name);
}

static int kv_rules(struct parser *ps, const char *key, char *v) {
        struct ruleset *rs = ps->rules;
        if (strcmp(key, "allow") == 0) {
                for (size_t i = 0; i < NTFS_TOOL_COUNT; i++)
                        rs->allowed[i] = false;
                if (!*v)
                        return 0; /* allow = (nothing) */
                return for_each_item(ps, key, v, add_allowed_tool);
        }
        if (strncmp(key, "quota.", 6) != 0)
                return perr(ps, "unknown key '%s' in [rules %s]", key, rs->name);
        const char *q = key + 6;
        if (strncmp(q, "calls.", 6) == 0) {
                int t = tool_index(q + 6);
                if (t < 0)
                        return perr(ps, "%s: unknown tool '%s'", key, q + 6);
                return get_count(ps, key, v, UINT64_MAX - 1, &rs->q_calls[t]);
        }
        if (strcmp(q, "irreversible_calls") == 0)
                return get_count(ps, key, v, UINT64_MAX - 1, &rs->q_irreversible);
        if (strcmp(q, "exec_seconds") == 0)
                return get_count(ps, key, v, 1000000000000ULL, &rs->q_exec_seconds);
        if (strcmp(q, "output_bytes") == 0)
                return get_size(ps, key, v, &rs->q_output_bytes);
        if (strcmp(q, "workspace_bytes") == 0)
                return get_size(ps, key, v, &rs->q_workspace_bytes);
        if (strcmp(q, "workspace_inodes") == 0)
                return get_count(ps, key, v, UINT64_MAX - 1, &rs->q_workspace_inodes);
        return perr(ps, "unknown quota '%s' in [rules %s]", key, rs->name);
}

static int kv_fetch(struct parser *ps, const char *key, char *v) {
        ntfs_policy *p = ps->p;
        if (strcmp(key, "allow_hosts") == 0)
                return for_each_item(ps, key, v, add_allow_host);
        if (strcmp(key, "allow_ports") == 0)
                return for_each_item(ps, key, v, add_port);
        if (strcmp(key, "private_hosts") == 0)
                return for_each_item(ps, key, v, add_private_host);
        if (strcmp(key, "allow_private") == 0)
                return get_bool(ps, key, v, &p->fetch.allow_private);
        if (strcmp(key, "max_response_bytes") == 0)
                return get_size(ps, key, v, &p->tools[NTFS_TOOL_FETCH_URL].output_limit);
        if (strcmp(key, "timeout") == 0)
                return get_duration(ps, key, v, &p->tools[NTFS_TOOL_FETCH_URL].timeout_ms);
        if (strcmp(key, "max_redirects") == 0) {
                uint64_t n;
                int r = get_count(ps, key, v, 20, &n);
                if (r < 0)
                        return r;
                p->fetch.max_redirects = (unsigned)n;
                return 0;
        }
        return perr(ps, "unknown key '%s' in [fetch]", key);
}

static int kv_limits(struct parser *ps, const char *key, char *v) {
        struct ntfs_session_limits *l = &ps->p->limits;
        if (strcmp(key, "memory") == 0)
                return get_size(ps, key, v, &l->memory_bytes);
        if (strcmp(key, "pids") == 0)
                return get_count(ps, key, v, 1 << 22, &l->pids);
        if (strcmp(key, "cpu") == 0) {
                /* percent of one core; "200" or "200%" */
                char num[32];
                size_t n = strlen(v);
                if (n && v[n - 1] == '%')
                        n--;
                if (n >= sizeof num)
                        return perr(ps, "cpu: '%s' is not a percentage in 0..100000", v);
                memcpy(num, v, n);
                num[n] = 0;
                uint64_t c;
                if (ntfs_parse_u64(num, 100000, &c) < 0)
                        return perr(ps, "cpu: '%s' is not a percentage in 0..100000", v);
                l->cpu_percent = (unsigned)c;
                return 0;
        }
        if (strcmp(key, "tmp_size") == 0) {
                int r = get_size(ps, key, v, &l->tmp_bytes);
                if (r == 0 && (l->tmp_bytes < (1ULL << 20) || l->tmp_bytes > (1ULL << 40)))
                        return perr(ps, "tmp_size: between 1M and 1T");
                return r;
        }
        if (strcmp(key, "workspace_bytes") == 0)
                return get_size(ps, key, v, &l->workspace_bytes);
        if (strcmp(key, "workspace_inodes") == 0)
                return get_count(ps, key, v, UINT64_MAX - 1, &l->workspace_inodes);
        return perr(ps, "unknown key '%s' in [limits]", key);
}

static int kv_credential(struct parser *ps, const char *key, char *v) {
        struct ntfs_credential *c = ps->cred;
        if (strcmp(key, "header") == 0) {
                if (!header_name_valid(v))
                        return perr(ps, "header: '%s' is not a header name", v);
                if (!strcasecmp(v, "host") || !strcasecmp(v, "content-length") ||
                    !strcasecmp(v, "transfer-encoding") || !strcasecmp(v, "connection"))
                        return perr(ps, "header: '%s' cannot carry a credential", v);
                return set_string(ps, key, v, &c->header);
        }
        if (strcmp(key, "value") == 0) {
                if (!*v)
                        return perr(ps, "value: empty");
                if (strlen(v) < NTFS_POLICY_SECRET_MIN)
                        return perr(ps, "value: a credential shorter than %d bytes cannot be redacted safely",
                                    NTFS_POLICY_SECRET_MIN);
                return set_string(ps, key, v, &c->value);
        }
        if (strcmp(key, "value_env") == 0) {
                if (!env_name_valid(v))
                        return perr(ps, "value_env: '%s' is not a variable name", v);
                return set_string(ps, key, v, &c->value_env);
        }
        if (strcmp(key, "allow_insecure") == 0)
                return get_bool(ps, key, v, &c->allow_insecure);
        return perr(ps, "unknown key '%s' in [credential %s]", key, c->host);
}

static int kv_llm(struct parser *ps, const char *key, char *v) {
        ntfs_policy *p = ps->p;
        if (strcmp(key, "base_url") == 0) {
                if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
                        return perr(ps, "base_url: must start with http:// or https://");
                return set_string(ps, key, v, &p->llm.base_url);
        }
        if (strcmp(key, "model") == 0) {
                if (!*v || strlen(v) > 256)
                        return perr(ps, "model: empty or too long");
                return set_string(ps, key, v, &p->llm.model);
        }
        if (strcmp(key, "env_file") == 0) {
                if (!*v)
                        return perr(ps, "env_file: empty");
                return set_string(ps, key, v, &p->llm.env_file);
        }
        if (strcmp(key, "max_tokens") == 0) {
                int r = get_count(ps, key, v, 1000000, &p->llm.max_tokens);
                if (r == 0 && p->llm.max_tokens == 0)
                        return perr(ps, "max_tokens: must be positive");
                return r;
        }
        if (strcmp(key, "timeout") == 0) {
                int r = get_duration(ps, key, v, &p->llm.timeout_ms);
                if (r == 0)
                        p->tools[NTFS_TOOL_LLM_GENERATE].timeout_ms = p->llm.timeout_ms;
                return r;
        }
        if (strcmp(key, "max_attempts") == 0) {
                uint64_t n;
                int r = get_count(ps, key, v, 20, &n);
                if (r < 0)
                        return r;
                if (n == 0)
                        return perr(ps, "max_attempts: must be at least 1");
                p->llm.max_attempts = (unsigned)n;
                return 0;
        }
        if (strcmp(key, "max_total_time") == 0)
                return get_duration(ps, key, v, &p->llm.max_total_ms);
        if (strcmp(key, "retry_base") == 0)
                return get_duration(ps, key, v, &p->llm.retry_base_ms);
        return perr(ps, "unknown key '%s' in [llm]", key);
}

static int parse_line(struct parser *ps, char *line) {
        char *s = trim(line);
        if (!*s || *s == '#' || *s == ';')
                return 0;
        if (*s == '[') {
                size_t n = strlen(s);
                if (s[n - 1] != ']')
                        return perr(ps, "section header without ']'");
                s[n - 1] = 0;
                return start_section(ps, s + 1);
        }
        char *eq = strchr(s, '=');
        if (!eq)
                return perr(ps, "expected 'key = value', '[section]' or a comment");
        *eq = 0;
        char *key = trim(s), *v = trim(eq + 1);
        if (!*key)
                return perr(ps, "empty key");
        for (const char *k = key; *k; k++)
                if (!isalnum((unsigned char)*k) && *k != '_' && *k != '.')
                        return perr(ps, "invalid key '%s'", key);
        if (!*v && !(ps->sec == SEC_RULES && strcmp(key, "allow") == 0))
                return perr(ps, "%s: empty value", key);
        switch (ps->sec) {
        case SEC_NONE:
                return perr(ps, "key '%s' outside a section", key);
        case SEC_TOOL:
                return kv_tool(ps, key, v);
        case SEC_RULES:
                return kv_rules(ps, key, v);
        case SEC_FETCH:
                return kv_fetch(ps, key, v);
        case SEC_CREDENTIAL:
                return kv_credential(ps, key, v);
        case SEC_LLM:
                return kv_llm(ps, key, v);
        case SEC_LIMITS:
                return kv_limits(ps, key, v);
        }
        return perr(ps, "internal parser state");
}

int ntfs_policy_parse(const char *text, size_t len, ntfs_policy **ret, char *why, size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        struct parser ps = { .why = why, .whylen = whylen };
        if (len > NTFS_POLICY_MAX_FILE)
                return perr(&ps, "policy larger than %d bytes", NTFS_POLICY_MAX_FILE);
        _cleanup_(ntfs_policy_freep) ntfs_policy *p = policy_alloc();
        if (!p)
                return -ENOMEM;
        ps.p = p;
        char buf[NTFS_POLICY_MAX_LINE + 2];
        size_t pos = 0;
        while (pos < len) {
                ps.line++;
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
                if (ll > NTFS_POLICY_MAX_LINE)
                        return perr(&ps, "line longer than %d bytes", NTFS_POLICY_MAX_LINE);
                memcpy(buf, text + pos, ll);
                buf[ll] = 0;
                if (memchr(buf, 0, ll))
                        return perr(&ps, "NUL byte");
                for (size_t i = 0; i < ll; i++) {
                        unsigned char c = (unsigned char)buf[i];
                        if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
                                return perr(&ps, "control character 0x%02x", c);
                }
                int r = parse_line(&ps, buf);
                if (r < 0)
                        return r;
                pos += ll + (nl ? 1 : 0);
        }
        ps.line++;
        int r = end_section(&ps);
        if (r < 0)
                return r;
        /* Without a [rules default], the default rule set is permissive. */
        bool have_default = false;
        for (size_t i = 0; i < p->n_rules; i++)
                have_default |= strcmp(p->rules[i].name, "default") == 0;
        if (!have_default) {
                if (p->n_rules >= NTFS_POLICY_MAX_RULESETS)
                        return perr(&ps, "more than %d rule sets", NTFS_POLICY_MAX_RULESETS - 1);
                struct ruleset *rs = &p->rules[p->n_rules];
                ruleset_init_permissive(rs);
                rs->name = strdup("default");
                if (!rs->name)
                        return -ENOMEM;
                p->n_rules++;
        }
        sync_fetch(p);
        *ret = TAKE_PTR(p);
        return 0;
}

int ntfs_policy_load(const char *path, ntfs_policy **ret, char *why, size_t whylen) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = ntfs_read_file(path, NTFS_POLICY_MAX_FILE, &text, &len);
        if (r < 0) {
                if (why && whylen)
                        snprintf(why, whylen, "%s: %s", path, r == -EFBIG ? "policy file too large" : strerror(-r));
                return r;
        }
        return ntfs_policy_parse(text, len, ret, why, whylen);
}

/* ---- registry and decisions ----------------------------------------- */

const struct ntfs_tool_spec *ntfs_policy_tool(const ntfs_policy *p, const char *name) {
        if (!p || !name)
                return NULL;
        int t = tool_index(name);
        return t < 0 ? NULL : &p->tools[t];
}

const struct ntfs_tool_spec *ntfs_policy_tool_by_id(const ntfs_policy *p, enum ntfs_tool_id id) {
        if (!p || (unsigned)id >= NTFS_TOOL_COUNT)
                return NULL;
        return &p->tools[id];
}

static const struct ruleset *find_rules(const ntfs_policy *p, const char *name) {
        if (!name)
                name = "default";
        for (size_t i = 0; i < p->n_rules; i++)
                if (strcmp(p->rules[i].name, name) == 0)
                        return &p->rules[i];
        return NULL;
}

__attribute__((format(printf, 4, 5))) static int deny(int err, char *why, size_t whylen, const char *fmt, ...) {
        if (why && whylen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(why, whylen, fmt, ap);
                va_end(ap);
        }
        return err;
}

static int resolve_call(const ntfs_policy *p, const char *rules, const char *tool, const struct ruleset **ret_rs,
                        int *ret_t, char *why, size_t whylen) {
        int t = tool ? tool_index(tool) : -1;
        if (t < 0)
                return deny(-NTFS_ENOTFOUND, why, whylen, "unknown tool '%s'", tool ? tool : "(null)");
        const struct ruleset *rs = find_rules(p, rules);
        if (!rs)
                return deny(-NTFS_EDENIED, why, whylen, "unknown rule set '%s'", rules);
        *ret_rs = rs;
        *ret_t = t;
        return 0;
}

int ntfs_policy_check_call(const ntfs_policy *p, const char *rules, const char *tool,
                           const struct ntfs_quota_usage *usage, char *why, size_t whylen) {
        static const struct ntfs_quota_usage zero;
        const struct ruleset *rs;
        int t;
        if (why && whylen)
                why[0] = 0;
        if (!p)
                return -EINVAL;
        int r = resolve_call(p, rules, tool, &rs, &t, why, whylen);
        if (r < 0)
                return r;
        if (!usage)
                usage = &zero;
        const struct ntfs_tool_spec *spec = &p->tools[t];
        if (!rs->allowed[t])
                return deny(-NTFS_EDENIED, why, whylen, "tool %s not allowed by rules '%s' (allow)", tool,
                            rs->name);
        if (usage->calls[t] >= rs->q_calls[t])
                return deny(-NTFS_EQUOTA, why, whylen, "quota calls.%s=%llu reached (rules '%s')", tool,
                            (unsigned long long)rs->q_calls[t], rs->name);
        if (spec->cls == NTFS_CLASS_IRREVERSIBLE && usage->irreversible_calls >= rs->q_irreversible)
                return deny(-NTFS_EQUOTA, why, whylen, "quota irreversible_calls=%llu reached (rules '%s')",
                            (unsigned long long)rs->q_irreversible, rs->name);
        if (spec->kind == NTFS_TOOL_KIND_EXEC) {
                if (rs->q_exec_seconds != NTFS_QUOTA_UNLIMITED && usage->exec_ms >= rs->q_exec_seconds * 1000)
                        return deny(-NTFS_EQUOTA, why, whylen, "quota exec_seconds=%llu reached (rules '%s')",
                                    (unsigned long long)rs->q_exec_seconds, rs->name);
        }
        if (spec->kind != NTFS_TOOL_KIND_LLM && usage->output_bytes >= rs->q_output_bytes)
                return deny(-NTFS_EQUOTA, why, whylen, "quota output_bytes=%llu reached (rules '%s')",
                            (unsigned long long)rs->q_output_bytes, rs->name);
        if (spec->workspace_rw) {
                if (usage->workspace_bytes >= rs->q_workspace_bytes)
                        return deny(-NTFS_EQUOTA, why, whylen,
                                    "quota workspace_bytes=%llu reached (rules '%s')",
                                    (unsigned long long)rs->q_workspace_bytes, rs->name);
                if (usage->workspace_inodes >= rs->q_workspace_inodes)
                        return deny(-NTFS_EQUOTA, why, whylen,
                                    "quota workspace_inodes=%llu reached (rules '%s')",
                                    (unsigned long long)rs->q_workspace_inodes, rs->name);
        }
        return 0;
}

int ntfs_policy_call_limits(const ntfs_policy *p, const char *rules, const char *tool,
                            const struct ntfs_quota_usage *usage, uint64_t *ret_timeout_ms,
                            uint64_t *ret_output_limit) {
        static const struct ntfs_quota_usage zero;
        const struct ruleset *rs;
        int t;
        if (!p)
                return -EINVAL;
        int r = resolve_call(p, rules, tool, &rs, &t, NULL, 0);
        if (r < 0)
                return r;
        if (!usage)
                usage = &zero;
        const struct ntfs_tool_spec *spec = &p->tools[t];
        uint64_t timeout = spec->timeout_ms, out = spec->output_limit;
        if (spec->kind == NTFS_TOOL_KIND_EXEC && rs->q_exec_seconds != NTFS_QUOTA_UNLIMITED) {
                uint64_t q = rs->q_exec_seconds * 1000;
                uint64_t left = usage->exec_ms >= q ? 0 : q - usage->exec_ms;
                timeout = NTFS_MIN(timeout, left);
        }
        if (spec->kind != NTFS_TOOL_KIND_LLM && rs->q_output_bytes != NTFS_QUOTA_UNLIMITED) {
                uint64_t left = usage->output_bytes >= rs->q_output_bytes ? 0
                                                                           : rs->q_output_bytes - usage->output_bytes;
                out = NTFS_MIN(out, left);
        }
        if (ret_timeout_ms)
                *ret_timeout_ms = timeout;
        if (ret_output_limit)
                *ret_output_limit = out;
        return 0;
}

int ntfs_policy_call_counters(const char *tool, const char *ret[NTFS_POLICY_MAX_CALL_COUNTERS]) {
        int t = tool ? tool_index(tool) : -1;
        if (t < 0)
                return -NTFS_ENOTFOUND;
        int n = 0;
        ret[n++] = call_counter_names[t];
        if (builtin_tools[t].cls == NTFS_CLASS_IRREVERSIBLE)
                ret[n++] = "irreversible_calls";
        return n;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int ntfs_quota_usage_charge(struct ntfs_quota_usage *u, const char *tool, uint64_t exec_ms,
                            uint64_t output_bytes) {
        int t = tool ? tool_index(tool) : -1;
        if (t < 0)
                return -NTFS_ENOTFOUND;
        u->calls[t] = sat_add(u->calls[t], 1);
        if (builtin_tools[t].cls == NTFS_CLASS_IRREVERSIBLE)
                u->irreversible_calls = sat_add(u->irreversible_calls, 1);
        u->exec_ms = sat_add(u->exec_ms, exec_ms);
        u->output_bytes = sat_add(u->output_bytes, output_bytes);
        return 0;
}

static uint64_t *counter_slot(struct ntfs_quota_usage *u, const char *counter) {
        if (!counter)
                return NULL;
        for (size_t i = 0; i < NTFS_TOOL_COUNT; i++)
                if (strcmp(counter, call_counter_names[i]) == 0)
                        return &u->calls[i];
        if (strcmp(counter, "irreversible_calls") == 0)
                return &u->irreversible_calls;
        if (strcmp(counter, "exec_ms") == 0)
                return &u->exec_ms;
        if (strcmp(counter, "output_bytes") == 0)
                return &u->output_bytes;
        if (strcmp(counter, "workspace_bytes") == 0)
                return &u->workspace_bytes;
        if (strcmp(counter, "workspace_inodes") == 0)
                return &u->workspace_inodes;
        return NULL;
}

int ntfs_quota_usage_set(struct ntfs_quota_usage *u, const char *counter, uint64_t value) {
        uint64_t *s = counter_slot(u, counter);
        if (!s)
                return -EINVAL;
        *s = value;
        return 0;
}

int ntfs_quota_usage_get(const struct ntfs_quota_usage *u, const char *counter, uint64_t *ret) {
        uint64_t *s = counter_slot((struct ntfs_quota_usage *)u, counter);
        if (!s)
                return -EINVAL;
        *ret = *s;
        return 0;
}

/* ---- fetch rules ------------------------------------------------------ */

const struct ntfs_fetch_rules *ntfs_policy_fetch_rules(const ntfs_policy *p) {
        return &p->fetch;
}

const struct ntfs_credential *ntfs_policy_credential(const ntfs_policy *p, const char *host) {
        if (!host)
                return NULL;
        for (size_t i = 0; i < p->n_creds; i++)
                if (strcasecmp(p->creds[i].host, host) == 0)
                        return &p->creds[i];
        return NULL;
}

size_t ntfs_policy_credentials(const ntfs_policy *p, const struct ntfs_credential **ret) {
        *ret = p->creds;
        return p->n_creds;
}

const struct ntfs_llm_settings *ntfs_policy_llm(const ntfs_policy *p) {
        return &p->llm;
}

const struct ntfs_session_limits *ntfs_policy_limits(const ntfs_policy *p) {
        return &p->limits;
}

bool ntfs_policy_host_allowed(const ntfs_policy *p, const char *host) {
        if (!host || !*host)
                return false;
        size_t hl = strlen(host);
        if (host[hl - 1] == '.')
                return false;
        for (size_t i = 0; i < p->n_hosts; i++) {
                const char *a = p->hosts[i];
                if (a[0] == '*' && a[1] == '.') {
                        size_t sl = strlen(a + 1); /* ".suffix" */
                        if (hl > sl && strcasecmp(host + hl - sl, a + 1) == 0)
                                return true;
                } else if (strcasecmp(a, host) == 0) {
                        return true;
                }
        }
        return false;
}

bool ntfs_policy_port_allowed(const ntfs_policy *p, unsigned port) {
        if (p->fetch.any_port)
                return true;
        if (p->fetch.n_ports == 0)
                return port == 80 || port == 443;
        for (size_t i = 0; i < p->fetch.n_ports; i++)
                if (p->ports[i] == port)
                        return true;
        return false;
}

bool ntfs_policy_private_allowed(const ntfs_policy *p, const char *host) {
        if (p->fetch.allow_private)
                return true;
        if (!host)
                return false;
        for (size_t i = 0; i < p->n_private; i++)
                if (strcasecmp(p->private_hosts[i], host) == 0)
                        return true;
        return false;
}
