/* SPDX-License-Identifier: MIT
 * test_gateway.c — fetch_url and llm_generate against loopback helper
 * servers (tests/helpers/http_server.py, tests/helpers/fake_anthropic.py),
 * started as subprocesses in their own process groups, killed at the end
 * (and by PR_SET_PDEATHSIG if this test dies first).
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "policy/gateway.h"
#include "policy/policy.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

struct helper {
        pid_t pid;
        int port;
};

static struct helper web = { -1, 0 }, llm = { -1, 0 };
static char src_root[2048];
static char envfile[64] = "";

static void helper_stop(struct helper *h) {
        if (h->pid > 0) {
                kill(-h->pid, SIGKILL);
                while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                h->pid = -1;
        }
}

static void teardown(void) {
        helper_stop(&web);
        helper_stop(&llm);
        if (envfile[0])
                unlink(envfile);
}

static int helper_start(struct helper *h, const char *script) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/helpers/%s", src_root, script);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(1);
                dup2(fds[1], 1);
                execl("/usr/bin/python3", "python3", path, (char *)NULL);
                _exit(127);
        }
        setpgid(pid, pid);
        h->pid = pid;
        close(fds[1]);
        char buf[64];
        size_t len = 0;
        int64_t deadline = ntfs_mono_ns() + 10LL * 1000000000;
        while (len < sizeof buf - 1 && !memchr(buf, '\n', len)) {
                struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
                int left = (int)((deadline - ntfs_mono_ns()) / 1000000);
                if (left <= 0 || poll(&pfd, 1, left) <= 0)
                        break;
                ssize_t r = read(fds[0], buf + len, sizeof buf - 1 - len);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                len += (size_t)r;
        }
        close(fds[0]);
        buf[len] = 0;
        if (sscanf(buf, "PORT %d", &h->port) != 1)
                return -EIO;
        return 0;
}

/* A raw request outside the gateway (for the helpers' control routes). */
struct rawbuf {
        char *p;
        size_t len;
};
static size_t raw_collect(char *d, size_t s, size_t n, void *u) {
        struct rawbuf *b = u;
        char *np = realloc(b->p, b->len + s * n + 1);
        if (!np)
                return 0;
        memcpy(np + b->len, d, s * n);
        b->p = np;
        b->len += s * n;
        b->p[b->len] = 0;
        return s * n;
}

static json_t *raw_request(int port, const char *path, const char *post) {
        char url[256];
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
        CURL *c = curl_easy_init();
        struct rawbuf b = { 0 };
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROXY, "");
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, raw_collect);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        if (post)
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
        CURLcode cc = curl_easy_perform(c);
        curl_easy_cleanup(c);
        json_t *j = cc == CURLE_OK && b.p ? json_loads(b.p, 0, NULL) : NULL;
        free(b.p);
        return j;
}

static long hits(const char *path) {
        json_t *j = raw_request(web.port, "/_count", NULL);
        long n = j ? (long)json_integer_value(json_object_get(j, path)) : -1;
        json_decref(j);
        return n;
}

