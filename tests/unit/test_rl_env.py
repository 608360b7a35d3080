"""SchedulingEnv: Gymnasium's contract, determinism, the action mask and the FIFO equivalence."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from loadmaster.errors import ConfigError
from loadmaster.model import TraceJob
from loadmaster.rl import ENV_ID, EnvConfig, SchedulingEnv, register_env
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile
from loadmaster.sim import simulate

SMALL = EnvConfig(jobs=120, window=16, load=1.2)


def pick_first(info: dict[str, Any], window: int) -> int:
    """Start the oldest waiting job if it fits, else wait: strict FIFO without backfill."""
    return 0 if info["action_mask"][0] else window


def run_episode(env: SchedulingEnv, seed: int, policy: Any) -> tuple[list[Any], list[float], int]:
    obs, info = env.reset(seed=seed)
    observations, rewards, steps = [obs], [], 0
    done = False
    while not done:
        obs, reward, done, truncated, info = env.step(policy(info, env.config.window))
        assert not truncated
        observations.append(obs)
        rewards.append(reward)
        steps += 1
    return observations, rewards, steps


def test_check_env_passes() -> None:
    check_env(SchedulingEnv(SMALL), skip_render_check=True)


def test_registered_id_makes_the_env() -> None:
    register_env()
    register_env()  # idempotent
    env = gym.make(ENV_ID, config=SMALL)
    obs, _ = env.reset(seed=1)
    assert obs["jobs"].shape == (16, 6)


def test_same_seed_and_actions_give_the_same_episode() -> None:
    first = run_episode(SchedulingEnv(SMALL), 5, pick_first)
    second = run_episode(SchedulingEnv(SMALL), 5, pick_first)
    assert first[1] == second[1]
    assert len(first[0]) == len(second[0])
    for a, b in zip(first[0], second[0], strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_episode_ends_when_all_jobs_ran_and_rewards_sum_to_minus_mean_slowdown() -> None:
    env = SchedulingEnv(SMALL)
    _, rewards, _ = run_episode(env, 7, pick_first)
    assert len(env.starts) == len({j for j, _ in env.starts}) == SMALL.jobs
    durations = {t.job.id: t.duration_s for t in env.traces}
    submits = {t.job.id: t.job.submit_s for t in env.traces}
    ratios = [
        (start - submits[j] + durations[j]) / max(durations[j], SMALL.bound_s) for j, start in env.starts
    ]
    assert sum(rewards) == pytest.approx(-np.mean(ratios))
    assert sum(rewards) < -1.0  # the load made some jobs wait


def probe_every_action(env: SchedulingEnv, mask: np.ndarray) -> None:
    """Each action, tried on a copy: flagged invalid exactly where masked; a valid slot starts its job."""
    for action in range(int(env.action_space.n)):
        probe = copy.deepcopy(env)
        before = len(probe.starts)
        _, _, _, _, info = probe.step(action)
        assert info["invalid_action"] == (not mask[action])
        if action < env.config.window and mask[action]:
            assert probe.starts[before][0] == env._window()[action].job.id


def test_mask_marks_exactly_the_invalid_actions() -> None:
    env = SchedulingEnv(SMALL)
    _, info = env.reset(seed=7)
    probed_points, done = 0, False
    while not done and probed_points < 4:
        mask = info["action_mask"]
        np.testing.assert_array_equal(mask, env.action_masks())
        waiting = len(env._window())
        assert not mask[waiting : SMALL.window].any()  # empty slots are never valid
        if probed_points == 0 or not mask[:waiting].all():  # the start, then points where a job does not fit
            probe_every_action(env, mask)
            probed_points += 1
        _, _, done, _, info = env.step(pick_first(info, SMALL.window))
    assert probed_points == 4


def test_pick_first_reproduces_strict_fifo_without_backfill() -> None:
    env = SchedulingEnv(SMALL)
    run_episode(env, 7, pick_first)
    one_queue = [TraceJob(dataclasses.replace(t.job, queue="default"), t.duration_s) for t in env.traces]
    plugins = [PluginSpec("fifo", {}), PluginSpec("gang", {}), PluginSpec("binpack", {})]
    fifo = Scheduler(build_profile("fifo-binpack", ["allocate"], plugins))
    result = simulate(env.cluster.nodes, fifo, one_queue)
    table = result.jobs
    expected = sorted(
        zip(table.start_s.tolist(), table.submit_s.tolist(), table.job_id.tolist(), strict=True)
    )
    assert [(j, s) for s, _, j in expected] == env.starts


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="window"):
        EnvConfig(window=0)
