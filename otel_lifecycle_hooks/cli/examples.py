"""The EXAMPLES section of each command's `--help`: a few lines a user can copy, in one place.

`main` attaches them as each command's epilog; a test parses every example line with the real
parser, so an option renamed in a command is caught here too.
"""

from __future__ import annotations

import argparse

HEADING = "examples:"

# command -> example lines ("# ..." explains the line below it)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "validate": (
        "otel-lifecycle-hooks validate scion-agent.yaml",
        "# a parent template, then its child; the result as JSON",
        "otel-lifecycle-hooks validate --json base/scion-agent.yaml scion-agent.yaml",
    ),
    "list": (
        "otel-lifecycle-hooks list scion-agent.yaml",
        "otel-lifecycle-hooks list --json --journal /var/lib/agent/journal.sqlite3 .",
    ),
    "test": (
        "# what post-start's hooks would send, nothing sent",
        "otel-lifecycle-hooks test --event post-start scion-agent.yaml",
        "otel-lifecycle-hooks test --event session-end --set EXIT_CODE=1 scion-agent.yaml",
        "# send them for real",
        "otel-lifecycle-hooks test --event post-start --execute scion-agent.yaml",
    ),
    "schema": (
        "otel-lifecycle-hooks schema > scion-agent.schema.json",
        "otel-lifecycle-hooks schema --hooks-only",
    ),
    "run": (
        "otel-lifecycle-hooks run --template scion-agent.yaml -- claude",
        "# as root, the agent as an unprivileged user, a parent template then its child",
        "otel-lifecycle-hooks run --user agent -t base.yaml -t scion-agent.yaml -- python agent.py",
        "otel-lifecycle-hooks run --agent-name reviewer --grace-period 30s -q -- ./agent.sh",
    ),
    "status": (
        "otel-lifecycle-hooks status",
        "otel-lifecycle-hooks status --json",
        'otel-lifecycle-hooks status task_completed "Opened the pull request"',
        'otel-lifecycle-hooks status ask_user "Which branch should I use?"',
    ),
    "history": (
        "otel-lifecycle-hooks history --failed --since 1h",
        "otel-lifecycle-hooks history --session 5e55101a --hook notify --json",
        "otel-lifecycle-hooks history show 42",
        "otel-lifecycle-hooks history --follow --journal postgresql://hooks@db/journal",
    ),
    "replay": (
        "# what would be sent again, then send it",
        "otel-lifecycle-hooks replay --failed --since 1h --dry-run --template scion-agent.yaml",
        "otel-lifecycle-hooks replay --failed --since 1h --template scion-agent.yaml",
        "otel-lifecycle-hooks replay 42 57 --template scion-agent.yaml",
    ),
    "reconcile": (
        "otel-lifecycle-hooks reconcile --dry-run --journal postgresql://hooks@db/journal",
        "otel-lifecycle-hooks reconcile --watch --interval 1m --template scion-agent.yaml"
        " --journal postgresql://hooks@db/journal",
    ),
    "trace": (
        "otel-lifecycle-hooks trace",
        "otel-lifecycle-hooks trace --last 3",
        "otel-lifecycle-hooks trace --json --trace-id 4bf92f35",
    ),
    "harness": (
        "otel-lifecycle-hooks harness install claude",
        "otel-lifecycle-hooks harness install gemini --project . --dry-run",
        "otel-lifecycle-hooks harness uninstall codex",
        "# from inside a session: is the supervisor reachable?",
        "otel-lifecycle-hooks harness doctor",
    ),
    "ui": (
        "otel-lifecycle-hooks ui --template scion-agent.yaml",
        "otel-lifecycle-hooks ui --port 8765 --journal postgresql://hooks@db/journal",
    ),
    "completion": (
        "otel-lifecycle-hooks completion bash > ~/.local/share/bash-completion/completions/"
        "otel-lifecycle-hooks",
        'otel-lifecycle-hooks completion zsh > "${fpath[1]}/_otel-lifecycle-hooks"',
        "otel-lifecycle-hooks completion fish > ~/.config/fish/completions/"
        "otel-lifecycle-hooks.fish",
    ),
}


def examples_text(command: str) -> str | None:
    """The epilog of `command`'s help: the heading, then its examples indented; None if it
    has none here."""
    lines = EXAMPLES.get(command)
    if not lines:
        return None
    return "\n".join([HEADING, *(f"  {line}" for line in lines)])


class ExamplesHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that an examples section keeps its lines as written
    (the description is still wrapped to the terminal)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(HEADING + "\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def attach_examples(parser: argparse.ArgumentParser, command: str) -> None:
    """Give `parser` (the parser of `command`) its examples as an epilog."""
    text = examples_text(command)
    if text is None or parser.epilog:
        return
    parser.epilog = text
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = ExamplesHelpFormatter
