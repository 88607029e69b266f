"""Trust rules of a whole template: agent-controlled values never choose where a request goes or
what a program runs, and `env:` expansion stays small.

The agent can choose the values of the variables in `reported.AGENT_CONTROLLED`
(TOOL_NAME, ASSISTANT_TEXT, ERROR_MESSAGE, TASK_SUMMARY, PROMPT, MESSAGE, SESSION_ID, ...), and of
any template `env:` entry whose value refers to one of them. Such a value is refused, with a
message naming the variable and the safe form, where it would stand in:

- a URL's scheme, userinfo, host or port (it may stand in the path, query and fragment, where
  it is percent-encoded), or a `Host` header;
- any element of a script's `command:` (an allow-list: the value reaches a script through
  its environment, `env: {TOOL_NAME: "${TOOL_NAME}"}`, and its stdin JSON only; no list of
  shells, interpreters and wrappers that run an argument as code could be complete);
- with the hook's explicit `agent_values_in_args: true`, still the program (`command[0]`, or
  what a wrapper runs), the program text of a shell's `-c` or an interpreter's `-c` / `-e`,
  the command line of `env -S`, an option or an option's value before a literal `--`, and
  any argument of a program in `COMMAND_RUNNERS`;
- an environment variable that chooses what a program loads (`PATH`, `LD_PRELOAD`,
  `BASH_ENV`, `PYTHONPATH`, ...: `is_loader_variable`); a `run_as: root` hook may not set
  one at all.

Header names cannot hold a variable at all (validate.HEADER_NAME_PATTERN). What another hook's
endpoint answered (`HOOK_<NAME>_RESPONSE`) is refused in the program places too; in a URL's
origin it is the template author's choice to trust that endpoint.

`env:` values may refer to each other; each one's expansion is bounded (`MAX_EXPANDED_CHARS`,
`MAX_EXPANSION_DEPTH`), so that `A: ${B}${B}`, `B: ${C}${C}`, ... is refused here rather than
exhausting memory when a hook renders.

The checks run on the merged template, since a child's `env:` can change what a parent's hook
refers to. Pure functions: no I/O.
"""

from __future__ import annotations

import functools
import os.path
import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from ..reported import AGENT_CONTROLLED
from ..variables import Reference, parse_template
from .model import HookSpec, Position, Template
from .problems import Problem

# `HOOK_<NAME>_RESPONSE` / `_STATUS`: what another hook's endpoint answered.
_CAPTURED = re.compile(r"HOOK_[A-Z0-9_]+_(?:RESPONSE|STATUS)")

