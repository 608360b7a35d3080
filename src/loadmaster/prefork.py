"""A helper process forked early, that imports what a later step needs while this process works.

Why: ``loadmaster simulate`` writes its plots and report with libraries that take about half a
second to import (matplotlib, plotly, Parquet), and more to draw, while the simulation needs none
of them. A :class:`Prefork` forked when the command starts imports them on another core while the
simulation runs; when the results are ready, :meth:`Prefork.submit` hands it one call through a
pipe, and :meth:`Prefork.wait` waits for that call to end and raises what it raised. Whoever
submits must wait: every file is complete when the command returns.

Where the platform cannot fork, or after :meth:`Prefork.close`, nothing runs in the background:
:meth:`Prefork.submit` makes the call in this process, so the outputs are the same either way.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import pickle
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from loadmaster import forking  # noqa: F401 - forked helpers inherit the parent's objects frozen
from loadmaster.errors import LoadmasterError

T = TypeVar("T")

_HEADER = struct.Struct("<Q")
"""Every message is its length, then that many bytes of pickle: no reader depends on an end of file,
which a copy of the pipe inherited by another forked process would hold back."""

_LOG = logging.getLogger(__name__)

PREPARING_NICENESS = 10
"""How much lower the CPU priority of a helper's imports and warm-ups is (:class:`Preparation`).
They only have to be over by the time the caller's work is done, and on a machine with as many
busy processes as cores (two helpers and a simulation on two cores) an equal share would slow the
caller's work, which is the command's critical path, by about a third."""

_OPEN_IN_PARENT: set[int] = set()
"""Pipe ends held by the parent for its helpers: a helper forked later closes its copies of them."""


class HelperError(LoadmasterError):
    """The call handed to a helper process raised (the message carries its traceback), or the helper died."""


class Prefork:
    """One helper process, forked now; it imports ``modules``, runs ``warm_ups``, then runs at most
    one submitted call.

    ``warm_ups`` are ``"module:function"`` names of functions without arguments, called in order
    once the imports are done: work a library does only the first time (fonts, lazily imported
    validators), done while this process works. A call submitted before they are over waits for
    the step in progress and the imports left, not for the warm-ups left (:class:`Preparation`). They
    must leave no trace the call could see; one that raises is logged and the rest still run.
    """

    def __init__(self, modules: Sequence[str], *, warm_ups: Sequence[str] = (), fork: bool = True) -> None:
        self.pid: int | None = None
        self._to_child = self._from_child = -1
        self._submitted = False
        if fork and hasattr(os, "fork"):
            self._start(tuple(modules), tuple(warm_ups))

    @property
    def forked(self) -> bool:
        """Whether a helper process is running (or ran) for this object."""
        return self.pid is not None

    def _start(self, modules: tuple[str, ...], warm_ups: tuple[str, ...]) -> None:
        down_read, down_write = os.pipe()
        up_read, up_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the helper: never returns; what it inherits is frozen (loadmaster.forking)
            os.close(down_write)
            os.close(up_read)
            for fd in _OPEN_IN_PARENT:
                os.close(fd)
            _serve(modules, warm_ups, down_read, up_write)
        os.close(down_read)
        os.close(up_write)
        self.pid, self._to_child, self._from_child = pid, down_write, up_read
        _OPEN_IN_PARENT.update((down_write, up_read))

    def submit(self, fn: Callable[[T], object], arg: T) -> None:
        """Run ``fn(arg)`` in the helper (in this process when there is none); one call per helper.

        ``fn`` must be a module-level function and ``arg`` picklable.
        """
        if self._submitted:
            raise HelperError("a helper process runs one call; this one was given one already")
        self._submitted = True
        if self.pid is None:
            fn(arg)
            return
        _send(self._to_child, pickle.dumps((fn, arg), protocol=pickle.HIGHEST_PROTOCOL))

    def wait(self) -> None:
        """Wait for the submitted call to end; raise what it raised (:class:`HelperError` for a death)."""
        if self.pid is None:
            return
        try:
            reply = _receive(self._from_child)
        finally:
            self._reap()
        if reply is None:
            raise HelperError("the helper process ended without a word (killed?)")
        kind, payload = pickle.loads(reply)  # from our own forked child: trusted
        if kind == "missing":
            message, name = payload
            raise ModuleNotFoundError(message, name=name)
        if kind == "raised":
            raise payload
        if kind == "failed":
            raise HelperError(f"the helper process failed:\n{payload}")

    def close(self) -> None:
        """Stop a helper that was given nothing (an error came first); a no-op once waited for."""
        if self.pid is None:
            return
        if not self._submitted:
            os.kill(self.pid, signal.SIGKILL)  # it may still be importing: nothing to wait for
        self._reap()

    def _reap(self) -> None:
        if self.pid is None:
            return
        for fd in (self._to_child, self._from_child):
            _OPEN_IN_PARENT.discard(fd)
            os.close(fd)
        os.waitpid(self.pid, 0)
        self.pid = None

    def __enter__(self) -> Prefork:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _serve(modules: tuple[str, ...], warm_ups: tuple[str, ...], down: int, up: int) -> None:
    """The helper's whole life: import, warm up, wait for the call, run it, report, exit (never returns)."""
    code = 1
    try:
        # Read while importing: a call's argument is larger than a pipe holds, and the parent
        # would otherwise wait, in submit, for the imports to end.
        received: list[bytes | None] = []
        arrived = threading.Event()

        def receive() -> None:
            received.append(_receive(down))
            arrived.set()

        reader = threading.Thread(target=receive, name="prefork-receive")
        reader.start()
        preparation = Preparation(modules, warm_ups, arrived)
        preparer = threading.Thread(target=preparation.run, name="prefork-prepare")
        preparer.start()
        reader.join()
        preparer.join()  # it stops after the step it is in once the call has come
        preparation.finish()  # on this thread, at the caller's priority: the command waits now
        message = received[0] if received else None
        code = 0
        if message is not None:
            fn, arg = pickle.loads(message)  # from our own parent: trusted
            _send(up, pickle.dumps(_outcome(fn, arg), protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        os._exit(code)  # no atexit handlers, no flush of buffers copied from the parent


class Preparation:
    """A helper's imports and warm-ups, run on a thread of lower CPU priority until the call comes.

    Until then nothing waits for them, and on a machine with as many busy processes as cores the
    caller's work (the simulation: the command's critical path) should not share its core with
    them. Once the call has come the command waits for this helper, so the thread stops after the
    step it is in and :meth:`finish`, on the helper's main thread, which was never lowered, does
    the imports left (the warm-ups left are skipped: the call does their first-use work itself).
    Lowering a priority needs no privilege, raising it back does (CAP_SYS_NICE, or RLIMIT_NICE),
    which is why the call never runs on the lowered thread.
    """

    def __init__(self, modules: Sequence[str], warm_ups: Sequence[str], arrived: threading.Event) -> None:
        self.steps: list[tuple[str, str]] = [("import", m) for m in modules] + [("warm", w) for w in warm_ups]
        self.arrived = arrived
        self.done = 0
        """Steps taken so far (by the lowered thread, then by :meth:`finish`)."""

    def run(self) -> None:
        """Lower this thread's priority, then take the steps until the call comes."""
        _lower_this_thread()
        while self.done < len(self.steps) and not self.arrived.is_set():
            _take(self.steps[self.done])
            self.done += 1

    def finish(self) -> None:
        """The imports :meth:`run` left; its warm-ups left are dropped."""
        for kind, name in self.steps[self.done :]:
            if kind == "import":
                _take((kind, name))
        self.done = len(self.steps)


NICE_MAX = 19
"""The lowest CPU priority (highest nice value) Linux allows; a lower request is an error there."""


def _lower_this_thread() -> None:
    """Lower the calling thread's CPU priority by :data:`PREPARING_NICENESS` (Linux only).

    On Linux the nice value belongs to a thread, and ``setpriority(PRIO_PROCESS, 0)`` changes the
    calling one's; elsewhere (macOS, the BSDs) it is the whole process's, which would lower the
    call too, so nothing is done there.
    """
    if sys.platform != "linux":
        return
    try:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, min(before + PREPARING_NICENESS, NICE_MAX))
    except OSError as exc:  # a sandbox that forbids it: the helper prepares at the caller's priority
        _LOG.debug("could not lower the helper's preparing thread's priority: %s", exc)


def _take(step: tuple[str, str]) -> None:
    kind, name = step
    if kind == "warm":
        _warm_up(name)
    else:
        _import(name)


def _import(module: str) -> None:
    """Import ``module``; a missing one is left for the call, whose own import raises it again
    (the parent then reports it)."""
    with contextlib.suppress(ImportError):
        importlib.import_module(module)


def _warm_up(name: str) -> None:
    """Call the function ``"module:function"``; a failure is only logged: warming up is an
    optimisation, and the submitted call, which uses the same library, reports a real fault."""
    module, _, function = name.partition(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception:  # logged with its traceback; the call that follows raises what matters
        _LOG.warning("warm-up %s failed; the outputs are written without it", name, exc_info=True)


def _outcome(fn: Callable[[Any], object], arg: Any) -> tuple[str, Any]:
    """``("ok", None)``, or what the parent needs to raise the same error."""
    try:
        fn(arg)
    except ModuleNotFoundError as exc:
        return "missing", (str(exc), exc.name)
    except Exception as exc:  # any failure is data for the parent, which raises it
        text = traceback.format_exc()
        try:
            pickle.dumps(exc)
        except Exception:  # an exception that does not pickle still reaches the parent, as text
            return "failed", text
        return ("raised", exc) if isinstance(exc, LoadmasterError) else ("failed", text)
    return "ok", None


def _send(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int) -> bytes | None:
    """One message, or None when the other end closed before a whole one arrived."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    return _read_exactly(fd, _HEADER.unpack(header)[0])


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
