/* SPDX-License-Identifier: MIT
 * gateway.c — fetch_url and llm_generate through libcurl (docs/gateway.md).
 *
 * Every credential value stays inside this file: it is put into a curl
 * header list for exactly one request to the host it belongs to, wiped
 * afterwards, and masked out of anything returned.
 */
#include "policy/gateway.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

#define ENV_FILE_MAX (64 * 1024)
#define ENV_MAX_VARS 256
#define HEADER_VALUE_MAX 1024
#define LLM_ERRMSG_MAX 300
#define BACKOFF_CAP_MS (30 * 1000)
#define RETRY_AFTER_CAP_S 300

struct ntfs_gateway {
        const ntfs_policy *policy;
        char *api_key;
        char *base_url;
        char *model;
        size_t n_creds;
        char **cred_values;   /* parallel to ntfs_policy_credentials() */
        const char **secrets; /* NULL-terminated */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;
static __thread unsigned llm_last_attempts;

static void curl_init_once(void) {
        curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void wipe_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

static inline void curl_easy_cleanupp(CURL **c) {
        if (*c)
                curl_easy_cleanup(*c);
}
static inline void curl_slist_free_allp(struct curl_slist **l) {
        if (*l)
                curl_slist_free_all(*l);
}
static inline void curl_url_cleanupp(CURLU **u) {
        if (*u)
                curl_url_cleanup(*u);
}
static inline void curl_freep(char **s) {
        if (*s)
                curl_free(*s);
}
#define _cleanup_curl_ _cleanup_(curl_easy_cleanupp)

__attribute__((format(printf, 3, 4))) static void setwhy(char *why, size_t whylen, const char *fmt, ...) {
        if (!why || !whylen)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
}

/* Masks every occurrence of every secret in buf[0..len) with '*'. */
static bool redact(const ntfs_gateway *gw, char *buf, size_t len) {
        bool hit = false;
        if (!buf)
                return false;
        for (const char *const *s = gw->secrets; *s; s++) {
                size_t sl = strlen(*s);
                if (sl == 0 || sl > len)
                        continue;
                char *p = buf;
                size_t left = len;
                char *m;
                while ((m = memmem(p, left, *s, sl))) {
                        memset(m, '*', sl);
                        hit = true;
                        left -= (size_t)(m + sl - p);
                        p = m + sl;
                }
        }
        return hit;
}

/* ---- .env files --------------------------------------------------------- */

struct envfile {
        size_t n;
        char *key[ENV_MAX_VARS];
        char *value[ENV_MAX_VARS];
};

static void envfile_release(struct envfile *e) {
        for (size_t i = 0; i < e->n; i++) {
                free(e->key[i]);
                wipe_free(e->value[i]);
        }
        e->n = 0;
}

static int envfile_load(struct envfile *e, const char *path, char *why, size_t whylen) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = ntfs_read_file(path, ENV_FILE_MAX, &text, &len);
        if (r < 0) {
                setwhy(why, whylen, "env file %s: %s", path, strerror(-r));
                return r;
        }
        char *save = NULL;
        unsigned line = 0;
        r = 0;
        for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                line++;
                while (*l == ' ' || *l == '\t')
                        l++;
                size_t n = strlen(l);
                while (n && (l[n - 1] == '\r' || l[n - 1] == ' ' || l[n - 1] == '\t'))
                        l[--n] = 0;
                if (!*l || *l == '#')
                        continue;
                if (strncmp(l, "export ", 7) == 0)
                        l += 7;
                char *eq = strchr(l, '=');
                if (!eq) {
                        setwhy(why, whylen, "env file %s: line %u: expected KEY=VALUE", path, line);
                        r = -NTFS_EBADREQ;
                        break;
                }
                *eq = 0;
                char *k = l, *v = eq + 1;
                size_t kl = strlen(k);
                while (kl && (k[kl - 1] == ' ' || k[kl - 1] == '\t'))
                        k[--kl] = 0;
                size_t vl = strlen(v);
                if (vl >= 2 && (v[0] == '"' || v[0] == '\'') && v[vl - 1] == v[0]) {
                        v[vl - 1] = 0;
                        v++;
                }
                if (e->n >= ENV_MAX_VARS) {
                        setwhy(why, whylen, "env file %s: more than %d variables", path, ENV_MAX_VARS);
                        r = -NTFS_EBADREQ;
                        break;
                }
                e->key[e->n] = strdup(k);
                e->value[e->n] = strdup(v);
                e->n++;
                if (!e->key[e->n - 1] || !e->value[e->n - 1]) {
                        r = -ENOMEM;
                        break;
                }
        }
        explicit_bzero(text, len);
        return r;
}

static const char *lookup_var(const struct envfile *e, unsigned flags, const char *name) {
        if (!(flags & NTFS_GATEWAY_NO_ENVIRON)) {
                const char *v = getenv(name);
                if (v && *v)
                        return v;
        }
        for (size_t i = 0; i < e->n; i++)
                if (strcmp(e->key[i], name) == 0 && e->value[i][0])
                        return e->value[i];
        return NULL;
}

/* ---- construction ----------------------------------------------------- */

void ntfs_gateway_free(ntfs_gateway *gw) {
        if (!gw)
                return;
        wipe_free(gw->api_key);
        free(gw->base_url);
        free(gw->model);
        for (size_t i = 0; i < gw->n_creds; i++)
                wipe_free(gw->cred_values[i]);
        free(gw->cred_values);
        free(gw->secrets);
        free(gw);
}