static ntfs_policy *policy_from(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static ntfs_policy *policy_from(const char *fmt, ...) {
        char text[4096], why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        ntfs_policy *p = NULL;
        if (ntfs_policy_parse(text, strlen(text), &p, why, sizeof why) < 0)
                FAIL("policy: %s", why);
        return p;
}

static ntfs_gateway *gateway_for(const ntfs_policy *p, const char *env) {
        ntfs_gateway *gw = NULL;
        char why[256];
        int r = ntfs_gateway_new(p, env, NTFS_GATEWAY_NO_ENVIRON, &gw, why, sizeof why);
        if (r < 0)
                FAIL("gateway_new: %d %s", r, why);
        return gw;
}

/* The standard test policy: 127.0.0.1 and localhost listed, only the
 * literal 127.0.0.1 may reach a private (loopback) address. */
#define STD_POLICY                                                                                                \
        "[fetch]\nallow_hosts = 127.0.0.1, localhost\nallow_ports = %d\nprivate_hosts = 127.0.0.1\n"           \
        "max_redirects = 2\nmax_response_bytes = 1000\ntimeout = 10s\n"

static ntfs_policy *std_policy(void) {
        return policy_from(STD_POLICY, web.port);
}

static const char *hdr(const struct ntfs_fetch_result *r, const char *name) {
        for (size_t i = 0; i < r->n_headers; i++)
                if (strcmp(r->headers[i].name, name) == 0)
                        return r->headers[i].value;
        return NULL;
}

#define URL(buf, host, path) snprintf(buf, sizeof buf, "http://%s:%d%s", host, web.port, path)

TEST(address_classification) {
        static const struct {
                const char *a;
                bool restricted;
        } cases[] = {
                { "10.1.2.3", true },       { "172.16.0.1", true },      { "172.31.255.255", true },
                { "172.32.0.1", false },    { "192.168.1.1", true },     { "100.64.0.1", true },
                { "100.128.0.1", false },   { "127.0.0.1", true },       { "127.255.0.9", true },
                { "169.254.169.254", true }, { "0.0.0.0", true },        { "224.0.0.1", true },
                { "255.255.255.255", true }, { "8.8.8.8", false },       { "93.184.216.34", false },
                { "::1", true },            { "::", true },              { "fe80::1", true },
                { "fc00::1", true },        { "fd12::1", true },         { "ff02::1", true },
                { "::ffff:127.0.0.1", true }, { "::ffff:10.0.0.1", true }, { "::ffff:8.8.8.8", false },
                { "64:ff9b::a00:1", true }, { "64:ff9b::808:808", false }, { "2606:4700::1111", false },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                unsigned char buf[16];
                int fam = strchr(cases[i].a, ':') ? AF_INET6 : AF_INET;
                ASSERT_EQ(inet_pton(fam, cases[i].a, buf), 1);
                if (ntfs_gateway_address_restricted(fam, buf) != cases[i].restricted)
                        FAIL("%s: want restricted=%d", cases[i].a, cases[i].restricted);
        }
        ASSERT(ntfs_gateway_address_restricted(AF_UNIX, "x"));
}

TEST(fetch_ok) {
        ntfs_policy *p = std_policy();
        ntfs_gateway *gw = gateway_for(p, NULL);
        char url[256];
        URL(url, "127.0.0.1", "/ok");
        struct ntfs_fetch_result r;
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(r.body, "ok\n");
        ASSERT(!r.body_base64 && !r.truncated);
        ASSERT_EQ(r.bytes, 3);
        ASSERT_STREQ(r.final_url, url);
        ASSERT_STREQ(hdr(&r, "content-type"), "text/plain");
        ASSERT_STREQ(hdr(&r, "etag"), "\"v1\"");
        ASSERT(hdr(&r, "x-internal-secret") == NULL);
        ASSERT(hdr(&r, "set-cookie") == NULL);
        ASSERT(r.error_code == NULL);
        json_t *j = ntfs_fetch_result_to_json(&r);
        ASSERT(j);
        ASSERT_STREQ(json_string_value(json_object_get(j, "body_encoding")), "utf-8");
        ASSERT_EQ(json_integer_value(json_object_get(j, "status")), 200);
        json_decref(j);
        ntfs_fetch_result_release(&r);
        /* HEAD and POST */
        struct ntfs_fetch_opts o = { .method = "HEAD" };
        ASSERT_OK(ntfs_gateway_fetch(gw, url, &o, &r));
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.bytes, 0);
        ntfs_fetch_result_release(&r);
        URL(url, "127.0.0.1", "/echo-body");
        struct ntfs_fetch_opts po = { .method = "POST", .body = "a=1", .body_len = 3, .content_type = "text/x" };
        ASSERT_OK(ntfs_gateway_fetch(gw, url, &po, &r));
        ASSERT_STREQ(r.body, "a=1");
        ASSERT_STREQ(hdr(&r, "content-type"), "text/x");
        ntfs_fetch_result_release(&r);
        struct ntfs_fetch_opts bad = { .method = "DELETE" };
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, &bad, &r), -NTFS_EBADREQ);
        ntfs_fetch_result_release(&r);
        /* A 4xx is a result, not an error. */
        URL(url, "127.0.0.1", "/status?code=404");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT_EQ(r.status, 404);
        ntfs_fetch_result_release(&r);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(fetch_refused) {
        ntfs_policy *p = std_policy();
        ntfs_gateway *gw = gateway_for(p, NULL);
        struct ntfs_fetch_result r;
        char url[256];
        ASSERT_ERR(ntfs_gateway_fetch(gw, "http://example.invalid/ok", NULL, &r), -NTFS_EDENIED);
        ASSERT_STREQ(r.error_code, "policy_denied");
        ASSERT_STREQ(r.error, "host 'example.invalid' not in fetch.allow_hosts");
        ntfs_fetch_result_release(&r);
        ASSERT_ERR(ntfs_gateway_fetch(gw, "ftp://127.0.0.1/x", NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "scheme 'ftp'"));
        ntfs_fetch_result_release(&r);
        ASSERT_ERR(ntfs_gateway_fetch(gw, "file:///etc/passwd", NULL, &r), -NTFS_EDENIED);
        ntfs_fetch_result_release(&r);
        snprintf(url, sizeof url, "http://u:pw@127.0.0.1:%d/ok", web.port);
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "user name"));
        ntfs_fetch_result_release(&r);
        ASSERT_ERR(ntfs_gateway_fetch(gw, "http://127.0.0.1:1/ok", NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "port 1 of host '127.0.0.1' not in fetch.allow_ports"));
        ntfs_fetch_result_release(&r);
        ASSERT_ERR(ntfs_gateway_fetch(gw, "not a url", NULL, &r), -NTFS_EBADREQ);
        ntfs_fetch_result_release(&r);
        ASSERT_ERR(ntfs_gateway_fetch(gw, "http://localhost./ok", NULL, &r), -NTFS_EDENIED);
        ntfs_fetch_result_release(&r);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(fetch_private_address_by_name) {
        /* localhost is allow-listed but not private-allowed: it resolves to
         * a loopback address, which is refused at connect time. */
        ntfs_policy *p = std_policy();
        ntfs_gateway *gw = gateway_for(p, NULL);
        char url[256];
        long before = hits("/ok");
        URL(url, "localhost", "/ok");
        struct ntfs_fetch_result r;
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "of host 'localhost' is private, loopback or link-local"));
        ntfs_fetch_result_release(&r);
        ASSERT_EQ(hits("/ok"), before);
        /* The literal address without a private allowance is refused too. */
        ntfs_policy *p2 = policy_from("[fetch]\nallow_hosts = 127.0.0.1\nallow_ports = *\n");
        ntfs_gateway *gw2 = gateway_for(p2, NULL);
        URL(url, "127.0.0.1", "/ok");
        ASSERT_ERR(ntfs_gateway_fetch(gw2, url, NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "address 127.0.0.1"));
        ntfs_fetch_result_release(&r);
        /* Numeric spellings of 127.0.0.1 do not get past either check. */
        snprintf(url, sizeof url, "http://2130706433:%d/ok", web.port);
        ASSERT_ERR(ntfs_gateway_fetch(gw2, url, NULL, &r), -NTFS_EDENIED);
        ntfs_fetch_result_release(&r);
        ASSERT_EQ(hits("/ok"), before);
        ntfs_gateway_free(gw2);
        ntfs_policy_free(p2);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(fetch_redirects) {
        ntfs_policy *p = std_policy();
        ntfs_gateway *gw = gateway_for(p, NULL);
        char url[256], want[256];
        struct ntfs_fetch_result r;
        URL(url, "127.0.0.1", "/redirect?to=/ok");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        URL(want, "127.0.0.1", "/ok");
        ASSERT_STREQ(r.final_url, want);
        ASSERT_EQ(r.redirects, 1);
        ASSERT_STREQ(r.body, "ok\n");
        ntfs_fetch_result_release(&r);
        /* allowed -> refused host */
        URL(url, "127.0.0.1", "/redirect?to=http://evil.invalid/steal");
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ASSERT_STREQ(r.error, "redirect refused: host 'evil.invalid' not in fetch.allow_hosts");
        ntfs_fetch_result_release(&r);
        /* allowed -> a name resolving to loopback */
        char to[128];
        snprintf(to, sizeof to, "/redirect?to=http://localhost:%d/ok", web.port);
        long before = hits("/ok");
        URL(url, "127.0.0.1", to);
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ASSERT(strstr(r.error, "redirect refused: address"));
        ASSERT_EQ(hits("/ok"), before);
        ntfs_fetch_result_release(&r);
        /* allowed -> other scheme */
        URL(url, "127.0.0.1", "/redirect?to=file:///etc/passwd");
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ntfs_fetch_result_release(&r);
        /* max_redirects = 2 */
        URL(url, "127.0.0.1", "/chain?n=2");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT_EQ(r.redirects, 2);
        ASSERT_STREQ(r.body, "end\n");
        ntfs_fetch_result_release(&r);
        URL(url, "127.0.0.1", "/chain?n=3");
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, NULL, &r), -NTFS_EDENIED);
        ASSERT_STREQ(r.error, "more than 2 redirects (fetch.max_redirects)");
        ntfs_fetch_result_release(&r);
        /* 307 keeps POST */
        URL(url, "127.0.0.1", "/redirect?to=/echo-body&code=307");
        struct ntfs_fetch_opts po = { .method = "POST", .body = "kept", .body_len = 4 };
        ASSERT_OK(ntfs_gateway_fetch(gw, url, &po, &r));
        ASSERT_STREQ(r.body, "kept");
        ntfs_fetch_result_release(&r);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(fetch_limits) {
        ntfs_policy *p = std_policy(); /* max_response_bytes = 1000 */
        ntfs_gateway *gw = gateway_for(p, NULL);
        char url[256];
        struct ntfs_fetch_result r;
        URL(url, "127.0.0.1", "/big?n=1000");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT(!r.truncated);
        ASSERT_EQ(r.bytes, 1000);
        ntfs_fetch_result_release(&r);
        URL(url, "127.0.0.1", "/big?n=5000000");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT(r.truncated);
        ASSERT_EQ(r.bytes, 1000);
        ASSERT_EQ(r.body_len, 1000);
        ntfs_fetch_result_release(&r);
        struct ntfs_fetch_opts o = { .refuse_oversize = true };
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, &o, &r), -NTFS_ETOOLARGE);
        ASSERT_STREQ(r.error_code, "payload_too_large");
        ntfs_fetch_result_release(&r);
        struct ntfs_fetch_opts small = { .max_bytes = 10 };
        ASSERT_OK(ntfs_gateway_fetch(gw, url, &small, &r));
        ASSERT_EQ(r.bytes, 10);
        ntfs_fetch_result_release(&r);
        /* Time limit across the whole call. */
        URL(url, "127.0.0.1", "/slow?s=5");
        struct ntfs_fetch_opts t = { .timeout_ms = 500 };
        int64_t t0 = ntfs_mono_ns();
        ASSERT_ERR(ntfs_gateway_fetch(gw, url, &t, &r), -NTFS_ETIMEOUT);
        int64_t ms = (ntfs_mono_ns() - t0) / 1000000;
        printf("# timeout after %lld ms\n", (long long)ms);
        ASSERT(ms >= 400 && ms < 3000);
        ASSERT_STREQ(r.error_code, "timeout");
        ntfs_fetch_result_release(&r);
        /* Binary body -> base64. */
        URL(url, "127.0.0.1", "/binary");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT(r.body_base64);
        ASSERT_EQ(r.bytes, 7);
        unsigned char dec[16];
        ASSERT_EQ(EVP_DecodeBlock(dec, (const unsigned char *)r.body, (int)r.body_len), 9);
        ASSERT(memcmp(dec, "\x00\xff\xfe\x80" "ABC\xc3", 7) == 0 || memcmp(dec, "\x00\xff\xfe\x80\x41\x42\xc3", 7) == 0);
        ntfs_fetch_result_release(&r);
        /* Connection refused: upstream_error. */
        ntfs_policy *p2 = policy_from("[fetch]\nallow_hosts = 127.0.0.1\nallow_ports = *\nprivate_hosts = 127.0.0.1\n");
        ntfs_gateway *gw2 = gateway_for(p2, NULL);
        ASSERT_ERR(ntfs_gateway_fetch(gw2, "http://127.0.0.1:1/", NULL, &r), -NTFS_EUPSTREAM);
        ASSERT_STREQ(r.error_code, "upstream_error");
        ntfs_fetch_result_release(&r);
        ntfs_gateway_free(gw2);
        ntfs_policy_free(p2);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

