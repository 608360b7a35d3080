"""The project's own exception types.

Every error a user can cause names where it happened (file, line or field) and
what is allowed, so that the message alone is enough to fix the input.
"""

from __future__ import annotations


class LoadmasterError(Exception):
    """Base class of every error loadmaster raises on purpose."""


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
