"""Standard Webhooks signatures verify with the reference library, retries included."""

from __future__ import annotations

import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from otel_lifecycle_hooks.auth import AuthError, Credentials, message_id, sign, sign_request
from otel_lifecycle_hooks.template.model import HookAction

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"event": "session-end", "agent": "coder-1"}'


def test_the_specification_test_vector() -> None:
    headers = sign(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert headers == {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }


def test_the_reference_library_verifies_a_signed_delivery() -> None:
    headers = sign_request(
        SECRET, "agent-1:notify:session-end:2026-01-01T00:00:00Z", int(time.time()), BODY
    )
    assert Webhook(SECRET).verify(BODY, headers) == {"event": "session-end", "agent": "coder-1"}


def test_a_retry_keeps_the_message_id_and_signs_anew() -> None:
    key = "agent-1:notify:session-end:2026-01-01T00:00:00Z"
    now = int(time.time())
    first = sign_request(SECRET, key, now - 7, BODY)
    retry = sign_request(SECRET, key, now, BODY)

    assert first["webhook-id"] == retry["webhook-id"] == message_id(key)
    assert first["webhook-signature"] != retry["webhook-signature"]
    for headers in (first, retry):
        Webhook(SECRET).verify(BODY, headers)


def test_another_delivery_gets_another_message_id() -> None:
    assert message_id("a:h:e:1") != message_id("a:h:e:2")
    assert message_id("a:h:e:1").startswith("msg_")


def test_a_tampered_body_or_another_secret_does_not_verify() -> None:
    headers = sign_request(SECRET, "k", int(time.time()), BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(BODY.replace(b"coder-1", b"coder-2"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ=").verify(BODY, headers)


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "   ",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_",
        "whsec_not*base64!",
        "Bearer whsec_abc",
    ],
)
def test_a_malformed_secret_is_an_error_that_does_not_show_it(secret: str) -> None:
    with pytest.raises(AuthError) as bad:
        sign_request(secret, "k", 1, BODY, secret_env="WEBHOOK_SECRET")
    assert "WEBHOOK_SECRET" in str(bad.value)
    if len(secret.strip()) > len("whsec_"):  # the bare prefix is named in the advice itself
        assert secret.strip() not in str(bad.value)


def test_credentials_sign_from_the_named_variable_and_remember_the_secret() -> None:
    credentials = Credentials()
    action = HookAction(type="webhook", url="https://hooks.example", signing_secret_env="WH_SECRET")

    headers = credentials.signing_headers(action, "k-1", BODY, {"WH_SECRET": SECRET})

    Webhook(SECRET).verify(BODY, headers)
    assert SECRET in credentials.secret_values()
    plain = HookAction(type="webhook", url="https://hooks.example")
    assert credentials.signing_headers(plain, "k-1", BODY, {}) == {}


def test_credentials_refuse_to_sign_without_the_secret() -> None:
    action = HookAction(type="webhook", url="https://hooks.example", signing_secret_env="WH_SECRET")
    with pytest.raises(AuthError, match="WH_SECRET") as missing:
        Credentials().signing_headers(action, "k-1", BODY, {})
    assert missing.value.error_type == "auth.missing_secret"
