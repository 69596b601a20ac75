/* SPDX-License-Identifier: MIT */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/banned.h"

#define JOURNAL_SOCKET "/run/systemd/journal/socket"
#define MSG_MAX 8192

static enum ntfs_log_level level = NTFS_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;          /* under log_lock */
static char *log_file_path;     /* under log_lock */
static int journal_fd = -1;     /* under log_lock */
static struct sockaddr_un journal_addr;
static socklen_t journal_addr_len;
static char journal_ident[64] = "ntfs";

static _Thread_local uint64_t ctx_request;
static _Thread_local char ctx_session[256];
static _Thread_local char ctx_effect[80];

void ntfs_log_set_level(enum ntfs_log_level lvl) { level = lvl; }
enum ntfs_log_level ntfs_log_get_level(void) { return level; }

int ntfs_log_parse_level(const char *s, enum ntfs_log_level *ret) {
        static const char *names[] = { "error", "warn", "info", "debug" };
        for (int i = 0; i < 4; i++)
                if (strcmp(s, names[i]) == 0) {
                        *ret = (enum ntfs_log_level)i;
                        return 0;
                }
        return -EINVAL;
}

void ntfs_log_ctx_request(uint64_t request_id) { ctx_request = request_id; }

static void ctx_copy(char *dst, size_t len, const char *src) {
        dst[0] = 0;
        if (!src)
                return;
        size_t n = strnlen(src, len - 1);
        memcpy(dst, src, n);
        dst[n] = 0;
        for (size_t i = 0; i < n; i++) /* one line, one field */
                if (dst[i] == '\n' || dst[i] == '\r')
                        dst[i] = '?';
}

void ntfs_log_ctx_session(const char *session) { ctx_copy(ctx_session, sizeof ctx_session, session); }
void ntfs_log_ctx_effect(const char *effect_id) { ctx_copy(ctx_effect, sizeof ctx_effect, effect_id); }

void ntfs_log_ctx_clear(void) {
        ctx_request = 0;
        ctx_session[0] = 0;
        ctx_effect[0] = 0;
}

static FILE *open_append(const char *path, int *err) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
        if (fd < 0) {
                *err = -errno;
                return NULL;
        }
        FILE *f = fdopen(fd, "a");
        if (!f) {
                *err = -errno;
                close(fd);
                return NULL;
        }
        setvbuf(f, NULL, _IOLBF, 0);
        return f;
}

int ntfs_log_open_file(const char *path) {
        int err = 0;
        FILE *f = open_append(path, &err);
        if (!f)
                return err;
        char *p = strdup(path);
        if (!p) {
                fclose(f);
                return -ENOMEM;
        }
        pthread_mutex_lock(&log_lock);
        FILE *old = log_file;
        free(log_file_path);
        log_file = f;
        log_file_path = p;
        pthread_mutex_unlock(&log_lock);
        if (old)
                fclose(old);
        return 0;
}

int ntfs_log_reopen(void) {
        pthread_mutex_lock(&log_lock);
        int err = 0;
        if (log_file_path) {
                FILE *f = open_append(log_file_path, &err);
                if (f) {
                        fclose(log_file);
                        log_file = f;
                } /* else: the old file stays, the caller reports */
        }
        pthread_mutex_unlock(&log_lock);
        return err;
}

int ntfs_log_open_journal(const char *socket_path, const char *ident) {
        if (!socket_path)
                socket_path = getenv("NTFS_JOURNAL_SOCKET");
        if (!socket_path || !*socket_path)
                socket_path = JOURNAL_SOCKET;
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        size_t n = strlen(socket_path);
        if (n >= sizeof a.sun_path)
                return -ENAMETOOLONG;
        memcpy(a.sun_path, socket_path, n + 1);
        /* the socket must be there: a missing journal is said at start */
        struct stat sb;
        if (stat(socket_path, &sb) < 0)
                return -errno;
        if (!S_ISSOCK(sb.st_mode))
                return -ENOTSOCK;
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int sz = 1 << 20; /* best effort: long messages */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        pthread_mutex_lock(&log_lock);
        if (journal_fd >= 0)
                close(journal_fd);
        journal_fd = fd;
        journal_addr = a;
        journal_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        if (ident) {
                size_t il = strnlen(ident, sizeof journal_ident - 1);
                memcpy(journal_ident, ident, il);
                journal_ident[il] = 0;
        }
        pthread_mutex_unlock(&log_lock);
        return 0;
}

bool ntfs_log_stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        if (!e || !*e)
                return false;
        unsigned long long dev, ino;
        if (sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        struct stat sb;
        if (fstat(STDERR_FILENO, &sb) < 0)
                return false;
        return (unsigned long long)sb.st_dev == dev && (unsigned long long)sb.st_ino == ino;
}

