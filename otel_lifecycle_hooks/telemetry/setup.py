"""Tracer and meter providers from the standard `OTEL_*` variables.

Values come from the process environment; a template's `env:` fills only what the environment
leaves unset (an empty value counts as unset, as the OpenTelemetry specification says).

Honoured variables, with the specification's defaults where Python's own auto-configuration
differs from it:

- `OTEL_SDK_DISABLED=true`: providers that export nothing. Hooks still run.
- `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`.
- `OTEL_TRACES_EXPORTER` (`otlp`, `console`, `none`; comma-separated),
  `OTEL_METRICS_EXPORTER` (also `prometheus`, served on `OTEL_EXPORTER_PROMETHEUS_HOST`
  (default `localhost`) and `OTEL_EXPORTER_PROMETHEUS_PORT` (default 9464)).
  Unset: `otlp` when an OTLP endpoint is configured; otherwise traces go to the local trace
  file (see `tracefile.py`) and metrics nowhere.
- `OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL`: `http/protobuf` (default) or `grpc`.
- `OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT`: for http the generic endpoint gets
  `/v1/traces` or `/v1/metrics` appended and a per-signal one is used as given.
- `OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]HEADERS`, `..._COMPRESSION` (`gzip`, `none`),
  `..._INSECURE`, `..._CERTIFICATE`, `..._CLIENT_KEY`, `..._CLIENT_CERTIFICATE`.
- `OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]TIMEOUT` in **milliseconds** as the specification
  says (default 10000). It bounds each export *including its retries*: an unreachable
  collector costs at most that long per batch, on the exporter's thread, never the caller's.
- `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`; the sampler is wrapped in
  `SessionRecordingSampler`, so agent sessions sampled out still reach the hook processor
  (hooks are business logic, not telemetry) while only sampled spans are exported.
- `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_METRIC_EXPORT_TIMEOUT` (milliseconds).
- `LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT` (milliseconds, default 2000; the older
  `OTEL_LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT` is still read): how long closing
  the providers this package made may take in all, at exit. A collector that cannot be
  reached then costs at most that, and one line saying so instead of the exporters' retry
  messages; what was not exported is dropped.

With no metrics exporter the meter provider is the API's no-op one: the metrics SDK (a fifth
of `run`'s start-up) is imported only when some reader will collect what it aggregates. The
span exporters (the local trace file's, OTLP's with protobuf and its HTTP client) and their
batch processors are made when the first span ends (`_ExportLater`): `run` starts its agent
before any span ends, so the agent's start does not wait for their imports. With a metrics
exporter, `run` asks for the meter provider later too (`metrics_later`): a
`MeterProviderLater` (meter_later.py) until `Telemetry.start_metrics()`, right after the
agent's spawn, makes the readers, their exporters and the SDK's provider.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import unquote, urlsplit

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, sampling
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.version import __version__ as sdk_version
from opentelemetry.trace import TracerProvider

from ..extras import MissingExtra, require_extra
from .otel_env import EXIT_TIMEOUT_VARIABLE, merge_otel_env, sdk_disabled
from .sampling import SessionRecordingSampler

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter

    from ..tracecontext import SpanIds
    from .meter_later import MeterProviderLater

logger = logging.getLogger(__name__)

SERVICE_NAME_DEFAULT = "otel-lifecycle-hooks"
PROTOCOL_DEFAULT = "http/protobuf"
OTLP_TIMEOUT_MS_DEFAULT = 10_000.0
HTTP_ENDPOINT_DEFAULT = "http://localhost:4318"
GRPC_ENDPOINT_DEFAULT = "http://localhost:4317"
PROMETHEUS_HOST_DEFAULT = "localhost"
PROMETHEUS_PORT_DEFAULT = 9464

_SIGNAL_PATHS = {"traces": "v1/traces", "metrics": "v1/metrics"}
EXIT_TIMEOUT_MS_DEFAULT = 2_000.0
LEGACY_EXIT_TIMEOUT_VARIABLE = "OTEL_" + EXIT_TIMEOUT_VARIABLE  # the older name, still read
# Where the exporters log each retry and failure of an export.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.metrics._internal.export",
)
# Compiled by `re` at the first export failure, not at import.
_OS_ERROR = r"\[Errno -?\d+\] ([^'\")\]]+)"


# --- pure decisions from the environment ----------------------------------------------


def _signal_value(env: Mapping[str, str], signal: str, suffix: str) -> str | None:
    return env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{suffix}") or env.get(
        f"OTEL_EXPORTER_OTLP_{suffix}"
    )


def parse_headers(raw: str | None) -> dict[str, str]:
    """`k1=v1,k2=v2` (values percent-decoded) -> dict; malformed members are skipped."""
    headers: dict[str, str] = {}
    for member in (raw or "").split(","):
        name, sep, value = member.partition("=")
        name = unquote(name).strip()
        if not sep or not name:
            if member.strip():
                logger.warning("ignoring a malformed OTLP header entry")  # never echo values
            continue
        headers[name.lower()] = unquote(value).strip()
    return headers


def parse_key_values(raw: str | None) -> dict[str, str]:
    """`OTEL_RESOURCE_ATTRIBUTES` syntax: `k1=v1,k2=v2`, percent-decoded."""
    pairs: dict[str, str] = {}
    for member in (raw or "").split(","):
        key, sep, value = member.partition("=")
        if sep and key.strip():
            pairs[unquote(key).strip()] = unquote(value).strip()
    return pairs


# Its own repr: header values may be credentials.
# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class OtlpSettings(NamedTuple):
    """Everything an OTLP exporter of one signal needs, resolved from the environment."""

    signal: str
    protocol: str
    endpoint: str
    headers: dict[str, str]
    timeout_s: float
    compression: str
    insecure: bool
    certificate_file: str | None = None
    client_key_file: str | None = None
    client_certificate_file: str | None = None

    def __repr__(self) -> str:
        # Header values may be credentials: only their names are shown.
        return (
            f"OtlpSettings({self.signal} over {self.protocol} to {self.endpoint}, "
            f"headers={sorted(self.headers)}, timeout_s={self.timeout_s})"
        )


def otlp_settings(signal: str, env: Mapping[str, str]) -> OtlpSettings:
    """Resolve the OTLP exporter settings of `signal` (`traces` or `metrics`)."""
    protocol = (_signal_value(env, signal, "PROTOCOL") or PROTOCOL_DEFAULT).strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        logger.warning(
            "OTLP protocol %r is not supported here; using %s", protocol, PROTOCOL_DEFAULT
        )
        protocol = PROTOCOL_DEFAULT
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    generic = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "grpc":
        endpoint = specific or generic or GRPC_ENDPOINT_DEFAULT
    elif specific:
        endpoint = specific
    else:
        endpoint = (generic or HTTP_ENDPOINT_DEFAULT).rstrip("/") + "/" + _SIGNAL_PATHS[signal]
    insecure_flag = _signal_value(env, signal, "INSECURE")
    if insecure_flag is not None:
        insecure = insecure_flag.strip().lower() == "true"
    else:
        insecure = urlsplit(endpoint).scheme != "https"
    compression = (_signal_value(env, signal, "COMPRESSION") or "none").strip().lower()
    if compression not in ("gzip", "none"):
        logger.warning("OTLP compression %r is not supported; sending uncompressed", compression)
        compression = "none"
    return OtlpSettings(
        signal=signal,
        protocol=protocol,
        endpoint=endpoint,
        headers=parse_headers(_signal_value(env, signal, "HEADERS")),
        timeout_s=_milliseconds(_signal_value(env, signal, "TIMEOUT"), OTLP_TIMEOUT_MS_DEFAULT)
        / 1000.0,
        compression=compression,
        insecure=insecure,
        certificate_file=_signal_value(env, signal, "CERTIFICATE"),
        client_key_file=_signal_value(env, signal, "CLIENT_KEY"),
        client_certificate_file=_signal_value(env, signal, "CLIENT_CERTIFICATE"),
    )


def _milliseconds(raw: str | None, default: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        logger.warning("ignoring a non-numeric timeout %r", raw)
        return default
    return value if value > 0 else default


def has_otlp_endpoint(signal: str, env: Mapping[str, str]) -> bool:
    """Whether any OTLP endpoint variable applies to `signal`."""
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def exporter_names(signal: str, env: Mapping[str, str]) -> list[str]:
    """The exporters chosen for `signal`; `[]` when nothing was configured (the caller then
    falls back to the embedded default)."""
    raw = env.get(f"OTEL_{signal.upper()}_EXPORTER")
    if raw is None:
        return ["otlp"] if has_otlp_endpoint(signal, env) else []
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    return ["none"] if "none" in names else names


def sampler_from_env(env: Mapping[str, str]) -> sampling.Sampler:
    """`OTEL_TRACES_SAMPLER`/`_ARG` (default `parentbased_always_on`), wrapped so that agent
    sessions sampled out are still recorded for the hook processor (and only they)."""
    name = env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    ratio = _ratio(env.get("OTEL_TRACES_SAMPLER_ARG"))
    chosen: dict[str, Callable[[], sampling.Sampler]] = {
        "always_on": lambda: sampling.ALWAYS_ON,
        "always_off": lambda: sampling.ALWAYS_OFF,
        "traceidratio": lambda: sampling.TraceIdRatioBased(ratio),
        "parentbased_always_on": lambda: sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": lambda: sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": lambda: sampling.ParentBasedTraceIdRatio(ratio),
    }
    if name not in chosen:
        logger.warning("unknown OTEL_TRACES_SAMPLER %r; using parentbased_always_on", name)
        name = "parentbased_always_on"
    return SessionRecordingSampler(chosen[name]())


def _ratio(raw: str | None) -> float:
    try:
        value = float(raw) if raw is not None else 1.0
    except ValueError:
        return 1.0
    return value if 0.0 <= value <= 1.0 else 1.0


def build_resource(
    env: Mapping[str, str],
    resource_attributes: Mapping[str, str] | None = None,
    service_name_default: str = SERVICE_NAME_DEFAULT,
) -> Resource:
    """Resource from `OTEL_RESOURCE_ATTRIBUTES`, the caller's agent metadata (which wins over
    it) and the service name (`OTEL_SERVICE_NAME` wins over both)."""
    attributes: dict[str, str] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version,
    }
    attributes.update(parse_key_values(env.get("OTEL_RESOURCE_ATTRIBUTES")))
    attributes.update({k: v for k, v in (resource_attributes or {}).items() if v not in (None, "")})
    attributes["service.name"] = (
        env.get("OTEL_SERVICE_NAME") or attributes.get("service.name") or service_name_default
    )
    return Resource(attributes)


# --- the providers ---------------------------------------------------------------------


class Telemetry:
    """The providers in use, whether this package created them, and how to close them."""

    def __init__(
        self,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        owned: bool,
        trace_file: Path | None = None,
        otel_env: dict[str, str] | None = None,
        disabled: bool = False,
        _closers: list[Callable[[], None]] | None = None,
        _exporters: list[SpanExporter | MetricExporter] | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.owned = owned
        self._trace_file = trace_file
        # Where the local trace file goes, decided when first asked (or exported to).
        self._trace_file_later: Callable[[], Path | None] | None = None
        self.otel_env: dict[str, str] = {} if otel_env is None else otel_env
        self.disabled = disabled
        self._closers: list[Callable[[], None]] = [] if _closers is None else _closers
        # The exporters this package made, told to stop retrying when the exit bound passes.
        self._exporters: list[SpanExporter | MetricExporter] = (
            [] if _exporters is None else _exporters
        )
        self._closed = False
        self._lock = threading.Lock()
        self._session_failures: _SessionExportFailures | None = None
        self._export_later: _ExportLater | None = None  # the span exporters, once made
        # configure_telemetry(metrics_later=True): makes the readers and the SDK's meter
        # provider, which `meter_provider` (a MeterProviderLater) hands over to.
        self._make_metrics: Callable[[], MeterProvider] | None = None
        self._meter_later: MeterProviderLater | None = None

    @property
    def trace_file(self) -> Path | None:
        """The local trace file spans go to; None when they go to an exporter (or nowhere)."""
        if self._trace_file_later is not None:
            return self._trace_file_later()
        return self._trace_file

    def __repr__(self) -> str:
        return (
            f"Telemetry(owned={self.owned}, disabled={self.disabled}, "
            f"trace_file={self.trace_file!r}, tracer_provider={self.tracer_provider!r}, "
            f"meter_provider={self.meter_provider!r})"
        )

    def start_metrics(self) -> None:
        """Make the metric readers, their exporters and the SDK's meter provider, when
        `configure_telemetry(metrics_later=True)` left them for later, and hand the
        instruments made meanwhile (and what they measured) over to it. Once; `run` calls it
        when its agent has started, and the exit does when nothing did."""
        with self._lock:
            make, self._make_metrics = self._make_metrics, None
        if make is None:
            return
        try:
            real = make()
        except Exception:  # telemetry never stops the run: the instruments stay no-ops
            logger.warning("could not make the metric readers", exc_info=True)
            return
        if self._meter_later is not None:
            self._meter_later.hand_over(real)

    def _sdk_meter_provider(self) -> MeterProvider:
        """The meter provider that aggregates: the one handed over to, once it was."""
        if self._meter_later is not None and self._meter_later.real is not None:
            real: MeterProvider = self._meter_later.real
            return real
        return self.meter_provider

    def force_flush(self, timeout: float = 5.0) -> bool:
        """Push out buffered spans and metrics; False when something did not finish in time."""
        millis = int(timeout * 1000)
        done = True
        for provider in (self.tracer_provider, self._sdk_meter_provider()):
            flush = getattr(provider, "force_flush", None)
            if flush is None:
                continue
            try:
                done = bool(flush(millis)) and done
            except Exception:
                logger.debug("flushing telemetry failed", exc_info=True)
                done = False
        return done

    @property
    def exit_timeout(self) -> float:
        """Seconds closing the providers may take at exit (EXIT_TIMEOUT_VARIABLE)."""
        named = self.otel_env.get(EXIT_TIMEOUT_VARIABLE) or self.otel_env.get(
            LEGACY_EXIT_TIMEOUT_VARIABLE
        )
        return _milliseconds(named, EXIT_TIMEOUT_MS_DEFAULT) / 1000

    def shutdown(self, timeout: float | None = None) -> None:
        """Flush and close what this package created, within `timeout` seconds in all
        (default: `exit_timeout`); a provider it attached to is only flushed, never shut down.
        Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.shutdown)
        bound = self.exit_timeout if timeout is None else timeout
        if not self.owned:
            self.force_flush(bound)
            return
        if self._session_failures is not None:
            self._session_failures.uninstall()  # the exit has its own line, below
        quiet = _ExportFailures()
        quiet.install()
        closing = threading.Thread(
            target=self._close_all, args=(bound,), name="otel-lifecycle-hooks-exit", daemon=True
        )
        closing.start()
        closing.join(bound)
        gave_up = closing.is_alive()
        if gave_up:
            for exporter in self._exporters:  # ends their retry waits; nothing more is sent
                try:
                    exporter.shutdown()
                except Exception:
                    logger.debug("stopping an exporter failed", exc_info=True)
            closing.join(0.2)
        if gave_up or quiet.count:
            logger.warning("%s", self._export_failure_line(bound, quiet, gave_up))

    def _close_all(self, bound: float) -> None:
        millis = int(bound * 1000)
        self.start_metrics()  # a run that ended before its agent started: still exported
        meter_provider = self._sdk_meter_provider()
        closers: list[Callable[[], None]] = [self.tracer_provider.shutdown]  # type: ignore[attr-defined]
        if _is_sdk_meter_provider(meter_provider):  # the no-op one has nothing to close
            closers.append(lambda: meter_provider.shutdown(timeout_millis=millis))  # type: ignore[attr-defined]
        for close in (*closers, *self._closers):
            try:
                close()
            except Exception:
                logger.debug("closing telemetry failed", exc_info=True)

    def export_target(self) -> str:
        env = self.otel_env
        where = (
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        )
        return f"the collector at {where}" if where else "the telemetry exporter"

    def quiet_session_export_failures(self) -> None:
        """While the session runs, the exporters' retry and failure messages (one per attempt,
        raw) become one line at the first, and are counted after it; the exit says the rest."""
        if self._session_failures is None and (self._exporters or self._export_later):
            self._session_failures = _SessionExportFailures(self.export_target())
            self._session_failures.install()

    def _export_failure_line(self, bound: float, quiet: _ExportFailures, gave_up: bool) -> str:
        target = self.export_target()
        reason = f" ({quiet.reason})" if quiet.reason else ""
        if gave_up:
            return (
                f"telemetry not exported at exit: {target} did not take it within "
                f"{bound:g}s{reason}; what was left is dropped "
                f"({EXIT_TIMEOUT_VARIABLE}, in ms, sets how long to wait)"
            )
        refused = quiet.refused_line()
        if refused is not None:
            return f"telemetry not exported at exit: {target} refused {refused}"
        return f"telemetry not exported at exit: {target} refused it{reason}"