static inline void ntfs_gateway_freep(ntfs_gateway **g) {
        ntfs_gateway_free(*g);
}

static bool value_safe(const char *v) {
        for (; *v; v++)
                if (*v == '\r' || *v == '\n' || *v == 0x7f)
                        return false;
        return true;
}

/* A secret the journal can redact: long enough not to match ordinary text. */
static bool secret_length_ok(const char *v) {
        size_t l = strnlen(v, NTFS_POLICY_SECRET_MAX + 1);
        return l >= NTFS_POLICY_SECRET_MIN && l <= NTFS_POLICY_SECRET_MAX;
}

int ntfs_gateway_new(const ntfs_policy *p, const char *env_file, unsigned flags, ntfs_gateway **ret,
                     char *why, size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        if (!p)
                return -EINVAL;
        pthread_once(&curl_once, curl_init_once);
        if (curl_init_result != CURLE_OK) {
                setwhy(why, whylen, "curl_global_init failed");
                return -EIO;
        }
        const struct ntfs_llm_settings *llm = ntfs_policy_llm(p);
        if (!env_file)
                env_file = llm->env_file;
        struct envfile env = { 0 };
        int r = 0;
        _cleanup_(ntfs_gateway_freep) ntfs_gateway *gw = calloc(1, sizeof *gw);
        if (!gw)
                return -ENOMEM;
        gw->policy = p;
        if (env_file) {
                r = envfile_load(&env, env_file, why, whylen);
                if (r < 0)
                        goto out;
        }
        const char *v = lookup_var(&env, flags, "ANTHROPIC_API_KEY");
        if (v) {
                if (!value_safe(v)) {
                        setwhy(why, whylen, "ANTHROPIC_API_KEY holds a control character");
                        r = -NTFS_EBADREQ;
                        goto out;
                }
                if (!secret_length_ok(v)) {
                        setwhy(why, whylen,
                               "ANTHROPIC_API_KEY: a secret must be %d to %d bytes long to be redacted safely",
                               NTFS_POLICY_SECRET_MIN, NTFS_POLICY_SECRET_MAX);
                        r = -NTFS_EBADREQ;
                        goto out;
                }
                gw->api_key = strdup(v);
                if (!gw->api_key) {
                        r = -ENOMEM;
                        goto out;
                }
        }
        v = lookup_var(&env, flags, "ANTHROPIC_BASE_URL");
        if (!v)
                v = llm->base_url ? llm->base_url : NTFS_LLM_DEFAULT_BASE_URL;
        if ((strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) || !value_safe(v)) {
                setwhy(why, whylen, "ANTHROPIC_BASE_URL must be an http:// or https:// URL");
                r = -NTFS_EBADREQ;
                goto out;
        }
        gw->base_url = strdup(v);
        v = lookup_var(&env, flags, "LLM_MODEL");
        if (!v)
                v = llm->model ? llm->model : NTFS_LLM_DEFAULT_MODEL;
        gw->model = strdup(v);
        if (!gw->base_url || !gw->model) {
                r = -ENOMEM;
                goto out;
        }
        size_t bl = strlen(gw->base_url);
        while (bl > 0 && gw->base_url[bl - 1] == '/')
                gw->base_url[--bl] = 0;

        const struct ntfs_credential *creds;
        size_t n = ntfs_policy_credentials(p, &creds);
        gw->cred_values = calloc(n + 1, sizeof(char *));
        gw->secrets = calloc(n + 2, sizeof(char *));
        if (!gw->cred_values || !gw->secrets) {
                r = -ENOMEM;
                goto out;
        }
        size_t ns = 0;
        if (gw->api_key)
                gw->secrets[ns++] = gw->api_key;
        for (size_t i = 0; i < n; i++) {
                const char *val = creds[i].value;
                if (!val) {
                        val = lookup_var(&env, flags, creds[i].value_env);
                        if (!val) {
                                setwhy(why, whylen, "credential for %s: variable %s is not set", creds[i].host,
                                       creds[i].value_env);
                                r = -NTFS_ENOKEY;
                                goto out;
                        }
                }
                if (!value_safe(val)) {
                        setwhy(why, whylen, "credential for %s holds a control character", creds[i].host);
                        r = -NTFS_EBADREQ;
                        goto out;
                }
                if (!secret_length_ok(val)) {
                        setwhy(why, whylen,
                               "credential for %s: a secret must be %d to %d bytes long to be redacted safely",
                               creds[i].host, NTFS_POLICY_SECRET_MIN, NTFS_POLICY_SECRET_MAX);
                        r = -NTFS_EBADREQ;
                        goto out;
                }
                gw->cred_values[i] = strdup(val);
                gw->n_creds = i + 1;
                if (!gw->cred_values[i]) {
                        r = -ENOMEM;
                        goto out;
                }
                gw->secrets[ns++] = gw->cred_values[i];
        }
        gw->secrets[ns] = NULL;
        *ret = TAKE_PTR(gw);
out:
        envfile_release(&env);
        return r;
}

const char *const *ntfs_gateway_secrets(const ntfs_gateway *gw) {
        return gw->secrets;
}
const char *ntfs_gateway_llm_base_url(const ntfs_gateway *gw) {
        return gw->base_url;
}
const char *ntfs_gateway_llm_model(const ntfs_gateway *gw) {
        return gw->model;
}

