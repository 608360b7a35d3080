"""Reading an image's declared ``CUDA_VERSION`` from its registry, against an in-process fake registry.

The fake answers as the OCI distribution spec says a registry does: an
anonymous ``GET /v2/<name>/manifests/<ref>`` gets ``401`` with a
``WWW-Authenticate: Bearer realm,service,scope`` challenge (as Docker Hub,
nvcr.io and ghcr.io do), the realm hands out a token for that scope, a tag
resolves to an OCI image index, the index's linux/amd64 entry to an OCI image
manifest, and its ``config`` descriptor to a configuration blob addressed by
its sha256 digest. Differences from a real registry: no HEAD, no redirect of
blobs to a CDN, no rate limits, one token for every repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.kube import registry as rg
from loadmaster.model.cuda import CudaVersion

TOKEN = "anon-token"
SERVICE = "fake-registry"


def _blob(data: dict[str, Any]) -> tuple[str, bytes]:
    body = json.dumps(data).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest(), body


def _config(env: list[str]) -> tuple[str, bytes]:
    return _blob({"architecture": "amd64", "os": "linux", "config": {"Env": env}, "rootfs": {}})


def _manifest(config_digest: str, size: int) -> tuple[str, bytes]:
    return _blob(
        {
            "schemaVersion": 2,
            "mediaType": rg.OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": size,
            },
            "layers": [],
        }
    )


def _index(entries: list[tuple[str, str, str]]) -> tuple[str, bytes]:
    manifests = [
        {"mediaType": rg.OCI_MANIFEST, "digest": d, "size": 1, "platform": {"architecture": arch, "os": os_}}
        for d, os_, arch in entries
    ]
    return _blob({"schemaVersion": 2, "mediaType": rg.OCI_INDEX, "manifests": manifests})


class FakeRegistry:
    """Repositories -> {reference: (media type, body)} and blobs -> body, served on 127.0.0.1."""

    def __init__(self) -> None:
        self.manifests: dict[str, dict[str, tuple[str, bytes]]] = {}
        self.blobs: dict[str, dict[str, bytes]] = {}
        self.requests: list[str] = []
        self.delay_s = 0.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake.requests.append(self.path)
                time.sleep(fake.delay_s)
                if self.path.startswith("/token?"):
                    return self._send(200, "application/json", json.dumps({"token": TOKEN}).encode())
                parts = self.path.removeprefix("/v2/").rsplit("/", 2)
                if len(parts) != 3:
                    return self._send(404, "text/plain", b"not found")
                repo, kind, ref = parts
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    realm = f"http://127.0.0.1:{fake.port}/token"
                    challenge = f'Bearer realm="{realm}",service="{SERVICE}",scope="repository:{repo}:pull"'
                    return self._send(401, "application/json", b"{}", {"WWW-Authenticate": challenge})
                if kind == "manifests" and ref in fake.manifests.get(repo, {}):
                    assert (
                        rg.OCI_INDEX in self.headers["Accept"]
                        and rg.DOCKER_MANIFEST in self.headers["Accept"]
                    )
                    media, body = fake.manifests[repo][ref]
                    return self._send(200, media, body)
                if kind == "blobs" and ref in fake.blobs.get(repo, {}):
                    return self._send(200, "application/octet-stream", fake.blobs[repo][ref])
                return self._send(404, "application/json", b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')

            def _send(
                self, code: int, media: str, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"

    def add(self, repo: str, tag: str, env: list[str], platforms: list[tuple[str, str]] | None) -> None:
        """An image: its config, its manifest, and (when ``platforms``) an index naming it per platform."""
        config_digest, config = _config(env)
        manifest_digest, manifest = _manifest(config_digest, len(config))
        self.blobs.setdefault(repo, {})[config_digest] = config
        refs = self.manifests.setdefault(repo, {})
        refs[manifest_digest] = (rg.OCI_MANIFEST, manifest)
        if platforms is None:
            refs[tag] = (rg.OCI_MANIFEST, manifest)
            return
        other_digest, other = _manifest(config_digest, 0)  # another platform's manifest
        refs[other_digest] = (rg.OCI_MANIFEST, other)
        entries = [(manifest_digest if p == ("linux", "amd64") else other_digest, *p) for p in platforms]
        _, index = _index(entries)
        refs[tag] = (rg.OCI_INDEX, index)


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    fake = FakeRegistry()
    fake.add(
        "nvidia/pytorch",
        "24.05-py3",
        ["PATH=/usr/bin", "CUDA_VERSION=12.4.1"],
        [("linux", "arm64"), ("linux", "amd64")],
    )
    fake.add("arm/only", "1", ["CUDA_VERSION=12.4.1"], [("linux", "arm64")])
    fake.add("plain/python", "3.11", ["PATH=/usr/bin"], None)
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_parse_image_normalises_as_docker_does() -> None:
    assert rg.parse_image("ubuntu") == rg.ImageRef("registry-1.docker.io", "library/ubuntu", "latest")
    assert rg.parse_image("nvidia/cuda:12.4.1-base") == rg.ImageRef(
        "registry-1.docker.io", "nvidia/cuda", "12.4.1-base"
    )
    assert rg.parse_image("docker.io/nvidia/cuda:12.4.1-base").registry == "registry-1.docker.io"
    assert rg.parse_image("nvcr.io/nvidia/pytorch:24.05-py3") == rg.ImageRef(
        "nvcr.io", "nvidia/pytorch", "24.05-py3"
    )
    assert rg.parse_image("localhost:5000/a/b@sha256:00").reference == "sha256:00"
    assert rg.parse_image("localhost:5000/a/b").base_url == "http://localhost:5000/v2/a/b"
    assert rg.parse_image("ghcr.io/o/r:1").base_url == "https://ghcr.io/v2/o/r"
    with pytest.raises(rg.RegistryError, match="not an image name"):
        rg.parse_image("Bad Name")


def test_index_to_amd64_manifest_to_config_through_the_token_challenge(registry: FakeRegistry) -> None:
    assert rg.cuda_from_registry(f"{registry.host}/nvidia/pytorch:24.05-py3") == CudaVersion(12, 4)
    paths = [p.split("?")[0].rsplit("/", 1)[0] for p in registry.requests]
    assert paths == [  # challenged once, then index, amd64 manifest, config
        "/v2/nvidia/pytorch/manifests",
        "",
        "/v2/nvidia/pytorch/manifests",
        "/v2/nvidia/pytorch/manifests",
        "/v2/nvidia/pytorch/blobs",
    ]
    token_query = registry.requests[1]
    assert f"service={SERVICE}" in token_query and "scope=repository%3Anvidia%2Fpytorch%3Apull" in token_query


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("{host}/nvidia/pytorch:nope", "answered 404"),
        ("{host}/arm/only:1", "has no linux/amd64 image (it has: linux/arm64)"),
        ("{host}/plain/python:3.11", "declares no CUDA_VERSION"),
    ],
)
def test_failures_say_why(registry: FakeRegistry, image: str, why: str) -> None:
    with pytest.raises(rg.RegistryError, match=re.escape(why)):
        rg.cuda_from_registry(image.format(host=registry.host))


def test_a_slow_or_unreachable_registry_fails_quickly(registry: FakeRegistry) -> None:
    registry.delay_s = 1.0
    start = time.monotonic()
    with pytest.raises(rg.RegistryError, match=r"did not answer within 0\.2 s"):
        rg.cuda_from_registry(f"{registry.host}/nvidia/pytorch:24.05-py3", timeout_s=0.2)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    with pytest.raises(rg.RegistryError, match="unreachable"):
        rg.cuda_from_registry(f"127.0.0.1:{closed}/a/b:1", timeout_s=0.2)
    assert time.monotonic() - start < 2.0


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "me.yaml"
    path.write_text("user: alice\ngroup: team-a\n")
    monkeypatch.setenv("LOADMASTER_CONFIG", str(path))
    monkeypatch.delenv("LOADMASTER_IMAGE_LOOKUP", raising=False)


def _dry_run(*args: str) -> tuple[list[dict[str, Any]], str, str]:
    result = CliRunner().invoke(app, ["submit", "--dry-run", *args, "--", "python", "a.py"])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d], result.stdout, result.stderr


def test_submit_writes_the_declared_release_as_the_cuda_annotation(
    registry: FakeRegistry, identity: None
) -> None:
    docs, out, err = _dry_run("--image", f"{registry.host}/nvidia/pytorch:24.05-py3")
    assert docs[2]["spec"]["template"]["metadata"]["annotations"] == {"loadmaster.io/cuda": "12.4"}
    assert "# note: CUDA 12.4 read from the image's configuration (CUDA_VERSION)" in out
    assert err == "", err


def test_submit_carries_on_with_one_line_when_the_lookup_fails(
    registry: FakeRegistry, identity: None
) -> None:
    docs, _, err = _dry_run("--image", f"{registry.host}/plain/python:3.11")
    assert "annotations" not in docs[2]["spec"]["template"]["metadata"]
    assert err.strip().count("\n") == 0 and "declares no CUDA_VERSION" in err and "Traceback" not in err


def test_no_image_lookup_and_a_given_release_ask_nothing(
    registry: FakeRegistry, identity: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = f"{registry.host}/nvidia/pytorch:24.05-py3"
    docs, _, _ = _dry_run("--no-image-lookup", "--image", image)
    assert "annotations" not in docs[2]["spec"]["template"]["metadata"]
    _dry_run("--cuda", "11.8", "--image", image)
    _dry_run("--env", "CUDA_VERSION=12.1", "--image", image)
    monkeypatch.setenv("LOADMASTER_IMAGE_LOOKUP", "false")  # the identity setting, through its variable
    _dry_run("--image", image)
    assert registry.requests == []
