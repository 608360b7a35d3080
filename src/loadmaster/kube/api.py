"""The official ``kubernetes`` client, wrapped: informers (list + watch), leases and the writes.

Lists and watches ask for raw JSON (``_preload_content=False``): the
translation works on plain dicts, and decoding thousands of typed objects
would cost more than scheduling them.
"""

from __future__ import annotations

import json
import queue
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

PODGROUP_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
REQUEST_TIMEOUT_S = 10.0
"""Each API call gives up after this long, so a hung server cannot stall a cycle."""

ApiFailure = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a call to an unreachable or failing API server raises."""


def api_client(kubeconfig: str | None = None, host: str | None = None) -> client.ApiClient:
    """A client for ``host`` (the API double), a kubeconfig file, or the in-cluster service account."""
    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        return client.ApiClient(configuration)
    if kubeconfig is not None:
        built: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return built
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


Event = tuple[str, str, dict[str, Any]]
"""(kind, event type, object): one change seen by an informer; type RELIST carries a list."""


class Informer:
    """Lists one kind, then watches it from the list's version; re-lists on 410 Gone.

    Runs on its own daemon thread and puts every change on ``out``. A dropped
    watch resumes from the last version seen; a failing server is retried
    every ``backoff_s``.
    """

    def __init__(
        self,
        kind: str,
        api: client.ApiClient,
        out: queue.Queue[Event],
        backoff_s: float = 0.2,
    ) -> None:
        self.kind = kind
        self.out = out
        self.backoff_s = backoff_s
        self.version = 0
        self.relists = 0
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
            except ApiFailure:
                self._stop.wait(self.backoff_s)

    def list_once(self) -> None:
        """List the kind now, on the caller's thread (raises what the client raises)."""
        self._list()

    def _list(self) -> None:
        response = self._call(_preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        body = json.loads(response.data)
        self.version = int(body["metadata"]["resourceVersion"])
        self.relists += 1
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
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stop.is_set():
                    return
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:  # our version is too old: start over from a list
                        self.version = 0
                    return
                self.version = int(obj["metadata"]["resourceVersion"])
                if event["type"] != "BOOKMARK":
                    self.out.put((self.kind, event["type"], obj))
        finally:
            response.release_conn()


@dataclass
class LeaderElector:
    """Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

    The holder renews ``renewTime`` each cycle; another replica takes the
    lease over only once ``lease_duration_s`` has passed without a renewal.
    Every write carries the lease's ``resourceVersion``, so of two replicas
    racing for an expired lease exactly one wins (the other gets 409).
    """

    api: client.ApiClient
    identity: str
    namespace: str = "kube-system"
    name: str = "loadmaster"
    lease_duration_s: int = 15
    """How long a lease holds without renewal: client-go's default."""
    clock: Callable[[], float] = time.time

    def acquire_or_renew(self) -> bool:
        """True when this replica holds the lease now (renewed or newly taken)."""
        api = client.CoordinationV1Api(self.api)
        now = self.clock()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                return False
            body = client.V1Lease(
                api_version="coordination.k8s.io/v1",
                kind="Lease",
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(stamp, stamp, 0),
            )
            return _ok(lambda: api.create_namespaced_lease(self.namespace, body))
        except ApiFailure:
            return False
        spec = lease.spec if lease.spec is not None else client.V1LeaseSpec()
        holder = spec.holder_identity
        renewed = spec.renew_time.timestamp() if spec.renew_time is not None else 0.0
        if holder != self.identity and now < renewed + (spec.lease_duration_seconds or 0):
            return False
        transitions = (spec.lease_transitions or 0) + (holder != self.identity)
        kept = spec.acquire_time
        acquired = (
            stamp if holder != self.identity or kept is None else kept.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        )
        lease.spec = self._spec(acquired, stamp, transitions)
        return _ok(lambda: api.replace_namespaced_lease(self.name, self.namespace, lease))

    def _spec(self, acquired: str, renewed: str, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_duration_s,
            acquire_time=acquired,
            renew_time=renewed,
            lease_transitions=transitions,
        )


def _ok(call: Callable[[], object]) -> bool:
    try:
        call()
    except ApiFailure:
        return False
    return True