/* ---- addresses ------------------------------------------------------- */

static bool v4_restricted(uint32_t a) { /* host byte order */
        static const struct {
                uint32_t net, mask;
        } nets[] = {
                { 0x00000000, 0xff000000 }, /* 0/8 "this network" */
                { 0x0a000000, 0xff000000 }, /* 10/8 */
                { 0x64400000, 0xffc00000 }, /* 100.64/10 CGNAT */
                { 0x7f000000, 0xff000000 }, /* 127/8 */
                { 0xa9fe0000, 0xffff0000 }, /* 169.254/16 */
                { 0xac100000, 0xfff00000 }, /* 172.16/12 */
                { 0xc0000000, 0xffffff00 }, /* 192.0.0/24 IETF */
                { 0xc0a80000, 0xffff0000 }, /* 192.168/16 */
                { 0xc6120000, 0xfffe0000 }, /* 198.18/15 benchmarking */
                { 0xe0000000, 0xf0000000 }, /* 224/4 multicast */
                { 0xf0000000, 0xf0000000 }, /* 240/4 reserved, broadcast */
        };
        for (size_t i = 0; i < ARRAY_SIZE(nets); i++)
                if ((a & nets[i].mask) == nets[i].net)
                        return true;
        return false;
}

bool ntfs_gateway_address_restricted(int family, const void *addr) {
        if (family == AF_INET) {
                struct in_addr a;
                memcpy(&a, addr, sizeof a);
                return v4_restricted(ntohl(a.s_addr));
        }
        if (family != AF_INET6)
                return true;
        const uint8_t *b = addr;
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
        static const uint8_t zero12[12] = { 0 };
        if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 || memcmp(b, zero12, 12) == 0) {
                /* ::a.b.c.d (incl. :: and ::1), ::ffff:a.b.c.d, 64:ff9b::a.b.c.d */
                uint32_t v4 = ((uint32_t)b[12] << 24) | ((uint32_t)b[13] << 16) | ((uint32_t)b[14] << 8) | b[15];
                if (memcmp(b, zero12, 12) == 0)
                        return true; /* unspecified, loopback, deprecated IPv4-compatible */
                return v4_restricted(v4);
        }
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) /* fe80::/10 link-local */
                return true;
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) /* fec0::/10 site-local (deprecated) */
                return true;
        if ((b[0] & 0xfe) == 0xfc) /* fc00::/7 unique local */
                return true;
        if (b[0] == 0xff) /* multicast */
                return true;
        return false;
}

/* ---- fetch ------------------------------------------------------------ */

static const char *const safe_headers[NTFS_FETCH_MAX_HEADERS] = {
        "content-type", "content-length", "location", "date", "etag", "last-modified",
};

struct hop {
        const ntfs_gateway *gw;
        bool private_ok;
        bool denied;          /* the opensocket callback refused an address */
        char denied_addr[INET6_ADDRSTRLEN];
        char *buf;
        size_t len, cap, limit;
        bool overflow;
        struct ntfs_fetch_header headers[NTFS_FETCH_MAX_HEADERS];
        size_t n_headers;
        char *retry_after;    /* LLM: retry-after header */
};

static void hop_reset_headers(struct hop *h) {
        for (size_t i = 0; i < h->n_headers; i++) {
                free(h->headers[i].name);
                free(h->headers[i].value);
        }
        h->n_headers = 0;
        free(h->retry_after);
        h->retry_after = NULL;
}

static void hop_release(struct hop *h) {
        hop_reset_headers(h);
        free(h->buf);
        h->buf = NULL;
        h->len = h->cap = 0;
}

static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *a) {
        struct hop *h = clientp;
        if (purpose != CURLSOCKTYPE_IPCXN)
                return CURL_SOCKET_BAD;
        const void *ip = NULL;
        if (a->family == AF_INET && a->addrlen >= sizeof(struct sockaddr_in))
                ip = &((const struct sockaddr_in *)&a->addr)->sin_addr;
        else if (a->family == AF_INET6 && a->addrlen >= sizeof(struct sockaddr_in6))
                ip = &((const struct sockaddr_in6 *)&a->addr)->sin6_addr;
        if (!ip) {
                h->denied = true;
                snprintf(h->denied_addr, sizeof h->denied_addr, "(family %d)", a->family);
                return CURL_SOCKET_BAD;
        }
        if (!h->private_ok && ntfs_gateway_address_restricted(a->family, ip)) {
                h->denied = true;
                if (!inet_ntop(a->family, ip, h->denied_addr, sizeof h->denied_addr))
                        snprintf(h->denied_addr, sizeof h->denied_addr, "?");
                return CURL_SOCKET_BAD;
        }
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userp) {
        struct hop *h = userp;
        size_t n = size * nmemb;
        size_t take = n;
        if (h->len + take > h->limit) {
                take = h->limit - h->len;
                h->overflow = true;
        }
        if (take) {
                if (h->len + take + 1 > h->cap) {
                        size_t ncap = NTFS_MAX(h->cap * 2, h->len + take + 1);
                        ncap = NTFS_MAX(ncap, (size_t)16384);
                        ncap = NTFS_MIN(ncap, h->limit + 1);
                        char *nb = realloc(h->buf, ncap);
                        if (!nb)
                                return 0;
                        h->buf = nb;
                        h->cap = ncap;
                }
                memcpy(h->buf + h->len, data, take);
                h->len += take;
        }
        return h->overflow ? 0 : n; /* 0 aborts the transfer: CURLE_WRITE_ERROR */
}

