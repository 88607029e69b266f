"""Which requests the page answers, decided from the request's parts alone."""

from __future__ import annotations

import pytest

from otel_lifecycle_hooks.ui import access

PORT = 8123
TOKEN = "t0k3n-abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize(
    "host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"LOCALHOST:{PORT}", f"[::1]:{PORT}",
             f"127.0.0.2:{PORT}"],
)  # fmt: skip
def test_a_loopback_host_with_the_servers_port_is_this_server(host: str) -> None:
    assert access.allowed_host(host, PORT)


@pytest.mark.parametrize(
    "host",
    [
        None, "", "127.0.0.1", f"127.0.0.1:{PORT + 1}", f"attacker.example:{PORT}",
        f"127.0.0.1.attacker.example:{PORT}", f"localhost.attacker.example:{PORT}",
        f"[::1:{PORT}", f"::1]:{PORT}", f"0.0.0.0:{PORT}", f"10.0.0.1:{PORT}", f":{PORT}",
        f"127.0.0.1:{PORT}@attacker.example",
    ],
)  # fmt: skip
def test_any_other_host_header_is_not(host: str | None) -> None:
    assert not access.allowed_host(host, PORT)


def decide(**given: object) -> access.Refusal | None:
    request: dict[str, object] = {
        "method": "GET", "path": "/api/sessions", "host_header": f"127.0.0.1:{PORT}",
        "header_token": None, "origin": None, "port": PORT, "token": TOKEN,
    }  # fmt: skip
    request.update(given)
    return access.check(**request)  # type: ignore[arg-type]


def test_a_data_request_is_answered_with_the_token_in_the_header() -> None:
    assert decide(header_token=TOKEN) is None
    assert decide(path="/api/deliveries/7", header_token=TOKEN) is None


def test_the_shell_needs_no_token_but_still_this_servers_host_and_origin() -> None:
    for path in ("/", "/app.js", "/app.css"):
        assert decide(path=path) is None
        refusal = decide(path=path, host_header=f"attacker.example:{PORT}")
        assert refusal is not None and refusal.status == 421
        refusal = decide(path=path, origin="http://attacker.example")
        assert refusal is not None and refusal.status == 403


def test_no_or_a_wrong_token_is_401() -> None:
    for refusal in (decide(), decide(header_token=TOKEN + "x"), decide(header_token="")):
        assert refusal is not None and refusal.status == 401


def test_a_wrong_host_is_421_before_the_token_is_even_looked_at() -> None:
    refusal = decide(host_header=f"attacker.example:{PORT}", header_token=TOKEN)
    assert refusal is not None and refusal.status == 421


def test_a_post_needs_the_token_in_its_header_even_to_a_shell_path() -> None:
    for path in ("/api/deliveries/1/redeliver", "/"):
        refusal = decide(method="POST", path=path)
        assert refusal is not None and refusal.status == 403
    assert decide(method="POST", header_token=TOKEN) is None
    assert decide(method="POST", header_token=TOKEN, origin=f"http://127.0.0.1:{PORT}") is None


@pytest.mark.parametrize(
    "origin", ["http://attacker.example", "null", f"https://127.0.0.1:{PORT}",
               f"http://127.0.0.1:{PORT + 1}", f"http://attacker.example:{PORT}"],
)  # fmt: skip
def test_a_request_from_another_origin_is_403_whatever_it_carries(origin: str) -> None:
    for method in ("GET", "POST"):
        refusal = decide(method=method, origin=origin, header_token=TOKEN)
        assert refusal is not None and refusal.status == 403


def test_other_methods_are_refused() -> None:
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        refusal = decide(method=method, header_token=TOKEN)
        assert refusal is not None and refusal.status == 405
