"""opencode: a plugin file that forwards its events to `hook --dialect opencode`.

opencode loads every `.js` file in `~/.config/opencode/plugins/` (user) and in a project's
`.opencode/plugins/`. The file is ours alone: install writes it, uninstall deletes it, and a
file of that name that we did not write is left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from .install import (
    UNREACHABLE_DENY,
    FileChange,
    InstallError,
    InstallPlan,
    Scope,
    hook_argv,
    read_text,
)

DIALECT = "opencode"
PLUGIN_NAME = "otel-lifecycle-hooks.js"
MARKER = "// Written by `otel-lifecycle-hooks harness install opencode`"


def plugin_path(scope: Scope) -> Path:
    if scope.project is not None:
        return scope.project / ".opencode" / "plugins" / PLUGIN_NAME
    config_home = scope.environ.get("XDG_CONFIG_HOME") or str(scope.home / ".config")
    return Path(config_home) / "opencode" / "plugins" / PLUGIN_NAME


# The bus events the dialect reads (harness/dialects/opencode.py). opencode 1.18 publishes about
# ninety events for one prompt (plugin.added, message.part.updated, session.status, ...); each
# would otherwise cost a Python process, so everything else stays inside opencode.
# The plugin hooks (functions opencode calls, not bus events) that the plugin also forwards.
PLUGIN_HOOKS = (
    "chat.message",
    "tool.execute.before",
    "tool.execute.after",
    "experimental.session.compacting",
)
FORWARDED_EVENTS = (
    "session.created",
    "session.idle",
    "session.error",
    "session.compacted",
    "permission.asked",
    "permission.updated",
)


def plugin_source(program: list[str], unreachable_deny: bool = False) -> str:
    """The plugin's JavaScript: the hook command's argv and the events it forwards;
    `unreachable_deny`: the command answers deny when no supervisor does."""
    argv = json.dumps(hook_argv(DIALECT, program, unreachable_deny))
    forwarded = json.dumps(list(FORWARDED_EVENTS))
    return f"""{MARKER}; removed by `harness uninstall opencode`.
// Only the events the package uses go to the hook command, on stdin, one at a time and in the
// order opencode published them; a failure never reaches the agent.
import {{ spawn }} from "node:child_process"

const HOOK = {argv}
const FORWARDED = new Set({forwarded})

// Resolves with what the hook command printed (a gate's decision), at most 64 KiB.
const run = (body) =>
  new Promise((resolve) => {{
    let out = ""
    try {{
      const child = spawn(HOOK[0], HOOK.slice(1), {{ stdio: ["pipe", "pipe", "ignore"] }})
      child.stdout.setEncoding("utf8")
      child.stdout.on("data", (chunk) => {{
        if (out.length < 65536) out += chunk
      }})
      child.on("error", () => resolve(""))
      child.on("close", () => resolve(out))
      child.stdin.on("error", () => resolve(""))
      child.stdin.end(JSON.stringify(body))
    }} catch {{
      resolve("")
    }}
  }})

// One hook process at a time: started together they would reach the supervisor in any order.
let queue = Promise.resolve()
const send = (body) => (queue = queue.then(() => run(body)))

// A gate's refusal (docs/gates.md): the tool call is refused by throwing, with the reason,
// which opencode gives the model as the tool's result. Anything else lets it run.
const refusal = (printed) => {{
  try {{
    const answer = JSON.parse(printed)
    if (answer && (answer.decision === "deny" || answer.decision === "ask")) {{
      return String(answer.reason || "refused by a policy gate")
    }}
  }} catch {{}}
  return null
}}

// session.idle carries no text: the last text part of an assistant message is the answer.
// Both maps forget a session's entries at its idle, so a long session does not grow them.
const assistantMessages = new Map() // message id -> session id
const answers = new Map() // session id -> text

const remember = (event) => {{
  const props = event.properties ?? {{}}
  if (event.type === "message.updated" && props.info?.role === "assistant") {{
    assistantMessages.set(props.info.id, props.info.sessionID)
  }} else if (event.type === "message.part.updated") {{
    const part = props.part ?? {{}}
    if (part.type === "text" && !part.synthetic && assistantMessages.has(part.messageID)) {{
      answers.set(part.sessionID, part.text ?? "")
    }}
  }}
}}

const answerOf = (sessionID) => {{
  const answer = answers.get(sessionID) ?? ""
  answers.delete(sessionID)
  for (const [message, session] of assistantMessages) {{
    if (session === sessionID) assistantMessages.delete(message)
  }}
  return answer
}}

export const OtelLifecycleHooks = async () => ({{
  event: async ({{ event }}) => {{
    remember(event)
    if (!FORWARDED.has(event.type)) return
    const body = {{ ...event }}
    if (event.type === "session.idle") body.answer = answerOf(event.properties?.sessionID)
    await send(body)
  }},
  "chat.message": async (input, output) => {{
    await send({{ type: "chat.message", input, output }})
  }},
  "tool.execute.before": async (input, output) => {{
    const reason = refusal(await send({{ type: "tool.execute.before", input, output }}))
    if (reason !== null) throw new Error(reason)
  }},
  "tool.execute.after": async (input, output) => {{
    await send({{ type: "tool.execute.after", input, output }})
  }},
  "experimental.session.compacting": async (input) => {{
    await send({{ type: "experimental.session.compacting", input }})
  }},
}})
"""


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    path = plugin_path(scope)
    before = read_text(path)
    if before is not None and MARKER not in before:
        raise InstallError(f"{path}: exists and was not written by this package; not replaced")
    deny = scope.unreachable_deny("tool.execute.before")
    if deny is None:
        # No template given: an installed plugin keeps its unreachable policy.
        deny = before is not None and json.dumps(list(UNREACHABLE_DENY))[1:-1] in before
    after = plugin_source(program, deny)
    return InstallPlan(DIALECT, "install", scope, [FileChange(path, before, after)])


def plan_uninstall(scope: Scope) -> InstallPlan:
    path = plugin_path(scope)
    before = read_text(path)
    plan = InstallPlan(DIALECT, "uninstall", scope, [])
    if before is None:
        return plan
    if MARKER not in before:
        plan.notes.append(f"{path} was not written by this package: left alone")
        plan.changes.append(FileChange(path, before, before))
        return plan
    plan.changes.append(FileChange(path, before, None))
    return plan
