"""Redaction: known secret values, credential headers, URL secrets and nested records."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from otel_lifecycle_hooks.redact import (
    REDACTED,
    Redactor,
    looks_like_secret_name,
)


def test_every_occurrence_of_a_secret_value_is_replaced() -> None:
    redactor = Redactor(["s3cr3t-token"])
    assert redactor.redact_text("a s3cr3t-token b s3cr3t-token") == f"a {REDACTED} b {REDACTED}"


def test_a_secret_containing_another_is_replaced_whole() -> None:
    redactor = Redactor(["abcd", "abcd-efgh-ijkl"])
    assert redactor.redact_text("x abcd-efgh-ijkl y abcd") == f"x {REDACTED} y {REDACTED}"


def test_values_shorter_than_four_characters_are_not_treated_as_secrets() -> None:
    redactor = Redactor(["on", "abc", ""])
    assert redactor.redact_text("abc is on") == "abc is on"


def test_secrets_are_found_in_their_json_escaped_and_percent_encoded_forms() -> None:
    secret = 'p"ss/wörd\\1'
    redactor = Redactor([secret])
    body = json.dumps({"password": secret})
    assert secret not in json.loads(redactor.redact_text(body))["password"]
    assert json.loads(redactor.redact_text(body)) == {"password": REDACTED}
    url = "https://api.example.com/x/" + quote(secret, safe="")
    assert redactor.redact_text(url) == f"https://api.example.com/x/{REDACTED}"


def test_a_secret_url_keeps_its_scheme_and_host() -> None:
    webhook = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
    redactor = Redactor([webhook])
    assert redactor.redact_text(f"POST {webhook}") == f"POST https://hooks.slack.com/{REDACTED}"


def test_regex_characters_in_secrets_are_taken_literally() -> None:
    redactor = Redactor(["a.b*c+d"])
    assert redactor.redact_text("aXbbbcd a.b*c+d") == f"aXbbbcd {REDACTED}"


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "X-API-Key",
        "X-Goog-Api-Key",
        "X-Auth-Token",
        "X-Client-Secret",
        "Webhook-Signature",
    ],
)
def test_credential_headers_are_replaced_whatever_they_hold(name: str) -> None:
    assert Redactor().redact_headers({name: "anything at all"}) == {name: REDACTED}


def test_other_headers_keep_their_value_minus_known_secrets() -> None:
    redactor = Redactor(["tok-123456"])
    headers = {"Content-Type": "application/json", "X-Trace": "id tok-123456"}
    assert redactor.redact_headers(headers) == {
        "Content-Type": "application/json",
        "X-Trace": f"id {REDACTED}",
    }


def test_a_configured_api_key_header_is_replaced() -> None:
    redactor = Redactor(secret_header_names={"X-Vendor-Credential-Header"})
    assert redactor.redact_headers({"X-Vendor-Credential-Header": "v", "X-Other": "v"}) == {
        "X-Vendor-Credential-Header": REDACTED,
        "X-Other": "v",
    }


def test_url_userinfo_and_secret_query_values_are_replaced() -> None:
    url = "https://user:pw@api.example.com/p?token=t1&api_key=k1&sig=s1&page=2&client_secret=c#f"
    assert Redactor().redact_url(url) == (
        f"https://{REDACTED}@api.example.com/p?token={REDACTED}&api_key={REDACTED}"
        f"&sig={REDACTED}&page=2&client_secret={REDACTED}#f"
    )


def test_a_url_without_secrets_is_unchanged() -> None:
    url = "https://api.example.com/v1/services/a%2Fb?page=2&q=x"
    assert Redactor().redact_url(url) == url


def test_known_values_are_taken_out_of_urls_too() -> None:
    assert (
        Redactor(["T000/B000/XXXX"]).redact_url("https://hooks.example.com/services/T000/B000/XXXX")
        == f"https://hooks.example.com/services/{REDACTED}"
    )


def test_mappings_are_redacted_by_key_and_by_value_all_the_way_down() -> None:
    redactor = Redactor(["hunter22"])
    record = {
        "url": "https://x.example.com/?q=hunter22",
        "env": {"API_TOKEN": "whatever", "SERVICE_ACCOUNT": "sa", "NOTE": "pw hunter22"},
        "argv": ["prog", "--password-file", "hunter22"],
        "status": 201,
    }
    assert redactor.redact_mapping(record) == {
        "url": f"https://x.example.com/?q={REDACTED}",
        "env": {"API_TOKEN": REDACTED, "SERVICE_ACCOUNT": "sa", "NOTE": f"pw {REDACTED}"},
        "argv": ["prog", "--password-file", REDACTED],
        "status": 201,
    }


def test_with_values_extends_and_leaves_the_original_alone() -> None:
    base = Redactor(["first-secret"])
    extended = base.with_values(["second-secret"], ["X-Private"])
    text = "first-secret second-secret"
    assert extended.redact_text(text) == f"{REDACTED} {REDACTED}"
    assert extended.redact_headers({"X-Private": "v"}) == {"X-Private": REDACTED}
    assert base.redact_text(text) == f"{REDACTED} second-secret"
    assert base.redact_headers({"X-Private": "v"}) == {"X-Private": "v"}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("SLACK_WEBHOOK_URL", True),
        ("MONITORING_BEARER_TOKEN", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("OPENAI_API_KEY", True),
        ("GCP_PROJECT", False),
        ("AGENT_NAME", False),
        ("ASSISTANT_TEXT", False),
    ],
)
def test_credential_variable_names_are_recognised(name: str, secret: bool) -> None:
    assert looks_like_secret_name(name) is secret


def test_a_secrets_form_encoding_and_its_header_form_are_redacted() -> None:
    from urllib.parse import quote_plus

    secret = "s3cret é/+&=x"
    redactor = Redactor([secret])
    header_form = "s3cret %C3%A9/+&=x"  # only the non-ASCII percent-encoded, as headers get it
    for form in (quote_plus(secret), quote(secret, safe=""), header_form):
        assert redactor.redact_text(f"a={form}&b=1") == f"a={REDACTED}&b=1", form


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://hooks.slack.com/services/T000/B000/XXXXsecret",
            "https://hooks.slack.com/[REDACTED]",
        ),
        ("https://discord.com/api/webhooks/123/tokenXYZ", "https://discord.com/[REDACTED]"),
        (
            "https://acme.webhook.office.com/webhookb2/abc/IncomingWebhook/def",
            "https://acme.webhook.office.com/[REDACTED]",
        ),
        (
            "https://chat.example.com/hooks/8xk2secretkey",
            "https://chat.example.com/hooks/[REDACTED]",
        ),
        ("http://127.0.0.1:9/a/webhook/abc?x=1", "http://127.0.0.1:9/a/webhook/[REDACTED]?x=1"),
    ],
)
def test_a_webhook_urls_path_is_redacted_in_any_text(url: str, shown: str) -> None:
    assert Redactor().redact_text(f"sent to {url} ok") == f"sent to {shown} ok"
    assert Redactor().redact_url(url) == shown


def test_ordinary_urls_keep_their_path() -> None:
    text = "https://registry.example.com/v1/tools/Bash and https://example.com/hooks"
    assert Redactor().redact_text(text) == text
