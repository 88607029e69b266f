"""Fixtures for the end-to-end tests: Phoenix (one per test session) behind rotel."""

from __future__ import annotations

from tests.support.phoenix import phoenix_server, rotel_to_phoenix  # noqa: F401  (fixtures)
