/* SPDX-License-Identifier: MIT
 * cleanup.h — scope-bound ownership for every resource (systemd/bubblewrap style).
 *
 *   _cleanup_free_ char *s = malloc(..);    freed at end of scope
 *   _cleanup_close_ int fd = open(..);      closed at end of scope (if >= 0)
 *   return TAKE_PTR(s);                     hands ownership on; s becomes NULL
 *
 * Every destructor accepts NULL / -1.
 */
#ifndef NTFS_COMMON_CLEANUP_H
#define NTFS_COMMON_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void ntfs_freep(void *p) { free(*(void **)p); }
static inline void ntfs_closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
static inline void ntfs_fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

#define _cleanup_free_ _cleanup_(ntfs_freep)
#define _cleanup_close_ _cleanup_(ntfs_closep)
#define _cleanup_fclose_ _cleanup_(ntfs_fclosep)

#define TAKE_PTR(p)                        \
        ({                                 \
                __typeof__(p) _tp_ = (p);  \
                (p) = NULL;                \
                _tp_;                      \
        })
#define TAKE_FD(fd)                        \
        ({                                 \
                int _tf_ = (fd);           \
                (fd) = -1;                 \
                _tf_;                      \
        })

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define NTFS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NTFS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define _unused_ __attribute__((unused))

#endif