static size_t header_cb(char *data, size_t size, size_t nmemb, void *userp) {
        struct hop *h = userp;
        size_t n = size * nmemb;
        if (n >= 5 && strncmp(data, "HTTP/", 5) == 0) {
                hop_reset_headers(h); /* a new response (after 1xx) */
                return n;
        }
        const char *colon = memchr(data, ':', n);
        if (!colon)
                return n;
        size_t nl = (size_t)(colon - data);
        const char *v = colon + 1;
        size_t vl = n - nl - 1;
        while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                vl--;
        if (vl > HEADER_VALUE_MAX)
                return n;
        if (nl == 11 && strncasecmp(data, "retry-after", 11) == 0) {
                free(h->retry_after);
                h->retry_after = strndup(v, vl);
                return n;
        }
        for (size_t i = 0; i < ARRAY_SIZE(safe_headers); i++) {
                if (strlen(safe_headers[i]) != nl || strncasecmp(data, safe_headers[i], nl) != 0)
                        continue;
                char *val = strndup(v, vl);
                if (!val)
                        return 0;
                for (size_t k = 0; k < h->n_headers; k++)
                        if (strcmp(h->headers[k].name, safe_headers[i]) == 0) {
                                free(h->headers[k].value);
                                h->headers[k].value = val;
                                return n;
                        }
                char *name = strdup(safe_headers[i]);
                if (!name) {
                        free(val);
                        return 0;
                }
                h->headers[h->n_headers].name = name;
                h->headers[h->n_headers].value = val;
                h->n_headers++;
                return n;
        }
        return n;
}

void ntfs_fetch_result_release(struct ntfs_fetch_result *r) {
        if (!r)
                return;
        free(r->final_url);
        free(r->body);
        for (size_t i = 0; i < r->n_headers; i++) {
                free(r->headers[i].name);
                free(r->headers[i].value);
        }
        memset(r, 0, sizeof *r);
}

/* Strict UTF-8 (no overlongs, surrogates or > U+10FFFF); NUL counts as binary. */
static bool utf8_valid(const unsigned char *s, size_t n) {
        size_t i = 0;
        while (i < n) {
                unsigned char c = s[i];
                if (c == 0)
                        return false;
                if (c < 0x80) {
                        i++;
                        continue;
                }
                size_t len;
                uint32_t cp;
                if ((c & 0xe0) == 0xc0)
                        len = 2, cp = c & 0x1f;
                else if ((c & 0xf0) == 0xe0)
                        len = 3, cp = c & 0x0f;
                else if ((c & 0xf8) == 0xf0)
                        len = 4, cp = c & 0x07;
                else
                        return false;
                if (i + len > n)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((s[i + k] & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (s[i + k] & 0x3f);
                }
                if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                i += len;
        }
        return true;
}

__attribute__((format(printf, 4, 5))) static int fetch_fail(struct ntfs_fetch_result *ret, const ntfs_gateway *gw,
                                                          int err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ret->error, sizeof ret->error, fmt, ap);
        va_end(ap);
        redact(gw, ret->error, strlen(ret->error));
        ret->error_code = ntfs_errcode(err);
        return err;
}

/* URL checks of one hop: fills host (lower case, no brackets), port, and the
 * normalized URL to hand to curl (*ret_url, owned). */
static int check_url(const ntfs_gateway *gw, const char *url, bool is_redirect, struct ntfs_fetch_result *ret,
                     char *host, size_t hostlen, unsigned *ret_port, bool *ret_https, char **ret_url) {
        const ntfs_policy *p = gw->policy;
        const char *pfx = is_redirect ? "redirect refused: " : "";
        _cleanup_(curl_url_cleanupp) CURLU *u = curl_url();
        if (!u)
                return -ENOMEM;
        if (strlen(url) > 8192)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%sURL longer than 8192 bytes", pfx);
        if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%smalformed URL", pfx);
        _cleanup_(curl_freep) char *scheme = NULL, *h = NULL, *port = NULL, *user = NULL, *norm = NULL;
        if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%sURL without a scheme", pfx);
        for (char *c = scheme; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
                return fetch_fail(ret, gw, -NTFS_EDENIED, "%sscheme '%.32s' not allowed (fetch: http and https only)",
                                  pfx, scheme);
        if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
                return fetch_fail(ret, gw, -NTFS_EDENIED, "%suser name or password in the URL not allowed", pfx);
        if (curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK || !*h)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%sURL without a host", pfx);
        size_t hl = strlen(h);
        const char *hs = h;
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
                hs = h + 1;
                hl -= 2;
        }
        if (hl == 0 || hl >= hostlen)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%shost name too long", pfx);
        for (size_t i = 0; i < hl; i++) {
                unsigned char c = (unsigned char)hs[i];
                if (c >= 0x80 || c <= 0x20)
                        return fetch_fail(ret, gw, -NTFS_EDENIED,
                                          "%shost must be ASCII (use its punycode form)", pfx);
                host[i] = (char)tolower(c);
        }
        host[hl] = 0;
        if (strchr(host, '%'))
                return fetch_fail(ret, gw, -NTFS_EDENIED, "%sIPv6 zone ids not allowed", pfx);
        if (!ntfs_policy_host_allowed(p, host))
                return fetch_fail(ret, gw, -NTFS_EDENIED, "%shost '%s' not in fetch.allow_hosts", pfx, host);
        if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%sURL without a port", pfx);
        uint64_t pn;
        if (ntfs_parse_u64(port, 65535, &pn) < 0)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%sbad port", pfx);
        if (!ntfs_policy_port_allowed(p, (unsigned)pn))
                return fetch_fail(ret, gw, -NTFS_EDENIED, "%sport %u of host '%s' not in fetch.allow_ports", pfx,
                                  (unsigned)pn, host);
        if (curl_url_get(u, CURLUPART_URL, &norm, 0) != CURLUE_OK)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "%smalformed URL", pfx);
        *ret_url = strdup(norm);
        if (!*ret_url)
                return -ENOMEM;
        *ret_port = (unsigned)pn;
        *ret_https = strcmp(scheme, "https") == 0;
        return 0;
}

