"""The fair-share checkpoint's format and JobHistory's save and restore: no pod charged twice, none missed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from test_kube_history import NAMES, T0, pods_of, ran

from loadmaster.errors import ConfigError
from loadmaster.kube.checkpoint import UsageCheckpoint, parse, render
from loadmaster.kube.history import JobHistory
from loadmaster.kube.metrics import SchedulerMetrics
from loadmaster.kube.translate import utc_stamp

GRACE_S = 300.0


def charged_history(*pods: dict[str, Any], now: float) -> JobHistory:
    history = JobHistory()
    history.observe(pods_of(*pods), NAMES, now)
    return history


def test_a_restored_history_charges_only_what_ended_after_the_save() -> None:
    long_ago = ran("old", 2, end=T0 + 3600, phase="Succeeded")
    just_now = ran("recent", 1, start=T0 + 5000, end=T0 + 7100, phase="Succeeded")  # within the grace
    save_s = T0 + 7200
    before = charged_history(long_ago, just_now, now=save_s)
    text = render(before.saved(save_s, GRACE_S))

    after = JobHistory()
    after.restore(parse(text, "test"))
    later = ran("later", 4, start=T0 + 7000, end=T0 + 9000, namespace="team-b", phase="Succeeded")
    now = T0 + 9600
    assert after.observe(pods_of(long_ago, just_now, later), NAMES, now) == 1  # only the new one
    before.observe(pods_of(long_ago, just_now, later), NAMES, now)  # the replica that never stopped
    assert dict(after.usage.view(now)) == pytest.approx(dict(before.usage.view(now)))
    assert (
        after.recent_runtimes
        == before.recent_runtimes
        == {
            "team-a": (3600.0, 2100.0),
            "team-b": (2000.0,),
        }
    )


def test_a_pod_that_ended_after_the_save_and_was_charged_before_the_stop_is_charged_again() -> None:
    """The restored numbers are those of the save: a pod charged after it is not in them."""
    save_s = T0 + 7200
    history = charged_history(now=save_s)
    text = render(history.saved(save_s, GRACE_S))
    done = ran("a", 1, start=T0 + 7000, end=T0 + 7500, phase="Failed")
    history.observe(pods_of(done), NAMES, T0 + 7600)  # charged by the old leader, after its last save
    restored = JobHistory()
    restored.restore(parse(text, "test"))
    assert restored.observe(pods_of(done), NAMES, T0 + 7700) == 1
    assert restored.usage.value("user/team-a", T0 + 7700) == pytest.approx(500.0, rel=1e-3)


def test_the_watermark_never_goes_back_and_the_named_pods_stay_named_while_cached() -> None:
    done = ran("a", 1, end=T0 + 100, phase="Succeeded")
    history = charged_history(done, now=T0 + 200)
    first = history.saved(T0 + 200, GRACE_S)
    assert first.watermark_s == T0 + 200 - GRACE_S
    assert first.charged == frozenset({done["metadata"]["uid"]})
    assert first.recorded == {"team-a/a": frozenset({done["metadata"]["uid"]})}
    restored = JobHistory()
    restored.restore(first)
    assert restored.observe(pods_of(done), NAMES, T0 + 250) == 0
    second = restored.saved(T0 + 260, 1000.0)  # a longer grace: the restored watermark holds
    assert second.watermark_s == first.watermark_s
    assert second.charged == first.charged


def test_restore_after_observing_is_refused() -> None:
    history = charged_history(ran("a", end=T0 + 10, phase="Succeeded"), now=T0 + 20)
    with pytest.raises(RuntimeError, match="before it observes"):
        history.restore(history.saved(T0 + 20, GRACE_S))


def test_render_is_deterministic_and_round_trips() -> None:
    history = charged_history(ran("a", 3, end=T0 + 60, phase="Succeeded"), now=T0 + 120)
    saved = history.saved(T0 + 120, GRACE_S)
    assert render(saved) == render(history.saved(T0 + 120, GRACE_S))
    back = parse(render(saved), "test")
    assert back == saved


def good() -> dict[str, Any]:
    history = charged_history(ran("a", 3, end=T0 + 60, phase="Succeeded"), now=T0 + 120)
    loaded: dict[str, Any] = json.loads(render(history.saved(T0 + 120, GRACE_S)))
    return loaded


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format=2), "format: expected 1, got 2"),
        (lambda d: d.update(saved_at="yesterday"), "saved_at: expected a finite number"),
        (lambda d: d.update(watermark=d["saved_at"] + 1), "watermark: must be <= saved_at"),
        (lambda d: d["usage_gpu_s"].update({"user/x": -1}), "usage_gpu_s['user/x']: expected a finite"),
        (lambda d: d["usage_gpu_s"].update({"x": 1}), "key 'x' must start with user/ or group/"),
        (lambda d: d.update(recent_runtimes_s={"a": 5}), "recent_runtimes_s['a']: expected a list"),
        (lambda d: d["recent_limits_s"].update({"team-a": []}), "must have one limit per run time"),
        (lambda d: d.update(charged=[1, 2]), "charged: expected a list of pod UIDs"),
        (lambda d: d.update(recorded=[]), "recorded: expected an object"),
    ],
)
def test_a_bad_checkpoint_is_refused_naming_the_field(change: Any, message: str) -> None:
    raw = good()
    change(raw)
    with pytest.raises(ConfigError, match=r"^ConfigMap ns/cm, key usage.json: .*") as found:
        parse(json.dumps(raw), "ConfigMap ns/cm, key usage.json")
    assert message in str(found.value)


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(ConfigError, match="ConfigMap ns/cm: not JSON"):
        parse("{usage: 1", "ConfigMap ns/cm")
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        parse("[]", "ConfigMap ns/cm")


class Forbidden:
    """A CoreV1Api whose every call answers 403, as the API server does without the Role's grant."""

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=403, reason="Forbidden")

        return call


