/* SPDX-License-Identifier: MIT
 * step.h — the /step state machine (docs/agent.md): pure functions over a
 * Messages API conversation (a JSON array of {role, content}), no I/O. The
 * daemon (ctl/routes-agent.c) loads the conversation from the journal,
 * applies one event, saves it, and answers the next action.
 *
 * Events: {type: "user_message", content}, {type: "llm_result", content,
 * stop_reason?} (or {type, response: {content, ...}}), {type:
 * "tool_result", tool_use_id, content, is_error?}.
 * Actions: {type: "call_llm", messages, system, tools, idempotency_key},
 * {type: "execute_tool", tool_name, tool_input, tool_use_id},
 * {type: "wait_user"}, {type: "done", message?, reason?}.
 */
#ifndef NTFS_CTL_STEP_H
#define NTFS_CTL_STEP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define NTFS_STEP_DEFAULT_MAX_STEPS 50
#define NTFS_STEP_MAX_MESSAGES 10000

/* The number of generations in messages (its assistant messages). */
uint64_t ntfs_step_generations(const json_t *messages);

/* Applies event to messages (borrowed; modified in place). Returns 1 when
 * applied, 0 when it is a duplicate of an event already applied (a
 * tool_result for an answered tool_use_id), -NTFS_EBADREQ for a malformed
 * event, -NTFS_ECONFLICT for an event the conversation does not expect now
 * (why says what it expects), -ENOMEM. */
int ntfs_step_apply(json_t *messages, const json_t *event, char *why, size_t whylen);

/* The next action for messages (borrowed), as a new reference (NULL on
 * ENOMEM). session names the generation keys; max_steps bounds the
 * generations (then "done" with reason "step_limit"). */
json_t *ntfs_step_next(const json_t *messages, const char *session, uint64_t max_steps);

#endif
