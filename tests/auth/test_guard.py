"""Credentials go over https, or to loopback for local testing; nowhere else."""

from __future__ import annotations

import pytest

from otel_lifecycle_hooks.auth import AuthError, check_transport, is_loopback_host
from otel_lifecycle_hooks.template.model import AuthSpec

BEARER = AuthSpec(type="bearer-token", token_env="TOKEN")
NO_AUTH = AuthSpec()


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/agents",
        "https://10.0.0.1/hook",
        "http://127.0.0.1:8080/hook",
        "http://127.9.8.7/hook",
        "http://localhost/hook",
        "http://LOCALHOST:9000/",
        "http://[::1]:8443/hook",
        "http://[::ffff:127.0.0.1]/hook",
    ],
)
def test_https_or_loopback_may_carry_credentials(url: str) -> None:
    check_transport(url, BEARER)
    check_transport(url, NO_AUTH, has_credentials=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://api.example.com/hook",
        "http://localhost.example.com/hook",
        "http://[::2]/hook",
        "http://0.0.0.0:8080/hook",
        "ftp://127.0.0.1/hook",
        "/relative/path",
        "https:///no-host",
    ],
)
def test_anything_else_is_refused(url: str) -> None:
    with pytest.raises(AuthError) as refused:
        check_transport(url, BEARER)
    assert refused.value.error_type == "auth.transport_refused"
    assert "https://" in str(refused.value)


def test_a_hand_written_authorization_header_counts_as_credentials() -> None:
    with pytest.raises(AuthError, match="Authorization header"):
        check_transport("http://10.0.0.1/hook", NO_AUTH, has_credentials=True)


def test_without_credentials_plain_http_is_fine() -> None:
    check_transport("http://10.0.0.1/hook", NO_AUTH)


def test_the_refusal_does_not_repeat_the_query_where_secrets_may_hide() -> None:
    with pytest.raises(AuthError) as refused:
        check_transport("http://10.0.0.1/hook?key=s3cr3t-value", BEARER)
    assert "s3cr3t-value" not in str(refused.value)
    assert "http://10.0.0.1" in str(refused.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("128.0.0.1", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
