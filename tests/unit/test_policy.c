/* SPDX-License-Identifier: MIT
 * test_policy.c — registry defaults, policy file parser, L1/L2 decisions.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "policy/policy.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static ntfs_policy *parse_ok(const char *text) {
        ntfs_policy *p = NULL;
        char why[256] = "";
        int r = ntfs_policy_parse(text, strlen(text), &p, why, sizeof why);
        if (r < 0)
                FAIL("parse failed: %d %s", r, why);
        return p;
}

/* Expects a parse error whose message starts with "line N:" and contains want. */
static void parse_bad(const char *text, unsigned line, const char *want) {
        ntfs_policy *p = NULL;
        char why[256] = "", prefix[32];
        int r = ntfs_policy_parse(text, strlen(text), &p, why, sizeof why);
        if (r != -NTFS_EBADREQ) {
                ntfs_policy_free(p);
                FAIL("parse of <<%s>> returned %d, want bad_request", text, r);
        }
        ASSERT(p == NULL);
        snprintf(prefix, sizeof prefix, "line %u: ", line);
        if (strncmp(why, prefix, strlen(prefix)) != 0 || !strstr(why, want))
                FAIL("message '%s' lacks '%s' / '%s'", why, prefix, want);
}

TEST(registry_defaults) {
        ntfs_policy *p = NULL;
        ASSERT_OK(ntfs_policy_new_default(&p));
        const struct ntfs_tool_spec *t = ntfs_policy_tool(p, "bash_read");
        ASSERT(t);
        ASSERT_EQ(t->cls, NTFS_CLASS_NO_SIDE_EFFECTS);
        ASSERT(!t->workspace_rw);
        ASSERT_EQ(t->net, NTFS_NET_NONE);
        ASSERT(!t->checkpoint_after);
        t = ntfs_policy_tool(p, "bash_write");
        ASSERT_EQ(t->cls, NTFS_CLASS_REPLAYABLE_FAST);
        ASSERT(t->workspace_rw);
        ASSERT_EQ(t->net, NTFS_NET_NONE);
        t = ntfs_policy_tool(p, "bash_build");
        ASSERT_EQ(t->cls, NTFS_CLASS_REPLAYABLE_EXPENSIVE);
        ASSERT(t->workspace_rw && t->checkpoint_after);
        ASSERT_EQ(t->net, NTFS_NET_NONE);
        t = ntfs_policy_tool(p, "bash_run");
        ASSERT_EQ(t->cls, NTFS_CLASS_IRREVERSIBLE);
        ASSERT(t->workspace_rw);
        ASSERT_EQ(t->net, NTFS_NET_LOOPBACK);
        t = ntfs_policy_tool(p, "fetch_url");
        ASSERT_EQ(t->cls, NTFS_CLASS_IRREVERSIBLE);
        ASSERT_EQ(t->net, NTFS_NET_HOST);
        ASSERT_EQ(t->kind, NTFS_TOOL_KIND_FETCH);
        t = ntfs_policy_tool(p, "llm_generate");
        ASSERT_EQ(t->cls, NTFS_CLASS_RECORDED);
        ASSERT_EQ(t->kind, NTFS_TOOL_KIND_LLM);
        ASSERT(ntfs_policy_tool(p, "rm_rf") == NULL);
        ASSERT(ntfs_policy_tool(p, NULL) == NULL);
        for (int i = 0; i < NTFS_TOOL_COUNT; i++) {
                t = ntfs_policy_tool_by_id(p, (enum ntfs_tool_id)i);
                ASSERT(t && t->timeout_ms > 0 && t->output_limit > 0);
                ASSERT(ntfs_policy_tool(p, t->name) == t);
        }
        ASSERT_STREQ(ntfs_effect_class_name(NTFS_CLASS_REPLAYABLE_EXPENSIVE), "replayable_expensive");
        ASSERT_STREQ(ntfs_net_mode_name(NTFS_NET_LOOPBACK), "loopback");
        /* Default policy: every tool allowed, but no fetch host. */
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_run", NULL, NULL, 0));
        ASSERT(!ntfs_policy_host_allowed(p, "example.com"));
        ASSERT(ntfs_policy_port_allowed(p, 443) && ntfs_policy_port_allowed(p, 80));
        ASSERT(!ntfs_policy_port_allowed(p, 8080));
        ntfs_policy_free(p);
        ntfs_policy_free(NULL);
}

