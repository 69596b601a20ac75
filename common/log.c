/* SPDX-License-Identifier: MIT */
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/banned.h"

static enum ntfs_log_level level = NTFS_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

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
        va_list ap;
        va_start(ap, fmt);
        pthread_mutex_lock(&log_lock);
        fprintf(stderr, "%s.%03ld ntfs %s: ", stamp, ts.tv_nsec / 1000000, tags[lvl]);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        pthread_mutex_unlock(&log_lock);
        va_end(ap);
}
