/* SPDX-License-Identifier: MIT
 * s3.c — the S3 client of remotes (s3.h): signed requests, heads, listings.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/util.h"
#include "fs/sync/s3.h"
#include "common/banned.h"

#define MAX_BODY (64ull << 20)
#define MAX_KEYS 100000

/* ---- S3 client ----------------------------------------------------------------------------- */

void ntfs_remote_progress_get(const struct ntfs_remote_progress *p, struct ntfs_remote_progress *ret) {
        ret->bytes = __atomic_load_n(&p->bytes, __ATOMIC_RELAXED);
        ret->total_bytes = __atomic_load_n(&p->total_bytes, __ATOMIC_RELAXED);
        ret->objects = __atomic_load_n(&p->objects, __ATOMIC_RELAXED);
        ret->total_objects = __atomic_load_n(&p->total_objects, __ATOMIC_RELAXED);
        ret->packs = __atomic_load_n(&p->packs, __ATOMIC_RELAXED);
        ret->total_packs = __atomic_load_n(&p->total_packs, __ATOMIC_RELAXED);
        ret->totals_final = __atomic_load_n(&p->totals_final, __ATOMIC_ACQUIRE);
}

struct upload {
        const uint8_t *p;
        size_t n, off;
};
static size_t rd_cb(char *dst, size_t sz, size_t nm, void *ud) {
        struct upload *u = ud;
        size_t want = sz * nm, left = u->n - u->off;
        if (want > left)
                want = left;
        memcpy(dst, u->p + u->off, want);
        u->off += want;
        return want;
}
static size_t wr_cb(char *src, size_t sz, size_t nm, void *ud) {
        struct s3_resp *r = ud;
        size_t n = sz * nm;
        if (r->body.n + n > r->body_max) {
                r->too_big = true;
                return 0;
        }
        return buf_add(&r->body, src, n) < 0 ? 0 : n;
}
static size_t hdr_cb(char *src, size_t sz, size_t nm, void *ud) {
        struct s3_resp *r = ud;
        size_t n = sz * nm;
        if (n > 5 && strncasecmp(src, "etag:", 5) == 0) {
                const char *v = src + 5;
                size_t vl = n - 5;
                while (vl && (*v == ' ' || *v == '\t'))
                        v++, vl--;
                while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                        vl--;
                if (vl < sizeof r->etag) {
                        memcpy(r->etag, v, vl);
                        r->etag[vl] = 0;
                }
        }
        return n;
}

static void stat_add(struct s3 *s, uint64_t sent, uint64_t recv) {
        if (!s->stats)
                return;
        pthread_mutex_lock(s->stats_lock);
        s->stats->requests++;
        s->stats->bytes_sent += sent;
        s->stats->bytes_received += recv;
        pthread_mutex_unlock(s->stats_lock);
}

/* One request. key: object key below the bucket (already URL-safe), or NULL
 * for the bucket itself; query: sorted and encoded (libcurl 7.88 signs it
 * as given). Transport failures: -NTFS_EUPSTREAM with msg. */
int s3_req(struct s3 *s, CURL *c, const char *method, const char *key, const char *query, const void *body,
           size_t blen, const char *cond_header, struct s3_resp *out, char *msg, size_t msglen) {
        char url[2048];
        int n = snprintf(url, sizeof url, "%s/%s%s%s%s%s", s->endpoint, s->bucket, key ? "/" : "", key ? key : "",
                         query ? "?" : "", query ? query : "");
        if (n < 0 || (size_t)n >= sizeof url)
                return -ENAMETOOLONG;
        uint8_t sha[NTFS_HASH_LEN];
        char hex[NTFS_HEX_LEN + 1], h1[160];
        ntfs_sha256(body ? body : "", body ? blen : 0, sha);
        ntfs_hex(sha, NTFS_HASH_LEN, hex);
        snprintf(h1, sizeof h1, "x-amz-content-sha256: %s", hex);
        struct curl_slist *hl = curl_slist_append(NULL, h1);
        if (hl && cond_header)
                hl = curl_slist_append(hl, cond_header);
        if (!hl)
                return -ENOMEM;
        curl_easy_reset(c);
        struct upload up = { body, blen, 0 };
        if (!out->body_max)
                out->body_max = MAX_BODY;
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, s->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, s->userpwd);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, wr_cb);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, hdr_cb);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        if (strcmp(method, "PUT") == 0) {
                curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(c, CURLOPT_READFUNCTION, rd_cb);
                curl_easy_setopt(c, CURLOPT_READDATA, &up);
                curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)blen);
        } else if (strcmp(method, "HEAD") == 0) {
                curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "GET") != 0) {
                curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        }
        CURLcode cc = curl_easy_perform(c);
        curl_slist_free_all(hl);
        stat_add(s, blen, out->body.n);
        if (cc != CURLE_OK) {
                snprintf(msg, msglen, "remote '%s': %s %s: %s", s->cfg->name, method, key ? key : s->bucket,
                         out->too_big ? "response too large" : curl_easy_strerror(cc));
                return -NTFS_EUPSTREAM;
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        return 0;
}

