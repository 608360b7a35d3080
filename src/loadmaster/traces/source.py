"""Reading a trace file line by line, with line numbers and progress, plus gzip support."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

Progress = Callable[[int], None]
"""Called now and then with the number of bytes (characters) read so far."""

_PROGRESS_EVERY = 16_384
"""Lines between progress calls: often enough for a smooth bar, rare enough to cost nothing."""


def open_text(path: Path) -> TextIO:
    """``path`` opened for reading as UTF-8 text, gunzipped when it ends in .gz."""
    if path.suffix == ".gz":
        # Imported here: gzip (with zlib) costs a few hundredths of a second to import, and most
        # traces that loadmaster simulate reads are plain text.
        import gzip  # noqa: PLC0415

        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


class Lines:
    """The lines of a text file, counting them (``line`` is 1-based) and reporting progress.

    csv.reader accepts it as its iterable, and ``line`` is then the number of
    the last physical line read, which is what an error should name.
    """

    def __init__(self, handle: TextIO, progress: Progress | None = None, path: Path | None = None) -> None:
        self._handle = handle
        self._progress = progress
        self.path = path
        """The file read, when known: errors name it, and a reader may look for companion files beside it."""
        self.source = str(path) if path is not None else "<input>"
        self.line = 0
        self.chars = 0

    def __iter__(self) -> Iterator[str]:
        progress = self._progress
        for text in self._handle:
            self.line += 1
            self.chars += len(text)
            if progress is not None and self.line % _PROGRESS_EVERY == 0:
                progress(self.chars)
            yield text
        if progress is not None:
            progress(self.chars)


def size_of(path: Path) -> int:
    """Bytes to read, for a progress bar's total (the compressed size for .gz: a rough total)."""
    return path.stat().st_size