static bool log_has(json_t *log, size_t idx, const char *header, const char *value) {
        json_t *e = json_array_get(log, idx);
        const char *v = json_string_value(json_object_get(json_object_get(e, "headers"), header));
        return v && (!value || strcmp(v, value) == 0);
}

TEST(fetch_credentials) {
        static const char secret[] = "tok-SECRET-4242";
        ntfs_policy *p = policy_from("[fetch]\nallow_hosts = 127.0.0.1, localhost\nallow_ports = %d\n"
                                     "private_hosts = 127.0.0.1, localhost\n"
                                     "[credential 127.0.0.1]\nheader = X-Api-Token\nvalue_env = TEST_TOKEN\n"
                                     "allow_insecure = yes\n"
                                     "[credential localhost]\nheader = X-Https-Only\nvalue = plain-secret-77\n",
                                     web.port);
        ntfs_gateway *gw = gateway_for(p, envfile);
        const char *const *s = ntfs_gateway_secrets(gw);
        bool found = false;
        size_t n = 0;
        for (; s[n]; n++)
                found |= strcmp(s[n], secret) == 0;
        ASSERT(found);
        ASSERT_EQ(n, 3); /* API key from the env file + two credentials */

        char url[256];
        struct ntfs_fetch_result r;
        json_t *log0 = raw_request(web.port, "/_log", NULL);
        size_t base = json_array_size(log0);
        json_decref(log0);
        URL(url, "127.0.0.1", "/echo-headers");
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT_EQ(r.status, 200);
        /* The body echoed the header: it is masked in the result. */
        ASSERT(strstr(r.body, "x-api-token"));
        ASSERT(!strstr(r.body, secret));
        ASSERT(r.redacted);
        json_t *j = ntfs_fetch_result_to_json(&r);
        char *dump = json_dumps(j, 0);
        ASSERT(dump && !strstr(dump, secret));
        free(dump);
        json_decref(j);
        ntfs_fetch_result_release(&r);
        /* Credential over plain http only with allow_insecure; and never
         * carried to another host by a redirect. */
        char to[128];
        snprintf(to, sizeof to, "/redirect?to=http://localhost:%d/echo-headers", web.port);
        URL(url, "127.0.0.1", to);
        ASSERT_OK(ntfs_gateway_fetch(gw, url, NULL, &r));
        ASSERT_EQ(r.redirects, 1);
        ntfs_fetch_result_release(&r);

        json_t *log = raw_request(web.port, "/_log", NULL);
        ASSERT(json_array_size(log) == base + 3);
        ASSERT(log_has(log, base, "x-api-token", secret));      /* the server saw it */
        ASSERT(log_has(log, base + 1, "x-api-token", secret));  /* /redirect on 127.0.0.1 */
        ASSERT(!log_has(log, base + 2, "x-api-token", NULL));   /* not forwarded to localhost */
        ASSERT(!log_has(log, base + 2, "x-https-only", NULL));  /* https-only credential, http hop */
        json_decref(log);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);

        /* value_env set nowhere: a clear error naming the variable, not a value. */
        ntfs_policy *p2 = policy_from("[credential a.com]\nheader = X\nvalue_env = NOT_SET_ANYWHERE\n");
        ntfs_gateway *g2 = NULL;
        char why[256];
        ASSERT_ERR(ntfs_gateway_new(p2, NULL, NTFS_GATEWAY_NO_ENVIRON, &g2, why, sizeof why), -NTFS_ENOKEY);
        ASSERT(strstr(why, "NOT_SET_ANYWHERE"));
        ASSERT_ERR(ntfs_gateway_new(p2, "/nonexistent/.env", 0, &g2, why, sizeof why), -ENOENT);
        ntfs_policy_free(p2);

        /* A secret of 1-3 bytes, from a variable or as the LLM key, is refused:
         * the journal could not redact it without redacting ordinary text. */
        char shortenv[] = "/tmp/ntfs-gw-short-XXXXXX";
        int fd = mkstemp(shortenv);
        ASSERT(fd >= 0);
        close(fd);
        static const char shorttext[] = "SHORT_TOKEN=abc\n";
        ASSERT(ntfs_write_file_durable(shortenv, shorttext, sizeof shorttext - 1, 0600) == 0);
        ntfs_policy *p3 = policy_from("[credential a.com]\nheader = X\nvalue_env = SHORT_TOKEN\n");
        ntfs_gateway *g3 = NULL;
        ASSERT_ERR(ntfs_gateway_new(p3, shortenv, NTFS_GATEWAY_NO_ENVIRON, &g3, why, sizeof why), -NTFS_EBADREQ);
        ASSERT(strstr(why, "a.com") && strstr(why, "redacted safely") && !strstr(why, "abc"));
        ntfs_policy_free(p3);
        static const char shortkey[] = "ANTHROPIC_API_KEY=k1\n";
        ASSERT(ntfs_write_file_durable(shortenv, shortkey, sizeof shortkey - 1, 0600) == 0);
        ntfs_policy *p4 = policy_from("[fetch]\n");
        ASSERT_ERR(ntfs_gateway_new(p4, shortenv, NTFS_GATEWAY_NO_ENVIRON, &g3, why, sizeof why), -NTFS_EBADREQ);
        ASSERT(strstr(why, "ANTHROPIC_API_KEY") && strstr(why, "redacted safely"));
        ntfs_policy_free(p4);
        unlink(shortenv);
}