void ntfs_log_close(void) {
        pthread_mutex_lock(&log_lock);
        if (log_file)
                fclose(log_file);
        log_file = NULL;
        free(log_file_path);
        log_file_path = NULL;
        if (journal_fd >= 0)
                close(journal_fd);
        journal_fd = -1;
        pthread_mutex_unlock(&log_lock);
}

/* One datagram of the native protocol (systemd.journal-fields(7)): a field
 * whose value may hold a newline is "KEY\n", a little-endian u64 length,
 * the bytes, "\n". Called with log_lock held. Returns 0 or -errno. */
static int journal_send(enum ntfs_log_level lvl, const char *msg) {
        static const int prio[] = { 3, 4, 6, 7 };
        char head[768];
        int hl = snprintf(head, sizeof head, "PRIORITY=%d\nSYSLOG_IDENTIFIER=%s\nSYSLOG_PID=%d\n", prio[lvl],
                          journal_ident, (int)getpid());
        if (hl < 0 || (size_t)hl >= sizeof head)
                return -EINVAL;
        char tail[512];
        size_t tl = 0;
        int w;
        if (ctx_session[0]) {
                w = snprintf(tail + tl, sizeof tail - tl, "SESSION=%s\n", ctx_session);
                tl += w > 0 && (size_t)w < sizeof tail - tl ? (size_t)w : 0;
        }
        if (ctx_request) {
                w = snprintf(tail + tl, sizeof tail - tl, "REQUEST_ID=%" PRIu64 "\n", ctx_request);
                tl += w > 0 && (size_t)w < sizeof tail - tl ? (size_t)w : 0;
        }
        if (ctx_effect[0]) {
                w = snprintf(tail + tl, sizeof tail - tl, "EFFECT_ID=%s\n", ctx_effect);
                tl += w > 0 && (size_t)w < sizeof tail - tl ? (size_t)w : 0;
        }
        uint64_t ml = strlen(msg);
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
                le[i] = (uint8_t)(ml >> (8 * i));
        struct iovec iov[] = {
                { head, (size_t)hl },   { (void *)"MESSAGE\n", 8 }, { le, 8 }, { (void *)msg, (size_t)ml },
                { (void *)"\n", 1 },    { tail, tl },
        };
        struct msghdr mh = { .msg_name = &journal_addr, .msg_namelen = journal_addr_len, .msg_iov = iov,
                             .msg_iovlen = sizeof iov / sizeof iov[0] };
        return sendmsg(journal_fd, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static void write_line(FILE *f, const char *prefix, const char *msg) {
        fputs(prefix, f);
        fputs(msg, f);
        if (ctx_request || ctx_session[0] || ctx_effect[0]) {
                fputs(" {", f);
                const char *sep = "";
                if (ctx_request) {
                        fprintf(f, "request=%" PRIu64, ctx_request);
                        sep = " ";
                }
                if (ctx_session[0]) {
                        fprintf(f, "%ssession=%s", sep, ctx_session);
                        sep = " ";
                }
                if (ctx_effect[0])
                        fprintf(f, "%seffect=%s", sep, ctx_effect);
                fputc('}', f);
        }
        fputc('\n', f);
}

void ntfs_log(enum ntfs_log_level lvl, const char *fmt, ...) {
        static const char *tags[] = { "error", "warn", "info", "debug" };
        if (lvl > level)
                return;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
        char msg[MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s.%03ld ntfs %s: ", stamp, ts.tv_nsec / 1000000, tags[lvl]);
        pthread_mutex_lock(&log_lock);
        /* the journal instead of stderr; stderr again when it cannot be reached */
        if (journal_fd < 0 || journal_send(lvl, msg) < 0)
                write_line(stderr, prefix, msg);
        if (log_file) {
                char day[16];
                strftime(day, sizeof day, "%Y-%m-%d", &tm);
                char fprefix[80];
                snprintf(fprefix, sizeof fprefix, "%sT%s", day, prefix);
                write_line(log_file, fprefix, msg);
        }
        pthread_mutex_unlock(&log_lock);
}

static _Atomic uint64_t next_request_id;

uint64_t ntfs_log_next_request_id(void) { return atomic_fetch_add(&next_request_id, 1) + 1; }

void ntfs_log_request(bool new_id, const char *method, const char *path, int status, int64_t t_begin) {
        if (new_id)
                ctx_request = ntfs_log_next_request_id();
        if (level >= NTFS_LOG_INFO) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
                double ms = t_begin ? (double)(now - t_begin) / 1e6 : 0;
                ntfs_log(NTFS_LOG_INFO, "http %s %.200s %d %.3fms", method, path, status, ms);
        }
        ntfs_log_ctx_clear();
}
