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
it before it charges anything, and a replica that becomes leader reads it
again and starts its history from it (the last leader may have charged pods
this replica never saw end) before it writes; where the store holds no
ledger, it keeps its own.

What is written (JSON, ``format`` 1): the decayed usage per user and group as
of ``saved_at``, each user's recent run times and limits, and which ended pods
are in those numbers: every pod whose containers finished by the
``watermark`` (:data:`END_GRACE_S`, plus how far behind the pods cache is,
before ``saved_at``) and, besides, the pods and runs named by UID. A replica
that reads it charges the ended pods still in the API that are in neither,
so no pod is charged twice and none that ended after the write is missed.
What is lost: pods that ended after the last write and were removed before
another replica read the store.

Reading: no ConfigMap starts empty; one that cannot be read (a bad edit, a
format from a later version, a ``saved_at`` more than :data:`MAX_AHEAD_S`
after the reader's clock) is logged with the field at fault, the history
starts empty and the text is kept in the ConfigMap under
``unreadable.<unix time>.usage.json``, as every other key and label found
there is kept: nothing stored is lost. A failed read keeps the replica from
scheduling (its priorities would be wrong) and is tried again at the next
step; a 403 (RBAC) is an error that lets it go on without the store while
the leader keeps trying. A write refused with a conflict is read back: if
its ledger is still the one this replica wrote (someone changed a label or a
key), the write is made again at once, keeping them; otherwise another
replica wrote since, and the history starts again from the store; every failure
waits a doubling backoff up to :data:`SAVE_EVERY_S` and counts in
``failures``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

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
UNREADABLE_PREFIX = "unreadable."
"""A checkpoint that could not be read is kept under ``unreadable.<unix time>.usage.json``."""
FORMAT = 1
SAVE_EVERY_S = 15.0
"""Most often the leader writes: what ended since its last write and was removed from the API is lost
when it goes, so writes are frequent (four small writes a minute at most; the Lease is renewed every
2 s)."""
END_GRACE_S = 300.0
"""How long after a pod's end the informers are trusted to have shown it (the watermark's lag)."""
MAX_AHEAD_S = 86_400.0
"""A checkpoint saved later than this after the reader's clock is refused (a clock far off, or a bad
edit); one saved less far ahead is read as of the reader's now (the writer's clock ran ahead)."""
MAX_BYTES = 900 * 1024
"""Largest checkpoint written: a ConfigMap holds at most 1 MiB (etcd's object limit)."""
FIRST_RETRY_S = 1.0

Outcome = Literal["restored", "empty", "forbidden", "failed"]
"""What a read came to: ``restored`` (the history now starts from the store), ``empty`` (nothing
usable stored: none, no key, or set aside as unreadable), ``forbidden`` (403), ``failed`` (the API
could not answer)."""


@dataclass
class UsageCheckpoint:
    """Reads the ledger into a :class:`JobHistory` and writes it back (see the module)."""

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
        """True once this replica's history started from the store (or there was none, or it may not
        read it): from then on it may charge pods."""
        self.reload_wanted = False
        """The leader must start its history again from the store before it writes: it has just become
        leader, someone else wrote since its last read, or it could not read it (403)."""
        self.version: str | None = None
        """resourceVersion of the ConfigMap as last read or written (None: there is none)."""
        self.kept: dict[str, str] = {}
        """The ConfigMap's other keys (texts set aside as unreadable, keys others added): written back."""
        self.meta: dict[str, dict[str, str]] = {}
        """Its labels and annotations as read, written back."""
        self.saves = 0
        self.failures = 0
        """Reads and writes that failed (each logged, and retried)."""
        self.last_saved_at_s: float | None = None
        self._written_text: str | None = None
        """The ``usage.json`` this replica last read or wrote: a conflict leaving it unchanged was
        someone else's edit of the metadata, not another ledger."""
        self._saved_marker: object = None
        self._next_try_s = -math.inf
        self._retry_s = FIRST_RETRY_S

    # ----------------------------------------------------------------- read
    def restore(self, history: JobHistory, now: float) -> bool:
        """Start ``history`` from the store once; False while the API cannot answer (try again).

        A 403 lets the replica go on without a ledger (an error says why, and the leader keeps
        trying to read it); any other failure keeps it from charging, and so from scheduling.
        """
        if self.restored:
            return True
        outcome = self.read_into(history, now)
        if outcome == "failed":
            return False
        if outcome == "empty":
            log.info("fair-share usage starts empty", extra={"configmap": self.configmap})
        self.restored = True
        self.reload_wanted = outcome == "forbidden"
        return True

    def read_into(self, history: JobHistory, now: float) -> Outcome:
        """Read the store into ``history`` (which must not have charged anything yet)."""
        try:
            found = self._read()
        except ApiException as exc:
            if exc.status == 403:
                self._failed(exc, "read", level=logging.ERROR, why="forbidden: grant get, update and create "
                             "on it (deploy/rbac.yaml); fair share goes on without it")  # fmt: skip
                return "forbidden"
            self._failed(exc, "read", why="not scheduling until it is read")
            return "failed"
        except ApiFailure as exc:
            self._failed(exc, "read", why="not scheduling until it is read")
            return "failed"
        self._retry_s = FIRST_RETRY_S
        if found is None:
            log.info("no fair-share checkpoint ConfigMap %s yet", self.configmap)
            return "empty"
        text = self._take_extras(found)
        if text is None:
            log.info("fair-share checkpoint %s holds no %s yet", self.configmap, DATA_KEY)
            return "empty"
        try:
            where = f"ConfigMap {self.configmap}, key {DATA_KEY}"
            saved = _as_of_now(parse(text, where), now, where)
        except ConfigError as exc:
            aside = f"{UNREADABLE_PREFIX}{int(now)}.{DATA_KEY}"
            self.kept[aside] = text
            log.error("%s; it is not read (the text is kept under %s)", exc, aside)
            return "empty"
        history.restore(saved)
        log.info(
            "fair-share usage restored from ConfigMap %s: %d users and groups, saved at %s",
            self.configmap,
            len(saved.past.usage_gpu_s),
            tr.utc_stamp(saved.past.as_of_s),
            extra={"owners": len(saved.past.usage_gpu_s), "saved_at": saved.past.as_of_s},
        )
        self._written_text = text
        return "restored"

    def _take_extras(self, found: tr.Obj) -> str | None:
        """Keep the ConfigMap's other keys, labels and annotations (written back); its ledger text."""
        data = dict(found.get("data") or {})
        text = data.pop(DATA_KEY, None)
        self.kept = data
        metadata = found.get("metadata") or {}
        self.meta = {k: dict(metadata[k]) for k in ("labels", "annotations") if metadata.get(k)}
        return None if text is None else str(text)

    def reload_due(self) -> bool:
        """True when the leader should start its history again from the store now (see ``reload_wanted``)."""
        return self.reload_wanted and self.clock() >= self._next_try_s

    def reloaded(self) -> None:
        """The leader's history now starts from the store: writes may go on."""
        self.reload_wanted = False

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

    # ---------------------------------------------------------------- write
    def changed(self, marker: object) -> bool:
        """True when the history moved (``marker`` differs from the one last written) and may be written."""
        return self.restored and not self.reload_wanted and marker != self._saved_marker

    def due(self, marker: object) -> bool:
        """True when a write is due: the history changed and the interval (or the backoff) passed."""
        return self.changed(marker) and self.clock() >= self._next_try_s

    def save(self, history: JobHistory, now: float, marker: object, *, stale_s: float = 0.0) -> bool:
        """Write ``history`` as of ``now`` (create, or replace at the version last seen); True if written.

        ``stale_s``: how far behind the pods cache may be; the watermark stays that much further back,
        so a successor still charges the pods that ended in that time.
        """
        body = self._body(history, now, stale_s)
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
            if exc.status == 409:
                self._after_conflict(exc)
            elif exc.status == 404 and self.version is not None:  # deleted while running: create it anew
                self.version = None
                self._failed(exc, "write", why="it was deleted; creating it again")
            else:
                self._failed(
                    exc, "write", level=logging.ERROR if exc.status in {403, 404} else logging.WARNING
                )
            return False
        except ApiFailure as exc:
            self._failed(exc, "write")
            return False
        answer = json.loads(written.data)  # type: ignore[arg-type]  # raw answer
        self.version = str(answer.get("metadata", {}).get("resourceVersion"))
        self._written_text = (body.data or {}).get(DATA_KEY)
        self.saves += 1
        self.last_saved_at_s = now
        self._saved_marker = marker
        self._next_try_s = self.clock() + self.every_s
        self._retry_s = FIRST_RETRY_S
        log.debug("fair-share checkpoint written to ConfigMap %s", self.configmap)
        return True

    def _body(self, history: JobHistory, now: float, stale_s: float) -> client.V1ConfigMap | None:
        data = {**self.kept, DATA_KEY: render(history.saved(now, self.grace_s + max(stale_s, 0.0)))}
        size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
        if size > MAX_BYTES:
            self._failed(
                ValueError(f"{size} bytes, over the {MAX_BYTES} a ConfigMap can hold"),
                "write",
                level=logging.ERROR,
                why="the last one written stays",
            )
            return None
        labels = {"app": "loadmaster", **self.meta.get("labels", {})}
        metadata = client.V1ObjectMeta(
            name=self.name,
            namespace=self.namespace,
            labels=labels,
            annotations=self.meta.get("annotations") or None,
            resource_version=self.version,
        )
        return client.V1ConfigMap(api_version="v1", kind="ConfigMap", metadata=metadata, data=data)

    def _after_conflict(self, exc: ApiException) -> None:
        """A write refused with 409: someone changed the ConfigMap since this replica read or wrote it.

        Where its ``usage.json`` is still the text this replica last wrote, the change was someone
        else's label, annotation or key (``kubectl label``, a GitOps tool): take the new version and
        what it holds, and write again. Otherwise another replica wrote the ledger: read it again
        and start from it before writing (``reload_wanted``).
        """
        try:
            found = self._read()
        except ApiFailure as again:
            self.reload_wanted = True
            self._failed(again, "read", why="after a conflicting write; reading it again first")
            return
        if found is not None and (found.get("data") or {}).get(DATA_KEY) == self._written_text:
            self._take_extras(found)
            self._failed(exc, "write", why="changed by someone else (its ledger untouched); writing again")
            self._next_try_s = self.clock()  # at once: nothing is wrong with the ledger
            return
        self.reload_wanted = True
        self._failed(exc, "write", why="another replica wrote it since; reading it again first")

    def _failed(self, exc: BaseException, what: str, *, level: int = logging.WARNING, why: str = "") -> None:
        """Count and log a failed read or write; the next try waits a doubling backoff (up to ``every_s``)."""
        self.failures += 1
        log.log(
            level,
            "cannot %s the fair-share checkpoint ConfigMap %s (%s)%s; next try in %.0f s",
            what,
            self.configmap,
            short_error(exc),
            f": {why}" if why else "",
            self._retry_s,
            extra={"configmap": self.configmap, "error": short_error(exc)},
        )
        self._next_try_s = self.clock() + self._retry_s
        self._retry_s = min(self._retry_s * 2, self.every_s)


def _as_of_now(saved: SavedHistory, now: float, where: str) -> SavedHistory:
    """``saved`` as this replica reads it: one written ahead of its clock is taken as of now (its
    writer's clock ran ahead), one written more than :data:`MAX_AHEAD_S` ahead is refused."""
    ahead = saved.past.as_of_s - now
    if ahead <= 0:
        return saved
    if ahead > MAX_AHEAD_S:
        raise ConfigError(
            where,
            "saved_at",
            f"{tr.utc_stamp(saved.past.as_of_s)} is {ahead / 3600:.1f} h after this replica's clock "
            f"(at most {MAX_AHEAD_S / 3600:.0f} h is read)",
        )
    log.warning(
        "fair-share checkpoint saved %.0f s after this replica's clock: read as of now (clocks differ)", ahead
    )
    return replace(saved, past=replace(saved.past, as_of_s=now), watermark_s=min(saved.watermark_s, now))


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
