"""gcp-service-account and gcp-default against a loopback token endpoint that verifies the
signed JWT assertion: google-auth's own code paths, nothing patched."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from otel_lifecycle_hooks.auth import AuthError, Credentials
from otel_lifecycle_hooks.template.model import AuthSpec

from .conftest import KeyPair, write_service_account_key
from .fake_token_endpoint import FakeTokenEndpoint
from .loopback import RecordingTarget

SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def test_a_service_account_key_gets_a_token_the_service_receives(
    clean_google_env: Path, key_pair: KeyPair, target: RecordingTarget, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        credentials = Credentials()
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))

        headers = credentials.headers_for(auth, target.url, {})
        httpx.post(target.url, headers=headers, content=b"{}")
        again = credentials.headers_for(auth, target.url, {})
        credentials.close()

    assert target.requests[0][0]["Authorization"] == "Bearer ya29.loopback-1"
    assert again == headers  # an hour-long token is reused, not fetched again
    assert endpoint.requests == 1 and endpoint.rejections == []
    claims = endpoint.claims[0]
    assert claims["iss"] == "hooks@test-project.iam.gserviceaccount.com"
    assert claims["scope"] == SCOPE
    assert claims["aud"] == "https://oauth2.googleapis.com/token"


def test_the_key_file_may_come_from_google_application_credentials(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        environ = {"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}
        headers = Credentials().headers_for(
            AuthSpec(type="gcp-service-account"), "https://x.example", environ
        )
    assert headers == {"Authorization": "Bearer ya29.loopback-1"}


def test_gcp_default_finds_the_file_named_by_google_application_credentials(
    clean_google_env: Path,
    key_pair: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        import os

        headers = Credentials().headers_for(
            AuthSpec(type="gcp-default"), "https://x.example", os.environ
        )
    assert headers == {"Authorization": "Bearer ya29.loopback-1"}
    assert endpoint.claims[0]["scope"] == SCOPE


def test_gcp_default_searches_the_gcloud_adc_location(
    clean_google_env: Path, key_pair: KeyPair
) -> None:
    # No variable names a file: google.auth.default() looks in the gcloud config directory.
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        adc = clean_google_env / ".config" / "gcloud" / "application_default_credentials.json"
        write_service_account_key(adc, key_pair, endpoint.url)
        headers = Credentials().headers_for(AuthSpec(type="gcp-default"), "https://x.example", {})
    assert headers == {"Authorization": "Bearer ya29.loopback-1"}
    assert endpoint.rejections == []


def test_gcp_default_reads_a_workload_identity_federation_file(
    clean_google_env: Path, tmp_path: Path
) -> None:
    # An external_account file: a subject token (e.g. a Kubernetes service-account token)
    # exchanged at a Security Token Service for a Google access token.
    subject = tmp_path / "k8s-token"
    subject.write_text("subject-jwt-from-the-cluster")
    with FakeTokenEndpoint(subject_token="subject-jwt-from-the-cluster") as sts:
        config = tmp_path / "wif.json"
        config.write_text(
            json.dumps(
                {
                    "type": "external_account",
                    "audience": "//iam.googleapis.com/projects/1/locations/global/"
                    "workloadIdentityPools/p/providers/k8s",
                    "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                    "token_url": sts.url,
                    "credential_source": {"file": str(subject)},
                }
            )
        )
        environ = {"GOOGLE_APPLICATION_CREDENTIALS": str(config)}
        headers = Credentials().headers_for(
            AuthSpec(type="gcp-default"), "https://x.example", environ
        )
    assert headers == {"Authorization": "Bearer ya29.loopback-1"}
    assert sts.rejections == []


def test_ten_concurrent_hooks_cause_exactly_one_refresh_of_a_token_near_expiry(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    # The first token lives 0 s: already due, so the next call must refresh.
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem, expires_in=(0, 3600)) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        credentials = Credentials()
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        first = credentials.headers_for(auth, "https://x.example", {})
        endpoint.delay = 0.3  # hold the refresh open while the others arrive

        start = threading.Barrier(10)
        results: list[dict[str, str]] = []
        errors: list[BaseException] = []

        def hook() -> None:
            start.wait()
            try:
                results.append(credentials.headers_for(auth, "https://x.example", {}))
            except BaseException as exc:  # noqa: BLE001 - collected, asserted below
                errors.append(exc)

        threads = [threading.Thread(target=hook) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    assert errors == []
    assert first == {"Authorization": "Bearer ya29.loopback-1"}
    assert results == [{"Authorization": "Bearer ya29.loopback-2"}] * 10
    assert endpoint.requests == 2  # the first fetch, then exactly one refresh
    assert {"ya29.loopback-1", "ya29.loopback-2"} <= credentials.secret_values()


def test_callers_waiting_on_a_failed_refresh_share_its_failure(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(
        public_key_pem=key_pair.public_pem, failure="invalid_grant", delay=0.5
    ) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        credentials = Credentials()
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        start = threading.Barrier(5)
        failures: list[AuthError] = []

        def hook() -> None:
            start.wait()
            try:
                credentials.headers_for(auth, "https://x.example", {})
            except AuthError as exc:
                failures.append(exc)

        threads = [threading.Thread(target=hook) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    assert len(failures) == 5
    assert endpoint.requests == 1


@pytest.mark.parametrize("failure", ["invalid_grant", "500"])
def test_a_refresh_failure_is_an_auth_error_with_the_reason_and_no_secret(
    failure: str, clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem, failure=failure) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        started = time.monotonic()
        with pytest.raises(AuthError) as failed:
            Credentials().headers_for(auth, "https://x.example", {})
        elapsed = time.monotonic() - started

    message = str(failed.value)
    assert failed.value.error_type == "auth.refresh_failed"
    assert ("invalid_grant" if failure == "invalid_grant" else "backend_error") in message
    assert str(key_file) in message
    # The endpoint echoed the signed assertion back; neither it nor the key may show.
    assert "eyJ" not in message
    assert (
        "PRIVATE KEY" not in message
        and key_pair.private_pem.decode().splitlines()[1] not in message
    )
    assert elapsed < 30  # google-auth's own retries of a 500 stay bounded


def test_a_refresh_failure_hides_tokens_handed_out_before(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem, expires_in=(0,)) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        credentials = Credentials()
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        credentials.headers_for(auth, "https://x.example", {})
        endpoint.failure = "invalid_grant"
        with pytest.raises(AuthError) as failed:
            credentials.headers_for(auth, "https://x.example", {})
    assert "ya29.loopback-1" in credentials.secret_values()
    assert "ya29.loopback-1" not in str(failed.value)


def test_a_missing_key_file_says_which_file(clean_google_env: Path, tmp_path: Path) -> None:
    auth = AuthSpec(type="gcp-service-account", credentials_file=str(tmp_path / "absent.json"))
    with pytest.raises(AuthError) as missing:
        Credentials().headers_for(auth, "https://x.example", {})
    assert missing.value.error_type == "auth.credentials_unavailable"
    assert "absent.json" in str(missing.value)


def test_a_service_account_without_any_key_file_says_how_to_name_one(
    clean_google_env: Path,
) -> None:
    with pytest.raises(AuthError, match="credentials_file.*GOOGLE_APPLICATION_CREDENTIALS"):
        Credentials().headers_for(AuthSpec(type="gcp-service-account"), "https://x.example", {})


def test_a_file_that_is_not_a_key_is_refused(clean_google_env: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.json"
    bogus.write_text('{"hello": "world"}')
    auth = AuthSpec(type="gcp-service-account", credentials_file=str(bogus))
    with pytest.raises(AuthError, match="not usable"):
        Credentials().headers_for(auth, "https://x.example", {})


def test_no_token_is_fetched_for_a_url_that_would_leak_it(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        auth = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        with pytest.raises(AuthError, match="https://"):
            Credentials().headers_for(auth, "http://10.0.0.1/register", {})
    assert endpoint.requests == 0


def test_each_credential_has_its_own_cache(
    clean_google_env: Path, key_pair: KeyPair, tmp_path: Path
) -> None:
    with FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint:
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        credentials = Credentials()
        broad = AuthSpec(type="gcp-service-account", credentials_file=str(key_file))
        narrow = AuthSpec(
            type="gcp-service-account",
            credentials_file=str(key_file),
            scopes=("https://www.googleapis.com/auth/devstorage.read_only",),
        )
        tokens = {
            credentials.headers_for(a, "https://x.example", {})["Authorization"]
            for a in (broad, narrow, broad)
        }
    assert tokens == {"Bearer ya29.loopback-1", "Bearer ya29.loopback-2"}
    assert [c["scope"] for c in endpoint.claims] == [SCOPE, narrow.scopes[0]]
