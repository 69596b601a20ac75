/* SPDX-License-Identifier: MIT */
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/banned.h"

void ntfs_hex(const uint8_t *in, size_t len, char *out) {
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < len; i++) {
                out[2 * i] = digits[in[i] >> 4];
                out[2 * i + 1] = digits[in[i] & 15];
        }
        out[2 * len] = 0;
}

int ntfs_hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int ntfs_unhex(const char *in, uint8_t *out, size_t len) {
        for (size_t i = 0; i < len; i++) {
                int hi = ntfs_hexval(in[2 * i]);
                if (hi < 0)
                        return -EINVAL;
                int lo = ntfs_hexval(in[2 * i + 1]);
                if (lo < 0)
                        return -EINVAL;
                out[i] = (uint8_t)(hi << 4 | lo);
        }
        return in[2 * len] == 0 ? 0 : -EINVAL;
}

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
size_t ntfs_utf8_seq_len(const void *p, size_t n) {
        const unsigned char *s = p;
        if (n == 0)
                return 0;
        unsigned char c = s[0];
        size_t need;
        uint32_t cp;
        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                need = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
                need = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
                need = 4, cp = c & 0x07;
        else
                return 0;
        if (n < need)
                return 0;
        for (size_t i = 1; i < need; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                return 0;
        return need;
}

static bool utf8_valid(const unsigned char *s, size_t n) {
        for (size_t i = 0; i < n;) {
                size_t l = ntfs_utf8_seq_len(s + i, n - i);
                if (l == 0)
                        return false;
                i += l;
        }
        return true;
}

bool ntfs_text_clean(const void *p, size_t n) {
        const unsigned char *s = p;
        return memchr(s, 0, n) == NULL && utf8_valid(s, n);
}

int ntfs_text_lossy(const void *p, size_t n, char **ret, size_t *ret_len) {
        const unsigned char *s = p;
        /* every byte becomes at most 3 (U+FFFD) */
        if (n > (SIZE_MAX - 1) / 3)
                return -ENOMEM;
        char *out = malloc(3 * n + 1), *o = out;
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n;) {
                size_t l = s[i] ? ntfs_utf8_seq_len(s + i, n - i) : 0;
                if (l == 0) {
                        memcpy(o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                } else {
                        memcpy(o, s + i, l);
                        o += l;
                        i += l;
                }
        }
        *o = 0;
        *ret = out;
        if (ret_len)
                *ret_len = (size_t)(o - out);
        return 0;
}

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int ntfs_base64_encode(const void *p, size_t n, char **ret, size_t *ret_len) {
        const unsigned char *s = p;
        if (n > (SIZE_MAX - 5) / 4 * 3)
                return -ENOMEM;
        size_t len = (n + 2) / 3 * 4;
        char *out = malloc(len + 1), *o = out;
        if (!out)
                return -ENOMEM;
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
                *o++ = b64_alphabet[v >> 18];
                *o++ = b64_alphabet[(v >> 12) & 63];
                *o++ = b64_alphabet[(v >> 6) & 63];
                *o++ = b64_alphabet[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
                *o++ = b64_alphabet[v >> 18];
                *o++ = b64_alphabet[(v >> 12) & 63];
                *o++ = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
                *o++ = '=';
        }
        *o = 0;
        *ret = out;
        if (ret_len)
                *ret_len = len;
        return 0;
}

int ntfs_base64_decode(const char *in, size_t n, char **ret, size_t *ret_len) {
        if (n % 4)
                return -EINVAL;
        char *out = malloc(n / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < n; i += 4) {
                uint32_t v = 0;
                int pad = 0;
                for (size_t k = 0; k < 4; k++) {
                        char c = in[i + k];
                        const char *q = c ? memchr(b64_alphabet, c, 64) : NULL;
                        /* '=' only as the last one or two characters of the text */
                        if (c == '=' && i + 4 == n && (k == 3 || (k == 2 && in[i + 3] == '='))) {
                                pad++;
                                v <<= 6;
                                continue;
                        }
                        if (!q || pad) {
                                free(out);
                                return -EINVAL;
                        }
                        v = v << 6 | (uint32_t)(q - b64_alphabet);
                }
                out[o++] = (char)(v >> 16);
                if (pad < 2)
                        out[o++] = (char)(v >> 8);
                if (pad < 1)
                        out[o++] = (char)v;
        }
        out[o] = 0;
        *ret = out;
        if (ret_len)
                *ret_len = o;
        return 0;
}

bool ntfs_name_valid(const char *s) {
        if (!s)
                return false;
        size_t n = strnlen(s, NTFS_NAME_MAX + 1);
        if (n == 0 || n > NTFS_NAME_MAX)
                return false;
        if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return false;
        if (s[0] == ' ' || s[n - 1] == ' ' || s[0] == '-')
                return false;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x20 || c == 0x7f || c == '/' || c == '@' || c == ':')
                        return false;
        }
        return utf8_valid((const unsigned char *)s, n);
}