static const char *full_policy =
        "# a complete policy\n"
        "[tool bash_run]\n"
        "timeout = 90s\n"
        "output_limit = 2M\n"
        "\n"
        "[tool bash_build]\n"
        "checkpoint_after = false\n"
        "  ; indented comment\n"
        "[rules default]\n"
        "allow = bash_read, bash_write, bash_run, fetch_url\n"
        "quota.calls.bash_run = 3\n"
        "quota.irreversible_calls = 5\n"
        "quota.exec_seconds = 100\n"
        "quota.output_bytes = 1K\n"
        "quota.workspace_bytes = 1M\n"
        "quota.workspace_inodes = 10\n"
        "[rules readonly]\n"
        "allow = bash_read\n"
        "[rules nothing]\n"
        "allow =\n"
        "[fetch]\n"
        "allow_hosts = example.com, *.github.com\n"
        "allow_hosts = [::1]\n"
        "allow_ports = 443, 8443\n"
        "private_hosts = 127.0.0.1\n"
        "allow_private = no\n"
        "max_response_bytes = 64K\n"
        "timeout = 1500ms\n"
        "max_redirects = 2\n"
        "[credential API.GitHub.com]\n"
        "header = Authorization\n"
        "value = Bearer s3cr3t\n"
        "[credential example.com]\n"
        "header = X-Token\n"
        "value_env = EXAMPLE_TOKEN\n"
        "allow_insecure = true\n"
        "[llm]\n"
        "base_url = http://127.0.0.1:9\n"
        "model = claude-test\n"
        "max_tokens = 100\n"
        "max_attempts = 3\n"
        "max_total_time = 2m\n"
        "retry_base = 10ms\n"
        "timeout = 30\n";

TEST(parse_full) {
        ntfs_policy *p = parse_ok(full_policy);
        const struct ntfs_tool_spec *t = ntfs_policy_tool(p, "bash_run");
        ASSERT_EQ(t->timeout_ms, 90000);
        ASSERT_EQ(t->output_limit, 2 * 1024 * 1024);
        ASSERT_EQ(t->cls, NTFS_CLASS_IRREVERSIBLE);
        ASSERT(!ntfs_policy_tool(p, "bash_build")->checkpoint_after);
        ASSERT(ntfs_policy_tool(p, "bash_write")->checkpoint_after);

        const struct ntfs_fetch_rules *f = ntfs_policy_fetch_rules(p);
        ASSERT_EQ(f->max_response_bytes, 64 * 1024);
        ASSERT_EQ(f->timeout_ms, 1500);
        ASSERT_EQ(f->max_redirects, 2);
        ASSERT_EQ(ntfs_policy_tool(p, "fetch_url")->timeout_ms, 1500);
        ASSERT(!f->allow_private);
        ASSERT(ntfs_policy_host_allowed(p, "example.com"));
        ASSERT(ntfs_policy_host_allowed(p, "EXAMPLE.com"));
        ASSERT(!ntfs_policy_host_allowed(p, "www.example.com"));
        ASSERT(!ntfs_policy_host_allowed(p, "example.com."));
        ASSERT(!ntfs_policy_host_allowed(p, "notexample.com"));
        ASSERT(ntfs_policy_host_allowed(p, "api.github.com"));
        ASSERT(ntfs_policy_host_allowed(p, "a.b.github.com"));
        ASSERT(!ntfs_policy_host_allowed(p, "github.com"));
        ASSERT(!ntfs_policy_host_allowed(p, "evilgithub.com"));
        ASSERT(!ntfs_policy_host_allowed(p, "github.com.evil.net"));
        ASSERT(ntfs_policy_host_allowed(p, "::1"));
        ASSERT(ntfs_policy_port_allowed(p, 8443));
        ASSERT(!ntfs_policy_port_allowed(p, 80));
        ASSERT(ntfs_policy_private_allowed(p, "127.0.0.1"));
        ASSERT(!ntfs_policy_private_allowed(p, "localhost"));

        const struct ntfs_credential *c = ntfs_policy_credential(p, "api.github.com");
        ASSERT(c);
        ASSERT_STREQ(c->header, "Authorization");
        ASSERT_STREQ(c->value, "Bearer s3cr3t");
        ASSERT(!c->allow_insecure);
        c = ntfs_policy_credential(p, "example.com");
        ASSERT(c && !c->value && c->allow_insecure);
        ASSERT_STREQ(c->value_env, "EXAMPLE_TOKEN");
        ASSERT(ntfs_policy_credential(p, "github.com") == NULL);
        const struct ntfs_credential *all;
        ASSERT_EQ(ntfs_policy_credentials(p, &all), 2);

        const struct ntfs_llm_settings *l = ntfs_policy_llm(p);
        ASSERT_STREQ(l->base_url, "http://127.0.0.1:9");
        ASSERT_STREQ(l->model, "claude-test");
        ASSERT_EQ(l->max_tokens, 100);
        ASSERT_EQ(l->max_attempts, 3);
        ASSERT_EQ(l->max_total_ms, 120000);
        ASSERT_EQ(l->retry_base_ms, 10);
        ASSERT_EQ(l->timeout_ms, 30000);
        ntfs_policy_free(p);
}

