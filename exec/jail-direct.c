/* SPDX-License-Identifier: MIT
 * jail-direct.c — a command that needs no shell, run without bash: which
 * commands qualify (plain_words), the execve in P2 (exec_direct), and the
 * state reported for it (direct_state_raw).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "exec/jail-internal.h"
#include "exec/jail-helper.h"
#include "common/banned.h"

/* ---- direct exec --------------------------------------------------------
 * bash costs a start-up and the epilogue that saves the shell state. A
 * command that cannot change that state and needs nothing of the shell is
 * execve'd directly instead: a plain sequence of words made only of
 * characters no shell treats specially (so no quoting, expansion, globbing,
 * redirection, assignment, list or comment can be in it), whose first word
 * is not a builtin or keyword (those run inside the shell: cd, export, ...).
 * `true` and `false` without arguments are the exception: their programs do
 * exactly what the builtins do. Anything else goes through bash, as does a
 * direct command whose program cannot be exec'd (bash then reports it as it
 * would: "command not found", a script without #!, ...). */
#define DIRECT_WORDS_MAX 256

static bool plain_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               strchr("_./:,+=@%-", c) != NULL;
}

static bool shell_word(const char *w) {
        static const char *const words[] = {
                /* bash 5.2: compgen -b */
                ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen",
                "complete", "compopt", "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec",
                "exit", "export", "false", "fc", "fg", "getopts", "hash", "help", "history", "jobs", "kill", "let",
                "local", "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly",
                "return", "set", "shift", "shopt", "source", "suspend", "test", "times", "trap", "true", "type",
                "typeset", "ulimit", "umask", "unalias", "unset", "wait",
                /* compgen -k */
                "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done",
                "in", "function", "time", "{", "}", "!", "[[", "]]", "coproc",
        };
        for (size_t i = 0; i < ARRAY_SIZE(words); i++)
                if (strcmp(w, words[i]) == 0)
                        return true;
        return false;
}

/* The NULL-terminated words of cmd when it can run without a shell, else
 * NULL (also when out of memory: bash is always correct). The array has one
 * more slot past the NULL, which holds the buffer the words point into;
 * plain_words_free frees both. */
char **plain_words(const char *cmd) {
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)cmd; *p; p++) {
                if (*p == ' ' || *p == '\t')
                        continue;
                if (!plain_char(*p))
                        return NULL;
                if (p == (const unsigned char *)cmd || p[-1] == ' ' || p[-1] == '\t')
                        n++;
        }
        if (n == 0 || n > DIRECT_WORDS_MAX)
                return NULL;
        char **w = calloc(n + 2, sizeof *w);
        char *copy = strdup(cmd);
        if (!w || !copy) {
                free(w);
                free(copy);
                return NULL;
        }
        size_t k = 0;
        for (char *save = NULL, *t = strtok_r(copy, " \t", &save); t && k < n; t = strtok_r(NULL, " \t", &save))
                w[k++] = t;
        w[n + 1] = copy;
        bool ok = k == n && !strchr(w[0], '=');
        if (ok && shell_word(w[0]))
                ok = n == 1 && (strcmp(w[0], "true") == 0 || strcmp(w[0], "false") == 0);
        if (!ok) {
                free(copy);
                free(w);
                return NULL;
        }
        return w;
}

void plain_words_free(char **w) {
        if (!w)
                return;
        size_t n = 0;
        while (w[n])
                n++;
        free(w[n + 1]);
        free(w);
}

/* P2, after seccomp: execve the direct command's program the way bash
 * would find it (a word with '/' as is, else each absolute directory of
 * the PATH the command will see), with the variables bash adds for a
 * program it runs (PWD, SHLVL, _). *direct_ran is a page shared with P1:
 * set across each execve, so after a successful one P1 knows the command
 * ran without the shell. Returns when nothing could be exec'd, or an error
 * other than "not there"; the caller then runs it through bash. */
void exec_direct(char *const *words, char **env, const char *cwd, volatile int *direct_ran) {
        size_t n = 0, pwd_at = SIZE_MAX;
        const char *path = "";
        for (; env[n]; n++)
                if (strncmp(env[n], "PATH=", 5) == 0)
                        path = env[n] + 5;
                else if (strncmp(env[n], "PWD=", 4) == 0)
                        pwd_at = n;
        static char pwd[PATH_MAX + 8], under[PATH_MAX + 8];
        snprintf(pwd, sizeof pwd, "PWD=%s", cwd);
        if (pwd_at != SIZE_MAX) /* build_env's, for bash: this one is the same, in its place */
                env[pwd_at] = pwd;
        else
                env[n++] = pwd;
        env[n] = (char *)"SHLVL=1";
        env[n + 1] = under;
        env[n + 2] = NULL;
        char prog[PATH_MAX];
        const char *p = path;
        for (;;) {
                if (strchr(words[0], '/')) {
                        if (snprintf(prog, sizeof prog, "%s", words[0]) >= (int)sizeof prog)
                                return;
                } else {
                        size_t l = strcspn(p, ":");
                        /* An empty or relative PATH entry means the cwd: bash's business. */
                        if (l == 0 || p[0] != '/' || l + 1 + strlen(words[0]) >= sizeof prog)
                                return;
                        memcpy(prog, p, l);
                        prog[l] = '/';
                        memcpy(prog + l + 1, words[0], strlen(words[0]) + 1);
                        p += l;
                }
                snprintf(under, sizeof under, "_=%s", prog);
                *direct_ran = 1;
                execve(prog, words, env);
                *direct_ran = 0;
                if (strchr(words[0], '/') || (errno != ENOENT && errno != ENOTDIR && errno != EACCES &&
                                              errno != ELOOP && errno != ENAMETOOLONG))
                        return;
                if (*p != ':')
                        return;
                p++;
        }
}

/* The raw state record (as the shell epilogue writes it) of a command that
 * ran without the shell: it could not change the state, so it is the one
 * the command started with, exported variables in bash's (sorted) order. */
static int cmp_env(const void *x, const void *y) {
        const char *a = *(const char *const *)x, *b = *(const char *const *)y;
        size_t la = strcspn(a, "="), lb = strcspn(b, "=");
        int c = memcmp(a, b, NTFS_MIN(la, lb));
        return c ? c : (la > lb) - (la < lb);
}

size_t env_count(char *const *env) {
        size_t n = 0;
        while (env[n])
                n++;
        return n;
}

int direct_state_raw(const char *cwd, char **env, struct jbuf *b) {
        size_t n = env_count(env);
        qsort(env, n, sizeof *env, cmp_env);
        int r = jbuf_printf(b, "cwd=%s", cwd);
        if (r >= 0)
                r = jbuf_put(b, "", 1);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                r = jbuf_printf(b, "env=%s", env[i]);
                if (r >= 0)
                        r = jbuf_put(b, "", 1);
        }
        return r;
}
