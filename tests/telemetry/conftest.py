"""Shared fixtures for the telemetry tests."""

from __future__ import annotations

from tests.support.rotel import rotel_receiver  # noqa: F401  (a fixture, used by name)
