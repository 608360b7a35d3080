"""The official ``kubernetes`` client, wrapped: informers (list + watch), leases and the writes.

Lists and watches ask for raw JSON (``_preload_content=False``): the
translation works on plain dicts, and decoding thousands of typed objects
would cost more than scheduling them.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

PODGROUP_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
REQUEST_TIMEOUT_S = 10.0
"""Each API call gives up after this long, so a hung server cannot stall a cycle."""

CONNECTIONS = 32
"""HTTP connections kept open to the API server: the bind pool plus the informers' watches."""

ApiFailure = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a call to an unreachable or failing API server raises."""


def api_client(kubeconfig: str | None = None, host: str | None = None) -> client.ApiClient:
    """A client for ``host`` (the API double), a kubeconfig file, or the in-cluster service account.

    Its connection pool holds :data:`CONNECTIONS` connections, so that concurrent binds reuse
    connections instead of opening (and discarding) one each.
    """
    configuration = client.Configuration()
    if host is not None:
        configuration.host = host
    elif kubeconfig is not None:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = CONNECTIONS
    return client.ApiClient(configuration)


Event = tuple[str, str, dict[str, Any]]
"""(kind, event type, object): one change seen by an informer; type RELIST carries a list."""


class Informer:
    """Lists one kind, then watches it from the list's version; re-lists on 410 Gone.

    Runs on its own daemon thread and puts every change on ``out``. A dropped
    watch resumes from the last version seen. Any error (an API failure, a
    malformed answer, a bug) is logged and retried after an exponential
    backoff with jitter, from ``backoff_s`` up to ``max_backoff_s``, as
    client-go's reflector backs off; the thread never ends on its own.
    :attr:`staleness_s` says how long ago the last list or watch event arrived.
    """

    def __init__(  # noqa: PLR0917 - the seams tests need
        self,
        kind: str,
        api: client.ApiClient,
        out: queue.Queue[Event],
        backoff_s: float = 0.2,
        max_backoff_s: float = 30.0,
        seed: int | None = None,
    ) -> None:
        self.kind = kind
        self.out = out
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.version = 0
        self.relists = 0
        self.errors = 0
        """Errors seen so far (each one logged and retried)."""
        self.failures_in_a_row = 0
        self._last_ok = time.monotonic()
        self._random = random.Random(seed)
        self._stop = threading.Event()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        calls: dict[str, Callable[..., Any]] = {
            "nodes": core.list_node,
            "pods": core.list_pod_for_all_namespaces,
            "podgroups": lambda **kw: custom.list_cluster_custom_object(*PODGROUP_API, **kw),
            "priorityclasses": client.SchedulingV1Api(api).list_priority_class,
        }
        self._call = calls[kind]
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"informer-{kind}")

    @property
    def staleness_s(self) -> float:
        """Seconds since the last successful list or watch event (bookmarks count): the cache's age."""
        return time.monotonic() - self._last_ok

    def alive(self) -> bool:
        """True while the informer's thread runs (it ends only on :meth:`stop`)."""
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.version == 0:
                    self._list()
                self._watch()
            except Exception as exc:  # any error: log it, back off, list or watch again
                self.errors += 1
                self.failures_in_a_row += 1
                delay = self.next_backoff_s()
                log.warning(
                    "informer %s: %s: %s; retrying in %.2f s",
                    self.kind, type(exc).__name__, short_error(exc), delay,
                    extra={"kind": self.kind, "error": type(exc).__name__, "retry_s": delay},
                )  # fmt: skip
                self._stop.wait(delay)

    def next_backoff_s(self) -> float:
        """Uniform in [c/2, c], c = min(max, base * 2^(failures - 1)): doubling, capped, with jitter
        so that many replicas do not retry in step; the floor keeps a broken server from a hot loop."""
        ceiling = min(self.max_backoff_s, self.backoff_s * 2 ** max(self.failures_in_a_row - 1, 0))
        return self._random.uniform(ceiling / 2, ceiling)

    def _seen(self) -> None:
        self._last_ok = time.monotonic()
        self.failures_in_a_row = 0

    def list_once(self) -> None:
        """List the kind now, on the caller's thread (raises what the client raises)."""
        self._list()

    def _list(self) -> None:
        response = self._call(_preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        body = json.loads(response.data)
        response.release_conn()
        self.version = int(body["metadata"]["resourceVersion"])
        self.relists += 1
        self._seen()
        self.out.put((self.kind, "RELIST", body))

    def _watch(self) -> None:
        response = self._call(
            watch=True,
            resource_version=str(self.version),
            allow_watch_bookmarks=True,
            timeout_seconds=300,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT_S, 330),
        )
        self.failures_in_a_row = 0  # the server answered the watch: from here on no change is missed
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stop.is_set():
                    return
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:  # our version is too old: start over from a list
                        log.info("informer %s: watch expired (410), re-listing", self.kind)
                        self.version = 0
                    return
                self.version = int(obj["metadata"]["resourceVersion"])
                self._seen()
                if event["type"] != "BOOKMARK":
                    self.out.put((self.kind, event["type"], obj))
        finally:
            response.release_conn()


