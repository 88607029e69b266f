"""Whether a script hook would run, as root, a file that someone other than root could replace.

Seed 000 runs script hooks as the agent's user. When they would run as root, every file the
command makes root execute must be root's alone to change:

- the program (argv[0], looked up on the script's PATH as exec does), the interpreter its
  `#!` line names, and the script file an interpreter is given (`sh /x/s.sh`,
  `python3 -u x.py`, `node x.js`, `env python3 x.py`, ...; see `INTERPRETERS`);
- each must be owned by root, and writable by neither its group nor others;
- so must every directory above it, on the path as written and on the resolved one (whoever
  can write a directory can rename what is in it and put another file in its place), with one
  exception: a directory that is sticky and owned by root (`/tmp`, mode 1777), since there
  only an entry's owner can rename or remove it, and the entry itself must be root's;
- every other argument that names an existing file or directory, whole or as an option's
  attached value (`awk -f /x/a.awk`, `node -r /x/m.js`, `flock /x/lock`, `--rcfile=/x/rc`),
  follows the same rule: what root reads, runs or acts on must be root's alone (a root-owned
  sticky directory such as `/tmp` may be named), and so must the directory an absolute path
  that does not exist yet would be made in; so must what the environment's loader
  variables name (`BASH_ENV`, `PYTHONPATH`, `LD_PRELOAD`, ...);
- options that load code by a name looked up on a search path are refused: `python3 -m`
  (also in a cluster, `-um`), and, unless their value is an absolute path (then checked as
  above), `node -r/--require/--import/--loader`, `perl -M/-m`, `ruby -r`, `lua -l`, gawk's
  `-i/-l`; so is `env -S`, which splits a string into a command.

Inline code (`sh -c '...'`, `python3 -c`, `node -e`) is the template's own text, not a file,
and is not checked here. A program that does not exist passes: starting it reports that.

This is a guard, not a proof: a program may still read a file it finds by itself (a config
in HOME, a plugin directory, what an inline script opens). Root hooks also run confined
(actions/script.py: `/` as working directory, no loader variables); the way not to need it
is to run hooks as the agent's user, the default.

Pure reads (`os.stat`, at most one read of a script's first line); no state.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
from collections.abc import Mapping, Sequence

from ..template.trust import is_loader_variable

# How each interpreter is told where its program is:
#   inline   options whose value is program text (nothing to check)
#   valued   options that take the next argument as their value
#   files    options whose value is a program file
#   module   options whose value names a module found on a search path
_SHELL = {"inline": {"-c"}, "valued": {"-o", "+o", "-O", "+O"}, "files": set(), "module": set()}
INTERPRETERS: Mapping[str, Mapping[str, set[str]]] = {
    "sh": _SHELL,
    "bash": _SHELL,
    "dash": _SHELL,
    "zsh": _SHELL,
    "ksh": _SHELL,
    "mksh": _SHELL,
    "ash": _SHELL,
    "python": {
        "inline": {"-c"},
        "valued": {"-W", "-X", "--check-hash-based-pycs"},
        "files": set(),
        "module": {"-m"},
    },
    "node": {
        "inline": {"-e", "--eval", "-p", "--print"},
        "valued": {"-r", "--require", "--import", "--loader", "--input-type", "-C"},
        "files": set(),
        "module": set(),
    },
    "perl": {"inline": {"-e", "-E"}, "valued": {"-I", "-M", "-m"}, "files": set(), "module": set()},
    "ruby": {"inline": {"-e"}, "valued": {"-I", "-r", "-C"}, "files": set(), "module": set()},
    "php": {"inline": {"-r"}, "valued": {"-c", "-d", "-z"}, "files": {"-f"}, "module": set()},
    "lua": {"inline": {"-e"}, "valued": {"-l"}, "files": set(), "module": set()},
}
# Versioned names: python3, python3.11, pypy3, nodejs, perl5.36, lua5.4, php8.2, ...
_NAME = re.compile(r"(python|pypy|node|nodejs|perl|ruby|php|lua|luajit)[\d.]*")
_ALIASES = {"pypy": "python", "nodejs": "node", "luajit": "lua"}

# Programs that run the rest of their arguments as a command: (options taking a value,
# number of leading positional arguments they take before the command).
WRAPPERS: Mapping[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "exec": (frozenset(), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}), 0),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "xargs": (frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
}
# Options that make a program load code named by their value, looked up on a search path
# when it is not a path (`node -r module`, `perl -MModule`, `lua -l mod`), or that split a
# string into a command (`env -S`): refused as root, as this guard cannot follow them. A
# value that is a path is checked with every other argument (see `files_named`).
CODE_OPTIONS: Mapping[str, frozenset[str]] = {
    "node": frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"}),
    "perl": frozenset({"-M", "-m"}),
    "ruby": frozenset({"-r"}),
    "lua": frozenset({"-l"}),
    "awk": frozenset({"-i", "--include", "-l", "--load"}),
    "env": frozenset({"-S", "--split-string"}),
}
_AWK = re.compile(r"[gmn]?awk")


class _Unsafe(Exception):
    pass


def unsafe_as_root(
    argv: Sequence[str] | str, env: Mapping[str, str], user: str | None, cwd: str | None = None
) -> str | None:
    """Why running `argv` as root would be unsafe, or None when it is not (or would not run
    as root: this process is not root, or `user` names another account). `cwd`: the
    directory it will run in (None: this process's)."""
    if os.geteuid() != 0 or _names_another_user(user):
        return None
    command = (argv,) if isinstance(argv, str) else tuple(argv)
    checked: set[str] = set()
    try:
        _refuse_code_options(command)
        named = (*files_run(command, env, cwd), *files_named(command, cwd))
        for path in (*named, *files_loaded(env, cwd)):
            _check_file(path, checked)
    except _Unsafe as refusal:
        return f"{refusal}: refusing to run it as root; {_REMEDY}"
    return None


_REMEDY = (
    "make it and every directory above it root's alone (chown root, chmod go-w), "
    "or run hooks as the agent's user"
)


def unsafe_code_file_as_root(
    path: str, purpose: str = "refusing to load it into a process running as root"
) -> str | None:
    """Why using the file `path` in this process would be unsafe, or None (this process is
    not root, or the file and every directory above it are root's alone): for what decides
    what runs with the process's rights whatever the agent's user (an in-process executor, a
    template). `purpose` says what is refused, in the message."""
    if os.geteuid() != 0:
        return None
    try:
        _check_file(path, set())
    except _Unsafe as refusal:
        return (
            f"{refusal}: {purpose}; make it and every directory above it root's alone "
            "(chown root, chmod go-w)"
        )
    return None


def files_run(argv: Sequence[str], env: Mapping[str, str], cwd: str | None = None) -> list[str]:
    """The files `argv` makes the system execute or an interpreter read as its program:
    the program, its `#!` interpreter, and the interpreter's script, through wrappers."""
    found: list[str] = []
    rest = list(argv)
    while rest:
        program = _resolve(rest[0], env, cwd)
        if program is None:
            return found  # not found: starting it will say so
        found.append(program)
        found.extend(_shebang_interpreter(program))
        name = os.path.basename(rest[0])
        if name in WRAPPERS:
            rest = _wrapped_command(rest[1:], *WRAPPERS[name])
            continue
        rules = _interpreter_rules(name)
        if rules is not None:
            script = _script_argument(rest[1:], rules)
            if script is not None:
                found.append(_absolute(script, cwd))
        return found
    return found


def files_named(argv: Sequence[str], cwd: str | None = None) -> list[str]:
    """Every existing file or directory an argument names: as a whole (`/x/a.awk`), as an
    option's attached value (`--require=/x/m.js`, `-f/x/a.awk`, `-I/x/lib`). As root, each
    must be root's alone, whatever the program does with it: a list of the options that load
    code could never be complete, and root acting on a path another user controls is how a
    symlink swap or a replaced file turns into root's rights."""
    found: list[str] = []
    for arg in argv[1:]:
        candidates = [arg]
        if arg.startswith("-") and len(arg) > 2:
            if arg.startswith("--"):
                candidates.append(arg.partition("=")[2])
            else:
                candidates.append(arg[2:])
        for candidate in candidates:
            if not candidate or "\0" in candidate:
                continue
            path = _absolute(candidate, cwd)
            try:
                mode = os.lstat(path).st_mode
            except (OSError, ValueError):
                # Not there yet: whoever can write the directory it would be in can make it.
                # (A relative word that names nothing is no path: "-W ignore", a URL.)
                if candidate.startswith("/"):
                    found.extend(_nearest_directory(path))
                continue
            # Devices, sockets and pipes (/dev/null) hold no code; a symlink is followed.
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                found.append(path)
    return found


def _nearest_directory(path: str) -> list[str]:
    """The closest existing directory above the missing `path` (none: an empty list)."""
    parent = os.path.dirname(path)
    while parent and parent != "/":
        if os.path.isdir(parent):
            return [parent]
        parent = os.path.dirname(parent)
    return []


def files_loaded(env: Mapping[str, str], cwd: str | None = None) -> list[str]:
    """The existing files and directories the environment's loader variables name
    (`BASH_ENV=/x/rc`, `PYTHONPATH=/a:/b`, `LD_PRELOAD=/x.so`, ...; PATH is the programs',
    checked where they are found): the shell, the loader or the interpreter reads code from
    them before the program's own."""
    found: list[str] = []
    for name in env:  # names first: a value of os.environ costs a decode to read
        if name == "PATH" or not is_loader_variable(name):
            continue
        for part in env[name].replace(" ", ":").split(":"):
            if "/" not in part or "\0" in part:
                continue  # not a path (PYTHONUNBUFFERED=1); "./x" and "lib/x" are
            path = _absolute(part, cwd)
            if os.path.lexists(path):
                found.append(path)
    return found


def _refuse_code_options(argv: Sequence[str]) -> None:
    """Raises `_Unsafe` for an option that loads code by a name this guard cannot follow
    (see `CODE_OPTIONS`), anywhere in the command: wrappers pass them on."""
    for index, arg in enumerate(argv):
        name = os.path.basename(arg)
        family = _family(name)
        if family is None:
            continue
        options = CODE_OPTIONS.get(family, frozenset())
        rest = argv[index + 1 :]
        for offset, following in enumerate(rest):
            if following == "--":
                break
            if not following.startswith("-"):
                continue  # an option's value, or an operand: options may follow either
            option, _, value = (
                following.partition("=")
                if following.startswith("--")
                else (following[:2], "", following[2:])
            )
            if option not in options:
                continue
            if not value and offset + 1 < len(rest):
                value = rest[offset + 1]
            # A path is checked with every other argument (`files_named`); a name is looked
            # up where this guard cannot follow, and env -S's string is a whole command.
            if family == "env" or not value.startswith("/"):
                raise _Unsafe(
                    f"{following!r} makes {name} load code found on a search path (or a "
                    "command line it splits), which this guard cannot check"
                )


def _family(name: str) -> str | None:
    """`node` for nodejs, `awk` for gawk, `env` for env; None for programs without
    code-loading options."""
    if name == "env":
        return "env"
    if _AWK.fullmatch(name):
        return "awk"
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return _ALIASES.get(match.group(1), match.group(1))


def _absolute(path: str, cwd: str | None) -> str:
    if path.startswith("/"):
        return path
    return os.path.normpath(os.path.join(cwd or os.getcwd(), path))


def _resolve(program: str, env: Mapping[str, str], cwd: str | None = None) -> str | None:
    """Where exec finds `program`: a path as given (whether it exists is checked with the
    rest), else the first match on `env`'s PATH (None: nowhere)."""
    if "/" in program:
        return _absolute(program, cwd)
    return shutil.which(program, path=env.get("PATH", os.defpath))


# Interpreters already read from `#!` lines, by the file's identity: a script is spawned again
# and again, and a changed or replaced file has another identity (size, mtime, ctime, inode).
_shebangs: dict[tuple[str, int, int, int, int, int], list[str]] = {}
_SHEBANGS_LIMIT = 256


def _shebang_interpreter(path: str) -> list[str]:
    """The interpreter a `#!` line names (its first word), if `path` is a script."""
    try:
        info = os.stat(path)
    except OSError:
        return []
    key = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _shebangs.get(key)
    if known is not None:
        return [found for found in known if os.path.exists(found)]
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return []
    interpreter: list[str] = []
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].split()
        if words and os.path.isabs(os.fsdecode(words[0])):
            interpreter = [os.fsdecode(words[0])]
    if len(_shebangs) >= _SHEBANGS_LIMIT:
        _shebangs.clear()
    _shebangs[key] = interpreter
    return [found for found in interpreter if os.path.exists(found)]


