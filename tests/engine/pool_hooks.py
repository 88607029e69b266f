"""Templates and engines for the worker-pool tests: non-blocking POST hooks whose body carries
the event's TOOL_NAME (the tests' sequence number), and engines without journal or hook log."""

from __future__ import annotations

import textwrap

from otel_lifecycle_hooks.engine.engine import HookEngine
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import Template


def hooks_yaml(entries: list[str]) -> Template:
    return load_template_text("lifecycle_hooks:\n" + "".join(entries))


def http_hook(name: str, url: str, *, on: str = "tool-start", extra: str = "") -> str:
    """A non-blocking POST of the event's TOOL_NAME (the test's sequence number) to `url`."""
    return textwrap.indent(
        textwrap.dedent(
            f"""
            - name: {name}
              on: [{on}]
              action:
                type: http
                method: POST
                url: "{url}"
                body: '{{"seq": "${{TOOL_NAME}}"}}'
            """
        )
        + extra,
        "  ",
    )


def new_engine(engines: list[HookEngine], template: Template, **options: object) -> HookEngine:
    options.setdefault("journal", False)
    options.setdefault("hook_log", False)
    engine = HookEngine(template, **options)  # type: ignore[arg-type]
    engines.append(engine)
    return engine


def pre_stop_check(url: str) -> str:
    """A blocking pre-stop POST to `url`: what a worker held by other hooks must not delay."""
    return textwrap.indent(
        textwrap.dedent(
            f"""
            - name: pre-stop-check
              on: [pre-stop]
              blocking: true
              action:
                type: http
                method: POST
                url: "{url}"
            """
        ),
        "  ",
    )