class _ExportFailures(logging.Filter):
    """Takes the exporters' retry and failure messages while the providers close, counting
    them and keeping the first reason, so that one line can say what happened instead."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.reason: str | None = None
        # The signals a back end answered with an error status, each with its first answer
        # ("metrics" -> "HTTP 405 Method Not Allowed"): a traces-only back end refuses metrics.
        self.refused: dict[str, str] = {}

    def install(self) -> None:
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self.count += 1
        message = record.getMessage()
        if self.reason is None:
            found = re.search(_OS_ERROR, message)
            if found:
                self.reason = found.group(1).strip().lower()
        answer = re.search(_HTTP_STATUS, message)
        signal = _signal_of(record.name, message)
        if answer and signal and signal not in self.refused:
            self.refused[signal] = f"HTTP {answer.group(1)} {answer.group(2).strip()}".strip()
        return False

    def refused_line(self) -> str | None:
        """ "metrics (HTTP 405 Method Not Allowed)", with the setting a back end that takes
        only some signals needs; None when no back end answered with an error status."""
        if not self.refused:
            return None
        said = " and ".join(f"{signal} ({answer})" for signal, answer in self.refused.items())
        unwanted = [f"OTEL_{signal.upper()}_EXPORTER=none" for signal in self.refused]
        return (
            f"{said}; a back end that does not take {' or '.join(self.refused)} needs "
            f"{' and '.join(unwanted)}"
        )


_HTTP_STATUS = r"code: (\d{3}), reason: ([^\n]*)"


def _signal_of(logger: str, message: str) -> str | None:
    """Which signal an exporter's message is about, by its logger (HTTP) or its words."""
    for signal, marks in (
        ("metrics", ("metric",)),
        ("traces", ("trace", "spans")),
        ("logs", ("log",)),
    ):
        if any(mark in logger.rsplit(".", 1)[-1] or mark in message for mark in marks):
            return signal
    return None


