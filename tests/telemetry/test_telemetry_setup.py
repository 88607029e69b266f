"""Telemetry set-up from OTEL_* variables: the decisions, then the providers they build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from otel_lifecycle_hooks.telemetry import setup
from otel_lifecycle_hooks.telemetry.otel_env import merge_otel_env
from otel_lifecycle_hooks.telemetry.sampling import SessionRecordingSampler
from otel_lifecycle_hooks.telemetry.setup import (
    attach_or_configure,
    build_resource,
    configure_telemetry,
    exporter_names,
    otlp_settings,
    parse_headers,
    sampler_from_env,
)
from otel_lifecycle_hooks.telemetry.tracefile import TraceFileExporter, read_trace_file

# --- protocol, endpoint, headers, timeout --------------------------------------------


def test_protocol_defaults_to_http_protobuf_with_the_signal_path() -> None:
    settings = otlp_settings("traces", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings.protocol == "http/protobuf"
    assert settings.endpoint == "http://collector:4318/v1/traces"
    metrics = otlp_settings("metrics", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert metrics.endpoint == "http://collector:4318/v1/metrics"


def test_http_default_endpoint_is_localhost_4318() -> None:
    assert otlp_settings("traces", {}).endpoint == "http://localhost:4318/v1/traces"


def test_a_per_signal_http_endpoint_is_used_as_given() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/custom/path",
    }
    assert otlp_settings("traces", env).endpoint == "https://traces.example/custom/path"
    assert otlp_settings("metrics", env).endpoint == "http://generic:4318/v1/metrics"


def test_grpc_endpoints_get_no_path_and_plain_http_means_insecure() -> None:
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}
    settings = otlp_settings("traces", env)
    assert (settings.protocol, settings.endpoint, settings.insecure) == (
        "grpc",
        "http://c:4317",
        True,
    )
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).endpoint == (
        "http://localhost:4317"
    )
    secure = otlp_settings("traces", {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317"})
    assert secure.insecure is False


def test_the_per_signal_protocol_wins_over_the_generic_one() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
    }
    assert otlp_settings("traces", env).protocol == "grpc"
    assert otlp_settings("metrics", env).protocol == "http/protobuf"


def test_an_unsupported_protocol_falls_back_to_http_protobuf() -> None:
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}).protocol == (
        "http/protobuf"
    )


def test_headers_are_parsed_percent_decoded_and_per_signal_headers_win() -> None:
    assert parse_headers("api-key=abc%3D%3D, X-Tenant = t1,broken") == {
        "api-key": "abc==",
        "x-tenant": "t1",
    }
    env = {
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20generic",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20traces",
    }
    assert otlp_settings("traces", env).headers == {"authorization": "Bearer traces"}
    assert otlp_settings("metrics", env).headers == {"authorization": "Bearer generic"}


def test_timeout_is_read_in_milliseconds_as_the_specification_says() -> None:
    assert otlp_settings("traces", {}).timeout_s == 10.0
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}).timeout_s == 2.5
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "500"}
    assert otlp_settings("traces", env).timeout_s == 0.5
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}).timeout_s == 10.0


def test_compression_accepts_gzip_and_none_only() -> None:
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}).compression == "gzip"
    assert otlp_settings("traces", {"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}).compression == "none"


# --- which exporters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, [], []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ["otlp"], ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"], []),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ["console", "otlp"], []),
        (
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"},
            ["none"],
            ["otlp"],
        ),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, [], ["prometheus"]),
    ],
)
def test_exporter_choice(env: dict[str, str], traces: list[str], metrics: list[str]) -> None:
    assert exporter_names("traces", env) == traces
    assert exporter_names("metrics", env) == metrics


# --- template env and resource ----------------------------------------------------------


def test_template_env_fills_gaps_but_never_overrides_the_environment() -> None:
    merged = merge_otel_env(
        {
            "OTEL_SERVICE_NAME": "from-template",
            "OTEL_TRACES_SAMPLER": "always_off",
            "GCP_PROJECT": "p",
        },
        {"OTEL_SERVICE_NAME": "from-env", "OTEL_RESOURCE_ATTRIBUTES": "", "PATH": "/bin"},
    )
    assert merged == {"OTEL_SERVICE_NAME": "from-env", "OTEL_TRACES_SAMPLER": "always_off"}


def test_resource_service_name_precedence_and_agent_metadata() -> None:
    env = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr-name,deployment.environment.name=dev%20a"}
    resource = build_resource(env, {"gen_ai.agent.name": "reviewer"}, "fallback")
    assert resource.attributes["service.name"] == "attr-name"
    assert resource.attributes["deployment.environment.name"] == "dev a"
    assert resource.attributes["gen_ai.agent.name"] == "reviewer"
    named = build_resource({**env, "OTEL_SERVICE_NAME": "svc"}, {}, "fallback")
    assert named.attributes["service.name"] == "svc"
    assert build_resource({}, {}, "fallback").attributes["service.name"] == "fallback"


# --- sampler -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "root_type"),
    [
        (None, sampling.ParentBased),
        ("always_on", type(sampling.ALWAYS_ON)),
        ("always_off", type(sampling.ALWAYS_OFF)),
        ("traceidratio", sampling.TraceIdRatioBased),
        ("parentbased_traceidratio", sampling.ParentBasedTraceIdRatio),
        ("bogus", sampling.ParentBased),
    ],
)
def test_every_sampler_is_wrapped_to_keep_sessions_recording(
    name: str | None, root_type: type
) -> None:
    env = {"OTEL_TRACES_SAMPLER_ARG": "0.25"}
    if name:
        env["OTEL_TRACES_SAMPLER"] = name
    sampler = sampler_from_env(env)
    assert isinstance(sampler, SessionRecordingSampler)
    assert isinstance(sampler._root, root_type)


def test_a_session_sampled_out_is_still_recorded_for_span_processors(tmp_path: Path) -> None:
    telemetry = configure_telemetry(
        {}, {"OTEL_TRACES_SAMPLER": "always_off"}, trace_file=tmp_path / "t.jsonl"
    )
    try:
        span = telemetry.tracer_provider.get_tracer("t").start_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
        )
        assert span.is_recording()
        assert not span.get_span_context().trace_flags.sampled
        span.end()
    finally:
        telemetry.shutdown()
    assert not (tmp_path / "t.jsonl").exists()  # recorded, but never exported


# --- the providers they build --------------------------------------------------------------


def _span_exporters(telemetry: setup.Telemetry) -> list[object]:
    """The exporters spans go to (made now, as the first span's end would make them)."""
    processors = telemetry.tracer_provider._active_span_processor._span_processors  # type: ignore[attr-defined]
    batched = [p for later in processors for p in later.processors()]
    return [processor.span_exporter for processor in batched]


def test_grpc_and_http_exporters_are_built_from_the_environment(tmp_path: Path) -> None:
    grpc_env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
        "OTEL_METRICS_EXPORTER": "none",
    }
    telemetry = configure_telemetry({}, grpc_env)
    try:
        (exporter,) = _span_exporters(telemetry)
        assert isinstance(exporter, GrpcSpanExporter)
        assert telemetry.trace_file is None
    finally:
        telemetry.shutdown(timeout=1)
    http_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
        "OTEL_METRICS_EXPORTER": "none",
    }
    telemetry = configure_telemetry({}, http_env)
    try:
        (exporter,) = _span_exporters(telemetry)
        assert isinstance(exporter, HttpSpanExporter)
        assert exporter._endpoint == "http://127.0.0.1:1/v1/traces"  # type: ignore[attr-defined]
    finally:
        telemetry.shutdown(timeout=1)


