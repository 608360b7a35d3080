"""A stateful chaos model of the Kubernetes scheduler: Hypothesis interleaves faults, invariants judge.

:class:`KubeChaos` drives two replicas of :class:`KubeCluster` (the official
client over HTTP) against one :class:`KubeApiDouble`, with one fake clock
for the double, the replicas' wall clocks and their monotonic clocks. Rules
create and delete nodes, pods and PodGroups, evict with grace periods,
recreate controller-owned pods as a Job controller would, bind pods of
another scheduler, inject API errors and latency, drop watches and expire
them (410), crash and restart replicas (also mid-bind), and make binds slow
enough for the lease to pass to the other replica mid-cycle.

Invariants after every step: no node over-committed (Terminating pods
count), no pod bound twice, no gang left partly bound well past its
``scheduleTimeoutSeconds`` while a replica leads, no exception from a
scheduler step on valid objects (an exception fails the run by itself), and
fair share neither lost nor inflated: the usage in the checkpoint the
leaders write (every step that charged) never falls, decay aside, through
crashes and changes of leader, and no replica's usage exceeds what the pods
it scheduled can have used.

Two scenarios. :class:`KubeChaos` runs the shipped ``priority`` profile,
whose ``priority-preempt`` evicts only jobs that ran 600 s: the fake clock
seldom gets a pod that old, so it almost never preempts.
:class:`KubePreemptChaos` lowers ``min_runtime_s`` to
:data:`PREEMPT_MIN_RUNTIME_S`, so high-priority pods (half of those added)
evict running ones, and the invariants are judged while victims are still
Terminating (:attr:`Tally.checks_with_victims_terminating` counts those
checks: the claim that a victim keeps its GPUs until it is gone is only
tested when it is above 0).

Used by ``tests/kube/test_chaos.py`` (few examples, fixed seed) and
``benchmarks/kube_chaos.py`` (many).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kube.helpers import a_node, a_pod, a_pod_group
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.checkpoint import DATA_KEY, DEFAULT_CHECKPOINT, UsageCheckpoint
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.translate import timestamp_s as _epoch_s
from loadmaster.model.usage import HALF_LIFE_S
from loadmaster.scheduling import PluginSpec, Profile, Scheduler, build_profile
from loadmaster_testing.kube_api import KubeApiDouble

NODE_NAMES = ("n0", "n1", "n2", "n3")
GPUS_PER_NODE = 8
GANG_SLACK_S = 40.0
"""How far past its timeout a gang may stay partly bound: the replica must first see it (steps are
up to 20 s apart) and its released pods take their grace period to go."""
SYNC_S = 2.0
PREEMPT_MIN_RUNTIME_S = 10.0
"""``priority-preempt``'s ``min_runtime_s`` in the preemption scenario: shorter than a burst of steps
(3 s apart) or one ``advance``, so running pods become victims; above 0 so the rule is still exercised."""


class Killed(BaseException):
    """A replica's process ending abruptly (raised inside a bind, as SIGKILL would cut it)."""


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Tally:
    """What the runs did: read by the chaos benchmark."""

    steps: int = 0
    scheduler_steps: int = 0
    binds: int = 0
    evictions: int = 0
    rollbacks: int = 0
    crashes: int = 0
    fenced: int = 0
    checks_with_victims_terminating: int = 0
    """Invariant checks made while a pod a replica evicted was still on its node, Terminating."""
    rules: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, int]:
        """The counts now (rules left out), to difference around one run."""
        return {
            name: getattr(self, name)
            for name in (
                "steps", "scheduler_steps", "binds", "evictions", "rollbacks", "crashes", "fenced",
                "checks_with_victims_terminating",
            )
        }  # fmt: skip


TALLY = Tally()