static const char *cred_value(const ntfs_gateway *gw, const struct ntfs_credential *c) {
        const struct ntfs_credential *all;
        size_t n = ntfs_policy_credentials(gw->policy, &all);
        for (size_t i = 0; i < n && i < gw->n_creds; i++)
                if (&all[i] == c)
                        return gw->cred_values[i];
        return NULL;
}

static void wipe_slist(struct curl_slist *l) {
        for (; l; l = l->next)
                explicit_bzero(l->data, strlen(l->data));
}

static int64_t ms_left(int64_t deadline_ns) {
        int64_t left = (deadline_ns - ntfs_mono_ns()) / 1000000;
        return left;
}

int ntfs_gateway_fetch(ntfs_gateway *gw, const char *url, const struct ntfs_fetch_opts *opts,
                       struct ntfs_fetch_result *ret) {
        static const struct ntfs_fetch_opts defaults;
        memset(ret, 0, sizeof *ret);
        if (!gw || !url)
                return -EINVAL;
        if (!opts)
                opts = &defaults;
        const struct ntfs_fetch_rules *fr = ntfs_policy_fetch_rules(gw->policy);
        int64_t start = ntfs_mono_ns();
        uint64_t limit = fr->max_response_bytes, timeout = fr->timeout_ms;
        if (opts->max_bytes && opts->max_bytes < limit)
                limit = opts->max_bytes;
        if (opts->timeout_ms && opts->timeout_ms < timeout)
                timeout = opts->timeout_ms;
        if (limit > SIZE_MAX / 2)
                limit = SIZE_MAX / 2;
        int64_t deadline = start + (int64_t)timeout * 1000000;
        const char *method = opts->method ? opts->method : "GET";
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && strcmp(method, "POST") != 0)
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "method %.16s not supported (GET, HEAD, POST)", method);
        if (opts->content_type && (!value_safe(opts->content_type) || strlen(opts->content_type) > 200))
                return fetch_fail(ret, gw, -NTFS_EBADREQ, "bad content type");
        bool post = strcmp(method, "POST") == 0, head = strcmp(method, "HEAD") == 0;

        _cleanup_free_ char *cur = strdup(url);
        if (!cur)
                return -ENOMEM;
        struct hop h = { .gw = gw };
        int r;
        for (unsigned hopn = 0;; hopn++) {
                char host[256];
                unsigned port = 0;
                bool https = false;
                _cleanup_free_ char *norm = NULL;
                r = check_url(gw, cur, hopn > 0, ret, host, sizeof host, &port, &https, &norm);
                if (r < 0)
                        break;
                free(ret->final_url);
                ret->final_url = strdup(norm);
                if (!ret->final_url) {
                        r = -ENOMEM;
                        break;
                }
                int64_t left = ms_left(deadline);
                if (left <= 0) {
                        r = fetch_fail(ret, gw, -NTFS_ETIMEOUT, "timed out after %llu ms (fetch.timeout)",
                                       (unsigned long long)timeout);
                        break;
                }
                hop_release(&h);
                h.private_ok = ntfs_policy_private_allowed(gw->policy, host);
                h.denied = false;
                h.overflow = false;
                h.limit = (size_t)limit;
                ret->truncated = false;

                _cleanup_curl_ CURL *c = curl_easy_init();
                _cleanup_(curl_slist_free_allp) struct curl_slist *hdrs = NULL;
                if (!c) {
                        r = -ENOMEM;
                        break;
                }
                char errbuf[CURL_ERROR_SIZE] = "";
                const struct ntfs_credential *cred = ntfs_policy_credential(gw->policy, host);
                if (cred && (https || cred->allow_insecure)) {
                        const char *val = cred_value(gw, cred);
                        size_t need = strlen(cred->header) + strlen(val ? val : "") + 3;
                        _cleanup_free_ char *line = malloc(need);
                        if (!line || !val) {
                                r = -ENOMEM;
                                break;
                        }
                        snprintf(line, need, "%s: %s", cred->header, val);
                        struct curl_slist *nl = curl_slist_append(hdrs, line);
                        explicit_bzero(line, need);
                        if (!nl) {
                                r = -ENOMEM;
                                break;
                        }
                        hdrs = nl;
                }
                char ctype[256] = "";
                if (post) {
                        snprintf(ctype, sizeof ctype, "Content-Type: %s",
                                 opts->content_type ? opts->content_type : "application/octet-stream");
                        struct curl_slist *nl = curl_slist_append(hdrs, ctype);
                        if (!nl) {
                                r = -ENOMEM;
                                break;
                        }
                        hdrs = nl;
                }
                curl_easy_setopt(c, CURLOPT_URL, norm);
                curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
                curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
                curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never an environment proxy */
                curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
                curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
                curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)left);
                curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)left);
                curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
                curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &h);
                curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
                curl_easy_setopt(c, CURLOPT_WRITEDATA, &h);
                curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
                curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
                curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
                curl_easy_setopt(c, CURLOPT_USERAGENT, "ntfs-gateway/0.1");
                curl_easy_setopt(c, CURLOPT_MAXREDIRS, 0L);
                if (hdrs)
                        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
                if (head)
                        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
                if (post) {
                        curl_easy_setopt(c, CURLOPT_POST, 1L);
                        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)opts->body_len);
                        curl_easy_setopt(c, CURLOPT_POSTFIELDS, opts->body ? opts->body : "");
                }
                CURLcode cc = curl_easy_perform(c);
                wipe_slist(hdrs);
                long status = 0;
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
                ret->status = status;
                if (cc == CURLE_WRITE_ERROR && h.overflow) {
                        if (opts->refuse_oversize) {
                                r = fetch_fail(ret, gw, -NTFS_ETOOLARGE,
                                               "response larger than %llu bytes (fetch.max_response_bytes)",
                                               (unsigned long long)limit);
                                break;
                        }
                        ret->truncated = true;
                        cc = CURLE_OK;
                }
                if (cc != CURLE_OK) {
                        if (h.denied)
                                r = fetch_fail(ret, gw, -NTFS_EDENIED,
                                               "%saddress %s of host '%s' is private, loopback or link-local "
                                               "(fetch.private_hosts)",
                                               hopn > 0 ? "redirect refused: " : "", h.denied_addr, host);
                        else if (cc == CURLE_OPERATION_TIMEDOUT)
                                r = fetch_fail(ret, gw, -NTFS_ETIMEOUT, "timed out after %llu ms (fetch.timeout)",
                                               (unsigned long long)timeout);
                        else
                                r = fetch_fail(ret, gw, -NTFS_EUPSTREAM, "%s: %s", host,
                                               errbuf[0] ? errbuf : curl_easy_strerror(cc));
                        break;
                }
                char *loc = NULL;
                bool redirect = (status == 301 || status == 302 || status == 303 || status == 307 ||
                                 status == 308) &&
                                curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc;
                if (!redirect) {
                        r = 0;
                        break;
                }
                if (ret->redirects >= fr->max_redirects) {
                        r = fetch_fail(ret, gw, -NTFS_EDENIED, "more than %u redirects (fetch.max_redirects)",
                                       fr->max_redirects);
                        break;
                }
                ret->redirects++;
                char *next = strdup(loc);
                if (!next) {
                        r = -ENOMEM;
                        break;
                }
                free(cur);
                cur = next;
                if (status == 303 || ((status == 301 || status == 302) && post))
                        post = false; /* becomes a GET, as browsers do */
        }
        ret->duration_ms = (uint64_t)((ntfs_mono_ns() - start) / 1000000);
        if (r == -ENOMEM && !ret->error_code)
                fetch_fail(ret, gw, -ENOMEM, "out of memory");
        if (r == 0) {
                ret->bytes = h.len;
                ret->redacted = redact(gw, h.buf, h.len);
                for (size_t i = 0; i < h.n_headers; i++) {
                        ret->headers[i] = h.headers[i];
                        ret->redacted |= redact(gw, ret->headers[i].value, strlen(ret->headers[i].value));
                }
                ret->n_headers = h.n_headers;
                h.n_headers = 0;
                ret->redacted |= redact(gw, ret->final_url, strlen(ret->final_url));
                if (utf8_valid((const unsigned char *)h.buf, h.len)) {
                        ret->body = h.buf ? TAKE_PTR(h.buf) : strdup("");
                        if (!ret->body) {
                                hop_release(&h);
                                return -ENOMEM;
                        }
                        ret->body[h.len] = 0;
                        ret->body_len = h.len;
                } else {
                        size_t enc = 4 * ((h.len + 2) / 3) + 1;
                        ret->body = malloc(enc);
                        if (!ret->body) {
                                hop_release(&h);
                                return -ENOMEM;
                        }
                        ret->body_len = (size_t)EVP_EncodeBlock((unsigned char *)ret->body,
                                                                (const unsigned char *)h.buf, (int)h.len);
                        ret->body_base64 = true;
                }
        } else if (ret->final_url) {
                redact(gw, ret->final_url, strlen(ret->final_url));
        }
        hop_release(&h);
        log_debug("gateway: fetch %s -> %s", ret->error_code ? ret->error_code : "ok",
                  ret->error_code ? ret->error : "");
        return r;
}