def test_console_and_none(tmp_path: Path) -> None:
    telemetry = configure_telemetry({}, {"OTEL_TRACES_EXPORTER": "console"})
    try:
        assert [type(e) for e in _span_exporters(telemetry)] == [ConsoleSpanExporter]
    finally:
        telemetry.shutdown()
    telemetry = configure_telemetry({}, {"OTEL_TRACES_EXPORTER": "none"})
    try:
        assert _span_exporters(telemetry) == []
        assert telemetry.trace_file is None
    finally:
        telemetry.shutdown()


def test_with_no_exporter_configured_spans_go_to_the_default_trace_file(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "OTEL_SERVICE_NAME": "svc"}
    telemetry = configure_telemetry({}, environ, session_id="sess-1")
    expected = tmp_path / ".local/state/otel-lifecycle-hooks/traces/sess-1.jsonl"
    assert telemetry.trace_file == expected
    assert [type(e) for e in _span_exporters(telemetry)] == [TraceFileExporter]
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span("invoke_agent a"):
        pass
    telemetry.shutdown()  # the batch is flushed on shutdown
    (record,) = read_trace_file(expected)
    assert record["name"] == "invoke_agent a"
    assert record["resource"]["service.name"] == "svc"


def test_the_trace_dir_variable_may_come_from_the_template_env(tmp_path: Path) -> None:
    template = {"OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces")}
    telemetry = configure_telemetry(template, {"HOME": str(tmp_path / "home")}, session_id="s")
    telemetry.shutdown()
    assert telemetry.trace_file == tmp_path / "traces" / "s.jsonl"