def test_a_forbidden_read_leaves_the_replica_without_a_ledger_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpoint = UsageCheckpoint(api=None)  # type: ignore[arg-type]  # the client is replaced below
    checkpoint.core = Forbidden()  # type: ignore[assignment]
    history = JobHistory()
    assert checkpoint.restore(history, T0)  # scheduling goes on, without a ledger
    assert checkpoint.reload_wanted and not checkpoint.due(history.changes + 1)  # no write over it
    assert checkpoint.failures == 1  # counted: the failed-writes series shows it
    assert "forbidden" in caplog.text and "deploy/rbac.yaml" in caplog.text


def test_a_checkpoint_name_without_a_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        UsageCheckpoint(api=None, configmap="loadmaster-fairshare/")  # type: ignore[arg-type]


def test_the_watermark_boundary_is_the_same_on_both_sides() -> None:
    """A pod that finished exactly at the watermark is in the numbers and not named; one a second
    later is named: neither is charged again, and the restored history equals the one that ran on."""
    save_s = T0 + 7200
    watermark = save_s - GRACE_S
    at = ran("at", 1, start=T0, end=watermark, phase="Succeeded")
    after = ran("after", 1, start=T0, end=watermark + 1, phase="Succeeded")
    before = charged_history(at, after, now=save_s)
    saved = before.saved(save_s, GRACE_S)
    assert saved.watermark_s == watermark
    assert saved.charged == frozenset({after["metadata"]["uid"]})
    restored = JobHistory()
    restored.restore(parse(render(saved), "test"))
    assert restored.observe(pods_of(at, after), NAMES, save_s + 60) == 0
    assert restored.usage.value("user/team-a", save_s) == pytest.approx(
        before.usage.value("user/team-a", save_s)
    )


def a_pod_that_failed_before_its_container_ran(
    end: float, *, later_condition: float | None = None
) -> dict[str, Any]:
    """Failed with no container's finishedAt: its end is read from its conditions, which can grow."""
    pod = ran("early", 2, start=T0, phase="Failed")
    conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": utc_stamp(end)}]
    if later_condition is not None:
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": utc_stamp(later_condition)}
        )
    pod["status"]["conditions"] = conditions
    return pod


