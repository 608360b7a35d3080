"""``python -m loadmaster.validation.deepjs [DATA_DIR]``: reproduce the reference runs, print the tables."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from loadmaster.validation.deepjs.reference import compare, read_reference, reference_table, reproduce, table


def main(argv: Sequence[str]) -> int:
    """``python -m loadmaster.validation.deepjs [DATA_DIR]``: the table, then any mismatching run."""
    data = Path(argv[0]) if argv else Path("data/reference/cloudsimpy")
    evaluations = reproduce(data / "jobs.csv")
    comparisons = compare(evaluations, read_reference(data / "reference_runs_heuristics.json"))
    print(table(evaluations, comparisons), reference_table(comparisons), sep="\n\n")
    for c in comparisons:
        if not c.matches:
            print(f"chunk {c.chunk} {c.policy}: ours {c.ours} reference {c.reference}")
    return 0 if all(c.matches for c in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
