"""A stand-in agent: it reports what Claude Code would through `hook --dialect claude`, then
waits to be stopped."""

import json
import os
import subprocess
import sys
import time

SESSION = "demo-session-1"


def hook(payload: dict) -> None:
    payload = {"session_id": SESSION, "transcript_path": "", "cwd": os.getcwd(), **payload}
    subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"],
        input=json.dumps(payload).encode(),
        check=False,
    )


hook({"hook_event_name": "SessionStart", "source": "startup"})
hook({"hook_event_name": "UserPromptSubmit", "prompt": "List the files here"})
hook({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
hook(
    {
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {"stdout": "a b"},
    }
)
hook(
    {
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "There are two files: a and b.",
    }
)
subprocess.run(
    [sys.executable, "-m", "otel_lifecycle_hooks", "status", "task_completed", "Listed the files"],
    check=False,
)
print("agent: work done, waiting to be stopped", flush=True)
time.sleep(60)
