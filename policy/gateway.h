/* SPDX-License-Identifier: MIT
 * gateway.h — the capability gateway: fetch_url and llm_generate from the
 * host, through libcurl, under the policy's rules (docs/gateway.md).
 *
 * Lifecycle: ntfs_gateway_new() borrows the policy (it must outlive the
 * gateway), resolves every credential (literal values, environment, .env
 * file) and the LLM configuration once, and returns a gateway owned by the
 * caller, released with ntfs_gateway_free() (accepts NULL). After creation a
 * gateway is read-only: calls may run concurrently from several threads
 * (each call uses its own curl handle).
 *
 * Credentials (the API key, per-host header values) are never returned in
 * a result, an error message or a log line. ntfs_gateway_secrets() lists
 * them so the journal can redact any that slipped into stored text.
 */
#ifndef NTFS_POLICY_GATEWAY_H
#define NTFS_POLICY_GATEWAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

typedef struct ntfs_gateway ntfs_gateway;

#define NTFS_LLM_DEFAULT_MODEL "claude-sonnet-4-20250514"
#define NTFS_LLM_DEFAULT_BASE_URL "https://api.anthropic.com"
#define NTFS_ANTHROPIC_VERSION "2023-06-01"

enum {
        /* Ignore the process environment; read only the .env file (tests). */
        NTFS_GATEWAY_NO_ENVIRON = 1 << 0,
};

/* env_file: a .env-style file (KEY=VALUE lines, '#' comments, optional
 * quotes, optional "export "), or NULL to use the policy's [llm] env_file
 * (if any). A missing file is an error (-ENOENT), as is a credential whose
 * value_env is set nowhere (-NTFS_ENOKEY, the message names the variable,
 * never a value). A missing ANTHROPIC_API_KEY is NOT an error here:
 * ntfs_gateway_llm_generate() then fails with -NTFS_ENOKEY.
 * Lookup order for each variable: the process environment (unless
 * NTFS_GATEWAY_NO_ENVIRON), then the .env file, then the policy's [llm]
 * settings, then the built-in default. */
int ntfs_gateway_new(const ntfs_policy *p, const char *env_file, unsigned flags, ntfs_gateway **ret,
                     char *why, size_t whylen);
void ntfs_gateway_free(ntfs_gateway *gw);

/* NULL-terminated array of every configured credential value (API key,
 * per-host header values), borrowed; lives as long as gw. */
const char *const *ntfs_gateway_secrets(const ntfs_gateway *gw);
/* The base URL and model in use (borrowed). */
const char *ntfs_gateway_llm_base_url(const ntfs_gateway *gw);
const char *ntfs_gateway_llm_model(const ntfs_gateway *gw);

/* True when an address must not be connected to without an explicit
 * allowance: unspecified, loopback, private (10/8, 172.16/12, 192.168/16),
 * CGNAT 100.64/10, link-local (169.254/16, fe80::/10), unique-local fc00::/7,
 * multicast, reserved 240/4 and broadcast, 0/8, benchmarking 198.18/15,
 * IETF 192.0.0/24; IPv4-mapped, IPv4-compatible and NAT64 (64:ff9b::/96)
 * IPv6 addresses are judged by the IPv4 address they embed.
 * family is AF_INET (addr: struct in_addr) or AF_INET6 (struct in6_addr);
 * any other family is restricted. */
bool ntfs_gateway_address_restricted(int family, const void *addr);

/* ---- fetch_url --------------------------------------------------------- */

struct ntfs_fetch_opts {
        const char *method;       /* "GET" (NULL), "HEAD" or "POST" */
        const char *body;         /* POST body (may be NULL) */
        size_t body_len;
        const char *content_type; /* POST content type (default application/octet-stream) */
        uint64_t max_bytes;       /* 0: the policy's; otherwise the smaller of both */
        uint64_t timeout_ms;      /* 0: the policy's; otherwise the smaller of both */
        bool refuse_oversize;     /* over max_bytes: fail with -NTFS_ETOOLARGE instead of truncating */
};

#define NTFS_FETCH_MAX_HEADERS 6

struct ntfs_fetch_header {
        char *name;  /* lower case: one of content-type, content-length, location, date, etag, last-modified */
        char *value;
};

