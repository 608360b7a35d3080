"""The CUDA release an image declares in its configuration, read from its registry at submission.

NVIDIA's CUDA base images (and the NGC images built on them) declare
``ENV CUDA_VERSION=12.4.1``; that line lands in the image configuration's
``config.Env``. ``loadmaster submit`` reads it without pulling the image:

1. ``GET /v2/<name>/manifests/<reference>`` with ``Accept`` listing the OCI
   image index, the OCI image manifest, the Docker manifest list and the
   Docker image manifest v2 (OCI distribution spec v1.1, "Pulling manifests",
   https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests);
2. from an index, the manifest whose ``platform`` is ``linux/amd64`` (OCI image
   spec, image-index.md, ``manifests[].platform``), fetched by its digest;
3. ``GET /v2/<name>/blobs/<config.digest>``: the configuration (OCI image spec,
   manifest.md ``config`` and config.md ``config.Env``), checked against its
   sha256 digest (descriptor.md);
4. on ``401`` with ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``,
   an anonymous token from the realm (``GET realm?service=&scope=``, answer
   ``token`` or ``access_token``), as Docker Hub, nvcr.io and ghcr.io ask
   (Docker's token authentication specification, distribution/distribution
   docs/spec/auth/token.md), and the request again with ``Authorization: Bearer``.

Image names are normalised as Docker does (distribution/reference
``normalize.go``): a first component with a ``.`` or ``:`` or ``localhost`` is
a registry, else the image is on Docker Hub, whose API host is
``registry-1.docker.io`` and whose one-word images live under ``library/``.
Registries on localhost or 127.0.0.0/8 are spoken to in plain HTTP, as Docker
allows by default; every other registry over HTTPS.

Not done: credentials (a private registry answers 401 to an anonymous token
and the lookup reports that), platforms other than linux/amd64, and mirrors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from loadmaster.errors import LoadmasterError
from loadmaster.model.cuda import CudaVersion

log = logging.getLogger(__name__)

TIMEOUT_S = 4.0
"""Per request: submission must not hang on an unreachable registry (a lookup is at most 5 requests)."""
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
PLATFORM = ("linux", "amd64")
MAX_BYTES = 4 * 1024 * 1024
"""Largest manifest or configuration read: real ones are kilobytes."""
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(LoadmasterError):
    """Why the image's configuration could not be read (said in one line, never a traceback)."""


@dataclass(frozen=True)
class ImageRef:
    """Where an image lives: the registry's API host, the repository and the tag or digest."""

    registry: str
    repository: str
    reference: str

    @property
    def base_url(self) -> str:
        host = self.registry.rsplit(":", 1)[0] if self.registry.count(":") == 1 else self.registry
        plain = host == "localhost" or host.startswith("127.") or host in {"[::1]", "::1"}
        return f"{'http' if plain else 'https'}://{self.registry}/v2/{self.repository}"


def parse_image(image: str) -> ImageRef:
    """``nvidia/cuda:12.4.1-base`` -> registry-1.docker.io, nvidia/cuda, 12.4.1-base (as Docker names it)."""
    name, at, digest = image.strip().partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    repository, colon, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if not repository or not re.fullmatch(r"[a-z0-9]+(?:[._/-]+[a-z0-9]+)*", repository):
        raise RegistryError(f"{image!r} is not an image name")
    if registry == DOCKER_HUB:
        registry = DOCKER_HUB_API
        if "/" not in repository:
            repository = f"library/{repository}"
    reference = digest if at else (tag if colon else "latest")
    return ImageRef(registry, repository, reference)


