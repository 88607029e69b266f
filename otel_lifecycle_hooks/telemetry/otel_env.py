"""The `OTEL_*` settings in effect for a run, read without the SDK: `run` gives them to its
agent before it loads the SDK (supervisor/run.py), and `setup.py` builds the providers from
the same merge."""

from __future__ import annotations

import sys
from collections.abc import Mapping

EXIT_TIMEOUT_VARIABLE = "LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT"
# The samplers under which a session span with no parent is always sampled.
_SAMPLING_EVERY_ROOT = ("always_on", "parentbased_always_on")


def merge_otel_env(
    template_env: Mapping[str, str] | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The `OTEL_*` variables in effect (and EXIT_TIMEOUT_VARIABLE): the environment's, with
    the template's filling gaps."""

    def kept(key: str) -> bool:
        return key.startswith("OTEL_") or key == EXIT_TIMEOUT_VARIABLE

    merged = {
        key: str(value)
        for key, value in (template_env or {}).items()
        if kept(key) and str(value) != ""
    }
    merged.update({key: value for key, value in environ.items() if kept(key) and value != ""})
    return merged


def sdk_disabled(env: Mapping[str, str]) -> bool:
    """`OTEL_SDK_DISABLED=true`: providers that record and export nothing."""
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def samples_every_session(otel_env: Mapping[str, str], environ: Mapping[str, str]) -> bool:
    """Whether the session span has no parent and is sampled whatever its ids: no span is
    current (`in_a_callers_span`), the SDK is on (in the merged settings and in the process
    environment, which the SDK's provider reads itself) and the sampler is the default one or
    `always_on`. Then the session's trace flags are known before the SDK decides them."""
    if sdk_disabled(otel_env) or sdk_disabled(environ) or in_a_callers_span():
        return False
    sampler = otel_env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    return sampler in _SAMPLING_EVERY_ROOT


def in_a_callers_span() -> bool:
    """Whether a span is current in this thread (a library caller's, around its `run`): the
    session span is then its child, of the caller's trace, not of ids chosen before."""
    # Through the API only if it is loaded: a caller with a span loaded it, and `run` alone
    # does not before its agent's spawn (tests/test_startup_imports.py).
    api = sys.modules.get("opentelemetry.trace")
    return api is not None and bool(api.get_current_span().get_span_context().is_valid)
