/* SPDX-License-Identifier: MIT
 * ntfs-run — the supervisor (docs/agent.md): starts ntfsd and ntfs-agent as
 * two child processes, prints the session id, watches both, and restarts
 * whichever dies; the agent then resumes the same session from the journal
 * (`ntfs-agent --resume SESSION`). Restarts are bounded (--max-restarts
 * consecutive failures per process, exponential backoff), then it fails
 * clearly. The model's configuration (ANTHROPIC_API_KEY,
 * ANTHROPIC_BASE_URL, LLM_MODEL, ANTHROPIC_AUTH_TOKEN) reaches the daemon
 * only: it is scrubbed from the agent's environment.
 *
 * Exit codes: 0 the task completed; 1 failure (restarts exhausted, daemon
 * unusable); 2 usage; 3 the agent's step limit; 130/143 interrupted.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/client/client.h"
#include "common/banned.h"

extern char **environ;

#define TASK_MAX (1024 * 1024)
#define DEFAULT_MAX_RESTARTS 5
#define BACKOFF_BASE_MS 250
#define BACKOFF_MAX_MS 8000
/* A process that ran this long before dying starts its count afresh. */
#define HEALTHY_RUN_NS (10LL * 1000000000LL)
#define DAEMON_READY_TIMEOUT_S 30
#define DAEMON_STOP_TIMEOUT_S 30

/* Agent exit codes (agent/ntfs-agent.c). */
#define AGENT_DONE 0
#define AGENT_USAGE 2
#define AGENT_STEP_LIMIT 3

static const char *const scrubbed[] = { "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "LLM_MODEL",
                                        "ANTHROPIC_AUTH_TOKEN", NULL };

struct child {
        const char *what;
        pid_t pid;           /* 0: not running */
        unsigned failures;   /* consecutive */
        int64_t started_ns;  /* monotonic */
        int64_t restart_at;  /* monotonic; when to start it again */
};

struct run {
        const char *store, *sock, *policy, *env_file, *daemon_bin, *agent_bin;
        bool debug, verbose, step_mode;
        uint64_t max_restarts, max_steps;
        char session[256];
        struct child daemon, agent;
        char **agent_env;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fputs("ntfs-run: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

/* The program next to this one (or in ../SUBDIR/), else NAME for PATH. */
static char *find_prog(const char *env, const char *name, const char *subdir) {
        const char *e = getenv(env);
        if (e && *e)
                return strdup(e);
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
                self[n] = 0;
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        char p[PATH_MAX + 64];
                        snprintf(p, sizeof p, "%s/%s", self, name);
                        if (access(p, X_OK) == 0)
                                return strdup(p);
                        snprintf(p, sizeof p, "%s/../%s/%s", self, subdir, name);
                        if (access(p, X_OK) == 0)
                                return realpath(p, NULL);
                }
        }
        return strdup(name);
}

static bool scrub(const char *entry) {
        for (size_t i = 0; scrubbed[i]; i++) {
                size_t n = strlen(scrubbed[i]);
                if (strncmp(entry, scrubbed[i], n) == 0 && entry[n] == '=')
                        return true;
        }
        return strncmp(entry, "NTFS_SOCKET=", 12) == 0;
}

static char **agent_environ(const char *sock) {
        size_t n = 0;
        while (environ[n])
                n++;
        char **env = calloc(n + 2, sizeof *env);
        if (!env)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (!scrub(environ[i]))
                        env[k++] = environ[i];
        size_t len = strlen(sock) + 16;
        char *s = malloc(len);
        if (!s) {
                free(env);
                return NULL;
        }
        snprintf(s, len, "NTFS_SOCKET=%s", sock);
        env[k++] = s; /* the last entry is owned */
        env[k] = NULL;
        return env;
}

