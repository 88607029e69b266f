"""Reading the runnable parts of a docs page, running them, and comparing what they print.

A page opts in with `<!-- docs-test: runnable -->`. In such a page every fenced block is one of:

- a block whose lines start with `$ `: each command runs (`sh -c`, in the page's sandbox) and
  the lines after it, if any, are what it must print (stdout and stderr, as a terminal shows);
- a `sh` block without prompts: each line is a command that must succeed;
- in both, a line ending in a backslash continues on the next, as in sh;
- a block after `<!-- docs-test: file NAME -->`: written to NAME in the sandbox;
- a block after `<!-- docs-test: output-of CMD -->`: what CMD must print;
- a block after `<!-- docs-test: skip REASON -->`: not run (the reason says why);
- a block of commands after `<!-- docs-test: receives NAME, ... -->`: run, and then the
  collector of a page marked `<!-- docs-test: collector -->` must have received spans of those
  names (tests/docs/test_docs_run.py runs it and points OTEL_EXPORTER_OTLP_ENDPOINT at it).

Any other block of a runnable page is an error, so nothing a page shows escapes the test.

Expected output is compared after both sides are normalized (timestamps, durations, short trace
ids, bars and runs of spaces); a line `...` stands for any lines, and a line ending in `...`
for any line starting with what precedes it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

RUNNABLE = "<!-- docs-test: runnable -->"
_MARKER = re.compile(
    r"<!--\s*docs-test:\s*(?P<kind>file|output-of|skip|receives)\s*(?P<arg>.*?)\s*-->"
)
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<info>[^`]*)$")  # also in a list item


@dataclass
class Block:
    """One fenced block of a page and what the page says to do with it."""

    line: int  # 1-based line of the opening fence
    info: str
    text: str
    marker: str | None = None  # file | output-of | skip
    argument: str = ""


@dataclass
class Step:
    """A command and what it must print (None: only that it succeeds)."""

    where: str  # page:line
    command: str
    expected: list[str] | None
    check_exit: bool = True
    # Span names a collector must have received once this step ran (`receives` marker).
    receives: list[str] = field(default_factory=list)


def is_runnable(page: Path) -> bool:
    return RUNNABLE in page.read_text(encoding="utf-8")


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the marker right before it, if any."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    marker: tuple[str, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _MARKER.search(line)
        if match:
            marker = (match.group("kind"), match.group("arg"))
        fence = _FENCE.match(line)
        if fence:
            body: list[str] = []
            start = index
            index += 1
            indent = len(fence.group("indent"))
            while index < len(lines) and lines[index].strip() != fence.group("fence"):
                body.append(lines[index][indent:])
                index += 1
            kind, argument = marker or (None, "")
            found.append(
                Block(
                    start + 1, fence.group("info").strip(), "\n".join(body) + "\n", kind, argument
                )
            )
            marker = None
        elif line.strip() and not match:
            marker = None  # a marker applies to the block right after it
        index += 1
    return found


@dataclass
class Sandbox:
    """Where a page's commands run: its own HOME, state and files."""

    root: Path
    bin_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        home = self.root / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "HOME": str(home),
            "NO_COLOR": "1",
            # Each stream is written as it happens (a pipe would buffer stdout, not stderr).
            "PYTHONUNBUFFERED": "1",
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.root),
        }

    def run(self, command: str, timeout: float = 120.0) -> tuple[int, str, str]:
        """(exit code, stdout, stderr): the streams apart, since a page shows them as a terminal
        would, interleaved in an order that two processes writing at once do not fix."""
        result = subprocess.run(
            ["sh", "-c", command],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return result.returncode, result.stdout, result.stderr


def steps(page: Path, sandbox: Sandbox) -> list[Step | str]:
    """The page's steps, in order; a str is an error (a block with nothing to say how to run)."""
    name = page.name
    out: list[Step | str] = []
    for block in blocks(page):
        where = f"{name}:{block.line}"
        if block.marker == "skip":
            if not block.argument:
                out.append(f"{where}: docs-test skip needs a reason")
            continue
        if block.marker == "file":
            target = sandbox.root / block.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            continue
        if block.marker == "output-of":
            out.append(Step(where, block.argument, block.text.splitlines(), check_exit=False))
            continue
        lines = block.text.splitlines()
        start = len(out)
        if any(line.startswith("$ ") for line in lines):
            out.extend(_prompt_steps(where, lines))
        elif block.info in ("sh", "bash", "shell"):
            for line in _joined(lines):
                command = line if "\n" in line else line.split(" #", 1)[0].strip()
                if command and not command.startswith("#"):
                    out.append(Step(where, command, None))
        else:
            out.append(
                f"{where}: a ```{block.info} block of a runnable page needs a docs-test marker "
                "(file NAME, output-of CMD or skip REASON) or $ prompts"
            )
        if block.marker == "receives":
            block_steps = [step for step in out[start:] if isinstance(step, Step)]
            if not block_steps:
                out.append(f"{where}: docs-test receives needs a block of commands")
            else:
                names = [name.strip() for name in block.argument.split(",") if name.strip()]
                block_steps[-1].receives = names
    return out


def _joined(lines: list[str]) -> list[str]:
    """Lines with each command continued by a trailing backslash kept as one (as sh reads it)."""
    joined: list[str] = []
    continued = False
    for line in lines:
        if continued:
            joined[-1] += "\n" + line
        else:
            joined.append(line)
        continued = line.endswith("\\")
    return joined


def _prompt_steps(where: str, lines: list[str]) -> list[Step | str]:
    result: list[Step | str] = []
    if not lines[0].startswith("$ "):
        return [f"{where}: output before the first $ prompt"]
    current: Step | None = None
    for line in _joined(lines):
        if line.startswith("$ "):
            current = Step(where, line[2:], [], check_exit=False)
            result.append(current)
        elif current is not None and current.expected is not None:
            current.expected.append(line)
    return result


_NORMALIZE = (
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z"), "<TIME>"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s)\b"), "<DURATION>"),
    (re.compile(r"\btrace [0-9a-f]{8}\b"), "trace <ID>"),
    (re.compile(r"█+"), "█"),
    (re.compile(r"[ \t]+"), " "),
)


