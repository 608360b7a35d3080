"""The project's own exception types.

Every error a user can cause names where it happened (file, line or field) and
what is allowed, so that the message alone is enough to fix the input.
"""

from __future__ import annotations


class LoadmasterError(Exception):
    """Base class of every error loadmaster raises on purpose.

    Every subclass survives a pickle round trip, whatever its constructor's
    arguments, so that an error raised in a worker process reaches the parent
    as itself (a process pool that cannot unpickle a worker's error breaks,
    and the user sees ``BrokenProcessPool`` instead of the message).
    """

    def __reduce__(self) -> tuple[object, ...]:
        # Exception's own reduce rebuilds with cls(*self.args), which fails for subclasses whose
        # constructor takes other arguments than the message (ConfigError, TraceError...): rebuild
        # without calling the constructor, then restore the message and the attributes.
        return (_rebuild, (type(self), self.args), self.__dict__ or None)


def _rebuild(cls: type[LoadmasterError], args: tuple[object, ...]) -> LoadmasterError:
    """An instance of ``cls`` with ``args`` and no constructor call (see LoadmasterError.__reduce__)."""
    error = cls.__new__(cls)
    error.args = args
    return error


class ConfigError(LoadmasterError):
    """A cluster, profile or workload file is invalid.

    The message names the file, the field path and what is allowed.
    """

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.detail = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


class ModelError(LoadmasterError):
    """A domain object was built with values that cannot describe a real cluster or job."""


class SimulationError(LoadmasterError):
    """The simulator reached a state that breaks one of its invariants."""


class TelemetryError(LoadmasterError):
    """Telemetry could not be stored, read or collected (unknown series, unreachable server, no GPU)."""
