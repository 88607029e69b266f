"""`LifecycleHooksError` is the one base a user catches for every error the package raises on
purpose, and each error keeps the built-in base it had, so existing `except` clauses still work."""

from __future__ import annotations

from pathlib import Path

import pytest

import otel_lifecycle_hooks
from otel_lifecycle_hooks import LifecycleHooksError, TemplateError, load_templates
from otel_lifecycle_hooks.auth.errors import AuthError
from otel_lifecycle_hooks.harness.dialect_yaml import DialectFileError
from otel_lifecycle_hooks.harness.dialects import UnknownDialectError
from otel_lifecycle_hooks.harness.install import InstallError
from otel_lifecycle_hooks.harness.normalized import WireFormatError
from otel_lifecycle_hooks.harness.socket_client import SupervisorUnavailable
from otel_lifecycle_hooks.harness.without_supervisor import EngineMissing
from otel_lifecycle_hooks.journal.retention import RetentionError
from otel_lifecycle_hooks.journal.seal import JournalKeyError
from otel_lifecycle_hooks.render import RenderError
from otel_lifecycle_hooks.replay import ReplayRefused
from otel_lifecycle_hooks.systems.inprocess import HookRegistrationError
from otel_lifecycle_hooks.systems.the_loop import ExecutorLoadError
from otel_lifecycle_hooks.telemetry.setup import MissingExtra
from otel_lifecycle_hooks.template.condition import ConditionSyntaxError
from otel_lifecycle_hooks.template.durations import DurationError, parse_duration
from otel_lifecycle_hooks.ui.server import NotLoopback

# Each user-facing error and the built-in base it has always had.
ERRORS: list[tuple[type[Exception], type[Exception]]] = [
    (TemplateError, Exception),
    (DurationError, ValueError),
    (ConditionSyntaxError, ValueError),
    (RenderError, ValueError),
    (AuthError, Exception),
    (JournalKeyError, ValueError),
    (RetentionError, ValueError),
    (InstallError, Exception),
    (DialectFileError, ValueError),
    (UnknownDialectError, LookupError),
    (WireFormatError, ValueError),
    (SupervisorUnavailable, OSError),
    (EngineMissing, RuntimeError),
    (MissingExtra, Exception),
    (ReplayRefused, Exception),
    (HookRegistrationError, ValueError),
    (ExecutorLoadError, Exception),
    (NotLoopback, ValueError),
]


def test_the_base_is_exported_by_the_package() -> None:
    assert otel_lifecycle_hooks.LifecycleHooksError is LifecycleHooksError
    assert "LifecycleHooksError" in otel_lifecycle_hooks.__all__
    assert issubclass(LifecycleHooksError, Exception)


@pytest.mark.parametrize(("error", "builtin"), ERRORS, ids=[e.__name__ for e, _ in ERRORS])
def test_each_error_is_a_lifecycle_hooks_error_and_keeps_its_builtin_base(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, LifecycleHooksError)
    assert issubclass(error, builtin)


def test_a_refused_template_is_caught_by_the_base(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("lifecycle_hooks:\n  - name: x\n    on: [no-such-event]\n")
    with pytest.raises(LifecycleHooksError) as caught:
        load_templates([broken])
    assert isinstance(caught.value, TemplateError)
    assert "no-such-event" in str(caught.value)


def test_a_bad_duration_is_caught_by_the_base_and_still_by_value_error() -> None:
    for base in (LifecycleHooksError, ValueError):
        with pytest.raises(base):
            parse_duration("soon")


def test_an_os_error_subclass_keeps_its_errno() -> None:
    error = SupervisorUnavailable(111, "connection refused")
    assert error.errno == 111
    assert isinstance(error, LifecycleHooksError)