class _SessionExportFailures(_ExportFailures):
    """The first export failure of a session as one clear line; the later ones counted."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def uninstall(self) -> None:
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        first = self.count == 0
        super().filter(record)
        if not first:
            return False
        reason = f" ({self.reason})" if self.reason else ""
        refused = self.refused_line()
        failing = f"refused {refused}" if refused else f"did not take it{reason}"
        record.msg = (
            f"telemetry export is failing: {self.target} {failing}; the exporters "
            "keep retrying, and what is still not exported at exit is reported then"
        )
        record.args = ()
        record.exc_info = record.exc_text = None
        return True


def configure_telemetry(
    template_env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    service_name_default: str = SERVICE_NAME_DEFAULT,
    trace_file: Path | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    session_id: str | None = None,
    metrics_later: bool = False,
    first_span_ids: SpanIds | None = None,
) -> Telemetry:
    """Build new SDK providers from `OTEL_*` (see the module docstring). They are not made
    global; `attach_or_configure(set_global=True)` does that.

    With no traces exporter configured, spans go to `trace_file`, else to
    `default_trace_path(environ, session_id)`. `metrics_later`: with a metrics exporter
    configured, the meter provider is a `MeterProviderLater` until `start_metrics()` makes
    the readers, their exporters and the SDK's provider (`run`: once its agent has started).
    `first_span_ids`: the ids of the first span made with no parent (`run`'s session span,
    whose ids its agent was given before the provider existed).
    """
    env_source = os.environ if environ is None else environ
    env = merge_otel_env(template_env, env_source)
    # Where the local trace file goes: the package's own variable (its older OTEL_ name is
    # already in `env`) and the standard directories.
    path_names = ("HOME", "XDG_STATE_HOME", "LIFECYCLE_HOOKS_TRACE_DIR")
    path_env = {**env, **{k: v for k, v in env_source.items() if k in path_names}}
    resource = build_resource(env, resource_attributes, service_name_default)
    disabled = sdk_disabled(env)

    tracer_provider = SdkTracerProvider(
        sampler=sampler_from_env(env),
        resource=resource,
        shutdown_on_exit=False,
        id_generator=_FirstSpanIds(first_span_ids) if first_span_ids else None,
    )
    readers: list[MetricReader] = []
    closers: list[Callable[[], None]] = []
    exporters: list[SpanExporter | MetricExporter] = []
    later: _ExportLater | None = None
    if not disabled:
        trace_names = exporter_names("traces", env)
        file_path = _TraceFilePath(trace_file, path_env, session_id) if not trace_names else None
        later = _ExportLater(lambda: _span_exporters(env, trace_names, file_path), exporters)
        tracer_provider.add_span_processor(later)
        if not metrics_later:
            readers, closers = _metric_readers(env, exporters)
    make_metrics: Callable[[], MeterProvider] | None = None
    meter_later: MeterProviderLater | None = None
    if metrics_later and not disabled and _wants_metrics(env):
        # Only with a metrics exporter, which a run's start does not wait for (below).
        from .meter_later import MeterProviderLater

        meter_later = MeterProviderLater()
        meter_provider: MeterProvider = meter_later

        def make_metrics() -> MeterProvider:
            made, made_closers = _metric_readers(env, exporters)
            closers.extend(made_closers)
            return _meter_provider(made, resource)
    else:
        meter_provider = _meter_provider(readers, resource)
    telemetry = Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        owned=True,
        otel_env=env,
        disabled=disabled,
        _closers=closers,
        _exporters=exporters,
    )
    if not disabled:
        telemetry._trace_file_later = file_path
        telemetry._export_later = later
    telemetry._make_metrics = make_metrics
    telemetry._meter_later = meter_later
    atexit.register(telemetry.shutdown)
    return telemetry


class _FirstSpanIds(RandomIdGenerator):
    """The SDK's random ids, except for the first root span's: those chosen before. The SDK
    asks for a root span's trace id, then at once for its span id; the provider is new, so
    no other thread makes a span in between."""

    def __init__(self, first: SpanIds) -> None:
        self._first: SpanIds | None = first
        self._handing: SpanIds | None = None  # the first root span's, between the two asks

    def generate_trace_id(self) -> int:
        self._handing, self._first = self._first, None
        return self._handing.trace_id if self._handing else super().generate_trace_id()

    def generate_span_id(self) -> int:
        handing, self._handing = self._handing, None
        return handing.span_id if handing else super().generate_span_id()


def _wants_metrics(env: Mapping[str, str]) -> bool:
    """Whether some metrics exporter is configured (a reader would be made)."""
    return any(name != "none" for name in exporter_names("metrics", env))


class _TraceFilePath:
    """The local trace file's path, decided once, when first asked: the default one is read
    from the environment (and, without a session id, the time) by `tracefile`, imported then."""

    def __init__(self, given: Path | None, path_env: Mapping[str, str], session_id: str | None):
        self._path = given
        self._path_env = path_env
        self._session_id = session_id
        self._lock = threading.Lock()

    def __call__(self) -> Path:
        with self._lock:
            if self._path is None:
                # With the exporter, at the first span's end (see _span_exporters).
                from .tracefile import default_trace_path

                self._path = default_trace_path(self._path_env, self._session_id)
            return self._path


class _ExportLater(SpanProcessor):
    """The span exporters' batch processors, made with their exporters when the first span
    ends, by the thread that ends it, and then given every span, as if added to the provider
    themselves. Until then no span has anything to export (a batch processor does nothing
    when a span starts): `run` starts its agent with neither the export modules nor an OTLP
    exporter's (protobuf, its HTTP client) imported. The exporters made are added to
    `exporters` (the Telemetry's, stopped at a bounded exit)."""

    def __init__(
        self,
        make: Callable[[], list[SpanExporter]],
        exporters: list[SpanExporter | MetricExporter],
    ) -> None:
        self._make = make
        self._exporters = exporters
        self._processors: list[SpanProcessor] | None = None
        self._lock = threading.Lock()

    def processors(self) -> list[SpanProcessor]:
        """The batch processors, made now if they were not yet."""
        processors = self._processors
        if processors is None:
            with self._lock:
                if self._processors is None:
                    # The SDK's export module, about 2 ms: at the first span's end.
                    from opentelemetry.sdk.trace.export import BatchSpanProcessor

                    made = self._make()
                    self._exporters.extend(made)
                    self._processors = [BatchSpanProcessor(exporter) for exporter in made]
                processors = self._processors
        return processors

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in self._processors or ():
            processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self.processors():
            processor.on_end(span)

    def shutdown(self) -> None:
        with self._lock:
            made = self._processors
            self._processors = []  # shut down before any span ended: nothing is made later
        for processor in made or ():
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        flushed = [p.force_flush(timeout_millis) for p in self._processors or ()]  # each one
        return all(flushed)


def attach_or_configure(
    template_env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    set_global: bool = False,
    **options: Any,
) -> Telemetry:
    """Use the application's SDK tracer provider when there is one (an app's own, or
    `opentelemetry-instrument`'s), never replacing it; otherwise `configure_telemetry(...)`
    and, when `set_global`, make the new providers global."""
    current = trace.get_tracer_provider()
    env = merge_otel_env(template_env, os.environ if environ is None else environ)
    if isinstance(current, SdkTracerProvider):
        return Telemetry(
            tracer_provider=current,
            meter_provider=metrics.get_meter_provider(),
            owned=False,
            otel_env=env,
        )
    telemetry = configure_telemetry(template_env, environ, **options)
    if set_global:
        trace.set_tracer_provider(telemetry.tracer_provider)
        # A no-op provider is not made global: the API's proxy stays in place, so that an SDK
        # provider the application sets later still takes effect.
        if _is_sdk_meter_provider(telemetry.meter_provider) and not _is_sdk_meter_provider(
            metrics.get_meter_provider()
        ):
            metrics.set_meter_provider(telemetry.meter_provider)
    return telemetry


def _meter_provider(readers: list[MetricReader], resource: Resource) -> MeterProvider:
    """An SDK meter provider over `readers`, or the API's no-op one when there is none: with
    nothing to read them, the SDK's aggregations would only cost start-up time and memory."""
    if not readers:
        return NoOpMeterProvider()
    # Only with a reader: the metrics SDK is about 20 ms (-X importtime) that a run with no
    # metrics exporter never pays.
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

    return SdkMeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)


