"""The image's entry point (`loadmaster kube ...`) on a read-only root filesystem, importing no plotting code.

deploy/deployment.yaml runs the scheduler with ``readOnlyRootFilesystem: true``. Here the same command
runs in a private mount namespace (``unshare --mount``) where every writable mount is remounted
read-only: /, /tmp, /dev/shm, the home directory, the virtualenv and the checkout. As root (a developer
here, CI) that needs no container runtime; under CI=true a machine that cannot do it fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kube.helpers import a_node, a_pod, kubeconfig_for
from loadmaster_testing.kube_api import KubeApiDouble

ENTRY_POINT = Path(sys.executable).parent / "loadmaster"
PLOTTING = ("matplotlib", "plotly", "fastapi", "duckdb", "torch", "gymnasium")
"""Modules the scheduler's path must not import: the image does not install them."""

READ_ONLY = r"""
set -e
for m in $(awk '$4 ~ /^rw/ {print $2}' /proc/self/mounts | sort -u); do
  case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/pts) continue ;; esac
  mount -o remount,bind,ro "$m"
done
for p in / /tmp "$HOME" $PROBE_DIRS; do
  if touch "$p/.rw-probe" 2>/dev/null; then rm -f "$p/.rw-probe"; echo "$p is writable"; exit 97; fi
done
exec "$@"
"""


def read_only(
    command: list[str], probe: list[Path], timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with every writable filesystem read-only (checked on ``probe`` folders too)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        message = "a read-only mount namespace needs unshare (util-linux) and root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "PROBE_DIRS": " ".join(str(p) for p in probe)}
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY, "sh", *command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def here() -> list[Path]:
    """Folders the entry point reads from: they must be read-only too."""
    import loadmaster  # noqa: PLC0415 - where this checkout's package lies

    return [Path(loadmaster.__file__).parent, Path(sys.prefix), Path.cwd()]


def test_kube_run_imports_no_plotting_code() -> None:
    script = (
        "import sys\n"
        "from loadmaster.cli import main\n"
        "sys.argv = ['loadmaster', 'kube', 'run', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({PLOTTING!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]


def test_the_entry_point_runs_on_a_read_only_root(tmp_path: Path) -> None:
    result = read_only([str(ENTRY_POINT), "kube", "run", "--help"], [tmp_path, *here()])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "--http-port" in result.stdout and "--log-format" in result.stdout


def test_kube_run_schedules_on_a_read_only_root(api: KubeApiDouble, tmp_path: Path) -> None:
    """Two cycles against the API double, JSON logs, health port on: binds happen, nothing is written."""
    kubeconfig = kubeconfig_for(api, tmp_path / "kubeconfig")
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("p0", 2))
    command = [
        str(ENTRY_POINT), "kube", "run", "--kubeconfig", str(kubeconfig), "--queues", "",
        "--max-steps", "2", "--interval", "0", "--http-port", str(free_port()),
        "--http-address", "127.0.0.1", "--log-format", "json",
    ]  # fmt: skip
    result = read_only(command, [tmp_path, *here()])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert api.bindings == [("team-a/p0", "n0")]
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(r["msg"] == "cycle" and r["bound"] == 1 for r in records), result.stderr[-2000:]


def test_the_cli_defaults_are_the_libraries() -> None:
    from loadmaster.cli import kube as cli  # noqa: PLC0415
    from loadmaster.config import BUILTIN_PROFILES  # noqa: PLC0415
    from loadmaster.kube.checkpoint import DEFAULT_CHECKPOINT  # noqa: PLC0415
    from loadmaster.kube.queues import DEFAULT_CONFIGMAP  # noqa: PLC0415
    from loadmaster.kube.translate import SCHEDULER_NAME  # noqa: PLC0415

    assert (cli.BUILTIN_PROFILES, cli.DEFAULT_QUEUES, cli.SCHEDULER_NAME, cli.DEFAULT_CHECKPOINT) == (
        BUILTIN_PROFILES,
        DEFAULT_CONFIGMAP,
        SCHEDULER_NAME,
        DEFAULT_CHECKPOINT,
    )
