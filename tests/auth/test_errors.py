"""A failure's reason is shown, with secrets and credential-shaped strings taken out."""

from __future__ import annotations

from otel_lifecycle_hooks.auth.errors import safe_reason


def test_known_secret_values_are_removed() -> None:
    reason = safe_reason(RuntimeError("server said: token tok-abc-123 is revoked"), {"tok-abc-123"})
    assert "tok-abc-123" not in reason
    assert "revoked" in reason


def test_credential_shapes_are_removed_even_when_never_seen() -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJl"
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"
    text = (
        f"invalid_grant: assertion {jwt} rejected; key {pem}; "
        'access ya29.a0AfB_byC-xyz; Authorization: Bearer abc.def; {"refresh_token": "1//0g-rt"}'
    )
    reason = safe_reason(text)
    for secret in (jwt, "MIIEvQIBADANBg", "ya29.a0AfB_byC-xyz", "abc.def", "1//0g-rt"):
        assert secret not in reason
    assert reason.startswith("invalid_grant: assertion [REDACTED] rejected")


def test_a_long_reason_is_shortened_to_one_line() -> None:
    reason = safe_reason("line one\nline two " + "x" * 1000)
    assert "\n" not in reason
    assert len(reason) <= 400 and reason.endswith("...")


def test_an_exception_without_text_is_named() -> None:
    assert safe_reason(TimeoutError()) == "TimeoutError"