def _is_sdk_meter_provider(provider: object) -> bool:
    """Whether `provider` is the SDK's, without importing the SDK to ask: when the SDK is not
    imported yet, nothing can be one of its providers."""
    sdk = sys.modules.get("opentelemetry.sdk.metrics")
    return sdk is not None and isinstance(provider, sdk.MeterProvider)


def _span_exporters(
    env: Mapping[str, str], names: list[str], trace_file: Callable[[], Path] | None
) -> list[SpanExporter]:
    """The exporters `names` asks for; none named: the local trace file's, at `trace_file`."""
    if trace_file is not None:
        # Exporters are made when the first span ends (_ExportLater): a pre-start hook's
        # session does not wait for them (the SDK's export module alone is about 2 ms).
        from .tracefile import TraceFileExporter

        return [TraceFileExporter(trace_file())]
    exporters: list[SpanExporter] = []
    for name in names:
        exporter = _guarded(name, lambda n=name: _span_exporter(n, env))  # type: ignore[misc]
        if exporter is not None:
            exporters.append(exporter)
    return exporters


def _span_exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    if name == "none":
        return None
    if name == "console":  # named only by who debugs with it
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        return _otlp_span_exporter(otlp_settings("traces", env))
    logger.warning("unknown OTEL_TRACES_EXPORTER %r ignored", name)
    return None


