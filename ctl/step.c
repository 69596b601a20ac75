/* SPDX-License-Identifier: MIT
 * step.c — the /step state machine (ctl/step.h, docs/agent.md).
 *
 * The whole state is the conversation itself: the next action follows from
 * its last messages, so nothing but the message array (and the cursor, in
 * routes-agent.c) needs to be journaled, and ntfs-agent's own saved history
 * is a valid /step state and the other way round.
 *   - no message                                    -> wait_user
 *   - last: assistant without tool_use              -> done
 *   - last: assistant with tool_use                 -> execute_tool (the first)
 *   - last: user holding tool_result blocks for some
 *     of the previous assistant's tool_use blocks   -> execute_tool (the next unanswered)
 *   - last: user otherwise                          -> call_llm (or done: step_limit)
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/prompt.h"
#include "common/err.h"
#include "ctl/step.h"
#include "common/banned.h"

static const char *jstr(const json_t *o, const char *k) {
        return json_string_value(json_object_get(o, k));
}

static bool is_role(const json_t *m, const char *role) {
        const char *r = jstr(m, "role");
        return r && strcmp(r, role) == 0;
}

static bool is_type(const json_t *b, const char *type) {
        const char *t = jstr(b, "type");
        return t && strcmp(t, type) == 0;
}

uint64_t ntfs_step_generations(const json_t *messages) {
        uint64_t n = 0;
        size_t i;
        json_t *m;
        json_array_foreach(messages, i, m)
                if (is_role(m, "assistant"))
                        n++;
        return n;
}

static size_t count_tool_uses(const json_t *assistant) {
        size_t n = 0, i;
        json_t *b;
        json_array_foreach(json_object_get(assistant, "content"), i, b)
                if (is_type(b, "tool_use"))
                        n++;
        return n;
}

static bool answered(const json_t *user, const char *id) {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(user, "content"), i, b)
                if (is_type(b, "tool_result") && jstr(b, "tool_use_id") && strcmp(jstr(b, "tool_use_id"), id) == 0)
                        return true;
        return false;
}

static bool holds_tool_results(const json_t *user) {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(user, "content"), i, b)
                if (is_type(b, "tool_result"))
                        return true;
        return false;
}

/* The assistant message whose tool calls are being answered, and the user
 * message holding the answers so far (NULL if none yet); false when the
 * conversation is not in that phase. */
static bool tool_phase(const json_t *messages, json_t **ret_assistant, json_t **ret_user) {
        size_t n = json_array_size(messages);
        if (n == 0)
                return false;
        json_t *last = json_array_get(messages, n - 1);
        if (is_role(last, "assistant")) {
                if (count_tool_uses(last) == 0)
                        return false;
                *ret_assistant = last;
                *ret_user = NULL;
                return true;
        }
        if (n >= 2 && is_role(last, "user") && holds_tool_results(last)) {
                json_t *prev = json_array_get(messages, n - 2);
                if (is_role(prev, "assistant") && count_tool_uses(prev) > 0) {
                        *ret_assistant = prev;
                        *ret_user = last;
                        return true;
                }
        }
        return false;
}

/* The first tool_use block of the current assistant message without an
 * answer, or NULL. */
static json_t *next_tool_use(const json_t *messages) {
        json_t *asst, *user;
        if (!tool_phase(messages, &asst, &user))
                return NULL;
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(asst, "content"), i, b) {
                const char *id = jstr(b, "id");
                if (is_type(b, "tool_use") && id && (!user || !answered(user, id)))
                        return b;
        }
        return NULL;
}

static const char *expected(const json_t *messages) {
        size_t n = json_array_size(messages);
        if (n == 0)
                return "a user_message";
        if (next_tool_use(messages))
                return "a tool_result";
        if (is_role(json_array_get(messages, n - 1), "user"))
                return "an llm_result";
        return "a user_message";
}

static int apply_user(json_t *messages, const json_t *event, char *why, size_t whylen) {
        json_t *content = json_object_get(event, "content");
        if (!content)
                content = json_object_get(event, "text");
        if (!(json_is_string(content) && json_string_length(content) > 0) &&
            !(json_is_array(content) && json_array_size(content) > 0)) {
                snprintf(why, whylen, "user_message needs 'content' (a non-empty string or array of blocks)");
                return -NTFS_EBADREQ;
        }
        size_t n = json_array_size(messages);
        if (n > 0 && (next_tool_use(messages) || is_role(json_array_get(messages, n - 1), "user"))) {
                snprintf(why, whylen, "the session expects %s, not a user_message", expected(messages));
                return -NTFS_ECONFLICT;
        }
        return json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "user", "content", content)) < 0
                       ? -ENOMEM
                       : 1;
}

static int apply_llm(json_t *messages, const json_t *event, char *why, size_t whylen) {
        const json_t *src = json_is_object(json_object_get(event, "response")) ? json_object_get(event, "response")
                                                                                : event;
        json_t *content = json_object_get(src, "content");
        if (!json_is_array(content)) {
                snprintf(why, whylen, "llm_result needs 'content' (the generation's array of blocks)");
                return -NTFS_EBADREQ;
        }
        size_t i;
        json_t *b;
        json_array_foreach(content, i, b) {
                if (!json_is_object(b) || !jstr(b, "type")) {
                        snprintf(why, whylen, "llm_result content block %zu has no type", i);
                        return -NTFS_EBADREQ;
                }
                if (is_type(b, "tool_use") && (!jstr(b, "id") || !jstr(b, "name"))) {
                        snprintf(why, whylen, "llm_result tool_use block %zu needs 'id' and 'name'", i);
                        return -NTFS_EBADREQ;
                }
        }
        size_t n = json_array_size(messages);
        if (n == 0 || !is_role(json_array_get(messages, n - 1), "user") || next_tool_use(messages)) {
                snprintf(why, whylen, "the session expects %s, not an llm_result", expected(messages));
                return -NTFS_ECONFLICT;
        }
        return json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "assistant", "content", content)) < 0
                       ? -ENOMEM
                       : 1;
}