def _interpreter_rules(name: str) -> Mapping[str, set[str]] | None:
    if name in INTERPRETERS:
        return INTERPRETERS[name]
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    family = _ALIASES.get(match.group(1), match.group(1))
    return INTERPRETERS.get(family)


def _script_argument(args: Sequence[str], rules: Mapping[str, set[str]]) -> str | None:
    """The script file an interpreter's arguments name, or None (inline code, stdin)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return args[index + 1] if index + 1 < len(args) else None
        if arg == "-" or not arg.startswith(("-", "+")):
            return None if arg == "-" else arg
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if option in rules["inline"]:
            return None
        if option in rules["module"] or arg[:2] in rules["module"] or _clustered(arg, rules):
            raise _Unsafe(f"{arg!r} runs a module looked up on a search path this cannot check")
        if option in rules["files"]:
            return args[index + 1] if index + 1 < len(args) else None
        # A valued option takes the next argument, unless its value is attached (-Wignore).
        takes_next = option in rules["valued"] and "=" not in arg
        index += 2 if takes_next else 1
    return None


def _clustered(arg: str, rules: Mapping[str, set[str]]) -> bool:
    """A cluster of one-letter flags (`-um`, `-Im`) that holds a module option."""
    if arg.startswith("--") or len(arg) < 3 or not arg[1:].isalpha():
        return False
    return any(f"-{letter}" in rules["module"] for letter in arg[1:])


def _wrapped_command(args: Sequence[str], valued: frozenset[str], positional: int) -> list[str]:
    """What a wrapper (`env`, `nice`, `timeout 5`, ...) runs: its arguments after its own."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if arg.startswith("-") and arg != "-":
            index += 2 if arg in valued else 1
            continue
        if "=" in arg and not arg.startswith("="):
            index += 1  # env's NAME=VALUE
            continue
        break
    return list(args[index + positional :])


