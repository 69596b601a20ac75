/* SPDX-License-Identifier: MIT
 * egress.c — the egress proxy for jailed programs (docs/gateway.md,
 * "Egress proxy").
 *
 * One proxy per jailed run of a tool whose policy says `egress = true`:
 * ntfs_egress_start() binds a Unix socket STORE/egress/E.sock (E: the
 * run's effect id, mode 0600) and starts its accept thread; ntfs-jail
 * relays 127.0.0.1:PORT inside the jail to it (--proxy-socket). Each
 * connection gets a thread that reads one request head and either
 *   - CONNECT host:port            -> a tunnel (for https), or
 *   - METHOD http://host[:port]/p  -> one plain-HTTP request forwarded
 *                                     (Host must name the same host),
 * after the same checks as fetch_url: host on [fetch] allow_hosts, port on
 * allow_ports, and every address actually connected to outside the
 * private/loopback/link-local ranges unless the host is in private_hosts.
 * A refusal is a 403 from the proxy. Every connection, allowed or refused,
 * is recorded through the caller's recorder (the daemon makes it an effect
 * row of the run's session: ctl/egress-run.c). No credential is added (the
 * tunnel is end to end).
 * ntfs_egress_stop() stops accepting, cuts the connections still open and
 * waits for their threads.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "policy/egress.h"
#include "policy/gateway.h"
#include "common/banned.h"

#define HEAD_MAX (16 * 1024)          /* request line + headers */
#define HEAD_TIMEOUT_MS (10 * 1000)   /* first byte to the end of the head */
#define CONNECT_TIMEOUT_MS (10 * 1000)
#define IDLE_TIMEOUT_MS (300 * 1000)  /* a tunnel with no traffic either way */
#define MAX_CONNS 64                  /* per run */

struct conn {
        struct ntfs_egress *run;
        int client, upstream;
        struct conn *next;
};

struct ntfs_egress {
        char *label;
        const ntfs_policy *pol;
        struct ntfs_egress_recorder rec;
        char *path;
        int lfd;
        int stop_pipe[2];
        pthread_t acceptor;
        bool acceptor_started;
        pthread_mutex_t lock;
        pthread_cond_t idle;
        unsigned active, seq;
        struct conn *conns;
};

/* ---- small I/O helpers ------------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n) {
        const char *c = p;
        while (n > 0) {
                ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                c += w;
                n -= (size_t)w;
        }
        return 0;
}

static void reply_status(int fd, int status, const char *reason, const char *msg) {
        char buf[1024];
        int n = snprintf(buf, sizeof buf,
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\nX-Ntfs-Egress: refused\r\n\r\n%s\n",
                         status, reason, strlen(msg) + 1, msg);
        if (n > 0)
                (void)write_all(fd, buf, NTFS_MIN((size_t)n, sizeof buf - 1));
}

/* Reads until the end of the head ("\r\n\r\n"), after the *got bytes
 * buf already holds. Returns the head's length (buf holds *got >= that many
 * bytes; the rest is the body's start), 0 on EOF/timeout, -E2BIG when the
 * head is too large. */
