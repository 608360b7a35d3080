"""An in-process Kubernetes API double that the official client talks to over real HTTP.

It serves the few endpoints loadmaster uses, on ``127.0.0.1`` and a free
port, with the semantics the scheduler relies on:

* list and watch of nodes, pods, PodGroups, ConfigMaps, events, leases,
  batch Jobs and Services (lists honour an equality ``labelSelector``),
  with a global ``resourceVersion``; a watch from a version older than the
  retained history gets an ``ERROR`` event with a 410 Gone status, as the
  real API server sends; watches asked with ``allowWatchBookmarks`` get a
  BOOKMARK after every write (the real server sends them about once a
  minute; here they let a test wait until a watcher has caught up);
* ``pods/binding`` (409 when the pod is already bound or being deleted,
  404 for an unknown pod; a Binding onto a node that does not exist is
  accepted, as kube-apiserver does), ``pods/eviction`` (429 when a
  PodDisruptionBudget allows no disruption; else a graceful delete), pod and
  PodGroup ``status`` patches, deletes, events, and Leases with optimistic
  concurrency (409 when ``metadata.resourceVersion`` is stale);
* graceful deletion of pods (eviction, or ``DELETE`` without
  ``gracePeriodSeconds: 0``): a pod bound to a node stays, Terminating, with
  ``metadata.deletionTimestamp`` and ``deletionGracePeriodSeconds``, until
  the grace period has passed on the double's ``clock`` (the kubelet's part:
  see :meth:`KubeApiDouble.reap`); an unbound pod goes at once;
* every request body of a built-in kind is validated against the Kubernetes
  OpenAPI schema shipped by ``kubernetes-validate`` (strict: unknown fields
  are errors); a bad body is answered 422 and counted in ``invalid``.
  PodGroups (a CRD) have no schema there and are only checked for shape.

Fault hooks: :meth:`drop_watches`, :meth:`compact` (the next watch from an
old version gets 410), :meth:`conflict_next_binds`, :meth:`unavailable_for`,
:meth:`fail_next` (the next requests answer 500), and ``latency_s`` (every
request waits that long before it is served, as a remote API server would).

Checked against kube-apiserver (kubernetes/kubernetes):
``pkg/registry/core/pod/storage/storage.go`` (``BindingREST``: the pod's
``nodeName`` must be empty and it must not be being deleted; the node is not
looked up), ``pkg/registry/core/pod/storage/eviction.go`` (a PDB with
``disruptionsAllowed`` 0 answers 429 TooManyRequests; else the pod is
deleted with the Eviction's delete options) and
``pkg/registry/core/pod/strategy.go`` (``CheckGracefulDelete``: the grace
period defaults to ``spec.terminationGracePeriodSeconds``, 30 s, and is 0
for a pod not yet scheduled).
"""

from __future__ import annotations

import copy
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonschema
import referencing
from kubernetes_validate import utils as kv

