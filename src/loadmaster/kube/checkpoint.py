"""The fair-share ledger kept in a ConfigMap, so that a restart or a new leader starts where the last left.

:class:`~loadmaster.kube.history.JobHistory` charges the pods the informers
cache; the pods themselves do not last (a Job's ``ttlSecondsAfterFinished``,
the pod garbage collector and deletions remove them), so a replica that
starts afresh would have lost the usage of every pod already removed. Slurm
keeps it in slurmctld's state save location and its accounting database;
Kueue's admission fair sharing keeps each LocalQueue's decayed consumption in
the LocalQueue's status. Here the leader writes the history to one ConfigMap
(default ``loadmaster/loadmaster-fairshare``, key ``usage.json``) at most every
:data:`SAVE_EVERY_S` when it changed, and on a clean stop; every replica reads
it once, before it charges anything.

What is written (JSON, ``format`` 1): the decayed usage per user and group as
of ``saved_at``, each user's recent run times and limits, and which ended pods
are in those numbers: every pod that ended by the ``watermark``
(:data:`END_GRACE_S` before ``saved_at``) and, after it, the pods and runs
named by UID. A replica that reads it charges the ended pods still in the API
that are in neither, so no pod is charged twice and none that ended after the
save is missed. What is lost: pods that were running at the save and were
removed before a replica saw them end.

Reading: no ConfigMap starts empty; one that cannot be read (a bad edit, a
format from a later version) is logged with the field at fault, the history
starts empty and the unreadable text is kept in the ConfigMap under
:data:`UNREADABLE_KEY` at the next save, so nothing stored is lost. An API
failure is retried at the next step; the scheduler does not schedule until the
ledger is read (its priorities would be wrong), and a 403 (RBAC) is an error
that leaves it without a ledger. A write refused with a conflict (another
replica wrote since) re-reads the version and writes again at the next step;
other failures retry with a doubling backoff up to :data:`SAVE_EVERY_S`.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.config.usage import json_object, mapping, number, past_usage_from, usage_fields
from loadmaster.errors import ConfigError
from loadmaster.kube import translate as tr
from loadmaster.kube.api import REQUEST_TIMEOUT_S, ApiFailure, short_error
from loadmaster.kube.history import JobHistory, SavedHistory

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT = "loadmaster/loadmaster-fairshare"
"""NAMESPACE/NAME of the ConfigMap (the scheduler's namespace: its Role grants it by name)."""
DATA_KEY = "usage.json"
UNREADABLE_KEY = "unreadable.usage.json"
"""Where a checkpoint that could not be read is kept when the next one is written."""
FORMAT = 1
SAVE_EVERY_S = 60.0
"""Most often the leader writes (Slurm saves its state every few minutes; fair share moves in hours)."""
END_GRACE_S = 300.0
"""How long after a pod's end the informers are trusted to have shown it (the watermark's lag)."""
MAX_BYTES = 900 * 1024
"""Largest checkpoint written: a ConfigMap holds at most 1 MiB (etcd's object limit)."""
FIRST_RETRY_S = 1.0


@dataclass
class UsageCheckpoint:
    """Reads the ledger once into a :class:`JobHistory` and writes it back (see the module)."""

    api: client.ApiClient
    configmap: str = DEFAULT_CHECKPOINT
    every_s: float = SAVE_EVERY_S
    grace_s: float = END_GRACE_S
    clock: Callable[[], float] = time.monotonic
    """For the save interval and the backoff only (the ledger's times are the scheduler's clock)."""

    def __post_init__(self) -> None:
        namespace, _, name = self.configmap.rpartition("/")
        if not name:
            raise ValueError(f"checkpoint ConfigMap must be NAMESPACE/NAME, got {self.configmap!r}")
        self.namespace, self.name = namespace or "default", name
        self.core = client.CoreV1Api(self.api)
        self.restored = False
        """True once read (or found absent, or given up on a 403): the history may charge pods."""
        self.enabled = True
        """False after a 403: this replica keeps no ledger (an error says why)."""
        self.version: str | None = None
        """resourceVersion of the ConfigMap as last read or written (None: there is none)."""
        self.unreadable: str | None = None
        """The stored text that could not be read, kept at the next save."""
        self.saves = 0
        self.failures = 0
        """Reads and writes that failed (each logged, and retried)."""
        self.last_saved_at_s: float | None = None
        self._saved_marker: object = None
        self._next_save_s = -math.inf
        self._retry_s = FIRST_RETRY_S

    # ----------------------------------------------------------------- read
    def restore(self, history: JobHistory) -> bool:
        """Read the ledger into ``history``; False when the API could not be asked (try again)."""
        if self.restored:
            return True
        try:
            found = self._read()
        except ApiException as exc:
            if exc.status == 403:
                self.restored, self.enabled = True, False
                log.error(
                    "cannot read the fair-share checkpoint ConfigMap %s (forbidden): fair-share usage "
                    "starts empty and is not saved; grant get, update and create on it (deploy/rbac.yaml)",
                    self.configmap,
                )
                return True
            self._read_failed(exc)
            return False
        except ApiFailure as exc:
            self._read_failed(exc)
            return False
        self.restored = True
        if found is None:
            log.info("no fair-share checkpoint ConfigMap %s yet: usage starts empty", self.configmap)
            return True
        text = (found.get("data") or {}).get(DATA_KEY)
        self.unreadable = (found.get("data") or {}).get(UNREADABLE_KEY)
        if text is None:
            log.info("fair-share checkpoint %s holds no %s yet: usage starts empty", self.configmap, DATA_KEY)
            return True
        try:
            saved = parse(text, f"ConfigMap {self.configmap}, key {DATA_KEY}")
        except ConfigError as exc:
            self.unreadable = text
            log.error("%s; fair-share usage starts empty (the text is kept under %s)", exc, UNREADABLE_KEY)
            return True
        history.restore(saved)
        log.info(
            "fair-share usage restored from ConfigMap %s: %d users and groups, saved at %s",
            self.configmap,
            len(saved.past.usage_gpu_s),
            tr.utc_stamp(saved.past.as_of_s),
            extra={"owners": len(saved.past.usage_gpu_s), "saved_at": saved.past.as_of_s},
        )
        return True

    def _read(self) -> tr.Obj | None:
        try:
            response = self.core.read_namespaced_config_map(
                self.name, self.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status == 404:
                self.version = None
                return None
            raise
        found: tr.Obj = json.loads(response.data)  # type: ignore[arg-type]  # raw answer
        self.version = str(found.get("metadata", {}).get("resourceVersion"))
        return found

    def _read_failed(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning(
            "cannot read the fair-share checkpoint ConfigMap %s (%s); not scheduling until it is read",
            self.configmap,
            short_error(exc),
        )

    # ---------------------------------------------------------------- write
    def changed(self, marker: object) -> bool:
        """True when the history moved (``marker`` differs from the one last written) and may be saved."""
        return self.enabled and self.restored and marker != self._saved_marker

    def due(self, marker: object) -> bool:
        """True when a save is due: the history changed and the interval (or the backoff) passed."""
        return self.changed(marker) and self.clock() >= self._next_save_s

    def save(self, history: JobHistory, now: float, marker: object) -> bool:
        """Write ``history`` as of ``now`` (create or replace at the version last seen); True if written."""
        body = self._body(history, now)
        if body is None:
            return False
        try:
            if self.version is None:
                written = self.core.create_namespaced_config_map(
                    self.namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
                )
            else:
                written = self.core.replace_namespaced_config_map(
                    self.name,
                    self.namespace,
                    body,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT_S,
                )
        except ApiException as exc:
            if exc.status in {404, 409}:  # deleted, or written by another replica: take its version
                return self._after_conflict(exc)
            self._save_failed(exc)
            return False
        except ApiFailure as exc:
            self._save_failed(exc)
            return False
        answer = json.loads(written.data)  # type: ignore[arg-type]  # raw answer
        self.version = str(answer.get("metadata", {}).get("resourceVersion"))
        self.saves += 1
        self.last_saved_at_s = now
        self._saved_marker = marker
        self._next_save_s = self.clock() + self.every_s
        self._retry_s = FIRST_RETRY_S
        log.debug("fair-share checkpoint written to ConfigMap %s", self.configmap)
        return True

    def _body(self, history: JobHistory, now: float) -> client.V1ConfigMap | None:
        data = {DATA_KEY: render(history.saved(now, self.grace_s))}
        if self.unreadable is not None:
            data[UNREADABLE_KEY] = self.unreadable
        size = sum(len(v.encode()) for v in data.values())
        if size > MAX_BYTES:
            self._save_failed(
                ValueError(f"{size} bytes, over the {MAX_BYTES} a ConfigMap can hold; the last one stays")
            )
            return None
        metadata = client.V1ObjectMeta(
            name=self.name,
            namespace=self.namespace,
            labels={"app": "loadmaster"},
            resource_version=self.version,
        )
        return client.V1ConfigMap(api_version="v1", kind="ConfigMap", metadata=metadata, data=data)

    def _after_conflict(self, exc: ApiException) -> bool:
        log.warning(
            "fair-share checkpoint ConfigMap %s changed since read (%s); writing again at the next step",
            self.configmap,
            short_error(exc),
        )
        self.failures += 1
        try:
            self._read()
        except ApiFailure as again:
            self._save_failed(again)
        return False

    def _save_failed(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning(
            "cannot write the fair-share checkpoint ConfigMap %s (%s); retrying in %.0f s",
            self.configmap,
            short_error(exc),
            self._retry_s,
        )
        self._next_save_s = self.clock() + self._retry_s
        self._retry_s = min(self._retry_s * 2, self.every_s)


# --------------------------------------------------------------- the format
def render(saved: SavedHistory) -> str:
    """The checkpoint's JSON text (sorted keys: the same history writes the same text)."""
    return json.dumps(
        {
            "format": FORMAT,
            "saved_at": saved.past.as_of_s,
            "watermark": saved.watermark_s,
            **usage_fields(saved.past),
            "charged": sorted(saved.charged),
            "recorded": {job: sorted(uids) for job, uids in saved.recorded.items()},
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def parse(text: str, where: str) -> SavedHistory:
    """A checkpoint's text read back; :class:`ConfigError` naming ``where`` and the field at fault."""
    raw = json_object(text, where)
    if raw.get("format") != FORMAT:
        raise ConfigError(where, "format", f"expected {FORMAT}, got {raw.get('format')!r}")
    past = past_usage_from(raw, where, as_of="saved_at")
    watermark = number(raw, "watermark", where)
    if watermark > past.as_of_s:
        raise ConfigError(where, "watermark", f"must be <= saved_at ({past.as_of_s}), got {watermark}")
    return SavedHistory(
        past=past,
        watermark_s=watermark,
        charged=frozenset(_uids(raw.get("charged", []), "charged", where)),
        recorded={
            job: frozenset(_uids(uids, f"recorded[{job!r}]", where))
            for job, uids in mapping(raw, "recorded", where).items()
        },
    )


def _uids(values: Any, name: str, where: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(where, name, "expected a list of pod UIDs (strings)")
    return values
