"""Run the shell commands that README.md and docs/*.md mark as runnable, in a fresh clone.

Marker convention (stated in README.md, "A short tour"): a fenced block opened with

    ```sh runnable         every line is a command; tests/integration/test_doc_commands.py runs them
    ```sh runnable slow    runs only with --slow (`make docs-slow`): minutes, not seconds

runs line by line, in order, from the root of a fresh `git clone` of this repository (its
committed HEAD: commit first), with a time limit per command. A line continued with a trailing
backslash is one command; `  # ...` ends a line's comment. `loadmaster`, `.venv/bin/loadmaster`,
`python` and `pytest` run this checkout's code with the current interpreter (no install). A
command fails on a non-zero exit status or a Python traceback in its output. Unmarked blocks
(```sh alone) are not run: they need a GPU, a cluster, your own files, or they never end.

    python tools/doc_commands.py [--slow | --only-slow] [--list] [--timeout S] [FILE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(?P<lang>\w*)(?P<words>[^`]*)$")
COMMENT = re.compile(r"\s+#\s.*$")
DEFAULT_TIMEOUT_S = 300.0
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Command:
    """One runnable command: where it is written, and whether it is marked slow."""

    file: str
    line: int
    text: str
    slow: bool

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def documents(root: Path) -> list[Path]:
    """README.md and every Markdown file under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def commands_in(path: Path, root: Path) -> list[Command]:
    """The commands of ``path``'s blocks marked runnable, in document order."""
    found: list[Command] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        words = fence["words"].split()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        if "runnable" in words:
            found.extend(_commands(lines[i + 1 : end], i + 2, name, slow="slow" in words))
        i = end + 1
    return found


def _commands(block: Sequence[str], first_line: int, name: str, *, slow: bool) -> Iterable[Command]:
    text, start = "", first_line
    for offset, raw in enumerate(block):
        line = COMMENT.sub("", raw).rstrip()
        if not text:
            start = first_line + offset
        if line.endswith("\\"):
            text += line[:-1].rstrip() + " "
            continue
        text = (text + line.strip()).strip()
        if text:
            yield Command(name, start, text, slow)
        text = ""


def fresh_clone(repo: Path, into: Path) -> Path:
    """``git clone`` of ``repo`` (its committed HEAD), with shims that run its code in place."""
    clone = into / "clone"
    subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
    shims = clone / ".venv" / "bin"
    shims.mkdir(parents=True)
    targets = {
        "loadmaster": f'exec "{sys.executable}" -m loadmaster.cli "$@"',
        "python": f'exec "{sys.executable}" "$@"',
        "pytest": f'exec "{sys.executable}" -m pytest "$@"',
    }
    for name, line in targets.items():
        shim = shims / name
        shim.write_text(f"#!/bin/sh\n{line}\n")
        shim.chmod(0o755)
    return clone


def environment(clone: Path) -> dict[str, str]:
    """The clone's sources first on the import path, its shims first on PATH; no colour codes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(clone / "src")
    env["PATH"] = f"{clone / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    return env


def run_one(command: Command, clone: Path, timeout_s: float, *, stream: bool) -> tuple[bool, float, str]:
    """Run ``command`` in the clone; (passed, seconds, output). With ``stream``, its output is
    printed line by line as it comes (the slow commands' progress), indented under its header."""
    started = time.perf_counter()
    process = subprocess.Popen(
        ["bash", "-o", "pipefail", "-c", command.text],
        cwd=clone,
        env=environment(clone),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a timeout ends its children too
    )
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if stream:
                print(f"    | {line.rstrip()}", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        reader.join(5)
        return (
            False,
            time.perf_counter() - started,
            "".join(lines) + f"\n(killed after the {timeout_s:.0f} s limit)",
        )
    reader.join()
    output = "".join(lines)
    passed = status == 0 and TRACEBACK not in output
    return passed, time.perf_counter() - started, output + f"\n(exit status {status})"


def select(all_commands: Sequence[Command], *, slow: bool, only_slow: bool) -> list[Command]:
    """The commands a run asks for: cheap ones by default, slow ones too with --slow."""
    if only_slow:
        return [c for c in all_commands if c.slow]
    return [c for c in all_commands if slow or not c.slow]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md, docs/**.md)")
    parser.add_argument("--slow", action="store_true", help="also run the blocks marked slow")
    parser.add_argument("--only-slow", action="store_true", help="run only the blocks marked slow")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per command")
    parser.add_argument("--repo", type=Path, default=ROOT, help="repository to clone (default: this one)")
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.files] or documents(args.repo)
    chosen = select(
        [c for f in files for c in commands_in(f, args.repo)], slow=args.slow, only_slow=args.only_slow
    )
    if args.list:
        for c in chosen:
            print(f"{c.where:<28} {'slow ' if c.slow else ''}{c.text}")
        return 0
    failures = []
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as tmp:
        clone = fresh_clone(args.repo, Path(tmp))
        print(f"fresh clone of {args.repo} in {clone}; {len(chosen)} commands", flush=True)
        for n, command in enumerate(chosen, 1):
            print(f"[{n}/{len(chosen)}] {command.where}: {command.text}", flush=True)
            passed, seconds, output = run_one(command, clone, args.timeout, stream=command.slow)
            print(f"    {'ok' if passed else 'FAILED'} in {seconds:.1f} s", flush=True)
            if not passed:
                failures.append(command)
                shown = output.strip().splitlines()[-1 if command.slow else -30 :]  # slow: shown as it ran
                print("    " + "\n    ".join(shown), flush=True)
        shutil.rmtree(clone, ignore_errors=True)
    for command in failures:
        print(f"FAILED {command.where}: {command.text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
