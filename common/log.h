/* SPDX-License-Identifier: MIT
 * log.h — the one small logger. Programs set the level and the sinks;
 * libraries log only at DEBUG (they report errors by return value).
 * Never pass a credential to these functions.
 *
 * Sinks: stderr (the default), a file (ntfs_log_open_file: appended to,
 * reopened by ntfs_log_reopen, e.g. on SIGHUP) and the systemd journal
 * (ntfs_log_open_journal: the native protocol, one datagram of KEY=VALUE
 * lines per message, with the thread's context as fields SESSION,
 * REQUEST_ID and EFFECT_ID). docs/operations.md, "Logs".
 */
#ifndef NTFS_COMMON_LOG_H
#define NTFS_COMMON_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum ntfs_log_level { NTFS_LOG_ERROR = 0, NTFS_LOG_WARN, NTFS_LOG_INFO, NTFS_LOG_DEBUG };

void ntfs_log_set_level(enum ntfs_log_level lvl);
/* Parses "error|warn|info|debug"; returns -EINVAL for anything else. */
int ntfs_log_parse_level(const char *s, enum ntfs_log_level *ret);
enum ntfs_log_level ntfs_log_get_level(void);
void ntfs_log(enum ntfs_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Also appends every line to path (created 0640). Returns 0 or -errno. */
int ntfs_log_open_file(const char *path);
/* Reopens the log file (after a rotation); 0 when there is none. */
int ntfs_log_reopen(void);
/* Sends every message to the journal's socket (NULL: $NTFS_JOURNAL_SOCKET,
 * a test's own socket, else /run/systemd/journal/socket) instead of
 * stderr. ident is SYSLOG_IDENTIFIER. Returns 0 or -errno. */
int ntfs_log_open_journal(const char *socket_path, const char *ident);
/* True when $JOURNAL_STREAM names the file stderr is (systemd connected
 * stderr to the journal). */
bool ntfs_log_stderr_is_journal(void);
/* Closes the file and the journal socket (at exit). */
void ntfs_log_close(void);

/* The calling thread's context, given to every message it logs: copied;
 * NULL or 0 clears one field. */
void ntfs_log_ctx_request(uint64_t request_id);
void ntfs_log_ctx_session(const char *session);
void ntfs_log_ctx_effect(const char *effect_id);
void ntfs_log_ctx_clear(void);

/* Request ids, numbered from 1 in the process. */
uint64_t ntfs_log_next_request_id(void);
/* The one info line of an answered request: "http METHOD PATH STATUS
 * N.NNNms" (the time since t_begin, monotonic ns; 0: unknown), then clears
 * the thread's context. new_id: the request had no id yet. */
void ntfs_log_request(bool new_id, const char *method, const char *path, int status, int64_t t_begin);

#define log_error(...) ntfs_log(NTFS_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) ntfs_log(NTFS_LOG_WARN, __VA_ARGS__)
#define log_info(...) ntfs_log(NTFS_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                          \
        do {                                                    \
                if (ntfs_log_get_level() >= NTFS_LOG_DEBUG)     \
                        ntfs_log(NTFS_LOG_DEBUG, __VA_ARGS__);  \
        } while (0)

#endif
