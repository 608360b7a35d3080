"""Makes the shared test builders importable as ``from builders import ...``."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