TEST(parse_load_file) {
        char path[] = "/tmp/ntfs-policy-XXXXXX";
        int fd = mkstemp(path);
        ASSERT(fd >= 0);
        close(fd);
        ASSERT_OK(ntfs_write_file_durable(path, full_policy, strlen(full_policy), 0600));
        ntfs_policy *p = NULL;
        char why[256];
        ASSERT_OK(ntfs_policy_load(path, &p, why, sizeof why));
        ASSERT(ntfs_policy_host_allowed(p, "example.com"));
        ntfs_policy_free(p);
        unlink(path);
        ASSERT_ERR(ntfs_policy_load("/nonexistent/policy", &p, why, sizeof why), -ENOENT);
        ASSERT(strstr(why, "/nonexistent/policy"));
}

TEST(parse_errors) {
        parse_bad("[bogus]\n", 1, "unknown section [bogus]");
        parse_bad("\n\nfoo = 1\n", 3, "outside a section");
        parse_bad("[rules default]\nallow = bash_read, rm\n", 2, "unknown tool 'rm'");
        parse_bad("[rules default]\nallow = bash_read,,bash_run\n", 2, "empty list item");
        parse_bad("[rules default]\nquota.calls.nope = 1\n", 2, "unknown tool 'nope'");
        parse_bad("[rules default]\nquota.calls.bash_run = -1\n", 2, "not a number");
        parse_bad("[rules default]\nquota.calls.bash_run = 1x\n", 2, "not a number");
        parse_bad("[rules default]\nquota.output_bytes = 5Q\n", 2, "not a size");
        parse_bad("[rules default]\nquota.disk = 5\n", 2, "unknown quota");
        parse_bad("[rules default]\n[rules default]\n", 2, "section repeated");
        parse_bad("[rules]\n", 1, "needs a name");
        parse_bad("[rules a/b]\n", 1, "invalid name");
        parse_bad("[tool bash_run]\nclass = recorded\n", 2, "cannot be changed");
        parse_bad("[tool bash_run]\nnetwork = host\n", 2, "cannot be changed");
        parse_bad("[tool bash_read]\ncheckpoint_after = true\n", 2, "does not change the workspace");
        parse_bad("[tool my_tool]\n", 1, "unknown tool");
        parse_bad("[tool bash_run]\ntimeout = 0\n", 2, "positive");
        parse_bad("[tool bash_run]\ntimeout = 10 parsecs\n", 2, "not a duration");
        parse_bad("[tool bash_run]\ntimeout = 8000h\n", 2, "not a duration");
        parse_bad("[tool bash_run]\nfoo = 1\n", 2, "unknown key 'foo'");
        parse_bad("[fetch]\nallow_hosts = exa mple.com\n", 2, "not a host name");
        parse_bad("[fetch]\nallow_hosts = .example.com\n", 2, "not a host name");
        parse_bad("[fetch]\nallow_hosts = example.com/path\n", 2, "not a host name");
        parse_bad("[fetch]\nallow_ports = 0\n", 2, "not a port");
        parse_bad("[fetch]\nallow_ports = 70000\n", 2, "not a port");
        parse_bad("[fetch]\nallow_private = maybe\n", 2, "not a boolean");
        parse_bad("[fetch]\nmax_redirects = 50\n", 2, "not a number");
        parse_bad("[fetch]\nprivate_hosts = *.lan\n", 2, "not a host name");
        parse_bad("[fetch]\n[fetch]\n", 2, "section repeated");
        parse_bad("[fetch extra]\n", 1, "takes no argument");
        parse_bad("[fetch\n", 1, "without ']'");
        parse_bad("[fetch]\njust words\n", 2, "expected 'key = value'");
        parse_bad("[fetch]\n= 3\n", 2, "empty key");
        parse_bad("[fetch]\nmax redirects = 3\n", 2, "invalid key");
        parse_bad("[fetch]\ntimeout =\n", 2, "empty value");
        parse_bad("[credential a.com]\nheader = X-A\n\n[fetch]\n", 1, "exactly one of value, value_env");
        parse_bad("[credential a.com]\nvalue = xxxx\n", 1, "no header");
        parse_bad("[credential a.com]\nheader = X-A\nvalue = xxxx\nvalue_env = Y\n", 1, "exactly one");
        parse_bad("[credential a.com]\nheader = Bad Header\n", 2, "not a header name");
        parse_bad("[credential a.com]\nheader = Host\n", 2, "cannot carry a credential");
        parse_bad("[credential a.com]\nheader = X\nvalue_env = 1BAD\n", 3, "not a variable name");
        parse_bad("[credential a.com]\nheader = X\nheader = Y\n", 3, "set twice");
        parse_bad("[credential a.com]\nheader = X\nvalue = 1234\n[credential A.com]\n", 4, "section repeated");
        /* A 1-3 byte secret would make the journal redact ordinary text. */
        parse_bad("[credential a.com]\nheader = X\nvalue = abc\n", 3, "cannot be redacted safely");
        parse_bad("[credential a.com]\nheader = X\nvalue = a\n", 3, "cannot be redacted safely");
        parse_bad("[llm]\nbase_url = ftp://x\n", 2, "must start with http");
        parse_bad("[llm]\nmax_attempts = 0\n", 2, "at least 1");
        parse_bad("[llm]\nmax_tokens = 0\n", 2, "positive");
        parse_bad("[llm]\nmodel = a\nmodel = b\n", 3, "set twice");
        parse_bad("[llm]\nmodel = a\x01\n", 2, "control character");
        /* NUL in the middle of the text */
        ntfs_policy *p = NULL;
        char why[128];
        ASSERT_ERR(ntfs_policy_parse("[llm]\n\0x\n", 9, &p, why, sizeof why), -NTFS_EBADREQ);
        ASSERT(strstr(why, "line 2:"));
        /* why may be NULL */
        ASSERT_ERR(ntfs_policy_parse("[x]", 3, &p, NULL, 0), -NTFS_EBADREQ);
}