int64_t ntfs_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t ntfs_mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int ntfs_write_file_durable(const char *path, const void *buf, size_t len, int mode) {
        char tmp[PATH_MAX];
        int n = snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        if (n < 0 || (size_t)n >= sizeof tmp)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0)
                return -errno;
        const char *p = buf;
        size_t left = len;
        while (left > 0) {
                ssize_t w = write(fd, p, left);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        int r = -errno;
                        unlink(tmp);
                        return r;
                }
                p += w;
                left -= (size_t)w;
        }
        if (fsync(fd) < 0) {
                int r = -errno;
                unlink(tmp);
                return r;
        }
        if (rename(tmp, path) < 0) {
                int r = -errno;
                unlink(tmp);
                return r;
        }
        /* fsync the directory so the rename itself is durable. */
        char dir[PATH_MAX];
        n = snprintf(dir, sizeof dir, "%s", path);
        if (n < 0 || (size_t)n >= sizeof dir)
                return -ENAMETOOLONG;
        char *slash = strrchr(dir, '/');
        if (slash == dir)
                slash[1] = 0;
        else if (slash)
                *slash = 0;
        else {
                dir[0] = '.';
                dir[1] = 0;
        }
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        if (fsync(dfd) < 0)
                return -errno;
        return 0;
}

int ntfs_write_attr(const char *path, const char *val) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t l = strlen(val);
        ssize_t w;
        do
                w = write(fd, val, l);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return -errno;
        return (size_t)w == l ? 0 : -EIO;
}

int ntfs_read_file(const char *path, size_t max, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* Read up to max+1 bytes so a file of exactly max bytes is accepted
         * and a bigger one is detected. */
        size_t cap = NTFS_MIN((size_t)4096, max + 1), len = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len == cap) {
                        if (cap > max)
                                return -EFBIG;
                        size_t ncap = NTFS_MIN(cap * 2, max + 1);
                        char *nb = realloc(buf, ncap + 1);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                        cap = ncap;
                }
                ssize_t r = read(fd, buf + len, cap - len);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (r == 0)
                        break;
                len += (size_t)r;
        }
        if (len > max)
                return -EFBIG;
        buf[len] = 0;
        if (ret_len)
                *ret_len = len;
        *ret = TAKE_PTR(buf);
        return 0;
}

int ntfs_parse_u64(const char *s, uint64_t max, uint64_t *ret) {
        if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
                return -EINVAL;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (*end)
                return -EINVAL;
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* The store's write path allocates and frees memory in a steady rhythm:
 * LMDB mallocs each dirty page run of the batch transaction (a 64 KiB chunk
 * is one 68 KiB run) and frees it when the batch commits; a FUSE worker
 * thread gets a 1 MiB request buffer. glibc's defaults give that memory back
 * to the kernel (heap trimming at 128 KiB, a separate mmap per block over
 * the dynamic threshold, one arena per thread), so the next batch faults
 * every page in again: on a virtual machine a first touch of a page costs
 * ~14 µs, which made a 1 GiB sequential write spend more time in page
 * faults than in copying. Kept memory is bounded by what one batch
 * (BATCH_MAX_BYTES, 64 MiB) and the worker buffers use at once, per arena. */
bool ntfs_malloc_tune(void) {
        bool ok = mallopt(M_ARENA_MAX, 2) == 1;
        ok = (mallopt(M_MMAP_THRESHOLD, 4 << 20) == 1) && ok;
        ok = (mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1) && ok;
        return ok;
}

int ntfs_room_for(void **arr, size_t *cap, size_t n, size_t elem) {
        if (n < *cap)
                return 0;
        size_t nc = *cap ? *cap * 2 : 64;
        if (nc > SIZE_MAX / elem)
                return -ENOMEM;
        void *p = realloc(*arr, nc * elem);
        if (!p)
                return -ENOMEM;
        *arr = p;
        *cap = nc;
        return 0;
}

int ntfs_sd_notify(const char *state) {
        const char *e = getenv("NOTIFY_SOCKET");
        if (!e || !*e)
                return 0;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(e);
        if ((e[0] != '/' && e[0] != '@') || n >= sizeof sa.sun_path)
                return -EINVAL;
        memcpy(sa.sun_path, e, n);
        if (e[0] == '@')
                sa.sun_path[0] = 0;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/'));
        ssize_t w;
        do
                w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return -errno;
        return (size_t)w == strlen(state) ? 0 : -EIO;
}