def test_the_trace_dir_variable_of_the_environment_places_the_trace_file(tmp_path: Path) -> None:
    environ = {"LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces"), "HOME": str(tmp_path)}
    telemetry = configure_telemetry({}, environ, session_id="s")
    telemetry.shutdown()
    assert telemetry.trace_file == tmp_path / "traces" / "s.jsonl"


def test_sdk_disabled_exports_nothing(tmp_path: Path) -> None:
    telemetry = configure_telemetry(
        {}, {"OTEL_SDK_DISABLED": "true", "HOME": str(tmp_path)}, trace_file=tmp_path / "t.jsonl"
    )
    try:
        assert telemetry.disabled
        assert _span_exporters(telemetry) == []
        assert telemetry.trace_file is None
    finally:
        telemetry.shutdown()


def test_an_exporter_that_cannot_be_built_is_skipped_not_raised(tmp_path: Path) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:1",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tmp_path / "missing.pem"),
        "OTEL_METRICS_EXPORTER": "none",
    }
    telemetry = configure_telemetry({}, env)
    try:
        assert _span_exporters(telemetry) == []
    finally:
        telemetry.shutdown()


def test_an_unreachable_collector_never_raises_and_shutdown_is_bounded(tmp_path: Path) -> None:
    import time

    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # discard port: nothing listens
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        "OTEL_METRICS_EXPORTER": "none",
    }
    telemetry = configure_telemetry({}, env)
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span("invoke_agent a"):
        pass
    started = time.monotonic()
    telemetry.shutdown(timeout=2)
    # A hang guard: the 1s export budget, not the exporter's minute of retries with back-off.
    assert time.monotonic() - started < 20.0


# --- attaching to an existing SDK set-up ---------------------------------------------------


def test_attach_returns_an_existing_sdk_provider_without_replacing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    existing = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: existing)
    telemetry = attach_or_configure({}, {"OTEL_SERVICE_NAME": "x"}, set_global=True)
    assert telemetry.tracer_provider is existing
    assert telemetry.owned is False
    telemetry.shutdown()
    # Shutting down what we merely attached to must leave the application's provider working.
    assert existing.get_tracer("t").start_span("still").is_recording()


