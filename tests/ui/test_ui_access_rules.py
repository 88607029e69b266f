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
        "method": "GET", "host_header": f"127.0.0.1:{PORT}", "header_token": None,
        "cookie_token": None, "query_token": None, "origin": None, "port": PORT,
        "token": TOKEN, "page_load": False,
    }  # fmt: skip
    request.update(given)
    return access.check(**request)  # type: ignore[arg-type]


def test_a_get_is_answered_with_the_token_in_the_header_or_the_cookie() -> None:
    assert decide(header_token=TOKEN) is None
    assert decide(cookie_token=TOKEN) is None


def test_the_query_token_proves_only_the_page_load() -> None:
    assert decide(query_token=TOKEN, page_load=True) is None
    refusal = decide(query_token=TOKEN)
    assert refusal is not None and refusal.status == 401


def test_no_or_a_wrong_token_is_401() -> None:
    for refusal in (decide(), decide(header_token=TOKEN + "x"), decide(cookie_token="")):
        assert refusal is not None and refusal.status == 401


def test_a_wrong_host_is_421_before_the_token_is_even_looked_at() -> None:
    refusal = decide(host_header=f"attacker.example:{PORT}", header_token=TOKEN)
    assert refusal is not None and refusal.status == 421


def test_a_post_needs_the_token_in_its_header_the_cookie_is_not_enough() -> None:
    refusal = decide(method="POST", cookie_token=TOKEN)
    assert refusal is not None and refusal.status == 403
    assert decide(method="POST", header_token=TOKEN) is None
    assert decide(method="POST", header_token=TOKEN, origin=f"http://127.0.0.1:{PORT}") is None


@pytest.mark.parametrize(
    "origin", ["http://attacker.example", "null", f"https://127.0.0.1:{PORT}",
               f"http://127.0.0.1:{PORT + 1}", f"http://attacker.example:{PORT}"],
)  # fmt: skip
def test_a_request_from_another_origin_is_403_whatever_it_carries(origin: str) -> None:
    for method in ("GET", "POST"):
        refusal = decide(method=method, origin=origin, header_token=TOKEN, cookie_token=TOKEN)
        assert refusal is not None and refusal.status == 403


def test_other_methods_are_refused() -> None:
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        refusal = decide(method=method, header_token=TOKEN)
        assert refusal is not None and refusal.status == 405


def test_the_cookie_is_read_only_under_this_servers_port() -> None:
    header = f"lifecycle-hooks-ui-{PORT + 1}=other; lifecycle-hooks-ui-{PORT}={TOKEN}"
    assert access.cookie_token(header, PORT) == TOKEN
    assert access.cookie_token(f"lifecycle-hooks-ui-{PORT + 1}={TOKEN}", PORT) is None
    assert access.cookie_token('bad"cookie', PORT) is None
