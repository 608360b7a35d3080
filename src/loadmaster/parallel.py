"""Independent tasks in parallel: in this process, in local processes, or on Ray, one interface.

The sweep (one task per cell) and the RL trainers (one task per rollout) hand a
picklable module-level function and its argument to an :class:`Executor`;
every task's outcome comes back as a :class:`Finished` naming where it ran. A
task that raises is caught in the worker and returned as its traceback text,
so an exception that does not pickle, or a worker that dies, never takes the
driver down. Ray is an optional extra (``pip install 'loadmaster[ray]'``),
imported only when asked for.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import socket
import time
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster import forking  # noqa: F401 - forked workers inherit the parent's objects frozen
from loadmaster.errors import ConfigError, LoadmasterError

log = logging.getLogger(__name__)

RAY_HINT = "Ray is an optional extra: pip install 'loadmaster[ray]'"


@dataclass(frozen=True, slots=True)
class Finished:
    """One task's outcome: its ticket, its value or the worker's traceback, and where it ran."""

    ticket: int
    value: Any
    error: str | None
    node: str
    """Host name (local processes) or Ray node id."""
    pid: int


class TaskError(LoadmasterError):
    """A task of :meth:`Executor.map` raised in its worker; the message carries its traceback."""


def _here() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def located(fn: Callable[[Any], Any], arg: Any) -> tuple[bool, Any, str, int]:
    """Run ``fn(arg)`` in a worker: ``(ok, value or traceback text, node, pid)``."""
    node, pid = _here()
    try:
        return True, fn(arg), node, pid
    except Exception:  # any task failure is data for the driver; the worker goes on
        return False, traceback.format_exc(), node, pid


def _located_on_ray(fn: Callable[[Any], Any], arg: Any) -> tuple[bool, Any, str, int]:
    ray: Any = importlib.import_module("ray")  # optional extra, present in a Ray worker
    ok, value, _, pid = located(fn, arg)
    return ok, value, ray.get_runtime_context().get_node_id(), pid


class Executor(ABC):
    """Runs tasks; ``slots`` is how many run at once."""

    @property
    @abstractmethod
    def slots(self) -> int:
        """How many tasks can run at the same time."""

    @property
    @abstractmethod
    def describe(self) -> str:
        """One line for logs and progress: what runs the tasks."""

    @abstractmethod
    def submit(self, fn: Callable[[Any], Any], arg: Any) -> int:
        """Start ``fn(arg)``; returns its ticket."""

    @abstractmethod
    def wait(self, timeout_s: float | None) -> list[Finished]:
        """Tasks that finished since the last call, waiting up to ``timeout_s`` for at least one."""

    @abstractmethod
    def close(self) -> None:
        """Release the workers (pending tasks are abandoned)."""

    def map(self, fn: Callable[[Any], Any], args: Sequence[Any]) -> list[Any]:
        """``[fn(a) for a in args]`` in parallel, in order; a :class:`TaskError` if one raised."""
        tickets = [self.submit(fn, a) for a in args]
        done: dict[int, Finished] = {}
        while len(done) < len(tickets):
            for item in self.wait(None):
                done[item.ticket] = item
        for ticket in tickets:
            if done[ticket].error is not None:
                raise TaskError(f"a task failed on {done[ticket].node}:\n{done[ticket].error}")
        return [done[t].value for t in tickets]

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class InProcess(Executor):
    """Runs each task in the calling process when waited for: the serial baseline, and debugging."""

    def __init__(self) -> None:
        self._queue: deque[tuple[int, Callable[[Any], Any], Any]] = deque()
        self._next = 0

    @property
    def slots(self) -> int:
        return 1

    @property
    def describe(self) -> str:
        return "this process (serial)"

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> int:
        self._next += 1
        self._queue.append((self._next, fn, arg))
        return self._next

    def wait(self, timeout_s: float | None) -> list[Finished]:
        if not self._queue:
            return []
        ticket, fn, arg = self._queue.popleft()
        ok, value, node, pid = located(fn, arg)
        return [Finished(ticket, value if ok else None, None if ok else value, node, pid)]

    def close(self) -> None:
        self._queue.clear()


class LocalPool(Executor):
    """``workers`` forked processes on this machine (fork: the workers start in milliseconds and
    share the parent's imported modules; a worker that dies breaks the pool, which is rebuilt)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ConfigError("--workers", "--workers", f"must be >= 1, got {workers}")
        self._workers = workers
        self._pool = self._new_pool()
        self._futures: dict[Future[tuple[bool, Any, str, int]], int] = {}
        self._next = 0

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("fork"))

    @property
    def slots(self) -> int:
        return self._workers

    @property
    def describe(self) -> str:
        return f"{self._workers} local processes"

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> int:
        self._next += 1
        self._futures[self._pool.submit(located, fn, arg)] = self._next
        return self._next

    def wait(self, timeout_s: float | None) -> list[Finished]:
        if not self._futures:
            return []
        ready, _ = wait_futures(list(self._futures), timeout=timeout_s, return_when=FIRST_COMPLETED)
        out: list[Finished] = []
        broken = False
        for future in ready:
            ticket = self._futures.pop(future)
            try:
                ok, value, node, pid = future.result()
            except Exception as exc:  # a worker died (killed, out of memory): the task failed
                broken = True
                node, pid = _here()
                out.append(Finished(ticket, None, f"worker process lost: {exc!r}", node, pid))
                continue
            out.append(Finished(ticket, value if ok else None, None if ok else value, node, pid))
        if broken:
            log.warning("a worker process died; restarting the pool of %d", self._workers)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def connect_ray(address: str) -> Any:
    """Start or join Ray and return the module.

    ``auto``: Ray's own default (the cluster in ``RAY_ADDRESS``, else the latest ``ray start`` on
    this machine, else a new local instance); ``local``: always a new private local instance;
    anything else: the address of an existing cluster (``HOST:PORT`` or ``ray://HOST:10001``), to
    which this copy of loadmaster is shipped (``py_modules``) so that its nodes run the same code.
    """
    try:
        # By name: an optional extra, typed as Any whether or not it is installed where mypy runs.
        ray: Any = importlib.import_module("ray")
    except ModuleNotFoundError as err:
        raise ConfigError("--ray", "--ray", RAY_HINT) from err
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address in {"auto", "local"}:
        options["include_dashboard"] = False
        if address == "local":
            options["address"] = "local"
    else:
        options["address"] = address
        options["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parent)]}
    started = time.perf_counter()
    try:
        ray.init(**options)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise ConfigError("--ray", "--ray", f"cannot reach Ray at {address!r}: {err}") from err
    log.info("Ray ready in %.1f s: %s", time.perf_counter() - started, ray.cluster_resources())
    return ray


class RayPool(Executor):
    """Tasks on a Ray cluster, one CPU each; ``slots`` follows the cluster's CPUs (re-read every
    few seconds, so nodes that join are used). Ray's own retries are off: the caller decides."""

    REFRESH_S = 5.0

    def __init__(self, address: str) -> None:
        self._ray = connect_ray(address)
        self._address = address
        self._remote = self._ray.remote(num_cpus=1, max_retries=0)(_located_on_ray)
        self._refs: dict[Any, int] = {}
        self._next = 0
        self._slots = (0, -1e9)

    @property
    def slots(self) -> int:
        count, at = self._slots
        if time.monotonic() - at > self.REFRESH_S:
            count = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
            self._slots = (count, time.monotonic())
        return count

    @property
    def describe(self) -> str:
        nodes = len([n for n in self._ray.nodes() if n.get("Alive")])
        return f"Ray ({self._address}: {nodes} nodes, {self.slots} CPUs)"

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> int:
        self._next += 1
        self._refs[self._remote.remote(fn, arg)] = self._next
        return self._next

    def wait(self, timeout_s: float | None) -> list[Finished]:
        if not self._refs:
            return []
        ready, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout_s)
        if ready:  # take every other one that is already done too
            ready, _ = self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        out: list[Finished] = []
        for ref in ready:
            ticket = self._refs.pop(ref)
            try:
                ok, value, node, pid = self._ray.get(ref)
            except Exception as exc:  # the worker or its node died: the task failed
                out.append(Finished(ticket, None, f"Ray task lost: {exc}", "?", 0))
                continue
            out.append(Finished(ticket, value if ok else None, None if ok else value, node, pid))
        return out

    def close(self) -> None:
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()


