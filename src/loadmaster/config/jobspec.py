"""What a researcher submits, and who they are: the job file and the identity file.

A job file (``loadmaster submit job.yaml``) holds the same fields as the
command-line flags; flags given beside a file override its fields::

    name: llm-sft             # optional: default <user>-<command>-<random>
    tasks: 2                  # pods, one per node (Slurm's --ntasks / --nodes)
    gpus_per_task: 8
    image: nvcr.io/nvidia/pytorch:24.05-py3
    command: [torchrun, train.py, --epochs, "3"]
    queue: default
    time: "04:00:00"          # Slurm's formats, or 90m / 4h / 2d
    priority: normal          # a PriorityClass name
    env: {WANDB_MODE: offline}
    cuda: "12.4"              # the CUDA release the image was built with
    cuda_compat: false        # the image carries NVIDIA's cuda-compat package

Every error names the file, the line and the field. The identity file
(``~/.config/loadmaster/config.yaml``, or ``$LOADMASTER_CONFIG``) says who
submits; environment variables ``LOADMASTER_USER``, ``LOADMASTER_GROUP``,
``LOADMASTER_NAMESPACE``, ``LOADMASTER_KUBECONFIG``, ``LOADMASTER_DASHBOARD``,
``LOADMASTER_PROMETHEUS`` and ``LOADMASTER_IMAGE_LOOKUP`` override its fields (see docs/researchers.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadmaster.config.yamlfile import YamlDocument, parse_yaml, read_yaml, validate
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model.cuda import CudaVersion

NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1123 label: what Kubernetes allows as a Job, Service and namespace name."""
JOB_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1035 label: a Service's name must also start with a letter."""
MAX_NAME = 40
"""Longest job name: pods are named ``<job>-<index>-<5 random>`` and hostnames ``<job>-<index>``,
which must stay within the 63 characters of a DNS label."""
_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?P<rest>[\d:]+)$")
_UNIT = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<u>[smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def duration_s(text: str) -> int:
    """Seconds in a time limit written as Slurm writes them, or as ``90m``/``4h``/``2d``.

    Slurm's forms: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``.
    """
    text = str(text).strip()
    unit = _UNIT.match(text)
    if unit:
        return round(float(unit["n"]) * _UNIT_S[unit["u"]])
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a time limit; write 90 (minutes), 1:30:00, 2-00:00:00, 90m, 4h or 2d"
        )
    parts = [int(p) for p in match["rest"].split(":") if p != ""]
    if match["d"] is not None:
        days = int(match["d"])
        hms = [*parts, 0, 0][:3]
        return days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    if len(parts) == 3:
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    raise ValueError(f"{text!r} has too many fields; at most hours:minutes:seconds")


