/* SPDX-License-Identifier: MIT
 * run-python.c — the run_python tool (docs/python.md): the command and
 * environment that run the code under the embedded driver
 * (ctl/run-python-driver.py) with /usr/bin/python3 in the jail, and the
 * merge of the driver's report into the tool's result. run_tool
 * (routes-exec.c) does everything else as for any jailed tool: policy,
 * journal (the code is the effect's input), the jail, the checkpoint.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "ctl/daemon.h"
#include "ctl/run-python-driver.h"
#include "common/banned.h"

#define PY_ENV_NAME "NTFS_PY_DRIVER="

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const unsigned char *in, size_t n, char *out) {
        size_t o = 0, i = 0;
        for (; i + 2 < n; i += 3) {
                unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
                out[o++] = b64[v >> 18];
                out[o++] = b64[(v >> 12) & 63];
                out[o++] = b64[(v >> 6) & 63];
                out[o++] = b64[v & 63];
        }
        if (i < n) {
                unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0);
                out[o++] = b64[v >> 18];
                out[o++] = b64[(v >> 12) & 63];
                out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
                out[o++] = '=';
        }
        out[o] = 0;
}

static char env_entry[sizeof PY_ENV_NAME + sizeof ntfs_run_python_driver];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_init(void) {
        snprintf(env_entry, sizeof env_entry, "%s%s", PY_ENV_NAME, ntfs_run_python_driver);
}

int d_python_command(const char *code, size_t output_limit, char **ret_command, const char *const **ret_env) {
        static const char *env[] = { env_entry, NULL };
        size_t n = strlen(code);
        if (n > D_PYTHON_CODE_MAX)
                return -E2BIG;
        pthread_once(&env_once, env_init);
        size_t budget = output_limit / 16;
        if (budget < 4096)
                budget = 4096;
        static const char head[] = "exec /usr/bin/python3 -I -S -c 'import os;exec(os.environ[\"NTFS_PY_DRIVER\"])' "
                                   "/workspace ";
        size_t cap = sizeof head + 24 + (n + 2) / 3 * 4 + 1;
        char *cmd = malloc(cap);
        if (!cmd)
                return -ENOMEM;
        int w = snprintf(cmd, cap, "%s%zu ", head, budget);
        if (w < 0 || (size_t)w >= cap) {
                free(cmd);
                return -EINVAL;
        }
        b64_encode((const unsigned char *)code, n, cmd + w);
        *ret_command = cmd;
        *ret_env = env;
        return 0;
}

/* Replaces res's stdout (the driver's report) with the code's own stdout
 * and adds the report's fields. When there is no report (the jail ended
 * the run: timeout, memory, os._exit, a crash), the result says why in
 * `error` and keeps the jail's stderr. */
void d_python_result(json_t *res) {
        json_t *so = json_object_get(res, "stdout");
        json_t *rep = NULL;
        if (json_is_string(so))
                rep = json_loadb(json_string_value(so), json_string_length(so), JSON_ALLOW_NUL, NULL);
        if (json_is_object(rep) && json_is_string(json_object_get(rep, "stdout")) &&
            json_is_object(json_object_get(rep, "namespace"))) {
                json_t *jail_err = json_object_get(res, "stderr");
                if (json_is_string(jail_err) && json_string_length(jail_err) > 0) {
                        /* the interpreter's own complaints before or after the capture */
                        json_t *e = json_object_get(rep, "stderr");
                        size_t a = json_string_length(e), b = json_string_length(jail_err);
                        char *both = malloc(a + b + 1);
                        if (both) {
                                memcpy(both, json_string_value(e), a);
                                memcpy(both + a, json_string_value(jail_err), b);
                                json_object_set_new(rep, "stderr", json_stringn_nocheck(both, a + b));
                                free(both);
                        }
                }
                json_object_update(res, rep);
                json_decref(rep);
                return;
        }
        json_decref(rep);
        bool timed_out = json_is_true(json_object_get(res, "timed_out"));
        bool oom = json_is_true(json_object_get(res, "oom"));
        json_int_t code = json_integer_value(json_object_get(res, "exit_code"));
        char msg[160];
        const char *type = timed_out ? "Timeout" : oom ? "MemoryLimit" : "Ended";
        if (timed_out)
                snprintf(msg, sizeof msg, "the code did not finish within its timeout; the cache was not saved");
        else if (oom)
                snprintf(msg, sizeof msg, "the code went over the memory limit; the cache was not saved");
        else
                snprintf(msg, sizeof msg, "the interpreter ended (exit code %lld) before reporting; the cache "
                         "was not saved", (long long)code);
        json_object_set_new(res, "stdout", json_string(""));
        json_object_set_new(res, "error", json_pack("{s:s, s:s, s:s}", "type", type, "message", msg, "traceback", ""));
        json_object_set_new(res, "namespace", json_object());
        json_object_set_new(res, "omitted", json_array());
        json_object_set_new(res, "artifacts", json_array());
        json_object_set_new(res, "ui_problems", json_array());
        json_object_set_new(res, "cache_problems", json_array());
        if (code == 0)
                json_object_set_new(res, "exit_code", json_integer(125));
}