/* ---- LLM ------------------------------------------------------------ */

static void llm_script(const char *steps_json) {
        char buf[8192];
        snprintf(buf, sizeof buf, "{\"steps\": %s}", steps_json);
        json_t *j = raw_request(llm.port, "/_control/script", buf);
        if (!j)
                FAIL("could not load script");
        json_decref(j);
}

static json_t *llm_log(void) {
        json_t *j = raw_request(llm.port, "/_control/log", NULL);
        if (!json_is_array(j))
                FAIL("no log");
        return j;
}

static ntfs_policy *llm_policy(unsigned attempts) {
        return policy_from("[llm]\nbase_url = http://127.0.0.1:%d/\nmodel = claude-test\nmax_tokens = 100\n"
                           "max_attempts = %u\nretry_base = 20ms\nmax_total_time = 20s\ntimeout = 10s\n",
                           llm.port, attempts);
}

static json_t *user_request(const char *text, bool tools) {
        json_t *req = json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", text);
        if (tools)
                json_object_set_new(req, "tools",
                                    json_pack("[{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}]", "name", "bash_read",
                                              "description", "run a read-only command", "input_schema", "type",
                                              "object", "properties", "command", "type", "string", "required",
                                              "command"));
        return req;
}

TEST(llm_no_key) {
        llm_script("[{\"status\": 200}]");
        ntfs_policy *p = llm_policy(3);
        ntfs_gateway *gw = gateway_for(p, NULL); /* no env file, no environment */
        json_t *req = user_request("hi", false), *resp = NULL;
        char why[256];
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why), -NTFS_ENOKEY);
        ASSERT_STREQ(ntfs_errcode(-NTFS_ENOKEY), "no_credentials");
        ASSERT(strstr(why, "no_credentials"));
        ASSERT(resp == NULL);
        json_t *log = llm_log();
        ASSERT_EQ(json_array_size(log), 0);
        json_decref(log);
        ASSERT(ntfs_gateway_secrets(gw)[0] == NULL);
        json_decref(req);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(llm_tool_use_round_trip) {
        llm_script("[{\"status\": 200, \"body\": {\"id\": \"msg_1\", \"type\": \"message\", \"role\": \"assistant\","
                   " \"model\": \"claude-test\", \"content\": [{\"type\": \"text\", \"text\": \"Let me look.\"},"
                   " {\"type\": \"tool_use\", \"id\": \"toolu_01\", \"name\": \"bash_read\","
                   " \"input\": {\"command\": \"ls\"}}], \"stop_reason\": \"tool_use\", \"stop_sequence\": null,"
                   " \"usage\": {\"input_tokens\": 20, \"output_tokens\": 9}}},"
                   " {\"status\": 200}]");
        ntfs_policy *p = llm_policy(3);
        ntfs_gateway *gw = gateway_for(p, envfile);
        ASSERT_STREQ(ntfs_gateway_llm_model(gw), "claude-test");
        json_t *req = user_request("list files", true), *resp = NULL;
        json_object_set_new(req, "system", json_string("You are careful."));
        char why[256];
        ASSERT_OK(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why));
        ASSERT_STREQ(json_string_value(json_object_get(resp, "stop_reason")), "tool_use");
        json_t *block = json_array_get(json_object_get(resp, "content"), 1);
        ASSERT_STREQ(json_string_value(json_object_get(block, "type")), "tool_use");
        ASSERT_STREQ(json_string_value(json_object_get(block, "id")), "toolu_01");
        ASSERT_STREQ(json_string_value(json_object_get(json_object_get(block, "input"), "command")), "ls");
        ASSERT_EQ(json_integer_value(json_object_get(json_object_get(resp, "usage"), "output_tokens")), 9);

        /* Second turn: the assistant's content and a tool_result go back. */
        json_t *msgs = json_object_get(req, "messages");
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "assistant", "content",
                                              json_object_get(resp, "content")));
        json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "role", "user", "content", "type",
                                              "tool_result", "tool_use_id", "toolu_01", "content", "a.txt\n"));
        json_decref(resp);
        resp = NULL;
        ASSERT_OK(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why));
        ASSERT_STREQ(json_string_value(json_object_get(resp, "stop_reason")), "end_turn");
        ASSERT_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(resp, "content"), 0), "text")),
                     "hello from claude-test");
        json_decref(resp);

        json_t *log = llm_log();
        ASSERT_EQ(json_array_size(log), 2);
        json_t *h = json_object_get(json_array_get(log, 0), "headers");
        json_t *b = json_object_get(json_array_get(log, 0), "body");
        ASSERT_STREQ(json_string_value(json_object_get(h, "x-api-key")), "sk-test-KEY-0001");
        ASSERT_STREQ(json_string_value(json_object_get(h, "anthropic-version")), "2023-06-01");
        ASSERT_STREQ(json_string_value(json_object_get(h, "content-type")), "application/json");
        ASSERT_STREQ(json_string_value(json_object_get(b, "model")), "claude-test");
        ASSERT_EQ(json_integer_value(json_object_get(b, "max_tokens")), 100);
        ASSERT_STREQ(json_string_value(json_object_get(b, "system")), "You are careful.");
        ASSERT_EQ(json_array_size(json_object_get(b, "tools")), 1);
        json_t *b2 = json_object_get(json_array_get(log, 1), "body");
        ASSERT_EQ(json_array_size(json_object_get(b2, "messages")), 3);
        json_decref(log);
        json_decref(req);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(llm_retry_after) {
        llm_script("[{\"status\": 429, \"headers\": {\"retry-after\": \"1\"}}, {\"status\": 200}]");
        ntfs_policy *p = llm_policy(3);
        ntfs_gateway *gw = gateway_for(p, envfile);
        json_t *req = user_request("hi", false), *resp = NULL;
        char why[256];
        int64_t t0 = ntfs_mono_ns();
        ASSERT_OK(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why));
        int64_t ms = (ntfs_mono_ns() - t0) / 1000000;
        printf("# 429 + retry-after 1 -> success in %lld ms\n", (long long)ms);
        ASSERT(ms >= 950); /* honoured retry-after, not the 20 ms backoff */
        ASSERT_EQ(ntfs_gateway_llm_last_attempts(), 2);
        json_t *log = llm_log();
        ASSERT_EQ(json_array_size(log), 2);
        json_decref(log);
        json_decref(resp);
        json_decref(req);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(llm_500_storm) {
        llm_script("[{\"status\": 500, \"repeat\": 100}]");
        ntfs_policy *p = llm_policy(3);
        ntfs_gateway *gw = gateway_for(p, envfile);
        json_t *req = user_request("hi", false), *resp = NULL;
        char why[512];
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why), -NTFS_EUPSTREAM);
        printf("# %s\n", why);
        ASSERT(resp == NULL);
        ASSERT(strstr(why, "gave up after 3 attempts"));
        ASSERT(strstr(why, "HTTP 500 api_error: scripted 500"));
        ASSERT(!strstr(why, "sk-test-KEY-0001"));
        json_t *log = llm_log();
        ASSERT_EQ(json_array_size(log), 3);
        json_decref(log);
        /* A 400 is not retried; an error message echoing the key is masked. */
        llm_script("[{\"status\": 400, \"body\": {\"type\": \"error\", \"error\": {\"type\": "
                   "\"invalid_request_error\", \"message\": \"bad key sk-test-KEY-0001\"}}}]");
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why), -NTFS_EUPSTREAM);
        ASSERT(strstr(why, "HTTP 400 invalid_request_error: bad key ****"));
        ASSERT(!strstr(why, "sk-test"));
        log = llm_log();
        ASSERT_EQ(json_array_size(log), 1);
        json_decref(log);
        /* A bad request never leaves the machine. */
        json_t *bad = json_pack("{s:[], s:b}", "messages", "stream", 1);
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, bad, &resp, why, sizeof why), -NTFS_EBADREQ);
        json_decref(bad);
        bad = user_request("x", false);
        json_object_set_new(bad, "stream", json_true());
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, bad, &resp, why, sizeof why), -NTFS_EBADREQ);
        json_decref(bad);
        json_decref(req);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