TEST(parse_limits) {
        /* A line longer than NTFS_POLICY_MAX_LINE. */
        size_t n = NTFS_POLICY_MAX_LINE + 100;
        _cleanup_free_ char *t = malloc(n + 32);
        ASSERT(t);
        int k = snprintf(t, n + 32, "[fetch]\n# ");
        memset(t + k, 'a', n);
        t[k + n] = 0;
        parse_bad(t, 2, "longer than");
        /* The file size limit. */
        ntfs_policy *p = NULL;
        char why[128];
        _cleanup_free_ char *big = calloc(1, NTFS_POLICY_MAX_FILE + 2);
        ASSERT(big);
        memset(big, '\n', NTFS_POLICY_MAX_FILE + 1);
        ASSERT_ERR(ntfs_policy_parse(big, NTFS_POLICY_MAX_FILE + 1, &p, why, sizeof why), -NTFS_EBADREQ);
        ASSERT(strstr(why, "larger than"));
        /* Exactly the limit (blank lines) is accepted. */
        ASSERT_OK(ntfs_policy_parse(big, NTFS_POLICY_MAX_FILE, &p, why, sizeof why));
        ntfs_policy_free(p);
        /* Too many rule sets. */
        size_t cap = 64 * 1024, len = 0;
        _cleanup_free_ char *rs = malloc(cap);
        ASSERT(rs);
        for (int i = 0; i <= NTFS_POLICY_MAX_RULESETS; i++)
                len += (size_t)snprintf(rs + len, cap - len, "[rules r%d]\n", i);
        parse_bad(rs, NTFS_POLICY_MAX_RULESETS + 1, "rule sets");
        /* Too many hosts. */
        size_t hcap = 64 * 1024;
        _cleanup_free_ char *hs = malloc(hcap);
        ASSERT(hs);
        len = (size_t)snprintf(hs, hcap, "[fetch]\n");
        for (int i = 0; i <= NTFS_POLICY_MAX_HOSTS; i++)
                len += (size_t)snprintf(hs + len, hcap - len, "allow_hosts = h%d.example\n", i);
        parse_bad(hs, NTFS_POLICY_MAX_HOSTS + 2, "more than");
        /* Size overflow. */
        parse_bad("[rules x]\nquota.output_bytes = 99999999999999999999\n", 2, "not a size");
        parse_bad("[rules x]\nquota.output_bytes = 2000000T\n", 2, "not a size");
}