def _metric_readers(
    env: Mapping[str, str], exporters: list[SpanExporter | MetricExporter]
) -> tuple[list[MetricReader], list[Callable[[], None]]]:
    readers: list[MetricReader] = []
    closers: list[Callable[[], None]] = []
    interval = _milliseconds(env.get("OTEL_METRIC_EXPORT_INTERVAL"), 60_000.0)
    export_timeout = _milliseconds(env.get("OTEL_METRIC_EXPORT_TIMEOUT"), 30_000.0)
    for name in exporter_names("metrics", env):
        if name == "none":
            continue
        if name == "prometheus":
            served = _guarded(name, lambda: _prometheus_reader(env))
            if served is not None:
                readers.append(served[0])
                closers.append(served[1])
            continue
        exporter = _guarded(name, lambda n=name: _metric_exporter(n, env))  # type: ignore[misc]
        if exporter is not None:
            exporters.append(exporter)
            # With a metrics exporter only: part of the metrics SDK's 20 ms (above).
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers.append(
                PeriodicExportingMetricReader(
                    exporter,
                    export_interval_millis=interval,
                    export_timeout_millis=export_timeout,
                )
            )
    return readers, closers


def _metric_exporter(name: str, env: Mapping[str, str]) -> MetricExporter | None:
    if name == "console":  # named only by who debugs with it
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if name == "otlp":
        return _otlp_metric_exporter(otlp_settings("metrics", env))
    logger.warning("unknown OTEL_METRICS_EXPORTER %r ignored", name)
    return None