MAX_EXPANDED_CHARS = 64 * 1024
MAX_EXPANSION_DEPTH = 16

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox"})
# Interpreters and the option whose next argument is program text.
INTERPRETERS: Mapping[str, frozenset[str]] = {
    "python": frozenset({"-c"}),
    "perl": frozenset({"-e", "-E"}),
    "ruby": frozenset({"-e"}),
    "node": frozenset({"-e", "--eval", "-p", "--print"}),
}
# Programs that run the rest of their arguments as a command.
# Programs that run the rest of their arguments as a command, with their options that take a
# value, and how many plain arguments they take before the command (timeout's duration).
WRAPPERS: Mapping[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "sudo": (frozenset({"-u", "--user", "-g", "--group", "-C", "-D", "-h", "-p", "-r", "-t"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "xargs": (frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"}), 0),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "runuser": (frozenset({"-u", "-g", "-G", "--user", "--group"}), 0),
    "unshare": (frozenset(), 0),
    "setpriv": (frozenset(), 0),
    "time": (frozenset({"-f", "-o"}), 0),
}
# `env -S "sh -c ..."` splits its value into a command: that value is program text too.
_ENV_SPLIT = ("-S", "--split-string")
# Environment variables that choose what a program loads or runs.
LOADER_ENV = frozenset(
    {"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "PROMPT_COMMAND",
     "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH", "GLOBIGNORE", "ZDOTDIR", "PYTHONPATH",
     "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB",
     "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH",
     "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXEC_PATH",
     "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_PARAMETERS", "GIT_PAGER", "PAGER",
     "EDITOR", "VISUAL", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
     "PHPRC", "PHP_INI_SCAN_DIR", "TCLLIBPATH", "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH"}
)  # fmt: skip
# Whole families: the dynamic loader's, Python's, Lua's, bash's exported functions, git's
# configuration (GIT_CONFIG_KEY_0=core.pager ...), the macOS loader's.
_LOADER_PREFIXES = ("LD_", "PYTHON", "LUA_", "BASH_FUNC_", "GIT_CONFIG_", "DYLD_", "PERL", "RUBY")
# Programs that run (some of) their arguments as code or as a command: with
# `agent_values_in_args: true`, none of their arguments may hold an agent value. A guard for
# an explicit opt-in, not a complete list; without the opt-in nothing agent-chosen stands in
# `command:` at all.
COMMAND_RUNNERS = frozenset(
    {*SHELLS, *INTERPRETERS, *WRAPPERS, "php", "lua", "luajit", "tclsh", "wish", "expect",
     "awk", "gawk", "mawk", "nawk", "busybox", "sed", "xargs", "find", "parallel", "watch",
     "ssh", "su", "runuser", "chrt", "taskset", "flock", "script", "unshare", "nsenter",
     "chroot", "setpriv", "setarch", "strace", "ltrace", "gdb", "time", "eval", "make",
     "tar", "git", "rsync", "scp", "vim", "vi", "nvim", "emacs", "less", "more", "man",
     "xdg-open", "at", "batch", "crontab", "systemd-run", "dbus-send", "docker", "podman",
     "kubectl", "npx", "npm", "pip", "pip3", "uv", "cargo", "go", "java", "dotnet", "pwsh",
     "osascript", "m4", "dc", "bc", "jq", "openssl", "curl", "wget", "zip", "unzip", "rpm",
     "dpkg", "apt", "apt-get", "sudoedit", "pkexec"}
)  # fmt: skip


class _Agent(NamedTuple):
    """A reference whose value the agent chooses (or, `from_response`, a remote endpoint
    answered); `via` is the `env:` entry that led to it."""

    name: str
    via: str | None
    from_response: bool = False


class _Opaque(NamedTuple):
    """A reference to configuration (process environment, metadata, supervisor-set context)."""

    name: str


_Piece = str | _Agent | _Opaque


def trust_problems(template: Template) -> list[Problem]:
    """Every trust rule the merged template breaks (see the module docstring)."""
    problems = env_expansion_problems(template)
    if problems:
        return problems  # the other checks expand env values: not while they are unbounded
    env = template.env
    for hook in template.hooks:
        problems.extend(_hook_problems(hook, env))
    return problems


# --- env expansion ----------------------------------------------------------------------


def env_expansion_problems(
    template: Template, positions: Mapping[str, Position] | None = None
) -> list[Problem]:
    """`env:` values whose expansion is too deep or too large; `positions`: where each entry
    is written, when known."""
    env = template.env
    sizes: dict[str, int] = {}
    depths: dict[str, int] = {}
    default = Position(template.files[-1] if template.files else "template", 0, 0)
    problems: list[Problem] = []

    def measure(name: str, active: tuple[str, ...]) -> tuple[int, int]:
        if name in sizes:
            return sizes[name], depths[name]
        size, depth = 0, 0
        for piece in parse_template(env[name]):
            if isinstance(piece, str):
                size += len(piece)
            elif piece.name in env and piece.name not in active and piece.name != name:
                inner_size, inner_depth = measure(piece.name, (*active, name))
                size += inner_size
                depth = max(depth, inner_depth + 1)
            if size > MAX_EXPANDED_CHARS or depth > MAX_EXPANSION_DEPTH:
                break  # already too much: stop before the numbers themselves grow huge
        sizes[name], depths[name] = size, depth
        return size, depth

    for name in env:
        size, depth = measure(name, ())
        if depth > MAX_EXPANSION_DEPTH:
            message = (
                f"refers through more than {MAX_EXPANSION_DEPTH} levels of env: entries; "
                "refer to the value you mean directly"
            )
        elif size > MAX_EXPANDED_CHARS:
            message = (
                f"expands to more than {MAX_EXPANDED_CHARS} characters (entries that refer to "
                "each other several times grow exponentially); write the value out, or refer "
                "to each entry once"
            )
        else:
            continue
        where = (positions or {}).get(name, default)
        problems.append(Problem(where, None, f"env.{name}", message))
    return problems


def _expand(text: str, env: Mapping[str, str], active: tuple[str, ...] = ()) -> list[_Piece]:
    """`text` with `env:` references expanded as the engine would (a reference to an entry
    being expanded goes to the process environment), agent-controlled ones marked."""
    pieces: list[_Piece] = []
    for piece in parse_template(text):
        if isinstance(piece, str):
            pieces.append(piece)
        else:
            pieces.extend(_expand_reference(piece, env, active))
    return pieces


def _expand_reference(
    reference: Reference, env: Mapping[str, str], active: tuple[str, ...]
) -> Iterator[_Piece]:
    name = reference.name
    if name in AGENT_CONTROLLED:  # the event layer comes first: env: cannot shadow it
        yield _Agent(name, active[0] if active else None)
    elif _CAPTURED.fullmatch(name):
        yield _Agent(name, active[0] if active else None, from_response=True)
    elif name in env and name not in active and not reference.path:
        yield from _expand(env[name], env, (*active, name))
    else:
        yield _Opaque(name)


def _agent_names(pieces: list[_Piece], responses: bool = False) -> list[_Agent]:
    """The agent-chosen pieces; with `responses`, captured responses too (code never runs
    what a remote endpoint answered)."""
    return [p for p in pieces if isinstance(p, _Agent) and (responses or not p.from_response)]


def _chosen(agent: _Agent) -> str:
    if agent.from_response:
        return f"{_shown(agent)} is what another hook's endpoint answered"
    return f"{_shown(agent)} is chosen by the agent"


def _shown(agent: _Agent) -> str:
    if agent.via is None:
        return f"${{{agent.name}}}"
    return f"${{{agent.via}}} (through env: {agent.via}, which refers to ${{{agent.name}}})"


# --- one hook ---------------------------------------------------------------------------


def _hook_problems(hook: HookSpec, env: Mapping[str, str]) -> list[Problem]:
    problems: list[Problem] = []

    def report(field: str, message: str) -> None:
        problems.append(_problem(hook, field, message))

    action = hook.action
    if action.url:
        for part, agent in _url_origin_agents(_expand(action.url, env)):
            report(
                "action.url",
                f"{_shown(agent)} is chosen by the agent and stands in the URL's {part}: the "
                "agent could send this request (and its credentials) anywhere. Keep the "
                "scheme, host and port literal, or in an env: or environment variable, and "
                f"put agent values in the path or query, e.g. https://host/tools/${{{agent.name}}}",
            )
    for name, value in action.headers.items():
        if name.lower() in ("host", ":authority"):
            for agent in _agent_names(_expand(value, env)):
                report(
                    f"action.headers.{name}",
                    f"{_shown(agent)} is chosen by the agent and would choose the host the "
                    "request is for; keep the Host header literal",
                )
    if action.type == "script":
        problems.extend(_command_problems(hook, env))
    return problems


def _problem(hook: HookSpec, field: str, message: str) -> Problem:
    """A problem of `hook`, pointing at the field it is about."""
    position = hook.position_of(field) or Position("template", 0, 0)
    return Problem(position, hook.name, field, message, hook.entry_index)


def url_state_after(state: str, text: str) -> str:
    """Where in a URL ("scheme", "authority" or "rest") the literal `text`, met in `state`,
    leaves the reader: past "://" the authority starts, past "/", "?" or "#" the rest."""
    if state == "scheme" and "://" in text:
        text = text.split("://", 1)[1]
        state = "authority"
    if state == "authority" and any(mark in text for mark in "/?#"):
        state = "rest"
    return state


def _url_origin_agents(pieces: list[_Piece]) -> Iterator[tuple[str, _Agent]]:
    """The agent-controlled pieces that stand in the scheme or the authority."""
    state = "scheme"
    for piece in pieces:
        if state == "rest":
            return
        if isinstance(piece, _Agent) and not piece.from_response:
            yield ("scheme and host" if state == "scheme" else "userinfo, host or port"), piece
        elif isinstance(piece, (_Opaque, _Agent)):
            if state == "scheme":
                state = "authority"  # configuration that starts the URL: its scheme and host
        else:
            state = url_state_after(state, piece)


def _command_problems(hook: HookSpec, env: Mapping[str, str]) -> list[Problem]:
    action = hook.action
    argv = [_expand(item, env) for item in action.command]
    if action.agent_values_in_args:
        problems = _argument_problems(hook, argv)
    else:
        # The allow-list: an agent value reaches a script through its environment and its
        # stdin JSON, never through `command:` (no list of shells and wrappers is complete).
        problems = [
            _problem(hook, f"action.command[{index}]", _not_in_command(agent))
            for index, pieces in enumerate(argv)
            for agent in _agent_names(pieces, responses=True)
        ]
    for key, value in action.env.items():
        if action.run_as == "root" and is_loader_variable(key):
            problems.append(
                _problem(
                    hook,
                    f"action.env.{key}",
                    f"{key} chooses what a program loads or runs, and this hook runs as root "
                    "(run_as: root); remove it, or run the hook as the agent's user "
                    "(run_as: agent, the default)",
                )
            )
        elif key.upper() in LOADER_ENV or is_loader_variable(key):
            for agent in _agent_names(_expand(value, env), responses=True):
                problems.append(
                    _problem(
                        hook,
                        f"action.env.{key}",
                        f"{_chosen(agent)}, and {key} chooses what a "
                        "program loads or runs; pass the value in a variable of its own name",
                    )
                )
    return problems


def _safe_name(agent: _Agent) -> str:
    return agent.via or agent.name


def _not_in_command(agent: _Agent) -> str:
    name = _safe_name(agent)
    return (
        f"{_chosen(agent)} and may not stand in command: (many programs run an argument as "
        "code or read it as an option). Pass it through the script's environment, "
        f'env: {{{name}: "${{{name}}}"}}, and read it as "${name}" in the script, or read it '
        "from the JSON event on the script's stdin; for a program that treats its arguments "
        "as data only, see agent_values_in_args: true"
    )


def _argument_problems(hook: HookSpec, argv: list[list[_Piece]]) -> list[Problem]:
    """With `agent_values_in_args: true`: agent values may stand only in plain data
    arguments, never in the program, in program text, or in an option or its value."""
    command = hook.action.command
    problems: list[Problem] = []

    def refuse(index: int, agent: _Agent, why: str) -> None:
        problems.append(_problem(hook, f"action.command[{index}]", f"{_chosen(agent)} and {why}"))

    program_at = _program_index(command)
    program = _base_name(command[program_at]) if program_at is not None else "env"
    # A wrapper in front (`timeout ${X} prog`) takes its own arguments too: none for agents.
    runs_arguments = (
        program_at is None
        or program in COMMAND_RUNNERS
        or _base_name(command[0]) in COMMAND_RUNNERS
    )
    script_at = _program_text_index(command, program_at)
    if script_at is None:
        script_at = _env_split_index(command)
    options_ended = False
    for index, pieces in enumerate(argv):
        agents = _agent_names(pieces, responses=True)
        if command[index] == "--" and index > 0:
            options_ended = True
        if not agents:
            continue
        agent = agents[0]
        if index == 0 or index == program_at:
            refuse(index, agent, "names the program to run; write the program literally")
        elif index == script_at:
            refuse(index, agent, f"stands inside the program text that {program} runs")
        elif runs_arguments:
            refuse(
                index,
                agent,
                f"is an argument of {program}, which runs its arguments as code or as a "
                "command, so agent_values_in_args does not apply; pass it through env: "
                f'({{{_safe_name(agent)}: "${{{_safe_name(agent)}}}"}}) or the stdin JSON',
            )
        elif not options_ended and (
            command[index].startswith("-") or command[index - 1].startswith("-")
        ):
            refuse(
                index,
                agent,
                "stands in an option or an option's value; put agent values only in plain "
                'arguments after a literal "--" (["/opt/notify", "--", "${'
                f'{_safe_name(agent)}}}"])',
            )
    return problems


@functools.lru_cache(maxsize=1024)  # asked of every variable of a root script's environment
def is_loader_variable(name: str) -> bool:
    """Whether the environment variable `name` makes a program (the dynamic loader, a shell,
    an interpreter) load or run code from where its value says."""
    upper = name.upper()
    return upper in LOADER_ENV or upper.startswith(_LOADER_PREFIXES)


def _base_name(program: str) -> str:
    """`/usr/bin/python3.12` -> `python`; `bash` -> `bash`."""
    name = os.path.basename(program)
    for interpreter in INTERPRETERS:
        if name.startswith(interpreter) and name[len(interpreter) :].strip("0123456789.") == "":
            return interpreter
    return name


def _program_index(command: tuple[str, ...]) -> int | None:
    """Where the program that really runs stands, past wrappers such as `env FOO=1` or
    `timeout 5`; None when a wrapper's `env -S` string is the command."""
    index = 0
    while index < len(command):
        name = _base_name(command[index])
        if name not in WRAPPERS:
            return index
        value_options, positionals = WRAPPERS[name]
        index += 1
        # The wrapper's options (and their values) and env's NAME=value assignments.
        while index < len(command) and (
            command[index].startswith("-") or (name == "env" and "=" in command[index])
        ):
            if name == "env" and command[index].startswith(_ENV_SPLIT):
                return None
            if command[index] in value_options:
                index += 1
            index += 1
        index += positionals
    return None


def _env_split_index(command: tuple[str, ...]) -> int | None:
    """The argument `env -S` / `--split-string` runs as a command line, if any."""
    for index, arg in enumerate(command[:-1]):
        if _base_name(arg) != "env":
            continue
        for offset, option in enumerate(command[index + 1 :], start=index + 1):
            if option in _ENV_SPLIT:
                return offset + 1 if offset + 1 < len(command) else None
            if option.startswith(_ENV_SPLIT):
                return offset  # -S'...' or --split-string=...
            if not (option.startswith("-") or "=" in option):
                break
    return None


def _program_text_index(command: tuple[str, ...], program_at: int | None) -> int | None:
    """The argument a shell's `-c` or an interpreter's `-c` / `-e` runs as program text."""
    if program_at is None or program_at >= len(command):
        return None
    program = _base_name(command[program_at])
    args = command[program_at + 1 :]
    if program == "busybox" and args and args[0] in SHELLS:
        program_at, args, program = program_at + 1, args[1:], "sh"
    if program in SHELLS:
        seen_c = False
        offset = 0
        while offset < len(args):
            arg = args[offset]
            if arg in ("-o", "+o", "-O", "+O"):
                offset += 2  # an option that takes a value (-o pipefail)
                continue
            if arg.startswith(("-", "+")) and len(arg) > 1:
                if not arg.startswith("--"):
                    seen_c = seen_c or "c" in arg[1:]
                offset += 1  # a flag (-e, -ec), or a long option (--norc, --login)
                continue
            return program_at + 1 + offset if seen_c else None
        return None
    flags = INTERPRETERS.get(program)
    if flags is None:
        return None
    for offset, arg in enumerate(args):
        if arg in flags and offset + 1 < len(args):
            return program_at + 2 + offset
        if not arg.startswith("-"):
            return None  # a script file: its arguments are data
    return None