def test_under_opentelemetry_instrument_the_global_provider_is_kept(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import json
            from opentelemetry import trace
            from otel_lifecycle_hooks.telemetry.setup import attach_or_configure
            before = trace.get_tracer_provider()
            telemetry = attach_or_configure(set_global=True)
            print(json.dumps({
                "owned": telemetry.owned,
                "same": telemetry.tracer_provider is before is trace.get_tracer_provider(),
                "type": type(before).__name__,
            }))
            """
        )
    )
    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    if not instrument.exists():
        pytest.skip("opentelemetry-instrument is not installed")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "HOME": str(tmp_path),
    }
    result = subprocess.run(
        [str(instrument), sys.executable, str(script)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"owned": False, "same": True, "type": "TracerProvider"}


def test_without_a_provider_attach_builds_ours_and_sets_it_global_only_when_asked(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        from opentelemetry import trace
        from otel_lifecycle_hooks.telemetry.setup import attach_or_configure
        quiet = attach_or_configure(environ={{"HOME": {str(tmp_path)!r}}})
        assert quiet.owned and trace.get_tracer_provider() is not quiet.tracer_provider
        loud = attach_or_configure(environ={{"HOME": {str(tmp_path)!r}}}, set_global=True)
        assert loud.owned and trace.get_tracer_provider() is loud.tracer_provider
        quiet.shutdown(); loud.shutdown()
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "ok", result.stderr


# --- metrics: the SDK only when something reads it ----------------------------------------


def test_without_a_metrics_exporter_the_meter_provider_is_the_apis_no_op(tmp_path: Path) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    from otel_lifecycle_hooks.telemetry.metrics import HookMetrics

    telemetry = configure_telemetry({}, {"HOME": str(tmp_path)})
    assert isinstance(telemetry.meter_provider, NoOpMeterProvider)
    metrics = HookMetrics(telemetry.meter_provider)
    metrics.record_execution("register", "post-start", "http", "success", 0.2)  # recorded nowhere
    assert telemetry.force_flush(timeout=1)
    telemetry.shutdown()
    telemetry.shutdown()  # a second call is harmless


def test_a_run_without_a_metrics_exporter_never_imports_the_metrics_sdk(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from otel_lifecycle_hooks.engine.engine import HookEngine
        from otel_lifecycle_hooks.template.model import Template
        from otel_lifecycle_hooks.telemetry.setup import configure_telemetry
        telemetry = configure_telemetry({{}}, {{"HOME": {str(tmp_path)!r}}})
        engine = HookEngine(
            Template(), meter_provider=telemetry.meter_provider, journal=False, hook_log=False
        )
        engine.shutdown(1.0)
        telemetry.shutdown()
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk.metrics")))
        """
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_metrics_exporter_gets_an_sdk_meter_provider_that_exports_on_shutdown(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        from opentelemetry.sdk.metrics import MeterProvider
        from otel_lifecycle_hooks.telemetry.metrics import HookMetrics
        from otel_lifecycle_hooks.telemetry.setup import configure_telemetry
        environ = {{"HOME": {str(tmp_path)!r}, "OTEL_METRICS_EXPORTER": "console"}}
        telemetry = configure_telemetry({{}}, environ)
        assert isinstance(telemetry.meter_provider, MeterProvider)
        HookMetrics(telemetry.meter_provider).record_execution(
            "register", "post-start", "http", "success", 0.2
        )
        telemetry.shutdown(timeout=5)  # the periodic reader exports what it holds on shutdown
        """
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    assert '"agent.lifecycle_hook.executions"' in result.stdout


def test_attaching_with_no_metrics_exporter_leaves_the_global_meter_provider_settable(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from otel_lifecycle_hooks.telemetry.setup import attach_or_configure
        telemetry = attach_or_configure(environ={{"HOME": {str(tmp_path)!r}}}, set_global=True)
        application_provider = MeterProvider()
        metrics.set_meter_provider(application_provider)  # the application's own, set later
        print(metrics.get_meter_provider() is application_provider)
        telemetry.shutdown()
        """
    )
    result = run_python(script)
    assert result.stdout.strip() == "True", result.stderr


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter, without the OTEL_* settings of this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_otlp_settings_show_header_names_never_their_values() -> None:
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20canary-otlp-token,x-team=obs"}
    settings = otlp_settings("traces", env)
    assert settings.headers["authorization"] == "Bearer canary-otlp-token"
    for shown in (repr(settings), str(settings), f"{settings}", repr([settings])):
        assert "canary-otlp-token" not in shown
        assert "authorization" in shown and "x-team" in shown