_missing_extras_told: set[str] = set()


def _prometheus_reader(env: Mapping[str, str]) -> tuple[MetricReader, Callable[[], None]]:
    require_extra(
        "opentelemetry.exporter.prometheus", "prometheus", "OTEL_METRICS_EXPORTER=prometheus"
    )
    # The `prometheus` extra's modules, where they are used.
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    # A registry of our own: the process-wide default may already serve someone else's metrics.
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry)
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or PROMETHEUS_HOST_DEFAULT
    port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or PROMETHEUS_PORT_DEFAULT)
    server, _thread = start_http_server(port, addr=host, registry=registry)

    def close() -> None:
        server.shutdown()
        server.server_close()

    return reader, close


def _otlp_span_exporter(settings: OtlpSettings) -> SpanExporter:
    """An OTLP span exporter over `settings.protocol`."""
    if settings.protocol == "grpc":
        arguments = _grpc_arguments(settings)  # first: it tells when the extra is missing
        # The `grpc` extra's exporter, where it is used.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(**arguments)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(**_http_arguments(settings))


def _otlp_metric_exporter(settings: OtlpSettings) -> MetricExporter:
    """An OTLP metric exporter over `settings.protocol`."""
    if settings.protocol == "grpc":
        arguments = _grpc_arguments(settings)  # first: it tells when the extra is missing
        # The `grpc` extra's exporter, where it is used.
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(**arguments)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(**_http_arguments(settings))


