"""Fair-share usage: past GPU-seconds per user and group, decaying with a half-life (Slurm's model)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

HALF_LIFE_S = 7 * 86_400.0
"""Usage half-life of the simulator and the Kubernetes binding (Slurm's PriorityDecayHalfLife default)."""
HISTORY_JOBS = 5
"""Finished jobs kept per user for run-time prediction and the learned order's history inputs."""


@dataclass(frozen=True)
class PastUsage:
    """Fair-share usage and run-time history a run starts from (a live cluster's: ``kube snapshot``)."""

    as_of_s: float
    """When ``usage_gpu_s`` is worth what it says, in the run's time."""
    usage_gpu_s: Mapping[str, float]
    """Decayed GPU-seconds per ``user/NAME`` and ``group/NAME``."""
    recent_runtimes_s: Mapping[str, tuple[float, ...]]
    """Each user's last run times, oldest first."""
    recent_limits_s: Mapping[str, tuple[float, ...]]
    """The time limits of those runs, in the same order."""

    def ledger(self, half_life_s: float) -> UsageLedger:
        """A ledger holding this usage as of ``as_of_s``."""
        ledger = UsageLedger(half_life_s)
        for key, gpu_s in self.usage_gpu_s.items():
            ledger.charge(key, gpu_s, self.as_of_s)
        return ledger

    def recent(self, keep: int) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[float, ...]]]:
        """Each user's last ``keep`` run times and their limits."""
        return (
            {u: tuple(r)[-keep:] for u, r in self.recent_runtimes_s.items()},
            {u: tuple(r)[-keep:] for u, r in self.recent_limits_s.items()},
        )


@dataclass(eq=False)
class UsageLedger:
    """Decayed GPU-seconds per key; a charge made at time t is worth 2^-((now - t) / half_life) now."""

    half_life_s: float
    _value: dict[str, float] = field(default_factory=dict)
    _as_of: dict[str, float] = field(default_factory=dict)

    def charge(self, key: str, gpu_s: float, now: float) -> None:
        """Add ``gpu_s`` GPU-seconds to ``key`` at time ``now``."""
        self._value[key] = self.value(key, now) + gpu_s
        self._as_of[key] = now

    def value(self, key: str, now: float) -> float:
        """``key``'s usage as of ``now``."""
        if key not in self._value:
            return 0.0
        return float(self._value[key] * 0.5 ** ((now - self._as_of[key]) / self.half_life_s))

    def view(self, now: float) -> DecayedUsage:
        """A read-only mapping of every key's usage as of ``now``, decayed on access."""
        return DecayedUsage(self, now)


@dataclass(frozen=True, eq=False)
class DecayedUsage(Mapping[str, float]):
    """What a snapshot carries: usage per key as of one instant."""

    ledger: UsageLedger
    now: float

    def __getitem__(self, key: str) -> float:
        if key not in self.ledger._value:
            raise KeyError(key)
        return self.ledger.value(key, self.now)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ledger._value)

    def __len__(self) -> int:
        return len(self.ledger._value)

    def as_dict(self) -> dict[str, float]:
        """Every key's usage as of :attr:`now`, in the ledger's order: what ``dict(self.items())``
        makes, with the same arithmetic as :meth:`UsageLedger.value`, in one comprehension (a
        priority order reads every owner's usage at every cycle)."""
        ledger, now = self.ledger, self.now
        as_of, half_life_s = ledger._as_of, ledger.half_life_s
        return {
            key: float(value * 0.5 ** ((now - as_of[key]) / half_life_s))
            for key, value in ledger._value.items()
        }


def usage_now(usage: Mapping[str, float]) -> dict[str, float]:
    """``usage`` as a dict of its values (a :class:`DecayedUsage` decays each once)."""
    return usage.as_dict() if isinstance(usage, DecayedUsage) else dict(usage.items())
