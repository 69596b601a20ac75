/* SPDX-License-Identifier: MIT
 * prompt.h — the agent's default system prompt and tool definitions, shared
 * by ntfs-agent (agent/ntfs-agent.c) and the daemon's /step state machine
 * (ctl/step.c), so that a session driven either way asks the model the same
 * question. Header-only constants; no state.
 *
 * NTFS_AGENT_TOOLS_JSON is the Messages API "tools" array (name,
 * description, input_schema); parse it with json_loads().
 */
#ifndef NTFS_AGENT_PROMPT_H
#define NTFS_AGENT_PROMPT_H

#define NTFS_AGENT_SYSTEM_PROMPT                                                                                     \
        "You are a software agent working in a Linux sandbox. Your files live in /workspace, which is also the "   \
        "starting directory of every command; the working directory and exported variables persist from one "     \
        "command to the next. Every call is journaled and the workspace is checkpointed after each change, so "   \
        "work in small steps. Tools:\n"                                                                             \
        "- bash_read: run a command that only reads (the workspace is read-only during the call).\n"              \
        "- bash_write: run a command that writes files (no network).\n"                                          \
        "- bash_build: run a build or another expensive command (no network; a snapshot is taken afterwards).\n"  \
        "- bash_run: run a program whose effects leave the workspace (loopback network only); it is never "       \
        "re-run after a crash.\n"                                                                                   \
        "- fetch_url: fetch an http(s) URL from the host (the sandbox has no internet access); allowed hosts "   \
        "are set by the operator.\n"                                                                                \
        "When the task is complete, answer with a short summary and no tool call."

#define NTFS_AGENT_CMD_SCHEMA                                                                                        \
        "{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\",\"description\":"                  \
        "\"a bash command line, run in /workspace\"}},\"required\":[\"command\"]}"

#define NTFS_AGENT_TOOLS_JSON                                                                                        \
        "["                                                                                                         \
        "{\"name\":\"bash_read\",\"description\":\"Run a read-only bash command in /workspace (ls, cat, grep)."  \
        "\",\"input_schema\":" NTFS_AGENT_CMD_SCHEMA "},"                                                          \
        "{\"name\":\"bash_write\",\"description\":\"Run a bash command that creates or edits files in "           \
        "/workspace.\",\"input_schema\":" NTFS_AGENT_CMD_SCHEMA "},"                                               \
        "{\"name\":\"bash_build\",\"description\":\"Run a build (make, cc, pip install from a local tree) in "    \
        "/workspace.\",\"input_schema\":" NTFS_AGENT_CMD_SCHEMA "},"                                               \
        "{\"name\":\"bash_run\",\"description\":\"Run a program with effects outside the workspace; never "      \
        "repeated.\",\"input_schema\":" NTFS_AGENT_CMD_SCHEMA "},"                                                 \
        "{\"name\":\"fetch_url\",\"description\":\"Fetch an http(s) URL through the host's gateway.\","          \
        "\"input_schema\":{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\"}},"                   \
        "\"required\":[\"url\"]}}"                                                                                  \
        "]"

/* The generation key of the n-th generation (1-based) of a session: the
 * same in ntfs-agent and /step, so either can continue the other's run. */
#define NTFS_AGENT_GEN_KEY_FMT "gen:%s:%llu"

#endif