TEST(parse_egress) {
        /* Off by default for every tool. */
        ntfs_policy *d = NULL;
        ASSERT_EQ(ntfs_policy_new_default(&d), 0);
        for (int i = 0; i < NTFS_TOOL_COUNT; i++)
                ASSERT(!ntfs_policy_tool_by_id(d, (enum ntfs_tool_id)i)->egress);
        ntfs_policy_free(d);
        ntfs_policy *p = parse_ok("[tool bash_run]\negress = true\n");
        ASSERT(ntfs_policy_tool(p, "bash_run")->egress);
        ASSERT(!ntfs_policy_tool(p, "bash_write")->egress);
        ntfs_policy_free(p);
        p = parse_ok("[tool bash_run]\negress = off\n");
        ASSERT(!ntfs_policy_tool(p, "bash_run")->egress);
        ntfs_policy_free(p);
        parse_bad("[tool bash_write]\negress = true\n", 2, "only bash_run may use the egress proxy");
        parse_bad("[tool fetch_url]\negress = true\n", 2, "has no network");
        parse_bad("[tool bash_run]\negress = sometimes\n", 2, "not a boolean");
}

TEST(decisions_l1) {
        ntfs_policy *p = parse_ok(full_policy);
        char why[256];
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_read", NULL, why, sizeof why));
        ASSERT_OK(ntfs_policy_check_call(p, "default", "fetch_url", NULL, why, sizeof why));
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_build", NULL, why, sizeof why), -NTFS_EDENIED);
        ASSERT_STREQ(why, "tool bash_build not allowed by rules 'default' (allow)");
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "llm_generate", NULL, why, sizeof why), -NTFS_EDENIED);
        ASSERT_OK(ntfs_policy_check_call(p, "readonly", "bash_read", NULL, why, sizeof why));
        ASSERT_ERR(ntfs_policy_check_call(p, "readonly", "bash_write", NULL, why, sizeof why), -NTFS_EDENIED);
        ASSERT(strstr(why, "rules 'readonly'"));
        ASSERT_ERR(ntfs_policy_check_call(p, "nothing", "bash_read", NULL, why, sizeof why), -NTFS_EDENIED);
        ASSERT_ERR(ntfs_policy_check_call(p, "nosuch", "bash_read", NULL, why, sizeof why), -NTFS_EDENIED);
        ASSERT_STREQ(why, "unknown rule set 'nosuch'");
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "rm_rf", NULL, why, sizeof why), -NTFS_ENOTFOUND);
        ASSERT_STREQ(why, "unknown tool 'rm_rf'");
        /* A rule set without 'allow' allows everything; missing [rules default] is permissive. */
        ntfs_policy *q = parse_ok("[rules quiet]\nquota.calls.bash_run = 1\n");
        ASSERT_OK(ntfs_policy_check_call(q, "quiet", "bash_build", NULL, why, sizeof why));
        ASSERT_OK(ntfs_policy_check_call(q, NULL, "llm_generate", NULL, why, sizeof why));
        ntfs_policy_free(q);
        q = parse_ok("[rules x]\nallow = bash_read\nallow = *\n");
        ASSERT_OK(ntfs_policy_check_call(q, "x", "bash_run", NULL, why, sizeof why));
        ntfs_policy_free(q);
        ntfs_policy_free(p);
}

