/* SPDX-License-Identifier: MIT
 * log.h — the one small logger. Programs set the level and the sink;
 * libraries log only at DEBUG (they report errors by return value).
 * Never pass a credential to these functions.
 */
#ifndef NTFS_COMMON_LOG_H
#define NTFS_COMMON_LOG_H

enum ntfs_log_level { NTFS_LOG_ERROR = 0, NTFS_LOG_WARN, NTFS_LOG_INFO, NTFS_LOG_DEBUG };

void ntfs_log_set_level(enum ntfs_log_level lvl);
/* Parses "error|warn|info|debug"; returns -EINVAL for anything else. */
int ntfs_log_parse_level(const char *s, enum ntfs_log_level *ret);
enum ntfs_log_level ntfs_log_get_level(void);
void ntfs_log(enum ntfs_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) ntfs_log(NTFS_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) ntfs_log(NTFS_LOG_WARN, __VA_ARGS__)
#define log_info(...) ntfs_log(NTFS_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                          \
        do {                                                    \
                if (ntfs_log_get_level() >= NTFS_LOG_DEBUG)     \
                        ntfs_log(NTFS_LOG_DEBUG, __VA_ARGS__);  \
        } while (0)

#endif