json_t *ntfs_fetch_result_to_json(const struct ntfs_fetch_result *r) {
        json_t *hdrs = json_object();
        if (!hdrs)
                return NULL;
        for (size_t i = 0; i < r->n_headers; i++)
                json_object_set_new(hdrs, r->headers[i].name, json_string(r->headers[i].value));
        return json_pack("{s:s?, s:I, s:o, s:s, s:s, s:b, s:I, s:I, s:I}", "url", r->final_url, "status",
                         (json_int_t)r->status, "headers", hdrs, "body", r->body ? r->body : "",
                         "body_encoding", r->body_base64 ? "base64" : "utf-8", "truncated", r->truncated,
                         "bytes", (json_int_t)r->bytes, "redirects", (json_int_t)r->redirects, "duration_ms",
                         (json_int_t)r->duration_ms);
}

/* ---- llm_generate ------------------------------------------------------ */

unsigned ntfs_gateway_llm_last_attempts(void) {
        return llm_last_attempts;
}

static void sleep_ms(uint64_t ms) {
        struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* "type: message" of an API error body, or "" (redacted, bounded). */
static void api_error_text(const ntfs_gateway *gw, const char *body, size_t len, char *out, size_t outlen) {
        out[0] = 0;
        if (!body || !len)
                return;
        json_t *j = json_loadb(body, len, 0, NULL);
        if (!j)
                return;
        json_t *e = json_object_get(j, "error");
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        if (type || msg)
                snprintf(out, outlen, "%.60s%s%.*s", type ? type : "", type && msg ? ": " : "", LLM_ERRMSG_MAX,
                         msg ? msg : "");
        json_decref(j);
        for (char *c = out; *c; c++)
                if ((unsigned char)*c < 0x20)
                        *c = ' ';
        redact(gw, out, strlen(out));
}

static const char *const llm_pass_keys[] = {
        "system", "tools", "tool_choice", "temperature", "top_p", "top_k", "stop_sequences", "metadata",
};

static int llm_body(const ntfs_gateway *gw, json_t *req, char **ret, char *why, size_t whylen) {
        if (!json_is_object(req)) {
                setwhy(why, whylen, "request must be a JSON object");
                return -NTFS_EBADREQ;
        }
        json_t *msgs = json_object_get(req, "messages");
        if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
                setwhy(why, whylen, "request.messages must be a non-empty array");
                return -NTFS_EBADREQ;
        }
        json_t *stream = json_object_get(req, "stream");
        if (stream && !json_is_false(stream)) {
                setwhy(why, whylen, "streaming is not supported");
                return -NTFS_EBADREQ;
        }
        json_t *model = json_object_get(req, "model");
        if (model && !json_is_string(model)) {
                setwhy(why, whylen, "request.model must be a string");
                return -NTFS_EBADREQ;
        }
        json_t *mt = json_object_get(req, "max_tokens");
        if (mt && (!json_is_integer(mt) || json_integer_value(mt) <= 0)) {
                setwhy(why, whylen, "request.max_tokens must be a positive integer");
                return -NTFS_EBADREQ;
        }
        json_t *b = json_object();
        if (!b)
                return -ENOMEM;
        json_object_set_new(b, "model", json_string(model ? json_string_value(model) : gw->model));
        json_object_set_new(b, "max_tokens",
                            json_integer(mt ? json_integer_value(mt)
                                            : (json_int_t)ntfs_policy_llm(gw->policy)->max_tokens));
        for (size_t i = 0; i < ARRAY_SIZE(llm_pass_keys); i++) {
                json_t *v = json_object_get(req, llm_pass_keys[i]);
                if (v)
                        json_object_set(b, llm_pass_keys[i], v);
        }
        json_object_set(b, "messages", msgs);
        *ret = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        return *ret ? 0 : -ENOMEM;
}

