/* SPDX-License-Identifier: MIT
 * client.h — a small client of ntfsd's control socket (HTTP/1.1 over the
 * Unix socket, responses parsed by http-parser; no libcurl: its libraries
 * cost every short-lived ntfs-ctl more than the call), for ntfs-ctl,
 * ntfs-agent and ntfs-mcp.
 *
 *   ntfs_client *c;
 *   ntfs_client_new("/run/ntfs/ntfsd.sock", &c);
 *   struct ntfs_client_response res = { 0 };
 *   r = ntfs_client_request(c, "POST", "/v1/sessions", body, &res);
 *   if (r < 0)                   -> transport failure (no daemon, timeout)
 *   else if (res.status >= 400)  -> ntfs_client_error(&res, &code, &msg)
 *   ntfs_client_response_release(&res);
 *
 * Lifecycle: one ntfs_client per thread (it is not thread-safe); it keeps the
 * connection alive between requests (one the server closed while idle is
 * replaced, and the request sent again, only when not a byte of an answer
 * came on it). ntfs_client_free() accepts NULL. No global state.
 */
#ifndef NTFS_CTL_CLIENT_CLIENT_H
#define NTFS_CTL_CLIENT_CLIENT_H

#include <jansson.h>
#include <stddef.h>

typedef struct ntfs_client ntfs_client;

#define NTFS_CLIENT_DEFAULT_TIMEOUT_MS 60000u
#define NTFS_CLIENT_DEFAULT_MAX_RESPONSE (64u * 1024 * 1024)

struct ntfs_client_response {
        long status;
        json_t *json;      /* parsed when the body is JSON (owned; NULL otherwise) */
        char *body;        /* raw body, NUL-terminated (owned; "" when empty) */
        size_t body_len;
        char content_type[128];
};

/* The socket programs use when not told: $NTFS_SOCKET, else
 * $NTFS_STORE/ntfsd.sock, else ./.store/ntfsd.sock (ntfsd's defaults).
 * Returns the environment's string, buf, or a literal. */
const char *ntfs_client_default_socket(char *buf, size_t len);
int ntfs_client_new(const char *socket_path, ntfs_client **ret);
void ntfs_client_free(ntfs_client *c);
/* Whole-request timeout (0 = none). Default 60 s. */
void ntfs_client_set_timeout(ntfs_client *c, unsigned ms);
/* A bigger response body fails with -E2BIG. Default 64 MiB. */
void ntfs_client_set_max_response(ntfs_client *c, size_t bytes);

/* Sends method + path (already percent-encoded; may hold a query) with body
 * serialized as JSON (borrowed; NULL sends no body). Returns 0 when a
 * response arrived, whatever its status, and fills *ret (release it with
 * ntfs_client_response_release). Errors: -ENOENT (no socket file),
 * -ECONNREFUSED (nobody listens), -EACCES, -NTFS_ETIMEOUT, -E2BIG, -EPROTO
 * (not HTTP), -EIO (other transport failure), -ENOMEM. */
int ntfs_client_request(ntfs_client *c, const char *method, const char *path, const json_t *body,
                        struct ntfs_client_response *ret);
/* Same with a raw body and its content type. */
int ntfs_client_request_raw(ntfs_client *c, const char *method, const char *path, const char *content_type,
                            const void *body, size_t len, struct ntfs_client_response *ret);
void ntfs_client_response_release(struct ntfs_client_response *r);

/* Convenience: 0 for a 2xx answer (*ret_json gets the parsed body, owned,
 * possibly NULL), or the negative error the server named: the stable code is
 * mapped back to -NTFS_E* / -errno (-EIO when unknown), and the code and
 * message are copied to errbuf as "code: message". Transport errors as
 * above. ret_json and errbuf may be NULL. */
int ntfs_client_call(ntfs_client *c, const char *method, const char *path, const json_t *body,
                     json_t **ret_json, char *errbuf, size_t errlen);

/* Streams a 2xx response body to fd (EINTR-safe writes) without holding it
 * in memory; the status goes to *ret_status. For a non-2xx answer nothing
 * is written to fd and *ret (may be NULL) gets the error response. Returns
 * 0 when a response arrived; transport errors as above; -errno when writing
 * to fd failed. */
int ntfs_client_download(ntfs_client *c, const char *method, const char *path, const json_t *body, int fd,
                         long *ret_status, struct ntfs_client_response *ret);

/* Protocol upgrade on a new connection of its own (e.g. the streaming exec,
 * docs/protocol.md): POST path with body (JSON, borrowed), 'Connection:
 * Upgrade' and 'Upgrade: protocol'. On 101, *ret_fd is the connected
 * socket (the caller's, to close) speaking that protocol, and *ret_pre
 * (malloc'd, *ret_pre_len bytes, may be NULL) what the server sent past
 * the head; ret->status is 101. Any other answer fills *ret as a request
 * would (*ret_fd stays -1). Returns 0 when an answer arrived; transport
 * errors as for ntfs_client_request (the client's timeout bounds the wait
 * for the head only). */
int ntfs_client_upgrade(ntfs_client *c, const char *path, const json_t *body, const char *protocol, int *ret_fd,
                        void **ret_pre, size_t *ret_pre_len, struct ntfs_client_response *ret);

/* From an error response {"error":{"code","message"}}: borrowed pointers
 * (valid while r lives). Returns 0, or -ENOENT when r holds no such object
 * (code and message then describe the status, e.g. "http_502"). */
int ntfs_client_error(const struct ntfs_client_response *r, const char **code, const char **message);

/* Maps a stable error code back to the project's negative error
 * (-NTFS_ENOSESSION for "session_not_found"), -EIO when unknown. */
int ntfs_client_errcode_parse(const char *code);

/* Percent-encodes one path segment (everything but unreserved characters)
 * into buf. Returns the length or -ENAMETOOLONG. */
int ntfs_client_escape(const char *segment, char *buf, size_t len);

#endif