def owner(name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-{name}", "controller": True}]


def pod_gpus(pod: dict[str, Any]) -> int:
    return sum(int(c["resources"]["requests"].get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"])


def chaos_profile(min_runtime_s: float | None) -> Profile:
    """The shipped ``priority`` profile; with ``min_runtime_s``, ``priority-preempt`` takes that instead."""
    shipped = load_profiles()["priority"]
    if min_runtime_s is None:
        return shipped
    names = ("priority", "fifo", "gang", "binpack", "priority-preempt")
    assert tuple(p.name for p in shipped.plugins) == names, "the shipped priority profile changed"
    plugins = [
        PluginSpec(n, {"min_runtime_s": min_runtime_s} if n == "priority-preempt" else {}) for n in names
    ]
    return build_profile("priority", ["allocate", "preempt"], plugins, "tests/kube/chaos.py")


class KubeChaos(RuleBasedStateMachine):
    min_runtime_s: float | None = None
    """``priority-preempt``'s ``min_runtime_s`` (None: the shipped profile's 600 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.api = KubeApiDouble(clock=self.clock)
        self.url = self.api.serve()
        self.replicas: dict[str, KubeCluster | None] = {"a": None, "b": None}
        self.created: Counter[str] = Counter()
        self.templates: dict[str, tuple[str | None, int]] = {}
        """Owned pod name -> (its gang, GPUs): what the Job controller recreates when it is gone."""
        self.serial = 0
        self.partial_since: dict[str, float] = {}
        self.late_steps: Counter[str] = Counter()
        self.victims: set[str] = set()
        """Pod keys a replica evicted (their pods may still be Terminating on their nodes)."""
        self.profile = chaos_profile(self.min_runtime_s)
        self.started: dict[str, tuple[float, int]] = {}
        """UID -> (start, GPUs) of every pod of ours a kubelet started (the double at its bind)."""
        self.stored_usage: tuple[float, float] | None = None
        """(usage, time) of the checkpoint's ``user/team-a`` when last read."""
        for name in NODE_NAMES[:2]:
            self.api.create("nodes", a_node(name, GPUS_PER_NODE))

    def teardown(self) -> None:
        for cluster in self.replicas.values():
            if cluster is not None:
                cluster.stop()
        self.api.close()

    # ------------------------------------------------------------ helpers
    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def _create_pod(self, pod: dict[str, Any]) -> None:
        self.api.create("pods", pod)
        self.created[f"team-a/{pod['metadata']['name']}"] += 1

    def _count(self, rule_name: str) -> None:
        TALLY.steps += 1
        TALLY.rules[rule_name] += 1

    def _replica(self, name: str) -> KubeCluster:
        cluster = self.replicas[name]
        if cluster is None:
            client = api_client(host=self.url)
            lease = LeaderElector(client, name, clock=self.clock, monotonic=self.clock)
            scheduler = Scheduler(self.profile)
            checkpoint = UsageCheckpoint(client, clock=self.clock, every_s=0)
            cluster = KubeCluster(
                client, scheduler, name, lease=lease, clock=self.clock, bind_workers=2, checkpoint=checkpoint
            )
            for informer in cluster.informers.values():
                informer.backoff_s = 0.005
                informer.max_backoff_s = 0.05
            cluster.start()
            self.replicas[name] = cluster
            self.partial_since.clear()  # a new process judges timeouts from its own observation
        return cluster

    def _pods(self) -> list[dict[str, Any]]:
        return self.api.objects("pods")

    # -------------------------------------------------------------- rules
    @rule(node=st.sampled_from(NODE_NAMES))
    def add_node(self, node: str) -> None:
        self._count("add_node")
        if self.api.get("nodes", node) is None:
            self.api.create("nodes", a_node(node, GPUS_PER_NODE))

    @rule(node=st.sampled_from(NODE_NAMES))
    def delete_node(self, node: str) -> None:
        self._count("delete_node")
        if self.api.get("nodes", node) is not None and len(self.api.objects("nodes")) > 1:
            self.api.delete("nodes", node)

    @rule(gpus=st.integers(1, 8), owned=st.booleans(), high=st.booleans())
    def add_pod(self, gpus: int, owned: bool, high: bool) -> None:
        self._count("add_pod")
        name = self._name("p")
        pod = a_pod(name, gpus)
        if owned:
            pod["metadata"]["ownerReferences"] = owner(name)
            self.templates[name] = (None, gpus)
        if high:
            pod["spec"]["priorityClassName"] = "high"
        self._create_pod(pod)

    @rule(members=st.integers(2, 4), gpus=st.integers(1, 4), timeout_s=st.sampled_from([20, 45]))
    def add_gang(self, members: int, gpus: int, timeout_s: int) -> None:
        self._count("add_gang")
        group = self._name("g")
        body = a_pod_group(group, members)
        body["spec"]["scheduleTimeoutSeconds"] = timeout_s
        self.api.create("podgroups", body)
        for i in range(members):
            name = f"{group}-{i}"
            pod = a_pod(name, gpus, group)
            pod["metadata"]["ownerReferences"] = owner(group)
            self.templates[name] = (group, gpus)
            self._create_pod(pod)

    @rule(data=st.data(), grace=st.sampled_from([0, 5, 30]))
    def delete_pod(self, data: st.DataObject, grace: int) -> None:
        self._count("delete_pod")
        pods = self._pods()
        if pods:
            pod = data.draw(st.sampled_from(sorted(p["metadata"]["name"] for p in pods)))
            self.api.delete("pods", f"team-a/{pod}", grace)

    @rule(data=st.data())
    def evict_pod(self, data: st.DataObject) -> None:
        self._count("evict_pod")
        pods = [p for p in self._pods() if p["spec"].get("nodeName")]
        if pods:
            pod = data.draw(st.sampled_from(sorted(p["metadata"]["name"] for p in pods)))
            self.api.evict(
                "team-a", pod, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
            )

    @rule(data=st.data(), failed=st.booleans())
    def pod_finishes(self, data: st.DataObject, failed: bool) -> None:
        """The kubelet reports a bound pod's containers ended: its room is free again."""
        self._count("pod_finishes")
        pods = [
            p for p in self._pods() if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
        ]
        if pods:
            pod = data.draw(st.sampled_from(sorted(p["metadata"]["name"] for p in pods)))
            phase = "Failed" if failed else "Succeeded"
            self.api.patch("pods", f"team-a/{pod}", {"status": {"phase": phase}})

    @rule()
    def controller_recreates(self) -> None:
        """The Job controller: every owned pod that is gone comes back under a new name."""
        self._count("controller_recreates")
        present = {p["metadata"]["name"] for p in self._pods()}
        for name, (group, gpus) in list(self.templates.items()):
            if name in present:
                continue
            del self.templates[name]
            if group is not None and self.api.get("podgroups", f"team-a/{group}") is None:
                continue
            fresh = self._name(f"{group}-r" if group else "p")
            pod = a_pod(fresh, gpus, group)
            pod["metadata"]["ownerReferences"] = owner(group or fresh)
            self.templates[fresh] = (group, gpus)
            self._create_pod(pod)

    @rule(node=st.sampled_from(NODE_NAMES), gpus=st.integers(1, 8), fill=st.booleans())
    def foreign_pod(self, node: str, gpus: int, fill: bool) -> None:
        """Another scheduler binds a pod of its own, only where it sees room (Terminating pods count);
        ``fill``: as large as the room left, so that a half-bound gang cannot complete there."""
        self._count("foreign_pod")
        if self.api.get("nodes", node) is None:
            return
        if fill:
            gpus = GPUS_PER_NODE - sum(pod_gpus(p) for p in self._pods() if p["spec"].get("nodeName") == node)
            if gpus <= 0:
                return
        used = sum(pod_gpus(p) for p in self._pods() if p["spec"].get("nodeName") == node)
        assumed = sum(
            pod_gpus(self.api.get("pods", k) or {"spec": {"containers": []}})
            for c in self.replicas.values()
            if c is not None
            for k, a in c.assumed.items()
            if a.node == node
        )
        if used + assumed + gpus <= GPUS_PER_NODE:
            pod = a_pod(self._name("f"), gpus)
            pod["spec"]["schedulerName"] = "default-scheduler"
            pod["spec"]["nodeName"] = node
            self._create_pod(pod)

    @rule(seconds=st.sampled_from([1, 5, 12, 20, 300]))
    def advance(self, seconds: int) -> None:
        self._count("advance")
        self.clock.now += seconds
        self.api.reap()

    @rule(count=st.integers(1, 3))
    def fail_requests(self, count: int) -> None:
        self._count("fail_requests")
        self.api.fail_next(count)

    @rule(ms=st.sampled_from([0, 1, 3]))
    def latency(self, ms: int) -> None:
        self._count("latency")
        self.api.latency_s = ms / 1000

    @rule(expire=st.booleans())
    def drop_watches(self, expire: bool) -> None:
        self._count("drop_watches")
        self.api.compact() if expire else self.api.drop_watches()

    @rule(name=st.sampled_from(["a", "b"]))
    def crash(self, name: str) -> None:
        self._count("crash")
        cluster = self.replicas[name]
        if cluster is not None:
            cluster.stop()
            self.replicas[name] = None
            TALLY.crashes += 1

    @rule(name=st.sampled_from(["a", "b"]))
    def step(self, name: str) -> None:
        """A scheduler step, the most frequent rule (Hypothesis draws rules uniformly)."""
        self._faulty_step(name, "none")

    @rule(name=st.sampled_from(["a", "b"]))
    def step_again(self, name: str) -> None:
        self._faulty_step(name, "none")

    @rule(name=st.sampled_from(["a", "b"]), fault=st.sampled_from(["crash", "slow"]))
    def step_with_fault(self, name: str, fault: str) -> None:
        """A step that crashes after its first bind, or whose binds take 6 s each (the lease may pass)."""
        self._faulty_step(name, fault)

    @rule(cycles=st.integers(1, 4))
    def burst(self, cycles: int) -> None:
        """Both replicas step in turn, 3 s apart: a stretch of normal operation between faults."""
        self._count("burst")
        for _ in range(cycles):
            for name in ("a", "b"):
                self._step_quietly(name)
            self.clock.now += 3
            self.api.reap()

    def _faulty_step(self, name: str, fault: str) -> None:
        self._count(f"step_{fault}")
        cluster = self._replica(name)
        other = "b" if name == "a" else "a"
        original = cluster._bind_pod
        calls = [0]
        lock = threading.Lock()

        def faulty(key: str, node: str, gpus: str) -> str:
            with lock:
                calls[0] += 1
                n = calls[0]
            if fault == "crash" and n >= 2:
                raise Killed  # the process is gone: this bind and every later one never leave it
            outcome = original(key, node, gpus)
            if fault == "slow":
                with lock:
                    self.clock.now += 6  # each bind takes 6 s: the lease may pass mid-cycle
                    if n == 2:
                        self._step_quietly(other)
            return outcome

        cluster._bind_pod = faulty  # type: ignore[method-assign]
        try:
            self._step_quietly(name)
        except Killed:
            cluster.stop()
            self.replicas[name] = None
            TALLY.crashes += 1
        finally:
            cluster._bind_pod = original  # type: ignore[method-assign]

    def _step_quietly(self, name: str) -> None:
        cluster = self._replica(name)
        deadline = time.monotonic() + SYNC_S
        while not cluster.synced_to(self.api.rv) and time.monotonic() < deadline:
            time.sleep(0.005)
        report = cluster.step()
        self._note_started()
        TALLY.scheduler_steps += 1
        TALLY.binds += len(report.bound)
        TALLY.evictions += len(report.evicted)
        self.victims.update(report.evicted)
        TALLY.rollbacks += len(report.rolled_back)
        TALLY.fenced += report.fenced
        TALLY.rules["(leader)" if report.leader else "(follower)"] += 1
        if "*" in report.waiting:
            TALLY.rules["(cache distrusted)"] += 1
        if report.leader:
            self._judge_gangs()

    # ---------------------------------------------------------- invariants
    @invariant()
    def no_node_over_committed(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.api.objects("nodes")}
        used: Counter[str] = Counter()
        for pod in self._pods():
            node = pod["spec"].get("nodeName")
            if node in nodes and pod.get("status", {}).get("phase") not in {"Succeeded", "Failed"}:
                used[node] += pod_gpus(pod)
        over = {n: g for n, g in used.items() if g > GPUS_PER_NODE}
        detail = [
            (p["metadata"]["name"], pod_gpus(p), p["spec"]["schedulerName"], p["status"].get("phase"),
             "Terminating" if p["metadata"].get("deletionTimestamp") else "")
            for p in self._pods()
            if p["spec"].get("nodeName") in over
        ]  # fmt: skip
        assert not over, f"over-committed (GPUs in use, Terminating included): {over}: {detail}"
        terminating = [
            p
            for p in self._pods()
            if f"team-a/{p['metadata']['name']}" in self.victims
            and p["metadata"].get("deletionTimestamp")
            and p["spec"].get("nodeName") in nodes
        ]
        if terminating:  # victims still hold their GPUs: the check above counted them
            TALLY.checks_with_victims_terminating += 1

    @invariant()
    def no_pod_bound_twice(self) -> None:
        binds = Counter(key for key, _ in self.api.bindings)
        twice = {k: n for k, n in binds.items() if n > self.created[k]}
        assert not twice, f"bound more often than created: {twice}"

    def _note_started(self) -> None:
        """Every pod of ours a kubelet started, noted after each step too (a rule may bind a pod and a
        later step in the same rule delete it)."""
        for pod in self._pods():
            start = (pod.get("status") or {}).get("startTime")
            if start and pod["spec"].get("schedulerName") == "loadmaster":
                self.started.setdefault(pod["metadata"]["uid"], (_epoch_s(start), pod_gpus(pod)))

    @invariant()
    def fair_share_neither_lost_nor_inflated(self) -> None:
        now = self.clock.now
        self._note_started()
        most = sum(gpus * (now - start) for start, gpus in self.started.values())  # all ran until now
        for name, cluster in self.replicas.items():
            if cluster is not None:
                used = cluster.history.usage.value("user/team-a", now)
                assert used <= most * (1 + 1e-9) + 1e-6, f"replica {name} charged {used:.0f} > {most:.0f}"
        found = self.api.get("configmaps", DEFAULT_CHECKPOINT)
        if found is None:
            return
        ledger = json.loads(found["data"][DATA_KEY])
        stored = ledger["usage_gpu_s"].get("user/team-a", 0.0) * 0.5 ** (
            (now - ledger["saved_at"]) / HALF_LIFE_S
        )
        assert stored <= most * (1 + 1e-9) + 1e-6, f"checkpoint holds {stored:.0f} > {most:.0f}"
        if self.stored_usage is not None:
            last, at = self.stored_usage
            floor = last * 0.5 ** ((now - at) / HALF_LIFE_S)
            assert stored >= floor * (1 - 1e-9) - 1e-6, f"checkpoint usage fell: {floor:.0f} -> {stored:.0f}"
        self.stored_usage = (stored, now)

    @invariant()
    def no_gang_partly_bound_past_its_timeout(self) -> None:
        late = {g for g, n in self.late_steps.items() if n >= 3}
        assert not late, f"gangs partly bound past scheduleTimeoutSeconds + {GANG_SLACK_S:g} s: {late}"

    def _judge_gangs(self) -> None:
        """After a leader's step: count the steps each gang has stayed partly bound past its deadline."""
        pods = self._pods()
        for group in self.api.objects("podgroups"):
            name = group["metadata"]["name"]
            members = [p for p in pods if (p["metadata"].get("labels") or {}).get(
                "scheduling.x-k8s.io/pod-group") == name]  # fmt: skip
            bound = [  # live pods holding room: bound, not Terminating, not finished
                p
                for p in members
                if p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in {"Succeeded", "Failed"}
            ]
            if 0 < len(bound) < group["spec"]["minMember"]:
                since = self.partial_since.setdefault(name, self.clock.now)
                if self.clock.now - since > group["spec"]["scheduleTimeoutSeconds"] + GANG_SLACK_S:
                    self.late_steps[name] += 1
            else:
                self.partial_since.pop(name, None)
                self.late_steps.pop(name, None)


class KubePreemptChaos(KubeChaos):
    """The same chaos with preemption that happens: victims need only :data:`PREEMPT_MIN_RUNTIME_S` of run,
    and two more rules crowd the nodes with low-priority pods and send high-priority ones after them."""

    min_runtime_s = PREEMPT_MIN_RUNTIME_S

    @initialize()
    def crowded_start(self) -> None:
        """Start each run with the nodes full of low-priority pods that have run long enough to be victims."""
        self.crowd(owned=True)
        self._step_quietly("a")
        self.advance(int(PREEMPT_MIN_RUNTIME_S) + 1)

    @rule(owned=st.booleans())
    def crowd(self, owned: bool) -> None:
        """Low-priority pods of 4 GPUs, as many as the nodes have room for: victims to be."""
        self._count("crowd")
        nodes = len(self.api.objects("nodes"))
        used = sum(pod_gpus(p) for p in self._pods() if p["spec"].get("nodeName"))
        for _ in range(max(0, (nodes * GPUS_PER_NODE - used) // 4)):
            name = self._name("low")
            pod = a_pod(name, 4)
            if owned:
                pod["metadata"]["ownerReferences"] = owner(name)
                self.templates[name] = (None, 4)
            self._create_pod(pod)

    @rule(gpus=st.sampled_from([4, 8]), gang=st.booleans())
    def preemptor(self, gpus: int, gang: bool) -> None:
        """A high-priority pod (or a gang of two) that fits only if running pods make room."""
        self._count("preemptor")
        if not gang:
            pod = a_pod(self._name("hi"), gpus)
            pod["spec"]["priorityClassName"] = "high"
            self._create_pod(pod)
            return
        group = self._name("hg")
        self.api.create(
            "podgroups", {**a_pod_group(group, 2), "spec": {"minMember": 2, "scheduleTimeoutSeconds": 45}}
        )
        for i in range(2):
            name = f"{group}-{i}"
            pod = a_pod(name, gpus, group)
            pod["spec"]["priorityClassName"] = "high"
            pod["metadata"]["ownerReferences"] = owner(group)
            self.templates[name] = (group, gpus)
            self._create_pod(pod)