SCHEMA_VERSION = "1.33"
_BUILTIN = {
    ("v1", "Node"),
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("v1", "Event"),
    ("v1", "Binding"),
    ("policy/v1", "Eviction"),
    ("policy/v1", "PodDisruptionBudget"),
    ("coordination.k8s.io/v1", "Lease"),
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
}
_CLUSTER_SCOPED = {"nodes", "priorityclasses"}
_ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$"
)
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_KINDS = {
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    "events": ("v1", "Event"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    "podgroups": ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
    "jobs": ("batch/v1", "Job"),
    "services": ("v1", "Service"),
    "priorityclasses": ("scheduling.k8s.io/v1", "PriorityClass"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
}
DEFAULT_GRACE_S = 30
"""``spec.terminationGracePeriodSeconds`` when a pod does not set it (the API's default)."""


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    folder = f"kubernetes-json-schema/v{SCHEMA_VERSION}.0-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = kv.schema_contents(f"{folder}/{kind.lower()}-{group}.json", SCHEMA_VERSION)
    definitions = kv.schema_contents(f"{folder}/_definitions.json", SCHEMA_VERSION)
    schema = _inline(schema, definitions["$defs"], ())
    registry: referencing.Registry[Any] = referencing.Registry()
    registry = referencing.Resource.from_contents(schema) @ registry
    registry = referencing.Resource.from_contents(definitions) @ registry
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return validator


def _inline(node: Any, definitions: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """The schema with each ``$ref`` into the shared definitions replaced by the definition itself
    (recursive ones kept as references): the same schema, validated without a registry look-up
    per field, which made validation most of the double's time per request."""
    if isinstance(node, list):
        return [_inline(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and "#/$defs/" in ref:  # "/api/_definitions.json#/$defs/X" or "#/$defs/X"
        name = ref.rsplit("/", 1)[1]
        if name not in seen and set(node) <= {"$ref", "description"}:  # a description changes nothing
            return _inline(definitions[name], definitions, (*seen, name))
        node = {**node, "$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{name}"}
        return node
    return {key: _inline(value, definitions, seen) for key, value in node.items()}


def schema_errors(obj: Mapping[str, Any]) -> list[str]:
    """Why ``obj`` breaks the OpenAPI schema of its kind (empty: valid; unknown kinds: shape only)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind are required"]
    if (api_version, kind) not in _BUILTIN:
        meta = obj.get("metadata")
        return [] if isinstance(meta, dict) and meta.get("name") else ["metadata.name is required"]
    errors = _validator(api_version, kind).iter_errors(obj)
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]


def now_rfc3339(clock: Callable[[], float] = time.time) -> str:
    """``clock()`` as the RFC 3339 UTC timestamp Kubernetes writes."""
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiStatus(Exception):  # noqa: N818 - it is the API's Status object, sent as the answer
    """An error answer: HTTP code, reason and message, sent as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": self.code,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass
class _Watcher:
    resource: str
    events: list[dict[str, Any]] = field(default_factory=list)
    bookmarks: bool = False
    closed: bool = False
    last: bool = False
    """The queued events are the last: the stream ends after them (a 410 ERROR)."""
    namespace: str | None = None
    """A namespaced watch (``/namespaces/<ns>/pods?watch=true``) sees that namespace's objects only."""

    def sees(self, resource: str, obj: Mapping[str, Any]) -> bool:
        return resource == self.resource and self.namespace in (None, obj["metadata"].get("namespace"))


class KubeApiDouble:
    """The store, the semantics and the faults; :meth:`serve` starts the HTTP front end.

    ``clock`` stamps ``creationTimestamp`` (a test passes a fake one for
    deterministic submit times). ``history`` is how many write events are kept
    for watches to resume from; a watch from before them gets 410 Gone.
    """

    def __init__(
        self, clock: Callable[[], float] = time.time, history: int = 100_000, latency_s: float = 0.0
    ) -> None:
        self.clock = clock
        self.latency_s = latency_s
        """Every HTTP request waits this long before it is served (a remote API server's round trip)."""
        self.history = history
        self.rv = 1
        self.store: dict[str, dict[str, dict[str, Any]]] = {r: {} for r in _KINDS}
        self.log: list[tuple[int, str, str, dict[str, Any]]] = []
        self.oldest_rv = 1
        self.lock = threading.Condition()
        self.watchers: list[_Watcher] = []
        self.invalid: list[str] = []
        """Every rejected request body, with why: a contract test asserts it stays empty."""
        self.bindings: list[tuple[str, str]] = []
        """Every successful bind as (pod key, node), in order."""
        self.requests: dict[tuple[str, str], int] = {}
        """(RBAC verb, resource[/subresource]) -> how many requests: what a Role must allow."""
        self.logs: dict[str, str] = {}
        """Pod key -> what ``pods/<name>/log`` answers (a test writes it; there is no kubelet)."""
        self._terminating: dict[str, float] = {}
        """Pod key -> when its grace period ends (epoch seconds): what :meth:`reap` looks at."""
        self._conflicts = 0
        self._failures = 0
        self._down_until = 0.0
        self._server: ThreadingHTTPServer | None = None

    # ----------------------------------------------------------------- faults
    def drop_watches(self) -> None:
        """Close every open watch stream, as a load balancer or API server restart would."""
        with self.lock:
            for w in self.watchers:
                w.closed = True
            self.lock.notify_all()

    def compact(self) -> None:
        """Forget the event history: a watch resumed from any older version gets 410 Gone."""
        with self.lock:
            self.log.clear()
            self.rv += 1  # as if writes went by unseen: even a watcher that saw everything must re-list
            self.oldest_rv = self.rv
        self.drop_watches()

    def conflict_next_binds(self, count: int) -> None:
        """Answer the next ``count`` binds 409 Conflict, as if another scheduler bound the pods."""
        self._conflicts = count

    def fail_next(self, count: int) -> None:
        """Answer the next ``count`` requests (any verb) 500 InternalError, as an overloaded server may."""
        with self.lock:
            self._failures = count

    def take_failure(self) -> bool:
        """True (and one fewer left) when the request being served must fail (see :meth:`fail_next`)."""
        with self.lock:
            if self._failures <= 0:
                return False
            self._failures -= 1
            return True

    def unavailable_for(self, seconds: float) -> None:
        """Answer every request 503 for ``seconds`` (wall clock), and drop the watches."""
        self._down_until = time.monotonic() + seconds
        self.drop_watches()

    # ------------------------------------------------------------------ store
    def create(self, resource: str, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create an object directly (what ``kubectl apply`` would do)."""
        with self.lock:
            return self._create(resource, namespace, copy.deepcopy(dict(obj)))

    def get(self, resource: str, key: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.store[resource].get(key)
            return copy.deepcopy(found) if found is not None else None

    def objects(self, resource: str) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.store[resource].values()]

    def _create(self, resource: str, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        api_version, kind = _KINDS[resource]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        meta = obj.setdefault("metadata", {})
        if namespace and resource not in _CLUSTER_SCOPED:
            meta["namespace"] = namespace
        elif resource not in _CLUSTER_SCOPED:
            meta.setdefault("namespace", "default")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self.rv:05d}"
        self._check(obj)
        key = _key(obj)
        if key in self.store[resource]:
            raise ApiStatus(409, "AlreadyExists", f"{resource} {key} already exists")
        meta.setdefault("creationTimestamp", now_rfc3339(self.clock))
        meta["uid"] = f"uid-{self.rv}"
        if resource == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        return self._write(resource, "ADDED", obj)

    def _check(self, obj: Mapping[str, Any]) -> None:
        errors = schema_errors(obj)
        if errors:
            text = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: {'; '.join(errors[:3])}"
            self.invalid.append(text)
            raise ApiStatus(422, "Invalid", text)

    def _write(self, resource: str, event: str, obj: dict[str, Any], answer: bool = True) -> dict[str, Any]:
        """Store ``obj`` (or drop it on DELETED), log the event and queue it for the watchers.

        A stored object is never changed in place afterwards (every change stores a new copy), so
        watchers share it without copying. ``answer``: return a copy the caller may change.
        """
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = _key(obj)
        if event == "DELETED":
            self.store[resource].pop(key, None)
        else:
            self.store[resource][key] = obj
        if resource == "pods":
            stamp = obj["metadata"].get("deletionTimestamp")
            if stamp and event != "DELETED":
                self._terminating[key] = _epoch_s(stamp)
            else:
                self._terminating.pop(key, None)
        self.log.append((self.rv, resource, event, obj))
        if len(self.log) > self.history:
            del self.log[: len(self.log) - self.history]
            self.oldest_rv = self.log[0][0] - 1
        for w in self.watchers:
            if w.closed:
                continue
            if w.sees(resource, obj):
                w.events.append({"type": event, "object": obj})
            elif w.bookmarks:
                w.events.append({"type": "BOOKMARK", "object": _bookmark(w.resource, self.rv)})
        self.lock.notify_all()
        return copy.deepcopy(obj) if answer else obj

    def _find(self, resource: str, key: str) -> dict[str, Any]:
        found = self.store[resource].get(key)
        if found is None:
            raise ApiStatus(404, "NotFound", f'{resource} "{key}" not found')
        return found

    # ------------------------------------------------------------- semantics
    def bind(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST pods/<name>/binding``."""
        with self.lock:  # the HTTP handler holds it already; direct callers (tests) too
            self._check(body)
            pod = self._find("pods", f"{namespace}/{name}")
            node = body["target"]["name"]
            if self._conflicts > 0:
                self._conflicts -= 1
                raise ApiStatus(409, "Conflict", f"Operation cannot be fulfilled on pods/binding {name}")
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiStatus(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host")
            if pod["spec"].get("nodeName"):
                raise ApiStatus(
                    409, "Conflict", f"pod {name} is already assigned to node {pod['spec']['nodeName']}"
                )
            # kube-apiserver does not look the node up (BindingREST.setPodHostAndAnnotations): a pod bound
            # to a node that does not exist stays Pending until the pod garbage collector removes it.
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            if annotations:  # the API server copies a Binding's annotations onto the pod
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            pod["status"]["phase"] = "Running"
            pod["status"]["startTime"] = now_rfc3339(self.clock)
            _set_condition(pod, {"type": "PodScheduled", "status": "True"})
            self._write("pods", "MODIFIED", pod, answer=False)
            self.bindings.append((f"{namespace}/{name}", node))
            return _success(201)

    def delete(self, resource: str, key: str, grace_s: int | None = 0) -> dict[str, Any]:
        """``DELETE``: a pod bound to a node is deleted gracefully (Terminating for ``grace_s``; None:
        its ``terminationGracePeriodSeconds``, as an HTTP DELETE without options); anything else,
        or ``grace_s`` 0 (the default for a test's direct call: a forced delete), goes at once."""
        with self.lock:
            found = self._find(resource, key)
            if resource != "pods":
                return self._write(resource, "DELETED", copy.deepcopy(found))
            spec = found.get("spec") or {}
            if grace_s is None:
                grace_s = int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
            phase = (found.get("status") or {}).get("phase")
            if grace_s <= 0 or not spec.get("nodeName") or phase in {"Succeeded", "Failed"}:
                return self._write(resource, "DELETED", copy.deepcopy(found))
            meta = found["metadata"]
            # Already Terminating: a shorter grace period may only bring the end forward.
            if meta.get("deletionTimestamp") and grace_s >= int(meta.get("deletionGracePeriodSeconds") or 0):
                return copy.deepcopy(found)
            pod = copy.deepcopy(found)
            pod["metadata"]["deletionTimestamp"] = now_rfc3339(lambda: self.clock() + grace_s)
            pod["metadata"]["deletionGracePeriodSeconds"] = grace_s
            return self._write(resource, "MODIFIED", pod)

    def reap(self) -> list[str]:
        """Remove the Terminating pods whose grace period is over on ``clock`` (the kubelet's part).

        Called before every request is served; a test with a fake clock calls
        it after moving the clock. Returns the keys removed.
        """
        with self.lock:
            if not self._terminating:
                return []
            now = self.clock()
            due = [key for key, end in self._terminating.items() if end <= now]
            for key in due:
                self._write("pods", "DELETED", copy.deepcopy(self.store["pods"][key]))
            return due

    def evict(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST pods/<name>/eviction``: 429 if a PodDisruptionBudget forbids it, else delete gracefully."""
        with self.lock:  # the HTTP handler holds it already; direct callers (tests) too
            self._check(body)
            key = f"{namespace}/{name}"
            pod = self._find("pods", key)
            if (pod.get("status") or {}).get("phase") not in {"Succeeded", "Failed"}:
                self._take_disruption(pod)
            grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
            self.delete("pods", key, None if grace is None else int(grace))
            return _success(201)

    def _take_disruption(self, pod: Mapping[str, Any]) -> None:
        """Check and decrement the one PDB selecting ``pod`` (as ``EvictionREST.checkAndDecrement``)."""
        labels = pod["metadata"].get("labels") or {}
        namespace = pod["metadata"].get("namespace")
        budgets = [
            b
            for b in self.store["poddisruptionbudgets"].values()
            if b["metadata"].get("namespace") == namespace and _selects(b, labels)
        ]
        if len(budgets) > 1:
            raise ApiStatus(500, "InternalError", "This pod has more than one PodDisruptionBudget")
        if not budgets:
            return
        budget = copy.deepcopy(budgets[0])
        status = budget.setdefault("status", {})
        if int(status.get("disruptionsAllowed", 0)) <= 0:
            raise ApiStatus(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
        self._write("poddisruptionbudgets", "MODIFIED", budget)

    def patch(self, resource: str, key: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch (conditions merged by type, as strategic merge does); the result is validated."""
        with self.lock:  # the HTTP handler holds it already; direct callers (tests) too
            obj = copy.deepcopy(self._find(resource, key))
            _merge(obj, patch)
            self._check(obj)
            return self._write(resource, "MODIFIED", obj)

    def replace(self, resource: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT``: 409 unless ``metadata.resourceVersion`` is the stored one (optimistic concurrency)."""
        with self.lock:  # the HTTP handler holds it already; direct callers (tests) too
            self._check(body)
            current = self._find(resource, key)
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiStatus(
                    409, "Conflict", f"the object {key} has been modified; apply to the latest version"
                )
            return self._write(resource, "MODIFIED", copy.deepcopy(body))

    # ------------------------------------------------------------ list/watch
    def list_objects(self, resource: str, namespace: str | None, selector: str = "") -> dict[str, Any]:
        """A list filtered by namespace and a ``labelSelector`` (equalities, existence: ``a=b,c``)."""
        api_version, kind = _KINDS[resource]
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        present = [part for part in selector.split(",") if part and "=" not in part]
        items = [
            copy.deepcopy(o)
            for o in self.store[resource].values()
            if (namespace is None or o["metadata"].get("namespace") == namespace)
            and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
            and all(k in (o["metadata"].get("labels") or {}) for k in present)
        ]
        return {
            "apiVersion": api_version,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    @contextmanager
    def watch(
        self, resource: str, since: int, bookmarks: bool, namespace: str | None = None
    ) -> Iterator[_Watcher]:
        """Register a watcher primed with the events after ``since`` (or a 410 ERROR event)."""
        with self.lock:
            watcher = _Watcher(resource, bookmarks=bookmarks, namespace=namespace)
            if since < self.oldest_rv:
                gone = ApiStatus(410, "Expired", f"too old resource version: {since} ({self.oldest_rv})")
                watcher.events.append({"type": "ERROR", "object": gone.body()})
                watcher.last = True
            else:
                watcher.events.extend(
                    {"type": e, "object": o} for rv, r, e, o in self.log if rv > since and watcher.sees(r, o)
                )
                if bookmarks and since < self.rv:
                    watcher.events.append({"type": "BOOKMARK", "object": _bookmark(resource, self.rv)})
                self.watchers.append(watcher)
        try:
            yield watcher
        finally:
            with self.lock:
                if watcher in self.watchers:
                    self.watchers.remove(watcher)

    def next_events(self, watcher: _Watcher, deadline: float) -> list[dict[str, Any]] | None:
        """The watcher's queued events, waiting for some until ``deadline``; None when it is over."""
        with self.lock:
            while not watcher.events and not watcher.closed and time.monotonic() < deadline:
                self.lock.wait(min(0.5, max(deadline - time.monotonic(), 0.0)))
            events, watcher.events = watcher.events, []
            if watcher.last:
                watcher.closed = True
                return events or None
            return events if events and not watcher.closed else None

    # ------------------------------------------------------------------ HTTP
    def serve(self) -> str:
        """Start the HTTP front end on a free port; return its base URL."""
        handler = type("Handler", (_Handler,), {"api": self})
        server = _Server(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True, name="kube-double").start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    def close(self) -> None:
        """Stop serving and end every watch."""
        self.drop_watches()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def record(self, verb: str, resource: str, sub: str | None = None) -> None:
        """Count one request by the RBAC verb and resource it needs."""
        key = (verb, f"{resource}/{sub}" if sub else resource)
        with self.lock:
            self.requests[key] = self.requests.get(key, 0) + 1

    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def handle(self, method: str, path: str, query: Mapping[str, str], body: Any) -> tuple[int, Any]:
        """Route one non-watch request; return (HTTP code, JSON answer)."""
        if method == "GET" and (found := discovery(path)) is not None:
            return 200, found
        match = _ROUTE.match(path)
        if match is None or match["resource"] not in _KINDS:
            raise ApiStatus(404, "NotFound", f"no route for {method} {path}")
        resource, ns, name, sub = match["resource"], match["ns"], match["name"], match["sub"]
        self.record(_VERBS[method] if name is not None or method != "GET" else "list", resource, sub)
        key = f"{ns}/{name}" if ns else str(name)
        with self.lock:
            if method == "GET" and sub == "log":
                self._find(resource, key)
                return 200, self.logs.get(key, "")
            if method == "GET":
                if name is None:
                    return 200, self.list_objects(resource, ns, query.get("labelSelector", ""))
                return 200, copy.deepcopy(self._find(resource, key))
            if method == "POST" and sub == "binding":
                return 201, self.bind(str(ns), str(name), body)
            if method == "POST" and sub == "eviction":
                return 201, self.evict(str(ns), str(name), body)
            if method == "POST" and name is None:
                return 201, self._create(resource, ns, body)
            if method == "PATCH":
                return 200, self.patch(resource, key, body)
            if method == "PUT":
                return 200, self.replace(resource, key, body)
            if method == "DELETE":
                grace = query.get("gracePeriodSeconds", (body or {}).get("gracePeriodSeconds"))
                return 200, self.delete(resource, key, None if grace is None else int(grace))
        raise ApiStatus(405, "MethodNotAllowed", f"{method} {path}")


class _Server(ThreadingHTTPServer):
    request_queue_size = socket.SOMAXCONN
    """The listen backlog. socketserver's default is 5: 16 binds opening connections at once overflowed
    it and the kernel dropped SYNs, which the client resends after 1 s (a 1 s p99 bind). Go's
    net.Listen, which kube-apiserver uses, takes the kernel's ``somaxconn``, as this does."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about clients that hang up (a closed keep-alive connection); loud about the rest."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiDouble
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """TCP_NODELAY, as Go's net package sets on every connection kube-apiserver accepts: without it a
    kept-alive connection waits ~40 ms (Nagle + delayed ACK) between a response's header and body."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and benchmarks make thousands of requests."""

    def _answer(self, code: int, body: Any) -> None:
        text = isinstance(body, str)  # a pod's log is plain text, as the kubelet sends it
        data = body.encode() if text else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.api.latency_s > 0:
            time.sleep(self.api.latency_s)
        try:
            self.api.reap()
            if self.api.down():
                raise ApiStatus(503, "ServiceUnavailable", "the API double is unavailable (fault injected)")
            if self.api.take_failure():
                raise ApiStatus(500, "InternalError", "the API double failed this request (fault injected)")
            if self.command == "GET" and query.get("watch") in {"true", "1"}:
                self._watch(url.path, query)
                return
            code, answer = self.api.handle(self.command, url.path, query, json.loads(raw) if raw else None)
        except ApiStatus as status:
            code, answer = status.code, status.body()
        self._answer(code, answer)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch  # noqa: N815 - http.server's names

    def _watch(self, path: str, query: Mapping[str, str]) -> None:
        match = _ROUTE.match(path)
        if match is None or match["resource"] not in _KINDS:
            raise ApiStatus(404, "NotFound", path)
        self.api.record("watch", match["resource"])
        since = int(query.get("resourceVersion") or 0) or self.api.rv
        timeout = float(query.get("timeoutSeconds") or 300)
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        bookmarks = query.get("allowWatchBookmarks") in {"true", "1"}
        with self.api.watch(match["resource"], since, bookmarks, match["ns"]) as watcher:
            try:
                while (events := self.api.next_events(watcher, deadline)) is not None:
                    data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.close_connection = True


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _bookmark(resource: str, rv: int) -> dict[str, Any]:
    api_version, kind = _KINDS[resource]
    return {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": str(rv)}}


def _epoch_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _selects(budget: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A PDB's ``spec.selector.matchLabels`` against pod labels (an empty selector matches nothing)."""
    wanted = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _success(code: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": code}


def _set_condition(obj: dict[str, Any], condition: dict[str, Any]) -> None:
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != condition["type"]] + [condition]


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif key == "conditions" and isinstance(value, list):
            for condition in value:
                _set_condition(_holder(target), condition)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _holder(status: dict[str, Any]) -> dict[str, Any]:
    """Wrap a ``status`` dict so that :func:`_set_condition` edits its ``conditions``."""
    return {"status": status}


# ---------------------------------------------------------------------------------------------------
# Discovery: what a real client (kubectl) asks before anything else.
#
# kube-apiserver serves the legacy group at /api (APIVersions) and /api/v1 (APIResourceList), the
# named groups at /apis (APIGroupList) and /apis/<group>/<version> (APIResourceList): the types of
# k8s.io/apimachinery/pkg/apis/meta/v1 (types.go). kubectl 1.32 first asks for the aggregated form
# (Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList) and falls back to
# these documents when the answer is plain JSON (client-go discovery/aggregated_discovery.go), as
# kube-apiserver before 1.26 answered. Everything here is derived from _KINDS, so a kind the double
# stores is a kind kubectl can name. /version answers as kube-apiserver's version.Info.
# ---------------------------------------------------------------------------------------------------
_KINDS["pytorchjobs"] = ("kubeflow.org/v1", "PyTorchJob")  # stored only: there is no training operator
_SHORT_NAMES = {
    "pods": ["po"],
    "nodes": ["no"],
    "configmaps": ["cm"],
    "events": ["ev"],
    "podgroups": ["pg", "pgs"],
    "priorityclasses": ["pc"],
    "poddisruptionbudgets": ["pdb"],
    "services": ["svc"],
}
_SUBRESOURCES = {
    "pods": [("binding", "v1", "Binding", ["create"]), ("eviction", "policy/v1", "Eviction", ["create"]),
             ("status", "v1", "Pod", ["get", "patch", "update"]), ("log", "v1", "Pod", ["get"])],
    "podgroups": [("status", "scheduling.x-k8s.io/v1alpha1", "PodGroup", ["get", "patch", "update"])],
    "poddisruptionbudgets": [("status", "policy/v1", "PodDisruptionBudget", ["get", "patch", "update"])],
}  # fmt: skip
_VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-loadmaster-double",
    "platform": "linux/amd64",
}


def _group_versions() -> dict[str, list[str]]:
    """groupVersion ("v1", "policy/v1", ...) -> the resources of _KINDS in it, in insertion order."""
    found: dict[str, list[str]] = {}
    for resource, (api_version, _) in _KINDS.items():
        found.setdefault(api_version, []).append(resource)
    return found


def _resource_list(group_version: str) -> dict[str, Any] | None:
    resources = _group_versions().get(group_version)
    if resources is None:
        return None
    listed: list[dict[str, Any]] = []
    for resource in resources:
        kind = _KINDS[resource][1]
        entry: dict[str, Any] = {
            "name": resource,
            "singularName": kind.lower(),
            "namespaced": resource not in _CLUSTER_SCOPED,
            "kind": kind,
            "verbs": _VERBS_ALL,
        }
        if resource in _SHORT_NAMES:
            entry["shortNames"] = _SHORT_NAMES[resource]
        listed.append(entry)
        for sub, api_version, sub_kind, verbs in _SUBRESOURCES.get(resource, []):
            group, _, version = api_version.rpartition("/")
            where = {"group": group, "version": version} if group else {}
            namespaced = resource not in _CLUSTER_SCOPED
            listed.append(
                {"name": f"{resource}/{sub}", "singularName": "", "namespaced": namespaced,
                 "kind": sub_kind, "verbs": verbs, **where}
            )  # fmt: skip
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}


def discovery(path: str) -> dict[str, Any] | None:
    """The discovery document at ``path`` (None: not a discovery path)."""
    path = path.rstrip("/")
    if path == "/version":
        return dict(SERVER_VERSION)
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/api/v1":
        return _resource_list("v1")
    if path == "/apis":
        groups: dict[str, list[str]] = {}
        for group_version in _group_versions():
            if "/" in group_version:
                group, _, version = group_version.partition("/")
                groups.setdefault(group, []).append(version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
                }
                for group, versions in groups.items()
            ],
        }
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "apis":  # /apis/<group>/<version>
        return _resource_list(f"{parts[2]}/{parts[3]}")
    if path == "/openapi/v3":
        return {"paths": {_openapi_path(gv): {"serverRelativeURL": f"/openapi/v3/{_openapi_path(gv)}"}
                          for gv in _group_versions()}}  # fmt: skip
    if path.startswith("/openapi/v3/"):
        return _openapi_v3(path.removeprefix("/openapi/v3/"))
    return None


def _openapi_path(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def _openapi_v3(where: str) -> dict[str, Any] | None:
    """A group version's OpenAPI v3 document, reduced to what kubectl reads from it.

    kubectl (k8s.io/cli-runtime resource/query_param_verifier_v3.go) looks for the PATCH operation
    of each kind (by its ``x-kubernetes-group-version-kind``) and whether it takes the
    ``fieldValidation`` query parameter; with it, kubectl leaves validation to the server (the
    double validates every built-in kind against its schema, strictly) instead of downloading
    schemas. Schemas themselves are not served.
    """
    group_version = next((gv for gv in _group_versions() if _openapi_path(gv) == where), None)
    if group_version is None:
        return None
    group, _, version = group_version.rpartition("/")
    paths: dict[str, Any] = {}
    for resource in _group_versions()[group_version]:
        kind = _KINDS[resource][1]
        scope = "" if resource in _CLUSTER_SCOPED else "/namespaces/{namespace}"
        gvk = {"group": group, "version": version, "kind": kind}
        parameter = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        patch = {"x-kubernetes-group-version-kind": gvk, "parameters": [parameter], "responses": {}}
        paths[f"/{where}{scope}/{resource}/{{name}}"] = {"patch": patch}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths}  # fmt: skip