static int read_head(int fd, char *buf, size_t cap, size_t *got) {
        int64_t deadline = ntfs_mono_ns() + (int64_t)HEAD_TIMEOUT_MS * 1000000;
        for (;;) {
                if (*got >= 4) {
                        char *e = memmem(buf, *got, "\r\n\r\n", 4);
                        if (e)
                                return (int)(e - buf + 4);
                }
                if (*got >= cap)
                        return -E2BIG;
                int64_t left = (deadline - ntfs_mono_ns()) / 1000000;
                if (left <= 0)
                        return 0;
                struct pollfd pf = { fd, POLLIN, 0 };
                int pr = poll(&pf, 1, (int)left);
                if (pr < 0 && errno == EINTR)
                        continue;
                if (pr <= 0)
                        return 0;
                ssize_t n = recv(fd, buf + *got, cap - *got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return 0;
                *got += (size_t)n;
        }
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* Splits "host:port" / "[v6]:port" / "host" into a lower-case host (no
 * brackets) and a port. Only host-name characters are accepted. */
static int split_hostport(const char *s, size_t len, unsigned defport, char *host, size_t hostlen, unsigned *port) {
        const char *h = s, *p = NULL;
        size_t hl;
        if (len > 0 && s[0] == '[') {
                const char *rb = memchr(s, ']', len);
                if (!rb)
                        return -EINVAL;
                h = s + 1;
                hl = (size_t)(rb - h);
                if ((size_t)(rb + 1 - s) < len) {
                        if (rb[1] != ':')
                                return -EINVAL;
                        p = rb + 2;
                }
        } else {
                const char *colon = memchr(s, ':', len);
                hl = colon ? (size_t)(colon - s) : len;
                if (colon)
                        p = colon + 1;
        }
        if (hl == 0 || hl >= hostlen)
                return -EINVAL;
        for (size_t i = 0; i < hl; i++) {
                unsigned char c = (unsigned char)h[i];
                if (!(isalnum(c) || c == '.' || c == '-' || c == '_' || (s[0] == '[' && c == ':')))
                        return -EINVAL;
                host[i] = (char)tolower(c);
        }
        host[hl] = 0;
        if (p) {
                size_t pl = (size_t)(s + len - p);
                char pb[8];
                uint64_t v;
                if (pl == 0 || pl >= sizeof pb)
                        return -EINVAL;
                memcpy(pb, p, pl);
                pb[pl] = 0;
                if (ntfs_parse_u64(pb, 65535, &v) < 0 || v == 0)
                        return -EINVAL;
                *port = (unsigned)v;
        } else
                *port = defport;
        return 0;
}

/* The value of header name in head (first line excluded), trimmed; NULL. */
static const char *find_header(const char *head, size_t len, const char *name, size_t *vlen) {
        size_t nl = strlen(name);
        const char *p = memchr(head, '\n', len);
        const char *end = head + len;
        while (p && p + 1 < end) {
                const char *line = p + 1;
                const char *eol = memchr(line, '\n', (size_t)(end - line));
                if (!eol)
                        break;
                if ((size_t)(eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
                        const char *v = line + nl + 1;
                        const char *ve = eol;
                        while (v < ve && (*v == ' ' || *v == '\t'))
                                v++;
                        while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                                ve--;
                        *vlen = (size_t)(ve - v);
                        return v;
                }
                p = eol;
        }
        return NULL;
}

/* How many header lines of head (first line excluded) are named name. */
static unsigned count_header(const char *head, size_t len, const char *name) {
        size_t nl = strlen(name);
        unsigned n = 0;
        const char *end = head + len;
        for (const char *p = memchr(head, '\n', len); p && p + 1 < end;
             p = memchr(p + 1, '\n', (size_t)(end - p - 1))) {
                const char *line = p + 1;
                /* a name followed by optional whitespace and ':' (a space
                 * before the colon is invalid, and a server might still
                 * take it as the header) */
                if ((size_t)(end - line) > nl && strncasecmp(line, name, nl) == 0) {
                        const char *c = line + nl;
                        while (c < end && (*c == ' ' || *c == '\t'))
                                c++;
                        if (c < end && *c == ':')
                                n++;
                }
        }
        return n;
}

/* The request's Host headers against the host and port it goes to: NULL
 * when there is exactly one naming them (a Host without a port means
 * defport), else why not. Absent is accepted only when may_omit. */
static const char *host_header_problem(const char *head, size_t len, const char *host, unsigned port,
                                       unsigned defport, bool may_omit) {
        unsigned n = count_header(head, len, "Host");
        if (n > 1)
                return "more than one Host header";
        if (n == 0)
                return may_omit ? NULL : "no Host header";
        size_t hvl = 0;
        const char *hv = find_header(head, len, "Host", &hvl);
        char hh[256];
        unsigned hp = 0;
        if (!hv || split_hostport(hv, hvl, defport, hh, sizeof hh, &hp) < 0 || strcmp(hh, host) != 0 || hp != port)
                return "the Host header does not name the target";
        return NULL;
}

/* Writes a request head to the host: the request line given, the head's
 * header lines but the hop-by-hop and proxy ones, and `Connection: close`,
 * so the connection carries this one request. */
static int send_head(int up, const char *reqline, size_t rl, const char *head, size_t hl, uint64_t *sent) {
        _cleanup_free_ char *out = malloc(HEAD_MAX + 64 + rl);
        if (!out)
                return -ENOMEM;
        size_t len = 0;
        memcpy(out, reqline, rl);
        len = rl;
        const char *eol = memmem(head, hl, "\r\n", 2);
        const char *line = eol ? eol + 2 : head + hl;
        const char *hend = head + hl - 2; /* the final empty line */
        while (line < hend) {
                const char *le = memmem(line, (size_t)(hend - line), "\r\n", 2);
                if (!le)
                        break;
                size_t ll = (size_t)(le - line) + 2;
                static const char *const drop[] = { "proxy-connection:", "proxy-authorization:", "connection:",
                                                    "keep-alive:", "te:", "upgrade:" };
                bool skip = false;
                for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
                        if (strncasecmp(line, drop[i], strlen(drop[i])) == 0)
                                skip = true;
                if (!skip && len + ll < HEAD_MAX + 40 + rl) {
                        memcpy(out + len, line, ll);
                        len += ll;
                }
                line = le + 2;
        }
        static const char closing[] = "Connection: close\r\n\r\n";
        memcpy(out + len, closing, sizeof closing - 1);
        len += sizeof closing - 1;
        *sent += len;
        return write_all(up, out, len);
}

/* Checks "METHOD SP TARGET SP HTTP/1.x" as the head's first line; its
 * parts through the pointers. */
static bool request_line(const char *buf, size_t hl, const char **eol, const char **sp1, const char **sp2) {
        *eol = memchr(buf, '\r', hl);
        if (!*eol)
                return false;
        *sp1 = memchr(buf, ' ', (size_t)(*eol - buf));
        *sp2 = *sp1 ? memchr(*sp1 + 1, ' ', (size_t)(*eol - *sp1 - 1)) : NULL;
        return *sp1 && *sp2 && *sp1 != buf && *sp2 != *sp1 + 1 && (size_t)(*eol - *sp2 - 1) == 8 &&
               strncmp(*sp2 + 1, "HTTP/1.", 7) == 0 && (size_t)(*sp1 - buf) <= 16;
}

/* ---- the checks and the connection to the host ------------------------------------------ */

/* Resolves host and connects to the first address the rules allow.
 * Returns the socket, or a negative error with why filled:
 * -NTFS_EDENIED (every address restricted), -NTFS_EUPSTREAM. */
static int connect_upstream(const ntfs_policy *pol, const char *host, unsigned port, char *addr_out,
                            size_t addrlen, char *why, size_t whylen) {
        char ps[8];
        snprintf(ps, sizeof ps, "%u", port);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
        int g = getaddrinfo(host, ps, &hints, &res);
        if (g != 0) {
                snprintf(why, whylen, "cannot resolve host '%s': %s", host, gai_strerror(g));
                return -NTFS_EUPSTREAM;
        }
        bool private_ok = ntfs_policy_private_allowed(pol, host);
        bool tried = false;
        char denied[INET6_ADDRSTRLEN] = "";
        snprintf(why, whylen, "cannot connect to '%s' port %u", host, port);
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                const void *ip = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                 : ai->ai_family == AF_INET6
                                         ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                         : NULL;
                if (!ip)
                        continue;
                char a[INET6_ADDRSTRLEN] = "?";
                inet_ntop(ai->ai_family, ip, a, sizeof a);
                if (!private_ok && ntfs_gateway_address_restricted(ai->ai_family, ip)) {
                        snprintf(denied, sizeof denied, "%s", a);
                        continue;
                }
                tried = true;
                int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        continue;
                int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
                if (r < 0 && errno == EINPROGRESS) {
                        struct pollfd pf = { fd, POLLOUT, 0 };
                        int pr;
                        while ((pr = poll(&pf, 1, CONNECT_TIMEOUT_MS)) < 0 && errno == EINTR)
                                ;
                        int so = ETIMEDOUT;
                        socklen_t sl = sizeof so;
                        if (pr == 1)
                                getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
                        r = so ? -1 : 0;
                        errno = so;
                }
                if (r == 0) {
                        int fl = fcntl(fd, F_GETFL);
                        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
                        snprintf(addr_out, addrlen, "%s", a);
                        freeaddrinfo(res);
                        return fd;
                }
                snprintf(why, whylen, "cannot connect to '%s' (%s) port %u: %s", host, a, port, strerror(errno));
                close(fd);
        }
        freeaddrinfo(res);
        if (denied[0] && !tried) {
                snprintf(why, whylen, "address %s of host '%s' is private, loopback or link-local "
                                      "(fetch.private_hosts)", denied, host);
                return -NTFS_EDENIED;
        }
        return -NTFS_EUPSTREAM;
}

/* Copies both ways until both sides are done (or idle too long). */
static void relay(int a, int b, uint64_t *up, uint64_t *down) {
        bool a_open = true, b_open = true;
        char buf[65536];
        while (a_open || b_open) {
                struct pollfd pf[2] = { { a_open ? a : -1, POLLIN, 0 }, { b_open ? b : -1, POLLIN, 0 } };
                int pr = poll(pf, 2, IDLE_TIMEOUT_MS);
                if (pr < 0 && errno == EINTR)
                        continue;
                if (pr <= 0)
                        return;
                for (int i = 0; i < 2; i++) {
                        if (!pf[i].revents)
                                continue;
                        int from = i == 0 ? a : b, to = i == 0 ? b : a;
                        ssize_t n = recv(from, buf, sizeof buf, 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0 || write_all(to, buf, (size_t)n) < 0) {
                                if (i == 0)
                                        a_open = false;
                                else
                                        b_open = false;
                                shutdown(to, SHUT_WR);
                                if (i == 1) /* the host is done: nothing more can come back */
                                        return;
                                continue;
                        }
                        *(i == 0 ? up : down) += (uint64_t)n;
                }
        }
}

/* ---- one connection ------------------------------------------------------------------------ */

static void record_finish(struct ntfs_egress *run, int64_t id, bool ok, json_t *result, const char *reason) {
        if (id > 0)
                run->rec.finish(run->rec.ctx, id, ok, result, reason);
}

static int64_t record_begin(struct ntfs_egress *run, const char *method, const char *host, unsigned port) {
        pthread_mutex_lock(&run->lock);
        unsigned n = ++run->seq;
        pthread_mutex_unlock(&run->lock);
        return run->rec.begin(run->rec.ctx, n, method, host, port);
}

/* A request refused before any connection: recorded, answered, logged. */
__attribute__((format(printf, 7, 8))) static void refuse(struct ntfs_egress *run, int fd, const char *method,
                                                         const char *host, unsigned port, int status,
                                                         const char *fmt, ...) {
        char why[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        int64_t id = record_begin(run, method, host, port);
        json_t *res = json_pack("{s:i, s:s}", "status", status, "refused", why);
        record_finish(run, id, false, res, why);
        json_decref(res);
        char msg[600];
        snprintf(msg, sizeof msg, "ntfs egress: %s", why);
        reply_status(fd, status, status == 400 ? "Bad Request" : "Forbidden", msg);
        log_info("egress %s: %s %s:%u refused: %s", run->label, method, host, port, why);
}

/* The start of a CONNECT tunnel, once the client has its 200. TLS (a
 * handshake record, 0x16, first) and a host that speaks first pass as they
 * are. Anything else the client sends first must be one plain HTTP request
 * head, origin-form, whose single Host names the CONNECT target: it goes on
 * as one request (Connection: close, as a forwarded one), so a tunnel to an
 * allowed name cannot carry a request for another virtual host. Otherwise
 * the client gets a 400 inside the tunnel, *refused says why and nothing
 * reaches the host. buf holds the have bytes the client sent after the
 * CONNECT head and has room for HEAD_MAX. Returns 0 or a write error. */
static int tunnel_start(int fd, int up, const char *host, unsigned port, char *buf, size_t have, uint64_t *sent,
                        const char **refused) {
        *refused = NULL;
        if (have == 0) {
                struct pollfd pf[2] = { { fd, POLLIN, 0 }, { up, POLLIN, 0 } };
                int pr;
                while ((pr = poll(pf, 2, IDLE_TIMEOUT_MS)) < 0 && errno == EINTR)
                        ;
                if (pr <= 0 || pf[1].revents || !(pf[0].revents & POLLIN))
                        return 0; /* the host speaks first (or a side is gone): relay as is */
                ssize_t n;
                while ((n = recv(fd, buf, HEAD_MAX, 0)) < 0 && errno == EINTR)
                        ;
                if (n <= 0)
                        return 0;
                have = (size_t)n;
        }
        if ((unsigned char)buf[0] == 0x16) {
                *sent += have;
                return write_all(up, buf, have);
        }
        size_t got = have;
        int hl = read_head(fd, buf, HEAD_MAX, &got);
        const char *eol = NULL, *sp1 = NULL, *sp2 = NULL;
        if (hl == -E2BIG)
                *refused = "request head too large inside the tunnel";
        else if (hl <= 0 || !request_line(buf, (size_t)hl, &eol, &sp1, &sp2))
                *refused = "neither TLS nor an HTTP request inside the tunnel";
        else if (sp1[1] != '/' && !(sp1[1] == '*' && sp2 == sp1 + 2))
                *refused = "a request inside a tunnel must name a path, not a URL";
        else
                *refused = host_header_problem(buf, (size_t)hl, host, port, port, false);
        if (*refused) {
                char msg[300];
                snprintf(msg, sizeof msg, "ntfs egress: %s (CONNECT %s:%u)", *refused, host, port);
                reply_status(fd, 400, "Bad Request", msg);
                return 0;
        }
        int r = send_head(up, buf, (size_t)(eol - buf) + 2, buf, (size_t)hl, sent);
        if (r == 0 && got > (size_t)hl) {
                *sent += got - (size_t)hl;
                r = write_all(up, buf + hl, got - (size_t)hl);
        }
        return r;
}

static void handle(struct conn *c) {
        struct ntfs_egress *run = c->run;
        int fd = c->client;
        _cleanup_free_ char *buf = malloc(HEAD_MAX);
        if (!buf)
                return;
        size_t got = 0;
        int hl = read_head(fd, buf, HEAD_MAX, &got);
        if (hl == -E2BIG) {
                reply_status(fd, 431, "Request Header Fields Too Large", "ntfs egress: request head too large");
                return;
        }
        if (hl <= 0)
                return;
        /* Request line: METHOD SP TARGET SP HTTP/1.x */
        const char *eol, *sp1, *sp2;
        if (!request_line(buf, (size_t)hl, &eol, &sp1, &sp2)) {
                reply_status(fd, 400, "Bad Request", "ntfs egress: malformed request line");
                return;
        }
        char method[17];
        memcpy(method, buf, (size_t)(sp1 - buf));
        method[sp1 - buf] = 0;
        const char *target = sp1 + 1;
        size_t tl = (size_t)(sp2 - target);
        bool tunnel = strcmp(method, "CONNECT") == 0;
        char host[256];
        unsigned port = 0;
        const char *path = NULL; /* plain http: origin-form target */
        size_t path_len = 0;
        char why[512] = "";
        int status = 0;
        if (tunnel) {
                if (split_hostport(target, tl, 0, host, sizeof host, &port) < 0 || port == 0) {
                        reply_status(fd, 400, "Bad Request", "ntfs egress: CONNECT needs host:port");
                        return;
                }
                /* A Host header, if any (HTTP/1.0 clients omit it), names
                 * the CONNECT target; never two. */
                const char *bad = host_header_problem(buf, (size_t)hl, host, port, port, true);
                if (bad) {
                        refuse(run, fd, method, host, port, 400, "%s (CONNECT %s:%u)", bad, host, port);
                        return;
                }
        } else {
                if (tl < 8 || strncasecmp(target, "http://", 7) != 0) {
                        reply_status(fd, 400, "Bad Request",
                                     "ntfs egress: plain requests need an absolute http:// URL "
                                     "(use CONNECT for https)");
                        return;
                }
                const char *auth = target + 7;
                const char *slash = memchr(auth, '/', tl - 7);
                const char *q = memchr(auth, '?', tl - 7);
                const char *aend = slash ? slash : target + tl;
                if (q && q < aend)
                        aend = q;
                if (memchr(auth, '@', (size_t)(aend - auth)) ||
                    split_hostport(auth, (size_t)(aend - auth), 80, host, sizeof host, &port) < 0) {
                        reply_status(fd, 400, "Bad Request", "ntfs egress: bad host in the URL");
                        return;
                }
                path = slash ? slash : "/";
                path_len = slash ? (size_t)(target + tl - slash) : 1;
                /* Exactly one Host, naming the URL's host (no fronting
                 * another virtual host, no second Host for the server to
                 * pick instead). */
                if (count_header(buf, (size_t)hl, "Host") > 1) {
                        refuse(run, fd, method, host, port, 400, "more than one Host header");
                        return;
                }
                if (host_header_problem(buf, (size_t)hl, host, port, 80, false)) {
                        refuse(run, fd, method, host, port, 403, "Host header does not match the URL's host '%s'",
                               host);
                        return;
                }
        }
        int64_t id = record_begin(run, method, host, port);
        int64_t t0 = ntfs_mono_ns();
        int err = 0;
        if (!ntfs_policy_host_allowed(run->pol, host)) {
                snprintf(why, sizeof why, "host '%s' not in fetch.allow_hosts", host);
                err = -NTFS_EDENIED;
        } else if (!ntfs_policy_port_allowed(run->pol, port)) {
                snprintf(why, sizeof why, "port %u of host '%s' not in fetch.allow_ports", port, host);
                err = -NTFS_EDENIED;
        }
        char addr[INET6_ADDRSTRLEN] = "";
        int up = -1;
        if (!err) {
                up = connect_upstream(run->pol, host, port, addr, sizeof addr, why, sizeof why);
                if (up < 0)
                        err = up;
        }
        if (err) {
                status = err == -NTFS_EDENIED ? 403 : 502;
                json_t *res = json_pack("{s:i, s:s}", "status", status, "refused", why);
                record_finish(run, id, false, res, why);
                json_decref(res);
                char msg[600];
                snprintf(msg, sizeof msg, "ntfs egress: %s", why);
                reply_status(fd, status, status == 403 ? "Forbidden" : "Bad Gateway", msg);
                log_info("egress %s: %s %s:%u refused: %s", run->label, method, host, port, why);
                return;
        }
        pthread_mutex_lock(&run->lock);
        c->upstream = up;
        pthread_mutex_unlock(&run->lock);
        uint64_t bytes_up = 0, bytes_down = 0;
        int wr = 0;
        const char *refused = NULL;
        if (tunnel) {
                static const char ok[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
                wr = write_all(fd, ok, sizeof ok - 1);
                if (wr == 0) {
                        size_t have = got - (size_t)hl;
                        memmove(buf, buf + hl, have);
                        wr = tunnel_start(fd, up, host, port, buf, have, &bytes_up, &refused);
                }
        } else {
                /* origin-form request line, hop-by-hop and proxy headers dropped, one request */
                char rl[HEAD_MAX + 32];
                int n = snprintf(rl, sizeof rl, "%s %.*s %.8s\r\n", method, (int)path_len, path, sp2 + 1);
                wr = n < 0 || (size_t)n >= sizeof rl ? -E2BIG : send_head(up, rl, (size_t)n, buf, (size_t)hl, &bytes_up);
                if (wr == 0 && got > (size_t)hl)
                        wr = write_all(up, buf + hl, got - (size_t)hl);
                bytes_up += got > (size_t)hl ? got - (size_t)hl : 0;
        }
        if (wr == 0 && !refused)
                relay(fd, up, &bytes_up, &bytes_down);
        pthread_mutex_lock(&run->lock);
        c->upstream = -1;
        pthread_mutex_unlock(&run->lock);
        close(up);
        json_t *res = json_pack("{s:s, s:s, s:I, s:I, s:I}", "mode", tunnel ? "tunnel" : "forward", "address", addr,
                                "bytes_up", (json_int_t)bytes_up, "bytes_down", (json_int_t)bytes_down,
                                "duration_ms", (json_int_t)((ntfs_mono_ns() - t0) / 1000000));
        if (refused && res) {
                json_object_set_new(res, "status", json_integer(400));
                json_object_set_new(res, "refused", json_string(refused));
        }
        record_finish(run, id, wr == 0 && !refused, res,
                      refused ? refused : wr == 0 ? NULL : "write to the host failed");
        if (refused)
                log_info("egress %s: %s %s:%u refused inside the tunnel: %s", run->label, method, host, port,
                         refused);
        json_decref(res);
        log_debug("egress %s: %s %s:%u via %s, %" PRIu64 " up, %" PRIu64 " down", run->label, method, host, port,
                  addr, bytes_up, bytes_down);
}

static void *conn_main(void *arg) {
        struct conn *c = arg;
        struct ntfs_egress *run = c->run;
        handle(c);
        pthread_mutex_lock(&run->lock);
        for (struct conn **p = &run->conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        close(c->client);
        free(c);
        if (--run->active == 0)
                pthread_cond_broadcast(&run->idle);
        pthread_mutex_unlock(&run->lock);
        return NULL;
}

static void *accept_main(void *arg) {
        struct ntfs_egress *run = arg;
        for (;;) {
                struct pollfd pf[2] = { { run->lfd, POLLIN, 0 }, { run->stop_pipe[0], POLLIN, 0 } };
                int pr = poll(pf, 2, -1);
                if (pr < 0) {
                        if (errno == EINTR)
                                continue;
                        return NULL;
                }
                if (pf[1].revents)
                        return NULL;
                int fd = accept4(run->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                pthread_mutex_lock(&run->lock);
                if (run->active >= MAX_CONNS) {
                        pthread_mutex_unlock(&run->lock);
                        reply_status(fd, 503, "Service Unavailable", "ntfs egress: too many connections");
                        close(fd);
                        continue;
                }
                struct conn *c = calloc(1, sizeof *c);
                pthread_t t;
                pthread_attr_t at;
                bool ok = c != NULL && pthread_attr_init(&at) == 0;
                if (ok) {
                        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                        c->run = run;
                        c->client = fd;
                        c->upstream = -1;
                        c->next = run->conns;
                        run->conns = c;
                        run->active++;
                        if (pthread_create(&t, &at, conn_main, c) != 0) {
                                run->conns = c->next;
                                run->active--;
                                ok = false;
                        }
                        pthread_attr_destroy(&at);
                }
                pthread_mutex_unlock(&run->lock);
                if (!ok) {
                        free(c);
                        close(fd);
                }
        }
}

/* ---- the run ---------------------------------------------------------------------------- */

void ntfs_egress_stop(struct ntfs_egress *run) {
        if (!run)
                return;
        if (run->acceptor_started) {
                char b = 1;
                while (write(run->stop_pipe[1], &b, 1) < 0 && errno == EINTR)
                        ;
                pthread_join(run->acceptor, NULL);
        }
        pthread_mutex_lock(&run->lock);
        for (struct conn *c = run->conns; c; c = c->next) {
                shutdown(c->client, SHUT_RDWR);
                if (c->upstream >= 0)
                        shutdown(c->upstream, SHUT_RDWR);
        }
        while (run->active > 0)
                pthread_cond_wait(&run->idle, &run->lock);
        pthread_mutex_unlock(&run->lock);
        if (run->lfd >= 0)
                close(run->lfd);
        if (run->stop_pipe[0] >= 0)
                close(run->stop_pipe[0]);
        if (run->stop_pipe[1] >= 0)
                close(run->stop_pipe[1]);
        if (run->path)
                unlink(run->path);
        pthread_mutex_destroy(&run->lock);
        pthread_cond_destroy(&run->idle);
        free(run->path);
        free(run->label);
        free(run);
}

int ntfs_egress_start(const struct ntfs_egress_cfg *cfg, struct ntfs_egress **ret, const char **ret_path) {
        struct ntfs_egress *run = calloc(1, sizeof *run);
        if (!run)
                return -ENOMEM;
        run->lfd = run->stop_pipe[0] = run->stop_pipe[1] = -1;
        pthread_mutex_init(&run->lock, NULL);
        pthread_cond_init(&run->idle, NULL);
        run->pol = cfg->pol;
        run->rec = cfg->rec;
        run->label = strdup(cfg->label);
        const char *dir = cfg->dir;
        char path[PATH_MAX];
        int r = 0;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                r = -errno;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int n = snprintf(path, sizeof path, "%s/%" PRId64 ".sock", dir, cfg->id);
        if (r == 0 && (n < 0 || (size_t)n >= sizeof sa.sun_path))
                r = -ENAMETOOLONG;
        if (r == 0 && (!run->label || !(run->path = strdup(path))))
                r = -ENOMEM;
        if (r == 0 && pipe2(run->stop_pipe, O_CLOEXEC) < 0)
                r = -errno;
        if (r == 0 && (run->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
                r = -errno;
        if (r == 0) {
                memcpy(sa.sun_path, path, (size_t)n + 1);
                (void)unlink(path); /* a stale one of a crashed daemon */
                /* No umask games (other threads create files): the 0700
                 * directory keeps everyone else out until the chmod. */
                if (bind(run->lfd, (struct sockaddr *)&sa, sizeof sa) < 0)
                        r = -errno;
        }
        if (r == 0 && chmod(path, 0600) < 0)
                r = -errno;
        if (r == 0 && listen(run->lfd, 64) < 0)
                r = -errno;
        if (r == 0) {
                if (pthread_create(&run->acceptor, NULL, accept_main, run) != 0)
                        r = -EAGAIN;
                else
                        run->acceptor_started = true;
        }
        if (r < 0) {
                ntfs_egress_stop(run);
                return r;
        }
        *ret = run;
        *ret_path = run->path;
        return 0;
}
