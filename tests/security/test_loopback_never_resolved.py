"""What is called loopback never goes through a resolver.

Credentials may travel in clear to a loopback host, and a loopback request skips the proxy, so
whoever answers a name lookup for a host called loopback would choose where credentials go.
Loopback is an allow-list of forms that need no lookup: `localhost` (connected to 127.0.0.1,
then ::1, without asking the resolver), a canonical dotted-quad in 127.0.0.0/8, and `[::1]`
(or ::ffff:127.x.y.z). Every other spelling (`localhost.`, a percent-encoded or zone-bearing
host, decimal, octal or hex numbers) is not loopback: refused by `validate` with the host and
the valid forms named, and refused again as the request is about to be sent.

The resolver is observed, not replaced: `socket.getaddrinfo` is wrapped to record each host it
is asked about and then answers as it always does.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator

import pytest

from otel_lifecycle_hooks import loopback
from otel_lifecycle_hooks.actions import http
from otel_lifecycle_hooks.render import RenderedRequest
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.problems import TemplateError
from tests.support.target_server import Reply, TargetServer

TOKEN = "tok-loopback-5f1e"
ACCEPTED = ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"]
# Each of these reaches getaddrinfo as a name (or as a number glibc reads its own way).
ODD = [
    "localhost.",
    "LOCALHOST.",
    "127.0.0.1%09",
    "127.0.0.1%2e",
    "127.0.0.1%20",
    "[::1%25lo]",
    "[::1%lo]",
    "2130706433",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "127.1",
]


def _numeric(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hosts `socket.getaddrinfo` is asked about while the test runs."""
    asked: list[str] = []
    real: Callable[..., list[object]] = socket.getaddrinfo

    def observed(host: object, *args: object, **kwargs: object) -> list[object]:
        asked.append(host.decode() if isinstance(host, bytes) else str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", observed)
    return asked


@pytest.fixture
def client() -> Iterator[http.HttpClient]:
    made = http.make_client()
    try:
        yield made
    finally:
        made.close()


def _server_for(host: str) -> TargetServer:
    return TargetServer(host="::1" if host == "[::1]" else "127.0.0.1")


def _credentialed(url: str) -> RenderedRequest:
    return RenderedRequest("POST", url, {"Authorization": f"Bearer {TOKEN}"}, b"{}")


@pytest.mark.parametrize("host", ACCEPTED)
def test_a_loopback_host_is_connected_to_without_a_lookup(
    host: str, client: http.HttpClient, lookups: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy in the environment must not matter either: loopback goes direct.
    monkeypatch.setenv("http_proxy", "http://127.0.0.2:9")
    with _server_for(host) as server:
        server.always("/hook", Reply(204))
        url = server.url("/hook", host=host)
        result = http.send(client, _credentialed(url), 10.0, credentialed=True)

        assert result.ok, result.message
        assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {TOKEN}"]
        # The server is asked for the host as written (virtual hosting, TLS names keep working).
        assert server.requests[0].headers["host"].lower() == f"{host}:{server.port}".lower()
    assert lookups, "the observation saw no connection at all: it would prove nothing"
    assert [name for name in lookups if not _numeric(name)] == []


def test_localhost_reaches_a_server_on_ipv6_loopback_alone_without_a_lookup(
    client: http.HttpClient, lookups: list[str]
) -> None:
    with TargetServer(host="::1") as server:
        server.always("/hook", Reply(204))
        url = server.url("/hook", host="localhost")
        result = http.send(client, _credentialed(url), 10.0, credentialed=True)

        assert result.ok, result.message
        assert len(server.requests) == 1
    assert [name for name in lookups if not _numeric(name)] == []
    assert "::1" in lookups  # 127.0.0.1 was tried first and refused


@pytest.mark.parametrize("host", ODD)
def test_an_odd_loopback_spelling_is_not_loopback(host: str) -> None:
    assert loopback.is_loopback_host(host) is False
    assert loopback.is_loopback_host(host.strip("[]")) is False


@pytest.mark.parametrize("host", ODD)
def test_validate_refuses_an_odd_host_naming_it_and_the_valid_forms(host: str) -> None:
    text = (
        "lifecycle_hooks:\n"
        "  - name: notify\n"
        "    on: [post-start]\n"
        f"    action: {{type: http, url: 'http://{host}:8080/hook',\n"
        "             auth: {type: bearer-token, token_env: HUB_TOKEN}}\n"
    )
    with pytest.raises(TemplateError) as refused:
        load_template_text(text)

    message = str(refused.value)
    assert host.strip("[]").lower() in message.lower()
    for valid in ("localhost", "127.0.0.1", "[::1]"):
        assert valid in message


@pytest.mark.parametrize("host", ODD)
def test_at_send_time_an_odd_host_is_refused_before_any_lookup(
    host: str, client: http.HttpClient, lookups: list[str]
) -> None:
    with TargetServer() as server:
        server.always("/hook", Reply(204))
        url = server.url("/hook", host=host)
        result = http.send(client, _credentialed(url), 10.0, credentialed=True)

        assert result.kind == "permanent", result.message
        assert server.requests == []
    assert lookups == []
    assert TOKEN not in result.message
    for valid in ("localhost", "127.0.0.1", "[::1]"):
        assert valid in result.message, result.message


@pytest.mark.parametrize("host", ["127.0.0.1%09", "[::1%25lo]", "2130706433", "0x7f.0.0.1"])
def test_without_credentials_an_ambiguous_host_is_refused_too(
    host: str, client: http.HttpClient, lookups: list[str]
) -> None:
    # A host a resolver reads its own way is refused whether or not the request carries
    # credentials: what it reaches would not be what the template says.
    request = RenderedRequest("POST", f"http://{host}:9/hook", {}, b"{}")
    result = http.send(client, request, 10.0)

    assert (result.kind, result.error_type) == ("permanent", "InvalidURL"), result.message
    assert lookups == []