/* The S3 error code of a response body (<Code>X</Code>), or "". */
static void s3_code(const struct s3_resp *r, char *out, size_t olen) {
        out[0] = 0;
        if (!r->body.n)
                return;
        const char *b = (const char *)r->body.p;
        const char *end = b + r->body.n;
        const char *p = memmem(b, r->body.n, "<Code>", 6);
        if (!p)
                return;
        p += 6;
        const char *q = memmem(p, (size_t)(end - p), "</Code>", 7);
        if (!q || (size_t)(q - p) >= olen)
                return;
        memcpy(out, p, (size_t)(q - p));
        out[q - p] = 0;
}

/* Maps an unexpected status to an error with a message. */
int s3_fail(struct s3 *s, const char *what, const struct s3_resp *r, char *msg, size_t msglen) {
        char code[64];
        s3_code(r, code, sizeof code);
        if (r->status == 403 || r->status == 401) {
                snprintf(msg, msglen, "remote '%s': authentication failed (HTTP %ld %s): check the access key and secret",
                         s->cfg->name, r->status, code[0] ? code : "Forbidden");
                return -NTFS_ENOKEY;
        }
        snprintf(msg, msglen, "remote '%s': %s: HTTP %ld %s", s->cfg->name, what, r->status, code);
        return -NTFS_EUPSTREAM;
}

void s3_resp_free(struct s3_resp *r) {
        buf_free(&r->body);
}

int ntfs_remote_parse_url(const char *url, char *endpoint, size_t elen, char *bucket, size_t blen, char *prefix,
                          size_t plen) {
        const char *p;
        if (strncmp(url, "http://", 7) == 0)
                p = url + 7;
        else if (strncmp(url, "https://", 8) == 0)
                p = url + 8;
        else
                return -NTFS_EBADREQ;
        const char *slash = strchr(p, '/');
        if (!slash || slash == p || (size_t)(slash - url) >= elen)
                return -NTFS_EBADREQ;
        memcpy(endpoint, url, (size_t)(slash - url));
        endpoint[slash - url] = 0;
        const char *b = slash + 1, *e = strchr(b, '/');
        size_t bl = e ? (size_t)(e - b) : strlen(b);
        if (bl < 3 || bl > 63 || bl >= blen)
                return -NTFS_EBADREQ;
        for (size_t i = 0; i < bl; i++)
                if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.'))
                        return -NTFS_EBADREQ;
        memcpy(bucket, b, bl);
        bucket[bl] = 0;
        prefix[0] = 0;
        if (e && e[1]) {
                const char *pf = e + 1;
                size_t pl = strlen(pf);
                while (pl && pf[pl - 1] == '/')
                        pl--;
                if (pl + 2 > plen)
                        return -NTFS_EBADREQ;
                for (size_t i = 0; i < pl; i++)
                        if (!((pf[i] >= 'a' && pf[i] <= 'z') || (pf[i] >= 'A' && pf[i] <= 'Z') ||
                              (pf[i] >= '0' && pf[i] <= '9') || strchr("-_./", pf[i])))
                                return -NTFS_EBADREQ;
                memcpy(prefix, pf, pl);
                prefix[pl] = '/';
                prefix[pl + 1] = 0;
        }
        for (const char *q = endpoint; *q; q++)
                if ((unsigned char)*q <= 0x20 || *q == '@' || *q == '?' || *q == '#')
                        return -NTFS_EBADREQ;
        return 0;
}

int s3_init(struct s3 *s, const struct ntfs_remote_cfg *cfg, struct ntfs_remote_stats *stats,
            pthread_mutex_t *lock, char *msg, size_t msglen) {
        *s = (struct s3){ .cfg = cfg, .stats = stats, .stats_lock = lock };
        if (ntfs_remote_parse_url(cfg->url, s->endpoint, sizeof s->endpoint, s->bucket, sizeof s->bucket, s->prefix,
                                  sizeof s->prefix) < 0) {
                snprintf(msg, msglen, "remote '%s': bad URL (want http[s]://host[:port]/bucket[/prefix])", cfg->name);
                return -NTFS_EBADREQ;
        }
        snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", cfg->region[0] ? cfg->region : "us-east-1");
        snprintf(s->userpwd, sizeof s->userpwd, "%s:%s", cfg->access_key, cfg->secret_key);
        return 0;
}
void s3_done(struct s3 *s) {
        explicit_bzero(s->userpwd, sizeof s->userpwd);
}

void s3_head_key(const struct s3 *s, const char *session, char *out, size_t olen) {
        size_t n = strlen(session);
        char hx[2 * NTFS_NAME_MAX + 1];
        ntfs_hex((const uint8_t *)session, n, hx);
        if (snprintf(out, olen, "%sheads/%s", s->prefix, hx) < 0)
                out[0] = 0;
}

/* Reads the remote head: 0 with *ret and etag, -NTFS_ENOREF when absent
 * (*no_bucket set when the bucket itself is missing). */