def _check_file(path: str, checked: set[str]) -> None:
    """Raises `_Unsafe` when `path`, or a directory above it, is not root's alone.
    `checked`: directories found safe already in this check (the programs of one command
    share most of theirs)."""
    try:
        info = os.lstat(path)
        through_symlink = stat.S_ISLNK(info.st_mode)
        if through_symlink:
            info = os.stat(path)
    except OSError:
        return  # missing or unreadable: starting it reports that
    if stat.S_ISDIR(info.st_mode):
        _check_directory(path, info, of=path)  # a sticky root directory (/tmp) is fine
    elif info.st_uid != 0 or info.st_mode & _GROUP_OR_OTHER_WRITE:
        _check_owned_by_root(path, info, "")
    absolute = path if path.startswith("/") else os.path.abspath(path)
    through_symlink = _check_directories(absolute, path, checked) or through_symlink
    if through_symlink:  # where the symlinks lead must be root's alone too
        _check_directories(_real_path(path), path, checked)


def _check_directories(resolved: str, of: str, checked: set[str]) -> bool:
    """Checks each directory above `resolved` (lstat: a symlink's own mode means nothing,
    its directory is checked next); whether one of them was a symlink."""
    through_symlink = False
    cut = resolved.rfind("/")
    while cut >= 0:
        directory = resolved[:cut] or "/"
        if directory in checked:
            break
        try:
            info = os.lstat(directory)
        except OSError:
            break
        if stat.S_ISLNK(info.st_mode):
            through_symlink = True
        elif info.st_uid != 0 or info.st_mode & _GROUP_OR_OTHER_WRITE:
            _check_directory(directory, info, of=of)
        checked.add(directory)
        cut = resolved.rfind("/", 0, cut) if cut else -1
    return through_symlink


_GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _real_path(path: str) -> str:
    """`path` with every symlink resolved: asked of the kernel (an O_PATH descriptor's name
    in /proc), which is several times cheaper than resolving it component by component."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (AttributeError, OSError):
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def _check_owned_by_root(path: str, info: os.stat_result, what: str) -> None:
    problems = []
    if info.st_uid != 0:
        problems.append(f"is owned by uid {info.st_uid}, not root")
    writable = _writable_by(info.st_mode)
    if writable:
        problems.append(f"is writable by {writable} (mode {_mode(info)})")
    if problems:
        raise _Unsafe(f"{what}{path!r} {' and '.join(problems)}")


def _check_directory(directory: str, info: os.stat_result, of: str) -> None:
    what = "the directory " if of == directory else f"the directory above {of!r}, "
    if info.st_uid != 0:
        raise _Unsafe(f"{what}{directory!r}, is owned by uid {info.st_uid}, not root")
    writable = _writable_by(info.st_mode)
    # Sticky and root's: only an entry's owner may rename or remove it, and entries on the
    # way to the file are checked to be root's.
    if writable and not info.st_mode & stat.S_ISVTX:
        raise _Unsafe(
            f"{what}{directory!r}, is writable by {writable} and not sticky (mode {_mode(info)})"
        )


def _writable_by(mode: int) -> str:
    if mode & stat.S_IWOTH:
        return "others"
    if mode & stat.S_IWGRP:
        return "its group"
    return ""


def _mode(info: os.stat_result) -> str:
    return format(stat.S_IMODE(info.st_mode), "04o")


def _names_another_user(user: str | None) -> bool:
    if user is None:
        return False

    try:
        return pwd.getpwnam(user).pw_uid != 0
    except KeyError:
        return True  # an unknown user is refused on its own, before anything runs
