"""Reinforcement learning over the simulator: the Gymnasium environment (the agent comes later)."""

from loadmaster.rl.env import ENV_ID, EnvConfig, SchedulingEnv, register_env

__all__ = ["ENV_ID", "EnvConfig", "SchedulingEnv", "register_env"]