static int apply_tool(json_t *messages, const json_t *event, char *why, size_t whylen) {
        const char *id = jstr(event, "tool_use_id");
        json_t *content = json_object_get(event, "content");
        json_t *is_error = json_object_get(event, "is_error");
        if (!id || !*id) {
                snprintf(why, whylen, "tool_result needs 'tool_use_id'");
                return -NTFS_EBADREQ;
        }
        if (!content)
                content = json_object_get(event, "result");
        if (json_is_object(content)) { /* a /tool/execute result as it came */
                char *s = json_dumps(content, JSON_COMPACT | JSON_SORT_KEYS);
                if (!s)
                        return -ENOMEM;
                content = json_string(s);
                free(s);
                if (!content)
                        return -ENOMEM;
        } else if (json_is_string(content) || json_is_array(content))
                json_incref(content);
        else {
                snprintf(why, whylen, "tool_result needs 'content' (a string, an array of blocks or a result object)");
                return -NTFS_EBADREQ;
        }
        if (is_error && !json_is_boolean(is_error)) {
                json_decref(content);
                snprintf(why, whylen, "'is_error' must be a boolean");
                return -NTFS_EBADREQ;
        }
        json_t *asst, *user;
        if (!tool_phase(messages, &asst, &user)) {
                json_decref(content);
                snprintf(why, whylen, "the session expects %s, not a tool_result", expected(messages));
                return -NTFS_ECONFLICT;
        }
        if (user && answered(user, id)) {
                json_decref(content);
                return 0; /* sent again after a crash: already applied */
        }
        bool known = false;
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(asst, "content"), i, b)
                if (is_type(b, "tool_use") && jstr(b, "id") && strcmp(jstr(b, "id"), id) == 0)
                        known = true;
        if (!known) {
                json_decref(content);
                snprintf(why, whylen, "no pending tool_use has the id '%s'", id);
                return -NTFS_ECONFLICT;
        }
        json_t *block = json_pack("{s:s, s:s, s:o, s:b}", "type", "tool_result", "tool_use_id", id, "content",
                                  content, "is_error", json_is_true(is_error));
        if (!block)
                return -ENOMEM;
        if (user)
                return json_array_append_new(json_object_get(user, "content"), block) < 0 ? -ENOMEM : 1;
        json_t *msg = json_pack("{s:s, s:[o]}", "role", "user", "content", block);
        return json_array_append_new(messages, msg) < 0 ? -ENOMEM : 1;
}

int ntfs_step_apply(json_t *messages, const json_t *event, char *why, size_t whylen) {
        if (!json_is_array(messages) || !json_is_object(event)) {
                snprintf(why, whylen, "'event' must be an object");
                return -NTFS_EBADREQ;
        }
        if (json_array_size(messages) >= NTFS_STEP_MAX_MESSAGES) {
                snprintf(why, whylen, "the conversation holds %d messages, the most /step keeps",
                         NTFS_STEP_MAX_MESSAGES);
                return -NTFS_ECONFLICT;
        }
        const char *type = jstr(event, "type");
        if (!type) {
                snprintf(why, whylen, "the event needs a 'type' (user_message, llm_result or tool_result)");
                return -NTFS_EBADREQ;
        }
        if (strcmp(type, "user_message") == 0)
                return apply_user(messages, event, why, whylen);
        if (strcmp(type, "llm_result") == 0)
                return apply_llm(messages, event, why, whylen);
        if (strcmp(type, "tool_result") == 0)
                return apply_tool(messages, event, why, whylen);
        snprintf(why, whylen, "unknown event type '%.64s' (user_message, llm_result or tool_result)", type);
        return -NTFS_EBADREQ;
}

json_t *ntfs_step_next(const json_t *messages, const char *session, uint64_t max_steps) {
        size_t n = json_array_size(messages);
        if (n == 0)
                return json_pack("{s:s}", "type", "wait_user");
        json_t *use = next_tool_use(messages);
        if (use) {
                json_t *input = json_object_get(use, "input");
                return json_pack("{s:s, s:s, s:o, s:s}", "type", "execute_tool", "tool_name", jstr(use, "name"),
                                 "tool_input", input ? json_incref(input) : json_object(), "tool_use_id",
                                 jstr(use, "id"));
        }
        json_t *last = json_array_get(messages, n - 1);
        if (is_role(last, "assistant"))
                return json_pack("{s:s, s:s, s:O}", "type", "done", "reason", "end_turn", "message", last);
        uint64_t gens = ntfs_step_generations(messages);
        if (gens >= max_steps)
                return json_pack("{s:s, s:s}", "type", "done", "reason", "step_limit");
        char key[512];
        snprintf(key, sizeof key, NTFS_AGENT_GEN_KEY_FMT, session, (unsigned long long)gens + 1);
        json_t *tools = json_loads(NTFS_AGENT_TOOLS_JSON, 0, NULL);
        if (!tools)
                return NULL;
        return json_pack("{s:s, s:O, s:s, s:o, s:s}", "type", "call_llm", "messages", messages, "system",
                         NTFS_AGENT_SYSTEM_PROMPT, "tools", tools, "idempotency_key", key);
}