@dataclass
class LeaderElector:
    """Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

    Expiry is judged on this replica's own monotonic clock: every time the
    Lease record (holder, renewTime, transitions) is seen to change, the local
    time of that observation is noted, and another holder's lease counts as
    expired only once ``lease_duration_s`` has passed locally with no change.
    The other replica's ``renewTime`` is never compared with the local clock,
    so clock skew between nodes cannot hand the lease to two replicas.

    The holder keeps the lease ``renew_deadline_s`` (shorter than the lease)
    after the start of its last successful renewal; :meth:`holds_now` is the
    fence every bind checks. Another replica waits ``lease_duration_s`` from
    when *it* saw that renewal, which is later, so the two never overlap (as
    long as the clocks run at about the same rate). :meth:`start` renews every
    ``retry_period_s`` on a background thread. Every write carries the
    lease's ``resourceVersion``: of two replicas racing for an expired lease
    exactly one wins (the other gets 409).
    """

    api: client.ApiClient
    identity: str
    namespace: str = "kube-system"
    name: str = "loadmaster"
    lease_duration_s: int = 15
    """How long another replica waits without seeing a renewal: client-go's default."""
    renew_deadline_s: float = 10.0
    """How long the holder trusts its last renewal: client-go's default, shorter than the lease."""
    retry_period_s: float = 2.0
    """How often the background thread tries to acquire or renew: client-go's default."""
    clock: Callable[[], float] = time.time
    """Wall clock, for the timestamps written into the Lease only."""
    monotonic: Callable[[], float] = time.monotonic
    """Local clock that judges expiry and the renew deadline."""
    on_change: Callable[[bool], None] | None = None
    """Called with the new state whenever this replica gains or loses the lease."""

    def __post_init__(self) -> None:
        if not 0 < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"renew_deadline_s ({self.renew_deadline_s}) must be > 0 and < lease_duration_s "
                f"({self.lease_duration_s})"
            )
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self._read_at = float("-inf")
        self._valid_until = float("-inf")
        self._leading = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holds_now(self) -> bool:
        """True while this replica's last successful renewal is younger than ``renew_deadline_s``."""
        leading = self.monotonic() < self._valid_until
        if not leading and self._leading:
            self._set_leading(False, "renew deadline passed without a successful renewal")
        return leading

    def role(self) -> str:
        """``leader`` (holds the lease now), ``standby`` (read the Lease within ``lease_duration_s``: it
        knows who leads and can take over) or ``unknown`` (the Lease could not be read lately: the
        replica cannot tell whether it may lead, so its readiness fails)."""
        if self.holds_now():
            return "leader"
        return "standby" if self.monotonic() - self._read_at <= self.lease_duration_s else "unknown"

    def acquire_or_renew(self) -> bool:
        """Try once to take or renew the lease; True when this replica holds it now."""
        with self._lock:
            started = self.monotonic()
            if self._try(started):
                self._valid_until = started + self.renew_deadline_s
                if not self._leading:
                    self._set_leading(True, "acquired the lease")
                return True
            return self.holds_now()

    def start(self) -> None:
        """Renew every ``retry_period_s`` on a daemon thread until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="lease-renewer")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def background(self) -> bool:
        """True when a background thread renews the lease (the cycle only checks :meth:`holds_now`)."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.acquire_or_renew()
            except Exception:  # the renewer must outlive any error; holds_now() then lapses
                log.exception("lease %s/%s: renewal failed", self.namespace, self.name)
            self._stop.wait(self.retry_period_s)

    def _set_leading(self, leading: bool, why: str) -> None:
        self._leading = leading
        state = "is the leader" if leading else "is no longer the leader"
        log.info(
            "lease %s/%s: %s %s (%s)", self.namespace, self.name, self.identity, state, why,
            extra={"identity": self.identity, "leader": leading},
        )  # fmt: skip
        if self.on_change is not None:
            self.on_change(leading)

    def _observe(self, spec: client.V1LeaseSpec, now: float) -> None:
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions, spec.lease_duration_seconds)
        if record != self._observed:
            self._observed, self._observed_at = record, now

    def _try(self, now: float) -> bool:
        api = client.CoordinationV1Api(self.api)
        stamp = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, short_error(exc))
                return False
            self._read_at = now  # read: there is no Lease yet
            body = client.V1Lease(
                api_version="coordination.k8s.io/v1",
                kind="Lease",
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(stamp, stamp, 0),
            )
            return _ok(lambda: api.create_namespaced_lease(self.namespace, body), "create lease")
        except ApiFailure as exc:
            log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, short_error(exc))
            return False
        self._read_at = now
        spec = lease.spec if lease.spec is not None else client.V1LeaseSpec()
        self._observe(spec, now)
        holder = spec.holder_identity
        duration = spec.lease_duration_seconds or self.lease_duration_s
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False
        transitions = (spec.lease_transitions or 0) + (holder != self.identity)
        kept = spec.acquire_time
        acquired = (
            stamp if holder != self.identity or kept is None else kept.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        )
        lease.spec = self._spec(acquired, stamp, transitions)
        return _ok(lambda: api.replace_namespaced_lease(self.name, self.namespace, lease), "renew lease")

    def _spec(self, acquired: str, renewed: str, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_duration_s,
            acquire_time=acquired,
            renew_time=renewed,
            lease_transitions=transitions,
        )


def _ok(call: Callable[[], object], what: str) -> bool:
    try:
        call()
    except ApiFailure as exc:
        log.warning("%s failed: %s", what, short_error(exc))
        return False
    return True


def short_error(exc: BaseException) -> str:
    """An API error as ``status reason`` (the client's own text carries every header); others as text."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return str(exc)[:200]