def normalize(line: str) -> str:
    for pattern, replacement in _NORMALIZE:
        line = pattern.sub(replacement, line)
    return line.strip()


def mismatch(expected: list[str], actual: str, stderr: str = "") -> str | None:
    """Why `actual` (stdout) and `stderr` are not what `expected` shows, or None when they are.

    The page shows both streams as one; each stream's lines must keep their order, but the two
    may interleave in any way (an agent's output and `run`'s report lines race)."""
    want = _trimmed([normalize(line) for line in expected])
    out = _trimmed([normalize(line) for line in actual.splitlines()])
    err = _trimmed([normalize(line) for line in stderr.splitlines()])
    if _matches(want, out, err):
        return None
    shown = actual.splitlines() + stderr.splitlines()
    return "expected:\n  " + "\n  ".join(expected) + "\ngot:\n  " + "\n  ".join(shown)


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _fits(head: str, line: str) -> bool:
    return line.startswith(head[:-3].rstrip()) if head.endswith("...") else line == head


def _matches(want: list[str], out: list[str], err: list[str]) -> bool:
    if not want:
        return not out and not err
    head = want[0]
    if head == "...":
        return any(
            _matches(want[1:], out[i:], err[j:])
            for i in range(len(out) + 1)
            for j in range(len(err) + 1)
        )
    if out and _fits(head, out[0]) and _matches(want[1:], out[1:], err):
        return True
    return bool(err) and _fits(head, err[0]) and _matches(want[1:], out, err[1:])


def bin_dir() -> Path:
    """The directory of the interpreter running the tests, holding the console script."""
    import sys

    return Path(sys.executable).parent


__all__ = ["Sandbox", "Step", "bin_dir", "blocks", "is_runnable", "mismatch", "steps"]
