"""The fair-share checkpoint's format and JobHistory's save and restore: no pod charged twice, none missed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from test_kube_history import NAMES, T0, pods_of, ran

from loadmaster.errors import ConfigError
from loadmaster.kube.checkpoint import UsageCheckpoint, parse, render
from loadmaster.kube.history import JobHistory

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
    assert checkpoint.restore(history)  # scheduling goes on, without a ledger
    assert not checkpoint.enabled and not checkpoint.due(history.changes + 1)
    assert "forbidden" in caplog.text and "deploy/rbac.yaml" in caplog.text


def test_a_checkpoint_name_without_a_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        UsageCheckpoint(api=None, configmap="loadmaster-fairshare/")  # type: ignore[arg-type]