TEST(decisions_l2) {
        ntfs_policy *p = parse_ok(full_policy);
        char why[256];
        struct ntfs_quota_usage u = { 0 };
        /* calls.bash_run = 3 */
        u.calls[NTFS_TOOL_BASH_RUN] = 2;
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_run", &u, why, sizeof why));
        u.calls[NTFS_TOOL_BASH_RUN] = 3;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_run", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT_STREQ(why, "quota calls.bash_run=3 reached (rules 'default')");
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_write", &u, why, sizeof why));
        u.calls[NTFS_TOOL_BASH_RUN] = 0;
        /* irreversible_calls = 5: refuses bash_run and fetch_url, not bash_write */
        u.irreversible_calls = 5;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "fetch_url", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT(strstr(why, "quota irreversible_calls=5 reached"));
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_run", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_write", &u, why, sizeof why));
        u.irreversible_calls = 0;
        /* exec_seconds = 100: exec tools only */
        u.exec_ms = 99999;
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_read", &u, why, sizeof why));
        uint64_t to, out;
        ASSERT_OK(ntfs_policy_call_limits(p, NULL, "bash_run", &u, &to, &out));
        ASSERT_EQ(to, 1);
        u.exec_ms = 100000;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_read", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT(strstr(why, "quota exec_seconds=100 reached"));
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "fetch_url", &u, why, sizeof why));
        u.exec_ms = 0;
        /* output_bytes = 1K */
        u.output_bytes = 1000;
        ASSERT_OK(ntfs_policy_call_limits(p, NULL, "bash_read", &u, &to, &out));
        ASSERT_EQ(out, 24);
        ASSERT_EQ(to, 60000);
        u.output_bytes = 1024;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_read", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT(strstr(why, "quota output_bytes=1024 reached"));
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "fetch_url", &u, why, sizeof why), -NTFS_EQUOTA);
        u.output_bytes = 0;
        /* workspace_bytes = 1M and inodes = 10: only calls that may write */
        u.workspace_bytes = 1024 * 1024;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_write", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT(strstr(why, "quota workspace_bytes=1048576 reached"));
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_read", &u, why, sizeof why));
        u.workspace_bytes = 0;
        u.workspace_inodes = 10;
        ASSERT_ERR(ntfs_policy_check_call(p, NULL, "bash_run", &u, why, sizeof why), -NTFS_EQUOTA);
        ASSERT(strstr(why, "quota workspace_inodes=10 reached"));
        ASSERT_OK(ntfs_policy_check_call(p, NULL, "bash_read", &u, why, sizeof why));
        /* L1 is decided before L2. */
        ASSERT_ERR(ntfs_policy_check_call(p, "readonly", "bash_run", &u, why, sizeof why), -NTFS_EDENIED);
        /* quota 0: no call at all */
        ntfs_policy *q = parse_ok("[rules default]\nquota.calls.fetch_url = 0\n");
        ASSERT_ERR(ntfs_policy_check_call(q, NULL, "fetch_url", NULL, why, sizeof why), -NTFS_EQUOTA);
        ASSERT_STREQ(why, "quota calls.fetch_url=0 reached (rules 'default')");
        ntfs_policy_free(q);
        ntfs_policy_free(p);
}

