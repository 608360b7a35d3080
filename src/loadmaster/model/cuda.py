"""CUDA and driver compatibility: NVIDIA's published rules, kept as data.

Sources (read 2026-12; cited in docs/cuda.md):

* NVIDIA CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding
  Driver Versions" (Linux x86_64): the driver each toolkit release ships
  with. A driver at least that new runs the toolkit with its full feature set;
  drivers are backward compatible, so any newer driver does too.
* NVIDIA CUDA Compatibility guide, "Minor Version Compatibility": from CUDA 11
  on, an application built with any toolkit of a major release runs, with a
  limited feature set (no JIT of newer PTX), on a driver at least as new as
  the minimum of that major family (11.x: 450.80.02, 12.x: 525.60.13,
  13.x: 580.65.06, the 13.0 toolkit driver).
* Same guide, "Forward Compatibility": a newer toolkit runs on an older
  driver branch only through the ``cuda-compat-<major>-<minor>`` package in
  the container, and only on NVIDIA data-center GPUs (and select NGC-ready RTX
  SKUs and Jetson, which loadmaster does not assume); NVIDIA's data-center
  driver support matrix lists the long-term-support and production branches
  that take it (new-feature branches do not).

Everything here is pure data and comparisons: the ``cuda-compat`` plugin,
``loadmaster submit`` and the Kubernetes translation all ask :func:`check`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from loadmaster.errors import ModelError

DRIVER_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
"""Node labels of NVIDIA GPU feature discovery that carry the driver version (major, minor, rev)."""
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_CLASS_LABEL = "loadmaster.io/gpu-class"
"""Node label overriding the guess from the product name: ``data-center`` or ``consumer``."""


@dataclass(frozen=True, slots=True, order=True)
class DriverVersion:
    """An NVIDIA Linux driver version such as 535.104.05 (compared numerically, part by part)."""

    major: int
    minor: int
    rev: int = 0

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", text)
        if match is None:
            raise ModelError(f"{text!r} is not an NVIDIA driver version (like 535.104.05)")
        return cls(int(match[1]), int(match[2]), int(match[3] or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}" + (f".{self.rev:02d}" if self.rev else "")


@dataclass(frozen=True, slots=True, order=True)
class CudaVersion:
    """A CUDA toolkit release, major.minor (a patch level such as 12.4.1 is accepted and dropped)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> CudaVersion:
        match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", text)
        if match is None:
            raise ModelError(f"{text!r} is not a CUDA version (like 12.4 or 12.4.1)")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def _d(text: str) -> DriverVersion:
    return DriverVersion.parse(text)


TOOLKIT_DRIVER: Mapping[CudaVersion, DriverVersion] = {
    CudaVersion(10, 0): _d("410.48"),
    CudaVersion(10, 1): _d("418.39"),
    CudaVersion(10, 2): _d("440.33"),
    CudaVersion(11, 0): _d("450.36.06"),
    CudaVersion(11, 1): _d("455.23"),
    CudaVersion(11, 2): _d("460.27.03"),
    CudaVersion(11, 3): _d("465.19.01"),
    CudaVersion(11, 4): _d("470.42.01"),
    CudaVersion(11, 5): _d("495.29.05"),
    CudaVersion(11, 6): _d("510.39.01"),
    CudaVersion(11, 7): _d("515.43.04"),
    CudaVersion(11, 8): _d("520.61.05"),
    CudaVersion(12, 0): _d("525.60.13"),
    CudaVersion(12, 1): _d("530.30.02"),
    CudaVersion(12, 2): _d("535.54.03"),
    CudaVersion(12, 3): _d("545.23.06"),
    CudaVersion(12, 4): _d("550.54.14"),
    CudaVersion(12, 5): _d("555.42.02"),
    CudaVersion(12, 6): _d("560.28.03"),
    CudaVersion(12, 8): _d("570.26"),
    CudaVersion(12, 9): _d("575.51.03"),
    CudaVersion(13, 0): _d("580.65.06"),
}
"""Toolkit release (its GA) -> the Linux x86_64 driver it ships with: CUDA Toolkit Release Notes,
"CUDA Toolkit and Corresponding Driver Versions". (There was no 12.7 release.)"""

MINOR_FAMILY_MINIMUM: Mapping[int, DriverVersion] = {
    11: _d("450.80.02"),
    12: _d("525.60.13"),
    13: _d("580.65.06"),
}
"""Major release -> the oldest driver that runs every toolkit of that major through minor-version
compatibility: CUDA Compatibility guide, "Minor Version Compatibility" (and the release notes'
table of minimum drivers for it). CUDA 10 and older have none: each release needs its own driver."""

FORWARD_COMPAT_BRANCHES: Mapping[int, tuple[int, ...]] = {
    11: (418, 450, 470),
    12: (470, 535, 550, 570),
    13: (535, 550, 570),
}
"""Major release -> the data-center driver branches (long-term-support and production branches)
its ``cuda-compat`` package runs on: CUDA Compatibility guide, "Forward Compatibility", and NVIDIA's
data-center driver support matrix (R418/R450/R470/R535 long-term support; R550/R570 production)."""

_CONSUMER = re.compile(r"geforce|titan|quadro|\brtx\b|-rtx-", re.IGNORECASE)
"""GPU product names that are not data-center GPUs (GeForce, TITAN, Quadro, RTX workstation cards)."""


