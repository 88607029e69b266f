"""bearer-token and api-key-header read the variable the hook names, at call time."""

from __future__ import annotations

import httpx
import pytest

from otel_lifecycle_hooks.auth import AuthError, Credentials, auth_header_names
from otel_lifecycle_hooks.template.model import AuthSpec, AuthType

from .loopback import RecordingTarget


def test_a_bearer_token_from_the_environment_reaches_the_service(target: RecordingTarget) -> None:
    credentials = Credentials()
    auth = AuthSpec(type="bearer-token", token_env="MONITORING_TOKEN")

    headers = credentials.headers_for(auth, target.url, {"MONITORING_TOKEN": "tok-123"})
    httpx.post(target.url, headers=headers, content=b"{}")

    assert headers == {"Authorization": "Bearer tok-123"}
    assert target.requests[0][0]["Authorization"] == "Bearer tok-123"
    assert "tok-123" in credentials.secret_values()


def test_the_value_is_read_on_every_call_so_a_rotated_secret_is_used() -> None:
    credentials = Credentials()
    auth = AuthSpec(type="bearer-token", token_env="T")
    first = credentials.headers_for(auth, "https://svc.example", {"T": "old"})
    second = credentials.headers_for(auth, "https://svc.example", {"T": "new"})
    assert (first["Authorization"], second["Authorization"]) == ("Bearer old", "Bearer new")
    assert credentials.secret_values() == {"old", "new"}


def test_an_api_key_goes_in_x_api_key_by_default(target: RecordingTarget) -> None:
    credentials = Credentials()
    auth = AuthSpec(type="api-key-header", token_env="REGISTRY_KEY")

    headers = credentials.headers_for(auth, target.url, {"REGISTRY_KEY": "key-abc"})
    httpx.post(target.url, headers=headers)

    assert headers == {"X-API-Key": "key-abc"}
    assert target.requests[0][0]["X-API-Key"] == "key-abc"


def test_an_api_key_goes_in_the_header_the_hook_names() -> None:
    auth = AuthSpec(type="api-key-header", token_env="K", header="X-Goog-Api-Key")
    assert Credentials().headers_for(auth, "https://svc.example", {"K": "v"}) == {
        "X-Goog-Api-Key": "v"
    }


@pytest.mark.parametrize("environ", [{}, {"MONITORING_TOKEN": ""}, {"MONITORING_TOKEN": "  \n"}])
@pytest.mark.parametrize("kind", ["bearer-token", "api-key-header"])
def test_an_unset_or_empty_variable_is_an_error_naming_it(
    kind: AuthType, environ: dict[str, str]
) -> None:
    credentials = Credentials()
    with pytest.raises(AuthError) as missing:
        credentials.headers_for(
            AuthSpec(type=kind, token_env="MONITORING_TOKEN"), "https://svc.example", environ
        )
    assert missing.value.error_type == "auth.missing_secret"
    assert "MONITORING_TOKEN" in str(missing.value)
    assert credentials.secret_values() == set()


def test_a_trailing_newline_from_a_mounted_secret_is_dropped() -> None:
    auth = AuthSpec(type="bearer-token", token_env="T")
    assert Credentials().headers_for(auth, "https://svc.example", {"T": "tok\n"}) == {
        "Authorization": "Bearer tok"
    }


def test_a_line_break_inside_the_secret_is_refused_without_showing_it() -> None:
    auth = AuthSpec(type="bearer-token", token_env="T")
    with pytest.raises(AuthError) as refused:
        Credentials().headers_for(auth, "https://svc.example", {"T": "abc\r\nX-Evil: 1"})
    assert refused.value.error_type == "auth.invalid_secret"
    assert "abc" not in str(refused.value) and "X-Evil" not in str(refused.value)


def test_the_transport_is_checked_before_the_secret_is_read() -> None:
    credentials = Credentials()
    auth = AuthSpec(type="bearer-token", token_env="T")
    with pytest.raises(AuthError) as refused:
        credentials.headers_for(auth, "http://10.0.0.1/hook", {"T": "tok"})
    assert refused.value.error_type == "auth.transport_refused"
    assert credentials.secret_values() == set()


def test_a_hook_that_writes_its_own_header_gets_nothing_added() -> None:
    # `headers: {Authorization: "Bearer ${TOKEN}"}` with `auth: bearer-token` and no token_env:
    # the engine renders that header; adding another would send two.
    credentials = Credentials()
    assert credentials.headers_for(AuthSpec(type="bearer-token"), "https://svc.example", {}) == {}
    assert credentials.headers_for(AuthSpec(type="none"), "http://10.0.0.1/", {}) == {}


@pytest.mark.parametrize(
    ("auth", "names"),
    [
        (AuthSpec(type="bearer-token"), {"Authorization"}),
        (AuthSpec(type="gcp-default"), {"Authorization"}),
        (AuthSpec(type="api-key-header"), {"X-API-Key"}),
        (AuthSpec(type="api-key-header", header="X-Custom"), {"X-Custom"}),
        (AuthSpec(type="none"), set()),
    ],
)
def test_the_header_names_to_redact(auth: AuthSpec, names: set[str]) -> None:
    assert auth_header_names(auth) == names
