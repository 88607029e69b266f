"""The docs test's reader: markers, prompts and the comparison of outputs."""

from __future__ import annotations

from pathlib import Path

from tests.docs.runnable import Sandbox, Step, bin_dir, mismatch, normalize, steps

PAGE = """\
# A page
<!-- docs-test: runnable -->

<!-- docs-test: file hello.txt -->
```text
hello
```

```text
$ cat hello.txt
hello
$ echo one; echo two; echo three
one
...
```

```sh
true  # a comment
```

<!-- docs-test: output-of printf 'a 10ms\\nb\\n' -->
```text
a 7132ms
b
```

<!-- docs-test: skip needs the network -->
```sh
curl https://example.com
```

```yaml
unmarked: true
```
"""


def test_a_page_is_read_into_files_commands_outputs_and_errors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    sandbox = Sandbox(tmp_path / "sandbox", bin_dir())
    found = steps(page, sandbox)
    assert (sandbox.root / "hello.txt").read_text() == "hello\n"
    commands = [step.command for step in found if isinstance(step, Step)]
    assert commands == [
        "cat hello.txt",
        "echo one; echo two; echo three",
        "true",
        "printf 'a 10ms\\nb\\n'",
    ]
    errors = [step for step in found if isinstance(step, str)]
    assert len(errors) == 1 and "page.md:32: a ```yaml block" in errors[0]
    for step in found:
        if isinstance(step, Step) and step.expected:
            _, output, errors = sandbox.run(step.command)
            assert mismatch(step.expected, output, errors) is None, step


def test_outputs_compare_without_timestamps_durations_or_alignment() -> None:
    assert normalize("2026-11-30T10:34:44.267Z  x   7.141s   ████") == "<TIME> x <DURATION> █"
    assert mismatch(["a 3ms", "..."], "a 10ms\nb\nc\n") is None
    assert mismatch(["valid events are ..."], "valid events are pre-start, post-start\n") is None
    assert mismatch(["6:10: problem"], "3:10: problem\n") is not None
    assert mismatch(["one", "two"], "one\n") is not None
    assert mismatch(["out", "err", "out2"], "out\nout2\n", "err\n") is None
    assert mismatch(["out2", "out"], "out\nout2\n") is not None
    assert mismatch(["err"], "", "err\nmore\n") is not None


def test_a_command_continued_with_a_backslash_runs_as_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: runnable -->\n"
        "```sh\nGREETING=hello \\\n  sh -c 'echo $GREETING'\ntrue\n```\n"
        "```text\n$ GREETING=hi \\\n  sh -c 'echo $GREETING'\nhi\n```\n"
    )
    sandbox = Sandbox(tmp_path / "sandbox", bin_dir())
    found = [step for step in steps(page, sandbox) if isinstance(step, Step)]
    assert [(step.command, step.expected) for step in found] == [
        ("GREETING=hello \\\n  sh -c 'echo $GREETING'", None),
        ("true", None),
        ("GREETING=hi \\\n  sh -c 'echo $GREETING'", ["hi"]),
    ]
    assert sandbox.run(found[0].command)[1] == "hello\n"


def test_a_receives_marker_names_the_spans_its_blocks_last_command_must_have_sent(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: runnable -->\n<!-- docs-test: collector -->\n"
        "<!-- docs-test: receives invoke_agent planner, agent.lifecycle_hook -->\n"
        "```text\n$ true\n$ python app.py\n```\n"
        "<!-- docs-test: receives nothing -->\n```yaml\na: 1\n```\n"
    )
    found = steps(page, Sandbox(tmp_path / "sandbox", bin_dir()))
    commands = [step for step in found if isinstance(step, Step)]
    assert [(step.command, step.receives) for step in commands] == [
        ("true", []),
        ("python app.py", ["invoke_agent planner", "agent.lifecycle_hook"]),
    ]
    errors = [step for step in found if isinstance(step, str)]
    assert len(errors) == 2 and "needs a block of commands" in errors[1]