TEST(llm_total_time_bound) {
        /* retry-after beyond max_total_time: give up at once. */
        llm_script("[{\"status\": 529, \"headers\": {\"retry-after\": \"60\"}}]");
        ntfs_policy *p = policy_from("[llm]\nbase_url = http://127.0.0.1:%d\nmax_attempts = 5\n"
                                     "max_total_time = 2s\nretry_base = 10ms\n",
                                     llm.port);
        ntfs_gateway *gw = gateway_for(p, envfile);
        json_t *req = user_request("hi", false), *resp = NULL;
        char why[512];
        int64_t t0 = ntfs_mono_ns();
        ASSERT_ERR(ntfs_gateway_llm_generate_ex(gw, req, &resp, why, sizeof why), -NTFS_EUPSTREAM);
        ASSERT((ntfs_mono_ns() - t0) / 1000000 < 1500);
        ASSERT(strstr(why, "exceeds max_total_time"));
        ASSERT(strstr(why, "overloaded_error"));
        json_decref(req);
        ntfs_gateway_free(gw);
        ntfs_policy_free(p);
}

int main(void) {
        const char *root = getenv("NTFS_SOURCE_ROOT");
        snprintf(src_root, sizeof src_root, "%s", root ? root : ".");
        if (access("/usr/bin/python3", X_OK) < 0) {
                printf("1..0 # SKIP no python3\n");
                return 77;
        }
        atexit(teardown);
        snprintf(envfile, sizeof envfile, "/tmp/ntfs-gw-env-XXXXXX");
        int fd = mkstemp(envfile);
        if (fd < 0)
                return 1;
        close(fd);
        static const char envtext[] = "# test credentials\nexport ANTHROPIC_API_KEY=\"sk-test-KEY-0001\"\n"
                                      "TEST_TOKEN=tok-SECRET-4242\n";
        if (ntfs_write_file_durable(envfile, envtext, sizeof envtext - 1, 0600) < 0)
                return 1;
        curl_global_init(CURL_GLOBAL_DEFAULT);
        if (helper_start(&web, "http_server.py") < 0 || helper_start(&llm, "fake_anthropic.py") < 0) {
                printf("Bail out! could not start helper servers\n");
                return 1;
        }
        RUN(address_classification);
        RUN(fetch_ok);
        RUN(fetch_refused);
        RUN(fetch_private_address_by_name);
        RUN(fetch_redirects);
        RUN(fetch_limits);
        RUN(fetch_credentials);
        RUN(llm_no_key);
        RUN(llm_tool_use_round_trip);
        RUN(llm_retry_after);
        RUN(llm_500_storm);
        RUN(llm_total_time_bound);
        teardown();
        curl_global_cleanup();
        return tap_done();
}
