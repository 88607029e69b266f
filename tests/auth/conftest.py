"""Fixtures for credential tests: a fresh RSA key pair, a process environment with no Google
credentials of the machine's in reach, and a loopback service that records what it receives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .loopback import RecordingTarget

_MACHINE_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_QUOTA_PROJECT",
    "GCE_METADATA_MTLS_MODE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


class KeyPair:
    def __init__(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self.public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@pytest.fixture(scope="session")
def key_pair() -> KeyPair:
    return KeyPair()


def write_service_account_key(path: Path, key_pair: KeyPair, token_uri: str) -> Path:
    """A service-account JSON key file as the Cloud console issues them, with our own key."""
    info = {
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "loopback-key-1",
        "private_key": key_pair.private_pem.decode(),
        "client_email": "hooks@test-project.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(info))
    return path


@pytest.fixture
def clean_google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """HOME and the gcloud config point into tmp_path; no credentials variable is set."""
    for name in _MACHINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".config" / "gcloud").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(home / ".config" / "gcloud"))
    return home


@pytest.fixture
def target() -> Iterator[RecordingTarget]:
    recording = RecordingTarget()
    recording.server.start()
    yield recording
    recording.server.stop()