static void agent_environ_free(char **env) {
        if (!env)
                return;
        size_t n = 0;
        while (env[n])
                n++;
        if (n)
                free(env[n - 1]);
        free(env);
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int spawn(const char *prog, char *const argv[], char *const envp[], pid_t *ret) {
        posix_spawnattr_t attr;
        sigset_t none;
        sigemptyset(&none);
        posix_spawnattr_init(&attr);
        /* The child must not inherit our blocked signals. */
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
        int r = posix_spawnp(ret, prog, NULL, &attr, argv, envp);
        posix_spawnattr_destroy(&attr);
        return -r;
}

/* ---- the daemon --------------------------------------------------------------------------------- */

static bool daemon_answers(const char *sock) {
        ntfs_client *c;
        if (ntfs_client_new(sock, &c) < 0)
                return false;
        ntfs_client_set_timeout(c, 2000);
        struct ntfs_client_response res = { 0 };
        bool ok = ntfs_client_request(c, "GET", "/v1/status", NULL, &res) == 0 && res.status == 200;
        ntfs_client_response_release(&res);
        ntfs_client_free(c);
        return ok;
}

static int daemon_start(struct run *R) {
        const char *argv[16];
        size_t k = 0;
        argv[k++] = R->daemon_bin;
        argv[k++] = "--store";
        argv[k++] = R->store;
        argv[k++] = "--socket";
        argv[k++] = R->sock;
        argv[k++] = "--log-level";
        argv[k++] = R->debug ? "debug" : "warn";
        if (R->policy) {
                argv[k++] = "--policy";
                argv[k++] = R->policy;
        }
        if (R->env_file) {
                argv[k++] = "--env-file";
                argv[k++] = R->env_file;
        }
        argv[k] = NULL;
        int r = spawn(R->daemon_bin, (char *const *)argv, environ, &R->daemon.pid);
        if (r < 0) {
                R->daemon.pid = 0;
                say("cannot start %s: %s", R->daemon_bin, strerror(-r));
                return r;
        }
        R->daemon.started_ns = ntfs_mono_ns();
        if (R->verbose)
                say("ntfsd started (pid %d)", (int)R->daemon.pid);
        int64_t deadline = ntfs_mono_ns() + (int64_t)DAEMON_READY_TIMEOUT_S * 1000000000LL;
        while (ntfs_mono_ns() < deadline) {
                if (daemon_answers(R->sock))
                        return 0;
                int st;
                if (waitpid(R->daemon.pid, &st, WNOHANG) == R->daemon.pid) {
                        R->daemon.pid = 0;
                        say("ntfsd exited during startup (%s %d)", WIFEXITED(st) ? "status" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                        return -ECHILD;
                }
                sleep_ms(50);
        }
        say("ntfsd did not answer on %s within %d s", R->sock, DAEMON_READY_TIMEOUT_S);
        kill(R->daemon.pid, SIGKILL);
        while (waitpid(R->daemon.pid, NULL, 0) < 0 && errno == EINTR)
                ;
        R->daemon.pid = 0;
        return -NTFS_ETIMEOUT;
}

static void child_stop(struct child *c, int sig, unsigned timeout_s) {
        if (c->pid <= 0)
                return;
        kill(c->pid, sig);
        int64_t deadline = ntfs_mono_ns() + (int64_t)timeout_s * 1000000000LL;
        for (;;) {
                pid_t p = waitpid(c->pid, NULL, WNOHANG);
                if (p == c->pid || (p < 0 && errno != EINTR))
                        break;
                if (ntfs_mono_ns() > deadline) {
                        kill(c->pid, SIGKILL);
                        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                        break;
                }
                sleep_ms(20);
        }
        c->pid = 0;
}

/* ---- the session -------------------------------------------------------------------------------- */

static int session_create(struct run *R, const char *task) {
        ntfs_client *c;
        char err[1024];
        int r = ntfs_client_new(R->sock, &c);
        if (r < 0)
                return r;
        ntfs_client_set_timeout(c, 60000);
        json_t *o = NULL;
        json_t *body = json_object();
        r = ntfs_client_call(c, "POST", "/session/start", body, &o, err, sizeof err);
        json_decref(body);
        const char *s = json_string_value(json_object_get(o, "session_id"));
        if (r < 0 || !s || strlen(s) >= sizeof R->session) {
                say("cannot start a session: %s", r < 0 ? err : "no session_id");
                json_decref(o);
                ntfs_client_free(c);
                return r < 0 ? r : -EPROTO;
        }
        snprintf(R->session, sizeof R->session, "%s", s);
        json_decref(o);
        /* The task is the first message of the saved history, so that the
         * agent always starts with --resume, the first time as after a crash. */
        char path[600], esc[512];
        if ((r = ntfs_client_escape(R->session, esc, sizeof esc)) < 0) {
                ntfs_client_free(c);
                return r;
        }
        if (R->step_mode) {
                snprintf(path, sizeof path, "/v1/sessions/%s/step", esc);
                body = json_pack("{s:{s:s, s:s}}", "event", "type", "user_message", "content", task);
        } else {
                snprintf(path, sizeof path, "/v1/sessions/%s/state", esc);
                body = json_pack("{s:[{s:s, s:s}], s:i, s:i}", "messages", "role", "user", "content", task, "cursor",
                                 1, "step", 0);
        }
        r = body ? ntfs_client_call(c, "POST", path, body, NULL, err, sizeof err) : -ENOMEM;
        json_decref(body);
        ntfs_client_free(c);
        if (r < 0) {
                say("cannot save the task in session %s: %s", R->session, err);
                return r;
        }
        return 0;
}

static int session_check(struct run *R) {
        ntfs_client *c;
        char err[1024], path[600], esc[512];
        int r = ntfs_client_new(R->sock, &c);
        if (r < 0)
                return r;
        if ((r = ntfs_client_escape(R->session, esc, sizeof esc)) < 0) {
                ntfs_client_free(c);
                return r;
        }
        snprintf(path, sizeof path, "/v1/sessions/%s", esc);
        r = ntfs_client_call(c, "GET", path, NULL, NULL, err, sizeof err);
        ntfs_client_free(c);
        if (r < 0)
                say("cannot resume session %s: %s", R->session, err);
        return r;
}

/* ---- the agent ---------------------------------------------------------------------------------- */

static int agent_start(struct run *R) {
        char steps[32];
        const char *argv[16];
        size_t k = 0;
        argv[k++] = R->agent_bin;
        argv[k++] = "--socket";
        argv[k++] = R->sock;
        argv[k++] = "--resume";
        argv[k++] = R->session;
        if (R->step_mode)
                argv[k++] = "--step";
        if (R->max_steps) {
                snprintf(steps, sizeof steps, "%" PRIu64, R->max_steps);
                argv[k++] = "--max-steps";
                argv[k++] = steps;
        }
        if (R->verbose)
                argv[k++] = "-v";
        argv[k] = NULL;
        int r = spawn(R->agent_bin, (char *const *)argv, R->agent_env, &R->agent.pid);
        if (r < 0) {
                R->agent.pid = 0;
                say("cannot start %s: %s", R->agent_bin, strerror(-r));
                return r;
        }
        R->agent.started_ns = ntfs_mono_ns();
        if (R->verbose)
                say("ntfs-agent started (pid %d) on session %s", (int)R->agent.pid, R->session);
        return 0;
}

/* Counts a death; false when the restarts are exhausted. */
static bool schedule_restart(struct run *R, struct child *c) {
        int64_t now = ntfs_mono_ns();
        if (now - c->started_ns >= HEALTHY_RUN_NS)
                c->failures = 0;
        c->failures++;
        if (c->failures > R->max_restarts)
                return false;
        uint64_t ms = BACKOFF_BASE_MS;
        for (unsigned i = 1; i < c->failures && ms < BACKOFF_MAX_MS; i++)
                ms *= 2;
        if (ms > BACKOFF_MAX_MS)
                ms = BACKOFF_MAX_MS;
        c->restart_at = now + (int64_t)ms * 1000000LL;
        say("%s died; restart %u of %" PRIu64 " in %" PRIu64 " ms", c->what, c->failures, R->max_restarts, ms);
        return true;
}

static void describe(char *buf, size_t len, int st) {
        if (WIFEXITED(st))
                snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
                snprintf(buf, len, "signal %d", WTERMSIG(st));
        else
                snprintf(buf, len, "status %d", st);
}

/* ---- supervision -------------------------------------------------------------------------------- */

static int supervise(struct run *R, const sigset_t *sigs) {
        for (;;) {
                struct timespec ts = { 0, 100 * 1000000L };
                int sig = sigtimedwait(sigs, NULL, &ts);
                if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
                        say("signal %d: stopping (resume later with: ntfs-run --resume %s)", sig, R->session);
                        child_stop(&R->agent, SIGTERM, 10);
                        child_stop(&R->daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                        return 128 + sig;
                }
                int st;
                char how[64];
                if (R->daemon.pid > 0 && waitpid(R->daemon.pid, &st, WNOHANG) == R->daemon.pid) {
                        R->daemon.pid = 0;
                        describe(how, sizeof how, st);
                        say("ntfsd exited (%s)", how);
                        if (!schedule_restart(R, &R->daemon)) {
                                say("ntfsd keeps dying (%u times in a row); giving up. Resume later with: "
                                    "ntfs-run --resume %s", R->daemon.failures, R->session);
                                child_stop(&R->agent, SIGTERM, 10);
                                return 1;
                        }
                }
                if (R->agent.pid > 0 && waitpid(R->agent.pid, &st, WNOHANG) == R->agent.pid) {
                        R->agent.pid = 0;
                        describe(how, sizeof how, st);
                        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                        if (code == AGENT_DONE || code == AGENT_USAGE || code == AGENT_STEP_LIMIT) {
                                child_stop(&R->daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                                if (code == AGENT_DONE)
                                        say("session %s done", R->session);
                                else
                                        say("ntfs-agent stopped (%s) in session %s", how, R->session);
                                return code == AGENT_DONE ? 0 : code == AGENT_STEP_LIMIT ? 3 : 1;
                        }
                        say("ntfs-agent exited (%s)", how);
                        if (!schedule_restart(R, &R->agent)) {
                                say("ntfs-agent keeps failing (%u times in a row); giving up. Resume later with: "
                                    "ntfs-run --resume %s", R->agent.failures, R->session);
                                child_stop(&R->daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                                return 1;
                        }
                }
                int64_t now = ntfs_mono_ns();
                if (R->daemon.pid == 0 && now >= R->daemon.restart_at) {
                        say("restarting ntfsd; it recovers the journal before it answers");
                        if (daemon_start(R) < 0 && !schedule_restart(R, &R->daemon)) {
                                say("ntfsd cannot be restarted; giving up. Resume later with: ntfs-run --resume %s",
                                    R->session);
                                child_stop(&R->agent, SIGTERM, 10);
                                return 1;
                        }
                        continue;
                }
                /* The agent runs only against a daemon that answers. */
                if (R->agent.pid == 0 && R->daemon.pid > 0 && now >= R->agent.restart_at) {
                        say("resuming session %s", R->session);
                        if (agent_start(R) < 0 && !schedule_restart(R, &R->agent)) {
                                child_stop(&R->daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                                return 1;
                        }
                }
        }
}

static void usage(FILE *f) {
        fprintf(f, "usage: ntfs-run [options] TASK\n"
                   "       ntfs-run [options] --task-file FILE\n"
                   "       ntfs-run [options] --resume SESSION\n"
                   "Starts ntfsd and ntfs-agent, prints the session id, and restarts whichever dies;\n"
                   "the agent then resumes the same session from the journal.\n"
                   "  --resume SESSION     continue SESSION\n"
                   "  --task-file FILE     read the task from FILE\n"
                   "  --debug              the daemon's debug log on stderr\n"
                   "  --policy FILE        the daemon's policy file (docs/policy.md)\n"
                   "  --env-file FILE      the daemon's .env file (ANTHROPIC_API_KEY=...)\n"
                   "  --max-restarts N     consecutive restarts of each process before giving up (default %d)\n"
                   "  --max-steps N        the agent's generation limit\n"
                   "  --step               the agent drives the session through POST /step\n"
                   "  -v, --verbose        progress of both processes on stderr\n"
                   "Environment: NTFS_STORE (default .store), NTFS_SOCKET (default STORE/ntfsd.sock);\n"
                   "ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, LLM_MODEL go to the daemon only;\n"
                   "NTFS_DAEMON, NTFS_AGENT override the programs.\n"
                   "Exit: 0 done, 1 failure, 2 usage, 3 step limit.\n",
                DEFAULT_MAX_RESTARTS);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "resume", required_argument, NULL, 'r' },   { "task-file", required_argument, NULL, 'f' },
                { "debug", no_argument, NULL, 'd' },          { "policy", required_argument, NULL, 'p' },
                { "env-file", required_argument, NULL, 'e' }, { "max-restarts", required_argument, NULL, 'm' },
                { "max-steps", required_argument, NULL, 'n' }, { "step", no_argument, NULL, 's' },
                { "verbose", no_argument, NULL, 'v' },        { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct run R = { .max_restarts = DEFAULT_MAX_RESTARTS, .daemon = { .what = "ntfsd" },
                         .agent = { .what = "ntfs-agent" } };
        const char *resume = NULL, *task_file = NULL;
        int c;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                switch (c) {
                case 'r':
                        resume = optarg;
                        break;
                case 'f':
                        task_file = optarg;
                        break;
                case 'd':
                        R.debug = true;
                        break;
                case 'p':
                        R.policy = optarg;
                        break;
                case 'e':
                        R.env_file = optarg;
                        break;
                case 'm':
                        if (ntfs_parse_u64(optarg, 100, &R.max_restarts) < 0) {
                                fprintf(stderr, "ntfs-run: --max-restarts wants a number in [0, 100]\n");
                                return 2;
                        }
                        break;
                case 'n':
                        if (ntfs_parse_u64(optarg, 1000000, &R.max_steps) < 0 || R.max_steps == 0) {
                                fprintf(stderr, "ntfs-run: --max-steps wants a number in [1, 1000000]\n");
                                return 2;
                        }
                        break;
                case 's':
                        R.step_mode = true;
                        break;
                case 'v':
                        R.verbose = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if ((optind < argc) + (task_file != NULL) + (resume != NULL) != 1 || argc - optind > 1) {
                usage(stderr);
                return 2;
        }
        _cleanup_free_ char *task = NULL;
        if (task_file) {
                size_t len;
                int r = ntfs_read_file(task_file, TASK_MAX, &task, &len);
                if (r < 0) {
                        fprintf(stderr, "ntfs-run: cannot read %s: %s\n", task_file, ntfs_strerror(r));
                        return 2;
                }
        } else if (optind < argc && !(task = strdup(argv[optind])))
                return 1;
        if (task && !*task) {
                fprintf(stderr, "ntfs-run: the task is empty\n");
                return 2;
        }
        if (resume && (!*resume || strlen(resume) >= sizeof R.session)) {
                fprintf(stderr, "ntfs-run: bad session name\n");
                return 2;
        }

        const char *store = getenv("NTFS_STORE"), *sock = getenv("NTFS_SOCKET");
        R.store = store && *store ? store : ".store";
        char defsock[PATH_MAX];
        if (!sock || !*sock) {
                snprintf(defsock, sizeof defsock, "%s/ntfsd.sock", R.store);
                sock = defsock;
        }
        R.sock = sock;
        _cleanup_free_ char *dbin = find_prog("NTFS_DAEMON", "ntfsd", "ctl");
        _cleanup_free_ char *abin = find_prog("NTFS_AGENT", "ntfs-agent", "agent");
        R.daemon_bin = dbin;
        R.agent_bin = abin;
        R.agent_env = agent_environ(R.sock);
        if (!dbin || !abin || !R.agent_env)
                return 1;
        if (daemon_answers(R.sock)) {
                say("a daemon already serves %s; ntfs-run starts its own (stop it, or use another NTFS_SOCKET)",
                    R.sock);
                agent_environ_free(R.agent_env);
                return 1;
        }

        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGHUP);
        sigprocmask(SIG_BLOCK, &sigs, NULL);
        signal(SIGPIPE, SIG_IGN);

        int rc = 1;
        if (daemon_start(&R) < 0)
                goto out;
        if (resume) {
                snprintf(R.session, sizeof R.session, "%s", resume);
                if (session_check(&R) < 0) {
                        child_stop(&R.daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                        goto out;
                }
        } else if (session_create(&R, task) < 0) {
                child_stop(&R.daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                goto out;
        }
        printf("session %s\n", R.session);
        fflush(stdout);
        if (agent_start(&R) < 0) {
                child_stop(&R.daemon, SIGTERM, DAEMON_STOP_TIMEOUT_S);
                goto out;
        }
        rc = supervise(&R, &sigs);
out:
        agent_environ_free(R.agent_env);
        return rc;
}