def image_env(
    image: str, timeout_s: float = TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> dict[str, str]:
    """The ``config.Env`` of the image's linux/amd64 configuration, as a mapping."""
    ref = parse_image(image)
    with httpx.Client(timeout=timeout_s, follow_redirects=True, transport=transport) as http:
        session = _Session(http, ref)
        manifest = session.json(f"manifests/{ref.reference}", ACCEPT)
        if manifest.get("mediaType") in {OCI_INDEX, DOCKER_LIST} or "manifests" in manifest:
            manifest = session.json(f"manifests/{_platform_digest(manifest, image)}", ACCEPT)
        digest = (manifest.get("config") or {}).get("digest")
        if not isinstance(digest, str):
            raise RegistryError(f"the manifest of {image} names no configuration")
        config = session.json(f"blobs/{digest}", "*/*", digest=digest)
    env = (config.get("config") or {}).get("Env") or []
    return dict(item.partition("=")[::2] for item in env if isinstance(item, str))


def cuda_from_registry(
    image: str, timeout_s: float = TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> CudaVersion:
    """The CUDA release the image's configuration declares (``CUDA_VERSION``); RegistryError says why not."""
    value = image_env(image, timeout_s, transport).get("CUDA_VERSION")
    if not value:
        raise RegistryError(f"the configuration of {image} declares no CUDA_VERSION")
    try:
        return CudaVersion.parse(value)
    except LoadmasterError as exc:
        raise RegistryError(f"the configuration of {image} declares CUDA_VERSION={value!r}: {exc}") from None


def _platform_digest(index: dict[str, Any], image: str) -> str:
    for entry in index.get("manifests") or ():
        platform = entry.get("platform") or {}
        if (platform.get("os"), platform.get("architecture")) == PLATFORM and entry.get("digest"):
            return str(entry["digest"])
    listed = sorted(
        f"{(e.get('platform') or {}).get('os')}/{(e.get('platform') or {}).get('architecture')}"
        for e in index.get("manifests") or ()
    )
    raise RegistryError(f"{image} has no {'/'.join(PLATFORM)} image (it has: {', '.join(listed) or 'none'})")


def _sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class _Session:
    """Requests to one repository, with the anonymous bearer token once a challenge asked for one."""

    def __init__(self, http: httpx.Client, ref: ImageRef) -> None:
        self.http, self.ref = http, ref
        self.token: str | None = None

    def json(self, path: str, accept: str, digest: str | None = None) -> dict[str, Any]:
        url = f"{self.ref.base_url}/{path}"
        response = self._get(url, accept)
        if response.status_code == 401 and self.token is None:
            self.token = self._token(response.headers.get("www-authenticate", ""))
            response = self._get(url, accept)
        if response.status_code != 200:
            raise RegistryError(
                f"{self.ref.registry} answered {response.status_code} for {self.ref.repository} {path}"
            )
        body = response.content
        if len(body) > MAX_BYTES:
            raise RegistryError(f"{url} is larger than {MAX_BYTES} bytes")
        if digest is not None and digest.startswith("sha256:") and _sha256(body) != digest:
            raise RegistryError(f"the blob {digest} of {self.ref.repository} does not match its digest")
        try:
            data = json.loads(body)
        except ValueError:
            raise RegistryError(f"{url} is not JSON") from None
        if not isinstance(data, dict):
            raise RegistryError(f"{url} is not a JSON object")
        return data

    def _get(self, url: str, accept: str) -> httpx.Response:
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            return self.http.get(url, headers=headers)
        except httpx.TimeoutException:
            raise RegistryError(
                f"{self.ref.registry} did not answer within {self.http.timeout.read} s"
            ) from None
        except httpx.HTTPError as exc:
            raise RegistryError(f"{self.ref.registry} is unreachable ({type(exc).__name__}: {exc})") from None

    def _token(self, challenge: str) -> str:
        scheme, _, params = challenge.partition(" ")
        fields = dict(_CHALLENGE.findall(params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            raise RegistryError(f"{self.ref.registry} asks for credentials ({challenge or 'no challenge'})")
        query = {k: fields[k] for k in ("service", "scope") if k in fields}
        query.setdefault("scope", f"repository:{self.ref.repository}:pull")
        response = self._get(f"{fields['realm']}?{urlencode(query)}", "application/json")
        if response.status_code != 200:
            raise RegistryError(
                f"{self.ref.registry} gave no anonymous token ({response.status_code}): a private image?"
            )
        try:
            answer = response.json()
        except ValueError:
            raise RegistryError(f"the token of {self.ref.registry} is not JSON") from None
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token answer of {self.ref.registry} holds no token")
        log.debug("anonymous token for %s from %s", self.ref.repository, fields["realm"])
        return token
