"""Zero-code use under `opentelemetry-instrument`.

Registered in the `opentelemetry_post_instrument` entry-point group, which the
auto-instrumentation calls with no arguments after the distro and configurator have set the
global providers and the instrumentors have run. A library must not ship an
`opentelemetry_configurator` (that would fight the application's), so this only *adds* a span
processor to the provider already in place.
"""

from __future__ import annotations

import atexit
import logging
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

logger = logging.getLogger(__name__)

TEMPLATE_ENV = "OTEL_LIFECYCLE_HOOKS_TEMPLATE"  # the older name, still read


def instrument() -> None:
    """Add `LifecycleHookProcessor.from_template($LIFECYCLE_HOOKS_TEMPLATE)` (or the older
    $OTEL_LIFECYCLE_HOOKS_TEMPLATE) to the global SDK tracer provider. Does nothing when the
    variable is unset, there is no SDK provider, or the engine is not installed; never raises
    into the application's start-up."""
    named = os.environ.get(TEMPLATE_ENV.removeprefix("OTEL_")) or os.environ.get(TEMPLATE_ENV)
    template = (named or "").strip()
    if not template:
        return
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        logger.warning(
            "%s is set but no OpenTelemetry SDK tracer provider is configured", TEMPLATE_ENV
        )
        return
    # Imported only when a template is named: every application started under
    # `opentelemetry-instrument` loads this hook, and the engine with the template loader costs
    # it about 80 ms (-X importtime). Importing `systems` registers its template sections.
    try:
        from . import systems  # noqa: F401
        from .engine.processor import LifecycleHookProcessor
    except ImportError:
        logger.debug("lifecycle hook engine not available", exc_info=True)
        return
    try:
        processor = LifecycleHookProcessor.from_template(template)
        provider.add_span_processor(processor)
    except Exception:
        logger.exception("lifecycle hooks from %s not loaded", template)
        return

    # At exit, hooks still running must finish while the provider can export their spans:
    # exit handlers run last-registered first, so this runs before the provider's shutdown.
    atexit.register(processor.force_flush)