def _http_arguments(settings: OtlpSettings) -> dict[str, Any]:
    """The http/protobuf exporters' keyword arguments (the same for spans and metrics)."""
    # OTLP's exporters with protobuf and requests are about 25 ms (-X importtime): made with
    # the first span's end or the meter provider, after the agent's spawn.
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": settings.endpoint,
        "headers": settings.headers,
        "timeout": settings.timeout_s,
        "compression": Compression.Gzip
        if settings.compression == "gzip"
        else Compression.NoCompression,
        "certificate_file": settings.certificate_file,
        "client_key_file": settings.client_key_file,
        "client_certificate_file": settings.client_certificate_file,
    }


def _grpc_arguments(settings: OtlpSettings) -> dict[str, Any]:
    """The gRPC exporters' keyword arguments; tells once when the `grpc` extra is missing."""
    require_extra(
        "opentelemetry.exporter.otlp.proto.grpc",
        "grpc",
        "OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc)",
    )
    import grpc  # the `grpc` extra's, where it is used

    credentials = None
    if not settings.insecure and settings.certificate_file:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read_bytes(settings.certificate_file),
            private_key=_read_bytes(settings.client_key_file),
            certificate_chain=_read_bytes(settings.client_certificate_file),
        )
    return {
        "endpoint": settings.endpoint,
        "insecure": settings.insecure,
        "credentials": credentials,
        "headers": settings.headers,
        "timeout": settings.timeout_s,
        "compression": grpc.Compression.Gzip
        if settings.compression == "gzip"
        else grpc.Compression.NoCompression,
    }


def _read_bytes(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as handle:
        return handle.read()


_Built = TypeVar("_Built")


def _guarded(name: str, build: Callable[[], _Built | None]) -> _Built | None:
    """Build an exporter, or log why it could not be built: telemetry set-up never fails the
    agent."""
    try:
        return build()
    except MissingExtra as exc:
        # Traces and metrics may both ask for the same extra: one line says it.
        if str(exc) not in _missing_extras_told:
            _missing_extras_told.add(str(exc))
            logger.warning("telemetry not exported: %s", exc)
        return None
    except Exception as exc:  # noqa: BLE001
        logger.warning("telemetry exporter %r not started: %s", name, type(exc).__name__)
        return None