class How(StrEnum):
    """How a CUDA build runs on a driver, or that it does not."""

    NATIVE = "native"
    """The driver is at least the toolkit's own: full feature set."""
    MINOR = "minor-version compatibility"
    """Same major family, older driver: runs with a limited feature set (no JIT of newer PTX)."""
    FORWARD = "forward compatibility"
    """Older branch, through the cuda-compat package on a data-center GPU."""
    NO = "incompatible"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a CUDA build runs on a node's driver, how, and why not."""

    how: How
    reason: str

    @property
    def ok(self) -> bool:
        return self.how is not How.NO


def is_data_center(labels: Mapping[str, str], gpu_model: str = "") -> bool:
    """Whether a node's GPUs are data-center GPUs: the override label, else the product name."""
    override = labels.get(GPU_CLASS_LABEL)
    if override is not None:
        return override == "data-center"
    product = labels.get(PRODUCT_LABEL) or gpu_model
    return not _CONSUMER.search(product)


def driver_of(labels: Mapping[str, str]) -> DriverVersion | None:
    """The driver version from GPU feature discovery labels (None when the node has none)."""
    major = labels.get(DRIVER_LABELS[0])
    if not major:
        return None
    minor = labels.get(DRIVER_LABELS[1]) or "0"
    rev = labels.get(DRIVER_LABELS[2]) or "0"
    try:
        return DriverVersion(int(major), int(minor), int(rev))
    except ValueError:
        raise ModelError(
            f"driver labels {major!r}.{minor!r}.{rev!r} are not numbers (GPU feature discovery writes "
            "nvidia.com/cuda.driver.major=535, .minor=104, .rev=05)"
        ) from None


def driver_labels(version: DriverVersion) -> dict[str, str]:
    """The GPU feature discovery labels for ``version`` (what a simulated node carries)."""
    return dict(
        zip(DRIVER_LABELS, (str(version.major), str(version.minor), f"{version.rev:02d}"), strict=True)
    )


def toolkit_driver(cuda: CudaVersion) -> DriverVersion:
    """The driver a release ships with; an unlisted newer minor takes its major's newest known release."""
    found = TOOLKIT_DRIVER.get(cuda)
    if found is not None:
        return found
    same_major = [v for v in TOOLKIT_DRIVER if v.major == cuda.major and v < cuda]
    if not same_major:
        known = ", ".join(str(v) for v in TOOLKIT_DRIVER)
        raise ModelError(f"CUDA {cuda} is not in loadmaster's table of NVIDIA releases; known: {known}")
    return TOOLKIT_DRIVER[max(same_major)]


def minimum_driver(cuda: CudaVersion) -> DriverVersion:
    """The oldest driver that runs ``cuda`` without the cuda-compat package."""
    return MINOR_FAMILY_MINIMUM.get(cuda.major, toolkit_driver(cuda))


def check(cuda: CudaVersion, driver: DriverVersion, *, data_center: bool, compat_package: bool) -> Verdict:
    """Whether an application built with ``cuda`` runs on ``driver`` (NVIDIA's rules, in order)."""
    native = toolkit_driver(cuda)
    if driver >= native:
        return Verdict(How.NATIVE, f"driver {driver} >= {native}, CUDA {cuda}'s own")
    family = MINOR_FAMILY_MINIMUM.get(cuda.major)
    if family is not None and driver >= family:
        return Verdict(How.MINOR, f"driver {driver} >= {family}, the CUDA {cuda.major}.x minimum")
    branches = FORWARD_COMPAT_BRANCHES.get(cuda.major, ())
    if compat_package and data_center and driver.major in branches:
        return Verdict(How.FORWARD, f"cuda-compat on data-center driver branch R{driver.major}")
    return Verdict(How.NO, _why_not(cuda, driver, data_center=data_center, compat_package=compat_package))


def _why_not(cuda: CudaVersion, driver: DriverVersion, *, data_center: bool, compat_package: bool) -> str:
    needs = f"CUDA {cuda} needs driver >= {minimum_driver(cuda)}"
    branches = FORWARD_COMPAT_BRANCHES.get(cuda.major, ())
    listed = "/".join(f"R{b}" for b in branches) or "none"
    if not compat_package:
        tail = f"or the cuda-compat package in the image on a data-center GPU with branch {listed}"
    elif not data_center:
        tail = "and forward compatibility (cuda-compat) works only on data-center GPUs"
    else:
        tail = f"and cuda-compat {cuda.major}.x runs only on driver branches {listed}"
    return f"{needs}; the node has {driver}, {tail}"


def requirement(cuda: CudaVersion, compat_package: bool) -> str:
    """What drivers ``cuda`` needs, in words (for a job that waits for a compatible node)."""
    text = f"driver >= {minimum_driver(cuda)}"
    branches = FORWARD_COMPAT_BRANCHES.get(cuda.major, ())
    if compat_package and branches:
        text += f", or branch {'/'.join(f'R{b}' for b in branches)} on a data-center GPU (cuda-compat)"
    return text


_CUDA_TAG = re.compile(r"(?:^|/)cuda:(\d+\.\d+)(?:\.\d+)?(?:-|$)")


def cuda_from_image(image: str) -> CudaVersion | None:
    """The CUDA release an NVIDIA CUDA base image declares in its tag (``nvidia/cuda:12.4.1-runtime-...``)."""
    match = _CUDA_TAG.search(image)
    return CudaVersion.parse(match[1]) if match else None
