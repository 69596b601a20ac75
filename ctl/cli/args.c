/* SPDX-License-Identifier: MIT
 * ntfs-ctl's argument parsing: the global options, one generic parser that
 * fills a struct args from a command's flags and positional bounds, and the
 * flag and number accessors the commands use.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

static int flag_index(const struct cmd *cmd, const char *lng) {
        for (int i = 0; cmd->flags && cmd->flags[i].lng; i++)
                if (strcmp(cmd->flags[i].lng, lng) == 0)
                        return i;
        return -1;
}

const char *flag(const struct cmd *cmd, const struct args *a, const char *lng) {
        int i = flag_index(cmd, lng);
        return i >= 0 && a->set[i] ? a->val[i] : NULL;
}

bool has_flag(const struct cmd *cmd, const struct args *a, const char *lng) {
        return flag(cmd, a, lng) != NULL;
}

/* Parses a count with optional K/M/G/T (binary) suffix. */
int parse_size(const char *s, uint64_t *ret) {
        size_t n = strlen(s);
        if (n == 0 || n > 32)
                return -EINVAL;
        char num[40];
        memcpy(num, s, n + 1);
        uint64_t mul = 1;
        char last = num[n - 1];
        const char *suf = "KMGT";
        const char *p = last ? strchr(suf, last >= 'a' ? last - 32 : last) : NULL;
        if (p) {
                for (const char *q = suf; q <= p; q++)
                        mul *= 1024;
                num[n - 1] = 0;
        }
        uint64_t v;
        int r = ntfs_parse_u64(num, INT64_MAX / mul, &v);
        if (r < 0)
                return r;
        *ret = v * mul;
        return 0;
}

int parse_num_flag_range(const struct cmd *cmd, const char *flagname, const char *s, uint64_t min, uint64_t max,
                         uint64_t *ret) {
        int r = ntfs_parse_u64(s, max, ret);
        if (r < 0 || *ret < min)
                return usage_error(cmd, "--%s needs a number from %" PRIu64 " to %" PRIu64 ", not '%s'", flagname, min,
                                   max, s);
        return 0;
}

int parse_num_flag(const struct cmd *cmd, const char *flagname, const char *s, uint64_t max, uint64_t *ret) {
        return parse_num_flag_range(cmd, flagname, s, 0, max, ret);
}

/* ---- argument parsing ------------------------------------------------------------ */

/* Global flags are accepted anywhere before "--". */
int take_global(struct ctx *c, int argc, char **argv, int *i, bool *handled) {
        const char *w = argv[*i];
        *handled = true;
        if (strcmp(w, "--json") == 0) {
                c->json = true;
                return 0;
        }
        if (strcmp(w, "--socket") == 0) {
                if (*i + 1 >= argc)
                        return -EINVAL;
                c->socket = argv[++*i];
                return 0;
        }
        if (strncmp(w, "--socket=", 9) == 0) {
                c->socket = w + 9;
                return 0;
        }
        *handled = false;
        return 0;
}

enum parse_result parse_args(struct ctx *c, const struct cmd *cmd, int argc, char **argv, struct args *a) {
        for (int i = 0; i < argc; i++) {
                const char *w = argv[i];
                if (strlen(w) > MAX_ARG_BYTES && !(cmd->wants_rest && a->dashdash)) {
                        usage_error(cmd, "an argument is longer than %u bytes", MAX_ARG_BYTES);
                        return PARSE_USAGE;
                }
                if (strcmp(w, "--") == 0) {
                        a->dashdash = true;
                        if (cmd->wants_rest) {
                                a->rest = argv + i + 1;
                                a->nrest = argc - i - 1;
                                break;
                        }
                        for (i++; i < argc; i++) {
                                if (a->npos >= MAX_POS) {
                                        usage_error(cmd, "too many arguments");
                                        return PARSE_USAGE;
                                }
                                a->pos[a->npos++] = argv[i];
                        }
                        break;
                }
                if (strcmp(w, "--help") == 0 || strcmp(w, "-h") == 0)
                        return PARSE_HELP;
                bool handled;
                if (take_global(c, argc, argv, &i, &handled) < 0) {
                        usage_error(cmd, "--socket needs a value");
                        return PARSE_USAGE;
                }
                if (handled)
                        continue;
                if (w[0] == '-' && w[1] != 0) {
                        int fi = -1;
                        const char *val = NULL;
                        if (w[1] == '-') {
                                const char *eq = strchr(w + 2, '=');
                                size_t n = eq ? (size_t)(eq - w - 2) : strlen(w + 2);
                                for (int k = 0; cmd->flags[k].lng; k++)
                                        if (strlen(cmd->flags[k].lng) == n && strncmp(cmd->flags[k].lng, w + 2, n) == 0)
                                                fi = k;
                                if (fi >= 0 && eq) {
                                        if (!cmd->flags[fi].arg) {
                                                usage_error(cmd, "--%s takes no value", cmd->flags[fi].lng);
                                                return PARSE_USAGE;
                                        }
                                        val = eq + 1;
                                }
                        } else {
                                for (int k = 0; cmd->flags[k].lng; k++)
                                        if (cmd->flags[k].shrt && cmd->flags[k].shrt == w[1])
                                                fi = k;
                                if (fi >= 0 && w[2] != 0) {
                                        if (!cmd->flags[fi].arg) {
                                                usage_error(cmd, "-%c takes no value", w[1]);
                                                return PARSE_USAGE;
                                        }
                                        val = w + 2; /* -mMESSAGE, -n5 */
                                }
                        }
                        if (fi < 0) {
                                usage_error(cmd, "unknown option '%s'", w);
                                return PARSE_USAGE;
                        }
                        if (a->set[fi]) {
                                usage_error(cmd, "--%s given twice", cmd->flags[fi].lng);
                                return PARSE_USAGE;
                        }
                        if (cmd->flags[fi].arg && !val) {
                                if (i + 1 >= argc) {
                                        usage_error(cmd, "--%s needs a value", cmd->flags[fi].lng);
                                        return PARSE_USAGE;
                                }
                                val = argv[++i];
                                if (strlen(val) > MAX_ARG_BYTES) {
                                        usage_error(cmd, "an argument is longer than %u bytes", MAX_ARG_BYTES);
                                        return PARSE_USAGE;
                                }
                        }
                        a->set[fi] = true;
                        a->val[fi] = val ? val : "";
                        continue;
                }
                if (a->npos >= MAX_POS || a->npos >= cmd->max_pos) {
                        usage_error(cmd, "unexpected argument '%s'", w);
                        return PARSE_USAGE;
                }
                a->pos[a->npos++] = w;
        }
        if (a->npos < cmd->min_pos) {
                usage_error(cmd, "missing argument");
                return PARSE_USAGE;
        }
        if (a->npos > cmd->max_pos) {
                usage_error(cmd, "too many arguments");
                return PARSE_USAGE;
        }
        return PARSE_OK;
}
