"""`run` with OTLP/http export: the session, hook and CLIENT spans and the
`http.client.request.duration` histogram reach a real OTLP receiver on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.otlp_http_receiver import OtlpHttpReceiver
from tests.support.target_server import Reply, TargetServer

HTTPX_SCOPE = "opentelemetry.instrumentation.httpx"


def write_template(path: Path, url: str) -> Path:
    path.write_text(
        "lifecycle_hooks:\n"
        "  - name: register\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{url}"\n'
        '      body: \'{"agent": "${AGENT_NAME}"}\'\n'
    )
    return path


def run_exporting(
    python: str, template: Path, endpoint: str, home: Path
) -> subprocess.CompletedProcess[str]:
    """`python -m otel_lifecycle_hooks run -t template -- true`, exporting over OTLP/http."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(home),
        "SCION_HOOKS_DIR": str(home / "no-legacy-hooks"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_SERVICE_NAME": "run-export-check",
    }
    return subprocess.run(
        [python, "-m", "otel_lifecycle_hooks", "run", "-t", str(template), "--", "true"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def assert_exported(receiver: OtlpHttpReceiver) -> None:
    def arrived() -> bool:
        names = {span.name for _, span in receiver.spans()}
        return (
            any(name.startswith("agent.lifecycle_hook ") for name in names)
            and any(name.startswith("invoke_agent") for name in names)
            and any(scope == HTTPX_SCOPE for scope, _ in receiver.spans())
            and "http.client.request.duration" in receiver.metric_names()
        )

    receiver.wait_for(arrived)
    spans = receiver.spans()
    (hook,) = [span for _, span in spans if span.name.startswith("agent.lifecycle_hook ")]
    (client,) = [span for scope, span in spans if scope == HTTPX_SCOPE]
    assert client.parent_span_id == hook.span_id
    assert {a.key for a in client.attributes} >= {"http.request.method", "url.full"}


def test_run_exports_the_client_span_and_its_duration_histogram(tmp_path: Path) -> None:
    with TargetServer() as target, OtlpHttpReceiver() as receiver:
        target.always("/register", Reply(201))
        template = write_template(tmp_path / "agent.yaml", target.url("/register"))
        done = run_exporting(sys.executable, template, receiver.endpoint, tmp_path)

        assert done.returncode == 0, done.stderr
        assert_exported(receiver)