class JobSpec(BaseModel):
    """One job as a researcher describes it (the job file, or the flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, pattern=JOB_NAME, max_length=MAX_NAME)
    tasks: int = Field(default=1, ge=1, le=1024)
    gpus_per_task: int = Field(default=1, ge=0, le=64)
    cpu_per_task: str | None = None
    """CPU request per task as a Kubernetes quantity (``16``, ``500m``); default: none asked."""
    memory_per_task: str | None = None
    """Memory request per task as a Kubernetes quantity (``64Gi``); default: none asked."""
    image: str = Field(min_length=1)
    command: list[str] = Field(default_factory=list)
    queue: str = Field(default="default", pattern=NAME)
    time: str = "24:00:00"
    priority: str | None = Field(default=None, pattern=NAME)
    env: dict[str, str] = Field(default_factory=dict)
    pool: str | None = None
    resource_type: str | None = None
    cuda: str | None = None
    cuda_compat: bool = False
    port: int = Field(default=29500, ge=1, le=65535)
    """Rendezvous port of task 0 (``MASTER_PORT``)."""
    interactive: bool = False
    mig: str | None = None
    """MIG profile (``1g.10gb``) instead of whole GPUs: one slice per task."""

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if duration_s(value) <= 0:
            raise ValueError("the time limit must be positive")
        return value

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                CudaVersion.parse(value)
            except ModelError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not an environment variable name")
        return value

    @property
    def time_limit_s(self) -> int:
        return duration_s(self.time)

    @property
    def cuda_version(self) -> CudaVersion | None:
        return CudaVersion.parse(self.cuda) if self.cuda is not None else None


def load_job_file(path: Path, overrides: Mapping[str, object] | None = None) -> JobSpec:
    """Read and validate a job file; ``overrides`` (the flags given) replace its fields."""
    doc = read_yaml(path)
    if doc.data is not None and not isinstance(doc.data, dict):
        raise doc.error([], "a job file is a mapping of fields (name, tasks, image, command, ...)")
    merged = YamlDocument(doc.source, {**(doc.data or {}), **(overrides or {})}, doc.root)
    return _validated(merged)


def job_from_flags(fields: Mapping[str, object]) -> JobSpec:
    """Validate flags as a job spec; errors name the flag."""
    doc = YamlDocument("command line", dict(fields), None)
    try:
        return _validated(doc)
    except ConfigError as exc:
        flag = "--" + exc.field.split(".")[0].replace("_", "-")
        raise ConfigError("command line", flag, exc.detail) from None


def _validated(doc: YamlDocument) -> JobSpec:
    return validate(JobSpec, doc)


class Identity(BaseModel):
    """Who submits: the user and group written on every job, and where jobs go.

    ``namespace`` defaults to the group: one namespace per group is the usual
    way to let Kubernetes RBAC enforce who may read and delete what.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str = Field(pattern=NAME)
    group: str = Field(pattern=NAME)
    namespace: str | None = Field(default=None, pattern=NAME)
    kubeconfig: str | None = None
    dashboard: str | None = None
    """Base URL of the loadmaster dashboard (links in ``loadmaster status``)."""
    prometheus: str | None = None
    """Base URL of the Prometheus that scrapes dcgm-exporter: ``status`` then shows GPU use and findings."""
    operator: bool = False
    """May see and cancel every job, as the dashboard's operator role."""
    image_lookup: bool = True
    """Read an image's declared ``CUDA_VERSION`` from its registry at submission (false: a site whose
    registries are private or out of reach; ``submit --no-image-lookup`` does the same once)."""

    @property
    def home(self) -> str:
        """The namespace jobs are created in."""
        return self.namespace or self.group


ENV_FIELDS = {
    "LOADMASTER_USER": "user",
    "LOADMASTER_GROUP": "group",
    "LOADMASTER_NAMESPACE": "namespace",
    "LOADMASTER_KUBECONFIG": "kubeconfig",
    "LOADMASTER_DASHBOARD": "dashboard",
    "LOADMASTER_PROMETHEUS": "prometheus",
    "LOADMASTER_IMAGE_LOOKUP": "image_lookup",
}
"""Environment variable -> identity field it overrides."""


def identity_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$LOADMASTER_CONFIG``, else ``$XDG_CONFIG_HOME/loadmaster/config.yaml`` (``~/.config`` default)."""
    env = os.environ if environ is None else environ
    if env.get("LOADMASTER_CONFIG"):
        return Path(env["LOADMASTER_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "loadmaster" / "config.yaml"


def load_identity(environ: Mapping[str, str] | None = None) -> Identity:
    """The caller's identity: the identity file (if any), overridden by environment variables."""
    env = os.environ if environ is None else environ
    path = identity_path(env)
    doc = read_yaml(path) if path.exists() else parse_yaml("{}", str(path))
    data = dict(doc.data or {}) if isinstance(doc.data, dict) else None
    if data is None:
        raise doc.error([], "the identity file is a mapping: user, group, namespace, kubeconfig, dashboard")
    data.update({field: env[var] for var, field in ENV_FIELDS.items() if env.get(var)})
    if "user" not in data or "group" not in data:
        raise ConfigError(
            str(path),
            "user" if "user" not in data else "group",
            "who you are is not configured: write `user: NAME` and `group: GROUP` in this file, "
            "or set LOADMASTER_USER and LOADMASTER_GROUP",
        )
    return validate(Identity, YamlDocument(doc.source, data, doc.root))