def open_executor(workers: int, ray: str | None) -> Executor:
    """Ray when ``ray`` names an address (or ``auto``/``local``), else ``workers`` local processes."""
    if ray:
        return RayPool(ray)
    return LocalPool(workers)


class ActorGroup(ABC):
    """A fixed set of stateful objects, one call per member at a time, results in member order."""

    @abstractmethod
    def call(self, method: str, args: Sequence[Any]) -> list[Any]:
        """``member[i].method(args[i])`` for every member, in parallel where the group can."""

    @abstractmethod
    def close(self) -> None:
        """Release the members."""


class LocalActors(ActorGroup):
    """The members live in this process and are called one after another."""

    def __init__(self, cls: type, inits: Sequence[tuple[Any, ...]]) -> None:
        self.members = [cls(*init) for init in inits]

    def call(self, method: str, args: Sequence[Any]) -> list[Any]:
        return [getattr(m, method)(a) for m, a in zip(self.members, args, strict=True)]

    def close(self) -> None:
        self.members = []


class RayActors(ActorGroup):
    """Each member is a Ray actor (its own worker process, on any node of the cluster)."""

    def __init__(self, cls: type, inits: Sequence[tuple[Any, ...]], address: str) -> None:
        self._ray = connect_ray(address)
        remote = self._ray.remote(num_cpus=1, max_restarts=0)(cls)
        self.members = [remote.remote(*init) for init in inits]

    def call(self, method: str, args: Sequence[Any]) -> list[Any]:
        refs = [getattr(m, method).remote(a) for m, a in zip(self.members, args, strict=True)]
        return list(self._ray.get(refs))

    def close(self) -> None:
        for member in self.members:
            self._ray.kill(member)
        self.members = []
