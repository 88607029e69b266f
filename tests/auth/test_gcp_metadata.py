"""gcp-default on a machine with a metadata server (GCE, GKE, Cloud Run), against a loopback one.

google-auth reads GCE_METADATA_HOST when it is imported, so the client runs in a fresh Python
process whose environment points there (and holds no other Google credentials).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .fake_metadata import FakeMetadataServer
from .loopback import RecordingTarget

CLIENT = r"""
import json, os, sys
import httpx
from otel_lifecycle_hooks.auth import AuthError, Credentials
from otel_lifecycle_hooks.template.model import AuthSpec

target = sys.argv[1]
credentials = Credentials()
auth = AuthSpec(type="gcp-default")
try:
    headers = credentials.headers_for(auth, target, os.environ)
except AuthError as exc:
    print(json.dumps({"error": str(exc), "error_type": exc.error_type}))
    sys.exit(0)
again = credentials.headers_for(auth, target, os.environ)
httpx.post(target, headers=headers, content=b"{}")
secrets = sorted(credentials.secret_values())
print(json.dumps({"headers": headers, "again": again, "secrets": secrets}))
credentials.close()
"""


def run_client(tmp_path: Path, metadata_address: str, target_url: str) -> dict[str, Any]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_")) and "proxy" not in name.lower()
    }
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    environ.update(
        HOME=str(home),
        CLOUDSDK_CONFIG=str(home / "gcloud"),
        GCE_METADATA_HOST=metadata_address,
        GCE_METADATA_IP=metadata_address,
        GCE_METADATA_DETECT_RETRIES="1",
        GCE_METADATA_TIMEOUT="2",
    )
    finished = subprocess.run(
        [sys.executable, "-c", CLIENT, target_url],
        env=environ,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_metadata_server_token_reaches_the_service(
    tmp_path: Path, target: RecordingTarget
) -> None:
    with FakeMetadataServer() as metadata:
        result = run_client(tmp_path, metadata.address, target.url)

    assert result["headers"] == {"Authorization": "Bearer ya29.metadata-1"}
    assert result["again"] == result["headers"]  # cached: one token for both calls
    assert target.requests[0][0]["Authorization"] == "Bearer ya29.metadata-1"
    assert metadata.issued == ["ya29.metadata-1"]
    assert metadata.token_scopes == ["https://www.googleapis.com/auth/cloud-platform"]
    assert "/" in metadata.paths  # google-auth's detection ping
    assert "ya29.metadata-1" in result["secrets"]


def test_without_any_credentials_gcp_default_explains_where_it_looked(
    tmp_path: Path, target: RecordingTarget
) -> None:
    # A metadata address where nothing answers: google-auth's ping fails at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    result = run_client(tmp_path, address, target.url)

    assert result["error_type"] in ("auth.credentials_unavailable", "auth.refresh_failed")
    assert "gcp-default" in result["error"]
    if result["error_type"] == "auth.credentials_unavailable":  # not on a real GCE machine
        assert "GOOGLE_APPLICATION_CREDENTIALS" in result["error"]
    assert target.requests == []