int ntfs_gateway_llm_generate_ex(ntfs_gateway *gw, json_t *request, json_t **ret_response, char *why,
                                 size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        llm_last_attempts = 0;
        if (!gw || !ret_response)
                return -EINVAL;
        if (!gw->api_key) {
                setwhy(why, whylen, "no_credentials: ANTHROPIC_API_KEY is not configured");
                return -NTFS_ENOKEY;
        }
        const struct ntfs_llm_settings *cfg = ntfs_policy_llm(gw->policy);
        _cleanup_free_ char *body = NULL;
        int r = llm_body(gw, request, &body, why, whylen);
        if (r < 0)
                return r;
        size_t ul = strlen(gw->base_url) + sizeof "/v1/messages";
        _cleanup_free_ char *url = malloc(ul);
        size_t kl = strlen(gw->api_key) + sizeof "x-api-key: ";
        _cleanup_free_ char *keyhdr = malloc(kl);
        if (!url || !keyhdr)
                return -ENOMEM;
        snprintf(url, ul, "%s/v1/messages", gw->base_url);
        snprintf(keyhdr, kl, "x-api-key: %s", gw->api_key);
        struct curl_slist *hdrs = NULL;
        const char *lines[] = { keyhdr, "anthropic-version: " NTFS_ANTHROPIC_VERSION,
                                "content-type: application/json", "accept: application/json" };
        for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
                struct curl_slist *nl = curl_slist_append(hdrs, lines[i]);
                if (!nl) {
                        wipe_slist(hdrs);
                        curl_slist_free_all(hdrs);
                        explicit_bzero(keyhdr, kl);
                        return -ENOMEM;
                }
                hdrs = nl;
        }
        explicit_bzero(keyhdr, kl);

        const struct ntfs_tool_spec *spec = ntfs_policy_tool_by_id(gw->policy, NTFS_TOOL_LLM_GENERATE);
        int64_t start = ntfs_mono_ns();
        int64_t deadline = start + (int64_t)cfg->max_total_ms * 1000000;
        char last[LLM_ERRMSG_MAX + 100] = "";
        int last_err = -NTFS_EUPSTREAM;
        struct hop h = { .gw = gw, .private_ok = true };
        r = -NTFS_EUPSTREAM;
        for (unsigned attempt = 1; attempt <= cfg->max_attempts; attempt++) {
                int64_t left = ms_left(deadline);
                if (left <= 0) {
                        last_err = -NTFS_ETIMEOUT;
                        break;
                }
                llm_last_attempts = attempt;
                hop_release(&h);
                h.limit = (size_t)spec->output_limit;
                h.overflow = false;
                _cleanup_curl_ CURL *c = curl_easy_init();
                if (!c) {
                        r = -ENOMEM;
                        goto done;
                }
                char errbuf[CURL_ERROR_SIZE] = "";
                curl_easy_setopt(c, CURLOPT_URL, url);
                curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
                curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
                curl_easy_setopt(c, CURLOPT_PROXY, "");
                curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
                curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
                curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)NTFS_MIN((uint64_t)left, cfg->timeout_ms));
                curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
                curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &h);
                curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
                curl_easy_setopt(c, CURLOPT_WRITEDATA, &h);
                curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
                curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
                curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
                curl_easy_setopt(c, CURLOPT_USERAGENT, "ntfs-gateway/0.1");
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
                curl_easy_setopt(c, CURLOPT_POST, 1L);
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
                CURLcode cc = curl_easy_perform(c);
                long status = 0;
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
                bool retry;
                uint64_t wait_ms = cfg->retry_base_ms;
                for (unsigned k = 1; k < attempt && wait_ms < BACKOFF_CAP_MS; k++)
                        wait_ms *= 2;
                wait_ms = NTFS_MIN(wait_ms, (uint64_t)BACKOFF_CAP_MS);
                if (cc == CURLE_WRITE_ERROR && h.overflow) {
                        setwhy(last, sizeof last, "response larger than %llu bytes",
                               (unsigned long long)spec->output_limit);
                        last_err = -NTFS_ETOOLARGE;
                        retry = false;
                } else if (cc != CURLE_OK) {
                        setwhy(last, sizeof last, "%s", errbuf[0] ? errbuf : curl_easy_strerror(cc));
                        redact(gw, last, strlen(last));
                        last_err = cc == CURLE_OPERATION_TIMEDOUT ? -NTFS_ETIMEOUT : -NTFS_EUPSTREAM;
                        retry = true;
                } else if (status >= 200 && status < 300) {
                        json_error_t jerr;
                        json_t *resp = json_loadb(h.buf ? h.buf : "", h.len, 0, &jerr);
                        if (!json_is_object(resp)) {
                                json_decref(resp);
                                setwhy(why, whylen, "HTTP %ld: the answer is not a JSON object", status);
                                r = -NTFS_EUPSTREAM;
                                goto done;
                        }
                        *ret_response = resp;
                        r = 0;
                        goto done;
                } else {
                        char api[LLM_ERRMSG_MAX + 80];
                        api_error_text(gw, h.buf, h.len, api, sizeof api);
                        setwhy(last, sizeof last, "HTTP %ld%s%s", status, api[0] ? " " : "", api);
                        last_err = -NTFS_EUPSTREAM;
                        retry = status == 429 || (status >= 500 && status <= 599);
                        uint64_t ra;
                        if (retry && h.retry_after) {
                                int pr = ntfs_parse_u64(h.retry_after, UINT64_MAX, &ra);
                                if (pr == -ERANGE || (pr == 0 && ra > RETRY_AFTER_CAP_S))
                                        ra = RETRY_AFTER_CAP_S;
                                if (pr == 0 || pr == -ERANGE)
                                        wait_ms = ra * 1000;
                        }
                }
                log_debug("gateway: llm attempt %u: %s", attempt, last);
                if (!retry) {
                        setwhy(why, whylen, "%s", last);
                        r = last_err;
                        goto done;
                }
                if (attempt == cfg->max_attempts)
                        break;
                if ((int64_t)wait_ms >= ms_left(deadline)) {
                        last_err = last_err == -NTFS_ETIMEOUT ? last_err : -NTFS_EUPSTREAM;
                        setwhy(why, whylen, "gave up after %u attempts (next wait %llu ms exceeds max_total_time): %s",
                               attempt, (unsigned long long)wait_ms, last);
                        r = last_err;
                        goto done;
                }
                sleep_ms(wait_ms);
        }
        setwhy(why, whylen, "gave up after %u attempt%s: %s", llm_last_attempts, llm_last_attempts == 1 ? "" : "s",
               last[0] ? last : "time budget exhausted");
        r = last_err;
done:
        hop_release(&h);
        wipe_slist(hdrs);
        curl_slist_free_all(hdrs);
        if (why && whylen)
                redact(gw, why, strlen(why));
        return r;
}

int ntfs_gateway_llm_generate(ntfs_gateway *gw, json_t *request, json_t **ret_response) {
        return ntfs_gateway_llm_generate_ex(gw, request, ret_response, NULL, 0);
}
