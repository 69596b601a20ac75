/* SPDX-License-Identifier: MIT
 * ntfs-ctl — the command line of ntfsd's control socket, git-style.
 *
 *   ntfs-ctl [--socket PATH] [--json] COMMAND [ARGS...]
 *
 * Every command is one or two requests through ctl/client/client.h; docs/cli.md is
 * the manual and docs/protocol.md the wire format. Exit codes: 0 success,
 * 1 the operation failed (the server refused it or could not be reached),
 * 2 usage error. `exec` exits with the command's own code instead.
 *
 * Structure (ctl/cli/): commands.c holds the table of commands (name, group,
 * synopsis, summary, help text, flags, positional bounds, handler) that
 * drives the dispatch here and every help text; args.c's one generic parser
 * fills a struct args; each handler (sessions.c, history.c, exec.c,
 * store.c, archive.c, trunk.c, remote.c) builds its request, calls the
 * daemon (request.c) and prints either the server's JSON (--json) or a
 * short human rendering (output.c). cli.h is what they share.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctl/client/client.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

#define CTL_VERSION "0.1.0"

static int run(int argc, char **argv) {
        struct ctx c = { 0 };
        char sockbuf[PATH_MAX];
        int i = 1;
        /* Global options before the command. */
        for (; i < argc; i++) {
                const char *w = argv[i];
                if (strcmp(w, "--help") == 0 || strcmp(w, "-h") == 0) {
                        cli_print_overview(stdout);
                        return 0;
                }
                if (strcmp(w, "--version") == 0) {
                        printf("ntfs-ctl %s\n", CTL_VERSION);
                        return 0;
                }
                bool handled;
                if (take_global(&c, argc, argv, &i, &handled) < 0)
                        return usage_error(NULL, "--socket needs a value");
                if (!handled)
                        break;
        }
        if (i >= argc) {
                cli_print_overview(stderr);
                return EXIT_USAGE;
        }
        if (argv[i][0] == '-')
                return usage_error(NULL, "unknown option '%s'", argv[i]);
        if (strcmp(argv[i], "help") == 0) {
                if (i + 1 >= argc) {
                        cli_print_overview(stdout);
                        return 0;
                }
                int used;
                const struct cmd *cmd = cli_lookup(argc - i - 1, argv + i + 1, &used);
                if (cmd) {
                        cli_print_command_help(stdout, cmd);
                        return 0;
                }
                if (cli_has_subcommands(argv[i + 1])) {
                        cli_print_subcommands(stdout, argv[i + 1]);
                        return 0;
                }
                return usage_error(NULL, "unknown command '%s'", argv[i + 1]);
        }
        int used = 0;
        const struct cmd *cmd = cli_lookup(argc - i, argv + i, &used);
        if (!cmd) {
                if (cli_has_subcommands(argv[i])) {
                        bool help = i + 1 < argc && (strcmp(argv[i + 1], "--help") == 0 || strcmp(argv[i + 1], "-h") == 0);
                        if (!help) {
                                if (i + 1 < argc)
                                        fprintf(stderr, "ntfs-ctl: unknown subcommand '%s %s'\n", argv[i], argv[i + 1]);
                                else
                                        fprintf(stderr, "ntfs-ctl: '%s' needs a subcommand\n", argv[i]);
                        }
                        cli_print_subcommands(help ? stdout : stderr, argv[i]);
                        return help ? 0 : EXIT_USAGE;
                }
                return usage_error(NULL, "unknown command '%s'", argv[i]);
        }
        struct args a = { 0 };
        switch (parse_args(&c, cmd, argc - i - used, argv + i + used, &a)) {
        case PARSE_HELP:
                cli_print_command_help(stdout, cmd);
                return 0;
        case PARSE_USAGE:
                return EXIT_USAGE;
        case PARSE_OK:
                break;
        }
        if (!c.socket)
                c.socket = ntfs_client_default_socket(sockbuf, sizeof sockbuf);
        int r = cmd->run(&c, cmd, &a);
        ntfs_client_free(c.client);
        return r;
}

int main(int argc, char **argv) {
        int r = run(argc, argv);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                if (r == 0) {
                        fprintf(stderr, "ntfs-ctl: cannot write the output: %s (io_error)\n", strerror(errno));
                        r = EXIT_FAIL;
                }
        }
        return r;
}