int s3_get_head(struct s3 *s, CURL *c, const char *session, ntfs_hash *ret, char *etag, size_t elen,
                bool *no_bucket, char *msg, size_t msglen) {
        char key[1600];
        s3_head_key(s, session, key, sizeof key);
        struct s3_resp r = { .body_max = 4096 };
        int rc = s3_req(s, c, "GET", key, NULL, NULL, 0, NULL, &r, msg, msglen);
        if (rc == 0) {
                char code[64];
                s3_code(&r, code, sizeof code);
                if (no_bucket)
                        *no_bucket = r.status == 404 && strcmp(code, "NoSuchBucket") == 0;
                if (r.status == 404) {
                        rc = -NTFS_ENOREF;
                } else if (r.status != 200) {
                        rc = s3_fail(s, "read head", &r, msg, msglen);
                } else if (r.body.n < NTFS_HEX_LEN) {
                        snprintf(msg, msglen, "remote '%s': head of '%s' is malformed", s->cfg->name, session);
                        rc = -NTFS_ECORRUPT;
                } else {
                        char hx[NTFS_HEX_LEN + 1];
                        memcpy(hx, r.body.p, NTFS_HEX_LEN);
                        hx[NTFS_HEX_LEN] = 0;
                        if (ntfs_unhex(hx, ret->b, NTFS_HASH_LEN) < 0) {
                                snprintf(msg, msglen, "remote '%s': head of '%s' is malformed", s->cfg->name, session);
                                rc = -NTFS_ECORRUPT;
                        }
                        snprintf(etag, elen, "%s", r.etag);
                }
        }
        s3_resp_free(&r);
        return rc;
}

/* "2026-11-29T12:00:00.000Z" as seconds since the epoch; -1 if malformed. */
static int64_t parse_mtime(const char *p, size_t n) {
        char t[32];
        if (n < 19 || n >= sizeof t)
                return -1;
        memcpy(t, p, n);
        t[n] = 0;
        struct tm tm = { 0 };
        const char *e = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!e)
                return -1;
        return (int64_t)timegm(&tm);
}

/* Lists keys under prefix pfx (full key prefix): calls cb(key, mtime)
 * (mtime: LastModified in seconds since the epoch, -1 when absent). */
int s3_list_keys(struct s3 *s, CURL *c, const char *pfx, int (*cb)(const char *key, int64_t mtime, void *),
                 void *ud, char *msg, size_t msglen) {
        char token[1024] = "";
        _cleanup_free_ char *epfx = curl_easy_escape(c, pfx, 0);
        if (!epfx)
                return -ENOMEM;
        for (int pages = 0; pages < MAX_KEYS / 1000; pages++) {
                char q[2048];
                if (token[0]) {
                        _cleanup_free_ char *et = curl_easy_escape(c, token, 0);
                        if (!et)
                                return -ENOMEM;
                        snprintf(q, sizeof q, "continuation-token=%s&list-type=2&prefix=%s", et, epfx);
                } else {
                        snprintf(q, sizeof q, "list-type=2&prefix=%s", epfx);
                }
                struct s3_resp r = { 0 };
                int rc = s3_req(s, c, "GET", NULL, q, NULL, 0, NULL, &r, msg, msglen);
                if (rc == 0 && r.status == 404) {
                        s3_resp_free(&r);
                        return 0; /* no bucket: nothing listed */
                }
                if (rc == 0 && r.status != 200)
                        rc = s3_fail(s, "list", &r, msg, msglen);
                if (rc == 0 && buf_add(&r.body, "", 1) < 0)
                        rc = -ENOMEM;
                if (rc < 0) {
                        s3_resp_free(&r);
                        return rc;
                }
                const char *b = (const char *)r.body.p;
                for (const char *p = strstr(b, "<Key>"); p && rc == 0; p = strstr(p, "<Key>")) {
                        p += 5;
                        const char *e = strstr(p, "</Key>");
                        if (!e)
                                break;
                        char k[1024];
                        if ((size_t)(e - p) < sizeof k) {
                                memcpy(k, p, (size_t)(e - p));
                                k[e - p] = 0;
                                /* LastModified of this entry: before the next <Key> */
                                int64_t mt = -1;
                                const char *nk = strstr(e, "<Key>"), *lm = strstr(e, "<LastModified>");
                                if (lm && (!nk || lm < nk)) {
                                        lm += 14;
                                        const char *le = strstr(lm, "</LastModified>");
                                        if (le)
                                                mt = parse_mtime(lm, (size_t)(le - lm));
                                }
                                rc = cb(k, mt, ud);
                        }
                        p = e;
                }
                bool more = strstr(b, "<IsTruncated>true</IsTruncated>") != NULL;
                token[0] = 0;
                const char *t = strstr(b, "<NextContinuationToken>");
                if (more && t) {
                        t += 23;
                        const char *e = strstr(t, "</NextContinuationToken>");
                        if (e && (size_t)(e - t) < sizeof token) {
                                memcpy(token, t, (size_t)(e - t));
                                token[e - t] = 0;
                        }
                }
                s3_resp_free(&r);
                if (rc < 0)
                        return rc;
                if (!more || !token[0])
                        return 0;
        }
        return 0;
}