struct ntfs_fetch_result {
        char *final_url;          /* the URL of the last hop (owned) */
        long status;              /* HTTP status of the last hop; 0 if none */
        struct ntfs_fetch_header headers[NTFS_FETCH_MAX_HEADERS];
        size_t n_headers;
        char *body;               /* NUL-terminated: UTF-8 text, or base64 when body_base64 */
        size_t body_len;          /* strlen(body) */
        bool body_base64;
        bool truncated;           /* the body was cut at the size limit */
        bool redacted;            /* a credential value echoed in the body was masked */
        uint64_t bytes;           /* raw body bytes kept (before base64) */
        unsigned redirects;       /* hops followed */
        uint64_t duration_ms;
        const char *error_code;   /* stable code on failure ("policy_denied"...), NULL on success */
        char error[512];          /* human message on failure (names the rule); never holds a credential */
};

/* Fetches url under the policy's fetch rules:
 *  - http and https only; no user:password@ in URLs;
 *  - the host must be on the allow-list (exact or *.suffix) and the port
 *    allowed (default 80, 443);
 *  - the address actually connected to is checked before connect():
 *    private, loopback, link-local, CGNAT, unique-local, unspecified,
 *    multicast and broadcast addresses are refused unless the URL's host is
 *    in private_hosts (or allow_private is set);
 *  - redirects (301, 302, 303, 307, 308) are followed here, at most
 *    max_redirects, each hop re-checked; credentials go only to the host
 *    they are configured for (https only unless allow_insecure);
 *  - over the size limit the body is truncated (ret->truncated), or the
 *    call fails with -NTFS_ETOOLARGE when opts->refuse_oversize;
 *  - one total deadline across hops.
 * Returns 0 (any HTTP status, including 4xx/5xx, is a success) or
 *   -NTFS_EDENIED (policy_denied), -NTFS_EUPSTREAM (upstream_error: DNS,
 *   connect, TLS, protocol), -NTFS_ETIMEOUT, -NTFS_ETOOLARGE, -NTFS_EBADREQ
 *   (malformed URL or options), -ENOMEM.
 * ret is always filled (zeroed first, error fields on failure) and must be
 * released with ntfs_fetch_result_release(), also after a failure. */
int ntfs_gateway_fetch(ntfs_gateway *gw, const char *url, const struct ntfs_fetch_opts *opts,
                       struct ntfs_fetch_result *ret);
void ntfs_fetch_result_release(struct ntfs_fetch_result *r);
/* The result as the JSON the control plane returns and the journal stores:
 * {url, status, headers:{}, body, body_encoding:"utf-8"|"base64", truncated,
 *  bytes, redirects, duration_ms}. New reference, NULL on ENOMEM. */
json_t *ntfs_fetch_result_to_json(const struct ntfs_fetch_result *r);

/* ---- llm_generate ------------------------------------------------------ */

/* One Anthropic Messages API call: POST {base_url}/v1/messages with
 * x-api-key, anthropic-version and content-type headers. request is
 * borrowed: {messages (required), model?, max_tokens?, system?, tools?,
 * tool_choice?, temperature?, top_p?, top_k?, stop_sequences?, metadata?};
 * other members are ignored; "stream" is refused. Missing model and
 * max_tokens are filled from the configuration.
 * Retries on 429, 5xx and connection failures with exponential backoff
 * (retry_base, doubling, capped at 30 s), honouring retry-after (seconds),
 * bounded by max_attempts and max_total_time.
 * On success *ret_response is the response object (new reference: id,
 * content blocks incl. tool_use, stop_reason, usage...). Errors:
 *   -NTFS_ENOKEY (no_credentials) when no API key is configured (no request
 *   is made), -NTFS_EBADREQ for a bad request object, -NTFS_EUPSTREAM for
 *   a non-retryable status, retries exhausted or a non-JSON answer,
 *   -NTFS_ETIMEOUT when the total time ran out. why (may be NULL) gets a
 *   message (status, error type and message of the API), never the key. */
int ntfs_gateway_llm_generate_ex(ntfs_gateway *gw, json_t *request, json_t **ret_response, char *why,
                                 size_t whylen);
int ntfs_gateway_llm_generate(ntfs_gateway *gw, json_t *request, json_t **ret_response);

/* Statistics of the gateway's last LLM call in this thread (tests, status). */
unsigned ntfs_gateway_llm_last_attempts(void);

#endif