TEST(counters) {
        const char *names[NTFS_POLICY_MAX_CALL_COUNTERS];
        ASSERT_EQ(ntfs_policy_call_counters("bash_run", names), 2);
        ASSERT_STREQ(names[0], "calls.bash_run");
        ASSERT_STREQ(names[1], "irreversible_calls");
        ASSERT_EQ(ntfs_policy_call_counters("bash_read", names), 1);
        ASSERT_STREQ(names[0], "calls.bash_read");
        ASSERT_EQ(ntfs_policy_call_counters("fetch_url", names), 2);
        ASSERT_EQ(ntfs_policy_call_counters("llm_generate", names), 1);
        ASSERT_ERR(ntfs_policy_call_counters("nope", names), -NTFS_ENOTFOUND);

        struct ntfs_quota_usage u = { 0 };
        ASSERT_OK(ntfs_quota_usage_charge(&u, "bash_run", 1500, 300));
        ASSERT_OK(ntfs_quota_usage_charge(&u, "bash_read", 10, 5));
        ASSERT_EQ(u.calls[NTFS_TOOL_BASH_RUN], 1);
        ASSERT_EQ(u.calls[NTFS_TOOL_BASH_READ], 1);
        ASSERT_EQ(u.irreversible_calls, 1);
        ASSERT_EQ(u.exec_ms, 1510);
        ASSERT_EQ(u.output_bytes, 305);
        uint64_t v;
        ASSERT_OK(ntfs_quota_usage_get(&u, "calls.bash_run", &v));
        ASSERT_EQ(v, 1);
        ASSERT_OK(ntfs_quota_usage_set(&u, "workspace_inodes", 42));
        ASSERT_EQ(u.workspace_inodes, 42);
        ASSERT_OK(ntfs_quota_usage_set(&u, "exec_ms", UINT64_MAX - 1));
        ASSERT_OK(ntfs_quota_usage_charge(&u, "bash_write", 100, 0));
        ASSERT(u.exec_ms == UINT64_MAX); /* saturates */
        ASSERT_ERR(ntfs_quota_usage_set(&u, "calls.nope", 1), -EINVAL);
        ASSERT_ERR(ntfs_quota_usage_get(&u, NULL, &v), -EINVAL);
        ASSERT_ERR(ntfs_quota_usage_charge(&u, "nope", 0, 0), -NTFS_ENOTFOUND);
}

/* [limits]: the defaults, each key, and its errors. */
TEST(session_limits) {
        ntfs_policy *p = NULL;
        ASSERT_OK(ntfs_policy_new_default(&p));
        const struct ntfs_session_limits *l = ntfs_policy_limits(p);
        ASSERT_EQ(l->memory_bytes, 4ULL << 30);
        ASSERT_EQ(l->pids, 1024);
        ASSERT_EQ(l->cpu_percent, 100);
        ASSERT_EQ(l->tmp_bytes, 64ULL << 20);
        ASSERT_EQ(l->workspace_bytes, 10ULL << 30);
        ASSERT_EQ(l->workspace_inodes, 1000000);
        ntfs_policy_free(p);
        static const char text[] = "[limits]\nmemory = 512M\npids = 0\ncpu = 250%\ntmp_size = 1G\n"
                                   "workspace_bytes = 0\nworkspace_inodes = 5000\n";
        char why[256];
        ASSERT_OK(ntfs_policy_parse(text, strlen(text), &p, why, sizeof why));
        l = ntfs_policy_limits(p);
        ASSERT_EQ(l->memory_bytes, 512ULL << 20);
        ASSERT_EQ(l->pids, 0);
        ASSERT_EQ(l->cpu_percent, 250);
        ASSERT_EQ(l->tmp_bytes, 1ULL << 30);
        ASSERT_EQ(l->workspace_bytes, 0);
        ASSERT_EQ(l->workspace_inodes, 5000);
        ntfs_policy_free(p);
        parse_bad("[limits]\ncpu = 100001\n", 2, "not a percentage");
        parse_bad("[limits]\ncpu = %\n", 2, "not a percentage");
        parse_bad("[limits]\ntmp_size = 4K\n", 2, "between 1M and 1T");
        parse_bad("[limits]\nmemory = lots\n", 2, "is not a size");
        parse_bad("[limits]\nswap = 1G\n", 2, "unknown key 'swap' in [limits]");
        parse_bad("[limits x]\n", 1, "takes no argument");
        parse_bad("[limits]\n[limits]\n", 2, "section repeated");
}

int main(void) {
        RUN(registry_defaults);
        RUN(parse_full);
        RUN(parse_load_file);
        RUN(parse_errors);
        RUN(parse_limits);
        RUN(parse_egress);
        RUN(decisions_l1);
        RUN(decisions_l2);
        RUN(counters);
        RUN(session_limits);
        return tap_done();
}
