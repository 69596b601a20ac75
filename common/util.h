/* SPDX-License-Identifier: MIT
 * util.h — small helpers shared by every module.
 */
#ifndef NTFS_COMMON_UTIL_H
#define NTFS_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NTFS_HASH_LEN 32
#define NTFS_HEX_LEN 64
#define NTFS_NAME_MAX 255

/* SHA-256 of buf (OpenSSL libcrypto, hardware accelerated where available). */
void ntfs_sha256(const void *buf, size_t len, uint8_t out[NTFS_HASH_LEN]);
/* out must hold 2*len+1 bytes. */
void ntfs_hex(const uint8_t *in, size_t len, char *out);
/* The value of one hex digit (either case), or -1. */
int ntfs_hexval(char c);
/* Parses exactly 2*len hex digits; -EINVAL otherwise. */
int ntfs_unhex(const char *in, uint8_t *out, size_t len);

/* A valid name for a session, tag, trunk or remote: 1..255 bytes of
 * well-formed UTF-8 (names travel in JSON), no '/', '@' or ':', not "." or
 * "..", no control characters, no space at either end, no '-' first. */
bool ntfs_name_valid(const char *s);

/* Length (1..4) of the well-formed UTF-8 sequence at p (n bytes
 * available), or 0 when it is not one (bad lead byte, cut short, overlong,
 * a surrogate, above U+10FFFF). */
size_t ntfs_utf8_seq_len(const void *p, size_t n);
/* True when the n bytes are well-formed UTF-8 holding no NUL: text that a
 * JSON string carries exactly and every C client reads whole. */
bool ntfs_text_clean(const void *p, size_t n);
/* The n bytes as clean text: every NUL and every byte of an ill-formed
 * sequence becomes U+FFFD. *ret is NUL-terminated, owned by the caller.
 * 0 or -ENOMEM. */
int ntfs_text_lossy(const void *p, size_t n, char **ret, size_t *ret_len);
/* Standard base64 (RFC 4648, '+' '/', padded). *ret is NUL-terminated and
 * owned by the caller; ret_len may be NULL. encode: 0 or -ENOMEM. decode:
 * -EINVAL for a length not a multiple of 4, a character outside the
 * alphabet or misplaced padding; the decoded bytes may hold NULs (a NUL is
 * added after them). */
int ntfs_base64_encode(const void *p, size_t n, char **ret, size_t *ret_len);
int ntfs_base64_decode(const char *in, size_t n, char **ret, size_t *ret_len);

/* Nanoseconds since the epoch (CLOCK_REALTIME) and monotonic. */
int64_t ntfs_now_ns(void);
int64_t ntfs_mono_ns(void);

/* Durable write: temp file in the same directory, write, fsync, rename over
 * path, fsync the directory. Returns 0 or -errno. */
int ntfs_write_file_durable(const char *path, const void *buf, size_t len, int mode);
/* Reads a whole file up to max bytes (a bigger file is -EFBIG). *ret is
 * NUL-terminated and owned by the caller. */
int ntfs_read_file(const char *path, size_t max, char **ret, size_t *ret_len);
/* Writes val to an existing kernel attribute file (sysfs, cgroupfs,
 * fusectl) in one write(2), creating nothing. Returns 0 or -errno (-EIO for
 * a short write). */
int ntfs_write_attr(const char *path, const char *val);

/* Keeps freed heap memory in the process instead of handing it back to the
 * kernel after every batch: call once at the start of a daemon, before any
 * thread starts. Returns false if the allocator refused (a sanitizer's does;
 * harmless). See docs/store.md, "Memory". */
bool ntfs_malloc_tune(void);

/* Makes room for element n of a growing array *arr of *cap elements of
 * elem bytes (doubling, from 64): 0, or -ENOMEM with *arr untouched. Use
 * NTFS_ROOM_FOR(arr, cap, n). */
int ntfs_room_for(void **arr, size_t *cap, size_t n, size_t elem);
#define NTFS_ROOM_FOR(arr, cap, n) ntfs_room_for((void **)&(arr), &(cap), (n), sizeof *(arr))

/* Big-endian encoders used by on-disk keys. */
static inline void ntfs_put_be64(uint8_t *p, uint64_t v) {
        for (int i = 7; i >= 0; i--) {
                p[i] = (uint8_t)v;
                v >>= 8;
        }
}
static inline uint64_t ntfs_get_be64(const uint8_t *p) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
                v = (v << 8) | p[i];
        return v;
}
static inline void ntfs_put_be32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}
static inline uint32_t ntfs_get_be32(const uint8_t *p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Parses a decimal unsigned integer with bounds; -EINVAL / -ERANGE. */
int ntfs_parse_u64(const char *s, uint64_t max, uint64_t *ret);

/* Tells the service manager about this daemon (sd_notify(3)'s protocol,
 * without libsystemd): sends state ("READY=1", "STOPPING=1") as one
 * datagram to $NOTIFY_SOCKET (a path, or "@name" for the abstract
 * namespace). 0 when sent or when $NOTIFY_SOCKET is unset, else -errno. */
int ntfs_sd_notify(const char *state);

#endif
