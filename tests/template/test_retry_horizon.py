"""`retry: {horizon: ...}`: read on pre-stop and session-end hooks, refused elsewhere and when
malformed, each refusal naming the field and what would be valid."""

from __future__ import annotations

import textwrap

import pytest

from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.problems import TemplateError


def template(events: str, retry: str) -> str:
    return textwrap.dedent(
        f"""\
        lifecycle_hooks:
          - name: deregister
            on: [{events}]
            retry: {retry}
            action: {{type: http, url: "http://127.0.0.1:9/x"}}
        """
    )


@pytest.mark.parametrize(
    ("events", "seconds"), [("pre-stop", 3600.0), ("pre-stop, session-end", 3600.0)]
)
def test_a_horizon_on_owed_events_is_read(events: str, seconds: float) -> None:
    (hook,) = load_template_text(template(events, "{horizon: 1h}")).hooks
    assert hook.retry_horizon == seconds


@pytest.mark.parametrize(
    ("events", "retry", "message"),
    [
        ("post-start", "{horizon: 1h}", "only pre-stop and session-end hooks"),
        ("pre-stop, tool-start", "{horizon: 1h}", "this hook is also on tool-start"),
        ("pre-stop", "{horizon: 0s}", "a horizon is above zero and at most 168h"),
        ("pre-stop", "{horizon: 169h}", "a horizon is above zero and at most 168h"),
        ("pre-stop", "{horizon: soon}", 'field "retry.horizon"'),
        ("pre-stop", "{horison: 1h}", 'unknown key (did you mean "horizon"?)'),
        ("pre-stop", "{}", 'field "retry.horizon": missing'),
        ("pre-stop", "1h", "write a mapping such as {horizon: 1h}"),
    ],
)
def test_a_bad_retry_is_refused_naming_what_is_valid(events: str, retry: str, message: str) -> None:
    with pytest.raises(TemplateError) as refused:
        load_template_text(template(events, retry))
    assert message in str(refused.value)