def test_an_end_read_from_conditions_is_named_whatever_the_watermark() -> None:
    """A condition added after the pod ended moves the end it reads; the watermark alone would let a
    successor charge it again, so the checkpoint names it."""
    save_s = T0 + 7200
    pod = a_pod_that_failed_before_its_container_ran(T0 + 600)
    before = charged_history(pod, now=save_s)
    saved = before.saved(save_s, GRACE_S)
    assert saved.charged == frozenset({pod["metadata"]["uid"]})  # ended long before the watermark
    restored = JobHistory()
    restored.restore(parse(render(saved), "test"))
    moved = a_pod_that_failed_before_its_container_ran(T0 + 600, later_condition=save_s + 30)
    assert restored.observe(pods_of(moved), NAMES, save_s + 60) == 0


class Answer:
    """What the client returns with ``_preload_content=False``: the raw body."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj).encode()


class FakeCore:
    """A CoreV1Api for one ConfigMap: the reads and writes are kept; ``errors`` answer the next calls."""

    def __init__(self, stored: dict[str, Any] | None = None) -> None:
        self.stored = stored
        self.version = 1
        self.errors: list[int] = []
        self.calls: list[str] = []

    def _fail(self) -> None:
        if self.errors:
            raise ApiException(status=self.errors.pop(0), reason="test")

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Answer:
        self.calls.append("read")
        self._fail()
        if self.stored is None:
            raise ApiException(status=404, reason="Not Found")
        return Answer(self.stored)

    def _write(self, body: Any) -> Answer:
        self._fail()
        self.version += 1
        self.stored = ApiClient().sanitize_for_serialization(body)
        self.stored["metadata"]["resourceVersion"] = str(self.version)
        return Answer(self.stored)

    def create_namespaced_config_map(self, namespace: str, body: Any, **_: Any) -> Answer:
        self.calls.append("create")
        return self._write(body)

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **_: Any) -> Answer:
        self.calls.append("replace")
        return self._write(body)


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def with_core(core: FakeCore, **options: Any) -> UsageCheckpoint:
    checkpoint = UsageCheckpoint(api=None, **options)  # type: ignore[arg-type]  # the client is replaced
    checkpoint.core = core  # type: ignore[assignment]
    return checkpoint


def stored_checkpoint(text: str, **data: str) -> dict[str, Any]:
    meta = {"name": "loadmaster-fairshare", "namespace": "loadmaster", "resourceVersion": "1",
            "labels": {"team": "platform"}, "annotations": {"note": "keep"}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"usage.json": text, **data}}


def test_a_missing_namespace_is_retried_with_a_doubling_backoff(caplog: pytest.LogCaptureFixture) -> None:
    core, ticks = FakeCore(), Ticks()
    checkpoint = with_core(core, clock=ticks, every_s=60)
    history = JobHistory()
    assert checkpoint.restore(history, T0)
    core.errors = [404] * 20  # create in a namespace that does not exist
    waits = []
    for step in range(40):
        ticks.now = float(step)
        if checkpoint.due(history.changes):
            checkpoint.save(history, T0 + step, history.changes)
            waits.append(step)
    assert waits == [0, 1, 3, 7, 15, 31]  # 1, 2, 4, 8, 16 s apart
    assert checkpoint.failures == 6 and "cannot write" in caplog.text


def test_a_stale_pods_cache_keeps_the_watermark_further_back() -> None:
    core = FakeCore()
    checkpoint = with_core(core)
    history = JobHistory()
    checkpoint.restore(history, T0)
    assert checkpoint.save(history, T0 + 10_000, history.changes, stale_s=1_000)
    assert json.loads(core.stored["data"]["usage.json"])["watermark"] == T0 + 10_000 - GRACE_S - 1_000  # type: ignore[index]


def test_a_checkpoint_from_the_future_is_set_aside_and_a_little_ahead_is_read_as_of_now() -> None:
    history = charged_history(ran("a", 2, end=T0 + 60, phase="Succeeded"), now=T0 + 120)
    far = render(history.saved(T0 + 3 * 86_400, GRACE_S))
    core = FakeCore(stored_checkpoint(far))
    checkpoint = with_core(core)
    fresh = JobHistory()
    assert checkpoint.read_into(fresh, T0 + 200) == "empty"
    assert dict(fresh.usage.view(T0 + 200)) == {}
    assert checkpoint.kept[f"unreadable.{int(T0 + 200)}.usage.json"] == far
    near = render(history.saved(T0 + 3_600, GRACE_S))  # the writer's clock an hour ahead
    checkpoint = with_core(FakeCore(stored_checkpoint(near)))
    fresh = JobHistory()
    assert checkpoint.read_into(fresh, T0 + 200) == "restored"
    assert fresh.usage.value("user/team-a", T0 + 200) == pytest.approx(
        history.usage.value("user/team-a", T0 + 3_600)
    )


def test_texts_set_aside_labels_and_other_keys_are_written_back() -> None:
    core = FakeCore(stored_checkpoint("{bad 2", **{"unreadable.1.usage.json": "{bad 1", "extra": "x"}))
    checkpoint = with_core(core)
    history = JobHistory()
    assert checkpoint.restore(history, T0)
    assert checkpoint.save(history, T0, history.changes)
    stored = core.stored
    assert stored is not None and core.calls == ["read", "replace"]
    assert stored["data"]["unreadable.1.usage.json"] == "{bad 1"
    assert stored["data"][f"unreadable.{int(T0)}.usage.json"] == "{bad 2"
    assert stored["data"]["extra"] == "x"
    assert stored["metadata"]["labels"] == {"app": "loadmaster", "team": "platform"}
    assert stored["metadata"]["annotations"] == {"note": "keep"}


def test_a_forbidden_read_is_tried_again_and_a_later_grant_takes_effect() -> None:
    core, ticks = FakeCore(stored_checkpoint(render(charged_history(now=T0).saved(T0, GRACE_S)))), Ticks()
    core.errors = [403, 403]
    checkpoint = with_core(core, clock=ticks)
    assert checkpoint.restore(JobHistory(), T0) and checkpoint.reload_wanted
    assert not checkpoint.reload_due()  # the backoff
    ticks.now = 1.0
    assert checkpoint.reload_due() and checkpoint.read_into(JobHistory(), T0) == "forbidden"
    ticks.now = 3.0
    assert checkpoint.read_into(JobHistory(), T0) == "restored"
    checkpoint.reloaded()
    assert checkpoint.due(1) and checkpoint.failures == 2


def test_the_metrics_count_writes_and_failures_and_stamp_the_last_write() -> None:
    metrics = SchedulerMetrics("slurm")
    metrics.observe_checkpoint(2, 1, T0)
    metrics.observe_checkpoint(3, 1, T0 + 60)
    samples = {
        (s.name, s.labels.get("result")): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name.startswith("loadmaster_fairshare_checkpoint")
    }
    assert samples[("loadmaster_fairshare_checkpoint_writes_total", "written")] == 3
    assert samples[("loadmaster_fairshare_checkpoint_writes_total", "failed")] == 1
    assert samples[("loadmaster_fairshare_checkpoint_last_write_timestamp_seconds", None)] == T0 + 60


def test_an_outside_edit_of_the_metadata_is_not_another_ledger() -> None:
    """``kubectl label`` between two writes: the 409 is answered by taking the new version, the
    labels and keys, and writing again at once; the ledger is not read back."""
    core, ticks = FakeCore(), Ticks()
    checkpoint = with_core(core, clock=ticks, every_s=60)
    history = charged_history(ran("a", 1, end=T0 + 10, phase="Succeeded"), now=T0 + 20)
    checkpoint.restored = True
    assert checkpoint.save(history, T0 + 20, 1)
    assert core.stored is not None
    core.stored["metadata"]["labels"]["owner"] = "platform"  # someone labels it: a new version
    core.version += 1
    core.stored["metadata"]["resourceVersion"] = str(core.version)
    checkpoint._next_try_s = 0.0  # due again
    core.errors = [409]  # the write at the old version
    assert not checkpoint.save(history, T0 + 30, 2)
    assert not checkpoint.reload_wanted and checkpoint.due(2)
    assert checkpoint.save(history, T0 + 30, 2)
    assert core.stored["metadata"]["labels"]["owner"] == "platform"
    core.stored["data"]["usage.json"] = "{}"  # now another writer's ledger: read it back first
    core.version += 1
    core.stored["metadata"]["resourceVersion"] = str(core.version)
    checkpoint._next_try_s = 0.0
    core.errors = [409]
    assert not checkpoint.save(history, T0 + 40, 3) and checkpoint.reload_wanted
