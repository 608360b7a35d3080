"""Validation against published results: our simulator and plugins rerun a paper's protocol."""

from loadmaster.validation.rlscheduler import (
    POLICIES,
    SEQUENCE_STARTS,
    Cell,
    Reference,
    read_reference,
    reproduce,
)

__all__ = ["POLICIES", "SEQUENCE_STARTS", "Cell", "Reference", "read_reference", "reproduce"]
