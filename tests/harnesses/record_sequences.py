"""Record the raw hook payloads each real harness sends, one JSON object per line.

    python -m tests.harnesses.record_sequences OUTPUT_DIR

writes `<harness>-<scenario>.jsonl` for every scenario of tests/harnesses/scenarios.py. The hook
program is a small wrapper that appends the payload (stdin, or Codex notify's last argument)
to the file, then hands it on to `otel-lifecycle-hooks hook` unchanged.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.harnesses import scenarios
from tests.harnesses.real import HARNESS_CLASSES, harness_binary
from tests.harnesses.session import PACKAGE_CLI

WRAPPER = """\
import json, os, subprocess, sys
record, program, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if args and args[-1].lstrip().startswith("{"):
    raw, stdin = args[-1].encode(), b""
else:
    raw = stdin = sys.stdin.buffer.read()
try:
    line = json.dumps(json.loads(raw), ensure_ascii=False)
except ValueError:
    line = json.dumps({"unparsed": raw.decode("utf-8", "replace")})
with open(record, "a", encoding="utf-8") as out:
    out.write(line + "\\n")
completed = subprocess.run([program, *args], input=stdin, stdout=sys.stdout)
sys.exit(completed.returncode)
"""


def record(output: Path) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, harness_class in sorted(HARNESS_CLASSES.items()):
        harness = harness_class(harness_binary(name))
        for scenario_name, make in scenarios.SCENARIOS.items():
            scenario = make(name)
            if scenario is None:
                continue
            target = output / f"{name}-{scenario_name}.jsonl"
            target.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory() as scratch:
                wrapper = Path(scratch) / "record_hook.py"
                wrapper.write_text(WRAPPER)
                program = [sys.executable, str(wrapper), str(target), str(PACKAGE_CLI)]
                result = harness.run(
                    Path(scratch) / "session",
                    scenario.script,
                    extra=scenario.extra,
                    program=program,
                    after_install=scenario.after_install,
                )
                if result.returncode != 0:
                    print(f"{name} {scenario_name}: exit {result.returncode}", file=sys.stderr)
                # The session's scratch folder is this run's alone: a stable name instead.
                # So is the package's install folder.
                text = target.read_text().replace(scratch, "/tmp/session-root")
                target.write_text(text.replace(str(PACKAGE_CLI), "otel-lifecycle-hooks"))
            written.append(target)
    return written


if __name__ == "__main__":
    for path in record(Path(sys.argv[1]).absolute()):
        print(path)
