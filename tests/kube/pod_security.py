"""The restricted Pod Security Standard (v1.32), as checks over a manifest's pod specs.

Each check follows one rule of the standard, https://kubernetes.io/docs/concepts/security/pod-security-standards/
("Baseline" and "Restricted" tables), and its implementation in kube-apiserver's admission plugin,
kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/check_<id>.go (the check id
is the dictionary key below). Restricted includes every baseline check. Where upstream allows more in
later versions (the safe sysctls gained a few in 1.27 and 1.29), the smaller 1.0 set is used: a lint
may be stricter than admission, never laxer.

Not checked: the AppArmor annotation form (deprecated; the field form is checked), Windows-only
fields other than hostProcess, and ``spec.os.name: windows`` exemptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Spec = dict[str, Any]

_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
"""check_capabilities_baseline.go: what ``capabilities.add`` may hold."""
RESTRICTED_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
"""check_restrictedVolumes.go: the only volume sources allowed."""
SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ]
)
"""check_sysctls.go (1.0 set)."""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
"""check_seLinuxOptions.go: allowed ``seLinuxOptions.type`` values."""


def pod_specs(doc: Any, path: str = "") -> Iterator[tuple[str, Spec]]:
    """Every pod spec in a manifest: a mapping with a ``containers`` list (Pods, templates, CRD templates)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("containers"), list):
            yield path or "spec", doc
            return
        for key, value in doc.items():
            yield from pod_specs(value, f"{path}.{key}" if path else key)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from pod_specs(value, f"{path}[{i}]")


def containers(spec: Spec) -> Iterator[tuple[str, Spec]]:
    for kind in _CONTAINER_LISTS:
        for c in spec.get(kind) or []:
            yield f"{kind}[{c.get('name')}]", c


def _security(obj: Spec) -> Spec:
    return obj.get("securityContext") or {}


def _each_container(rule: Callable[[Spec], str | None]) -> Callable[[Spec], list[str]]:
    def check(spec: Spec) -> list[str]:
        return [f"{where}: {why}" for where, c in containers(spec) if (why := rule(c)) is not None]

    return check


# --------------------------------------------------------------------------------------- baseline
def host_namespaces(spec: Spec) -> list[str]:
    return [f"{k}: true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]


def privileged(spec: Spec) -> list[str]:
    return _each_container(lambda c: "privileged: true" if _security(c).get("privileged") else None)(spec)


def add_capabilities(spec: Spec) -> list[str]:
    def rule(c: Spec) -> str | None:
        added = set((_security(c).get("capabilities") or {}).get("add") or [])
        extra = sorted(added - BASELINE_CAPABILITIES)
        return f"capabilities.add {extra}" if extra else None

    return _each_container(rule)(spec)


def host_path_volumes(spec: Spec) -> list[str]:
    return [f"volume {v.get('name')}: hostPath" for v in spec.get("volumes") or [] if "hostPath" in v]


def host_ports(spec: Spec) -> list[str]:
    def rule(c: Spec) -> str | None:
        ports = [p["hostPort"] for p in c.get("ports") or [] if p.get("hostPort")]
        return f"hostPort {ports}" if ports else None

    return _each_container(rule)(spec)


def host_probes_and_lifecycle(spec: Spec) -> list[str]:
    """check_hostProbesAndhostLifecycle.go: probes and lifecycle handlers may not set ``host``."""

    def rule(c: Spec) -> str | None:
        handlers = [c.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += list((c.get("lifecycle") or {}).values())
        hosts = [
            h[k]["host"] for h in handlers for k in ("httpGet", "tcpSocket") if (h.get(k) or {}).get("host")
        ]
        return f"probe or lifecycle host {hosts}" if hosts else None

    return _each_container(rule)(spec)


def app_armor(spec: Spec) -> list[str]:
    bad = [
        where
        for where, obj in [("spec", spec), *containers(spec)]
        if (_security(obj).get("appArmorProfile") or {}).get("type")
        not in {None, "RuntimeDefault", "Localhost"}
    ]
    return [f"{w}: appArmorProfile Unconfined" for w in bad]


def selinux(spec: Spec) -> list[str]:
    out = []
    for where, obj in [("spec", spec), *containers(spec)]:
        options = _security(obj).get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            out.append(f"{where}: seLinuxOptions {options}")
    return out


def proc_mount(spec: Spec) -> list[str]:
    return _each_container(
        lambda c: "procMount: Unmasked" if _security(c).get("procMount", "Default") != "Default" else None
    )(spec)


def seccomp_baseline(spec: Spec) -> list[str]:
    return [
        f"{where}: seccompProfile Unconfined"
        for where, obj in [("spec", spec), *containers(spec)]
        if (_security(obj).get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def sysctls(spec: Spec) -> list[str]:
    names = [s.get("name") for s in _security(spec).get("sysctls") or []]
    bad = [n for n in names if n not in SAFE_SYSCTLS]
    return [f"sysctls {bad}"] if bad else []


def windows_host_process(spec: Spec) -> list[str]:
    return [
        f"{where}: windowsOptions.hostProcess"
        for where, obj in [("spec", spec), *containers(spec)]
        if (_security(obj).get("windowsOptions") or {}).get("hostProcess")
    ]


# ------------------------------------------------------------------------------------- restricted
def restricted_volumes(spec: Spec) -> list[str]:
    out = []
    for volume in spec.get("volumes") or []:
        sources = set(volume) - {"name"}
        if not sources <= RESTRICTED_VOLUMES:
            out.append(f"volume {volume.get('name')}: {sorted(sources - RESTRICTED_VOLUMES)}")
    return out


def allow_privilege_escalation(spec: Spec) -> list[str]:
    return _each_container(
        lambda c: (
            None
            if _security(c).get("allowPrivilegeEscalation") is False
            else "allowPrivilegeEscalation must be false"
        )
    )(spec)


def run_as_non_root(spec: Spec) -> list[str]:
    """Pod-level true covers containers that do not say false; otherwise every container must say true."""
    pod = _security(spec).get("runAsNonRoot")
    out = ["spec: runAsNonRoot false"] if pod is False else []
    for where, c in containers(spec):
        mine = _security(c).get("runAsNonRoot")
        if mine is False or (mine is None and pod is not True):
            out.append(f"{where}: runAsNonRoot must be true (here or at pod level)")
    return out


def run_as_user(spec: Spec) -> list[str]:
    return [
        f"{where}: runAsUser 0"
        for where, obj in [("spec", spec), *containers(spec)]
        if _security(obj).get("runAsUser") == 0
    ]


def seccomp_restricted(spec: Spec) -> list[str]:
    allowed = {"RuntimeDefault", "Localhost"}
    pod = (_security(spec).get("seccompProfile") or {}).get("type")
    out = [f"spec: seccompProfile {pod}"] if pod is not None and pod not in allowed else []
    for where, c in containers(spec):
        mine = (_security(c).get("seccompProfile") or {}).get("type")
        if (mine is not None and mine not in allowed) or (mine is None and pod not in allowed):
            out.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost (here or at pod level)")
    return out


def capabilities_restricted(spec: Spec) -> list[str]:
    def rule(c: Spec) -> str | None:
        caps = _security(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            return "capabilities.drop must include ALL"
        extra = sorted(set(caps.get("add") or []) - {"NET_BIND_SERVICE"})
        return f"capabilities.add {extra} (only NET_BIND_SERVICE)" if extra else None

    return _each_container(rule)(spec)


BASELINE: dict[str, Callable[[Spec], list[str]]] = {
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "capabilities_baseline": add_capabilities,
    "hostPathVolumes": host_path_volumes,
    "hostPorts": host_ports,
    "hostProbesAndhostLifecycle": host_probes_and_lifecycle,
    "appArmorProfile": app_armor,
    "seLinuxOptions": selinux,
    "procMount": proc_mount,
    "seccompProfile_baseline": seccomp_baseline,
    "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
}
RESTRICTED: dict[str, Callable[[Spec], list[str]]] = {
    **BASELINE,
    "restrictedVolumes": restricted_volumes,
    "allowPrivilegeEscalation": allow_privilege_escalation,
    "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user,
    "seccompProfile_restricted": seccomp_restricted,
    "capabilities_restricted": capabilities_restricted,
}


def violations(spec: Spec, level: dict[str, Callable[[Spec], list[str]]] = RESTRICTED) -> list[str]:
    """Every rule ``spec`` breaks, as ``check id: where: what``."""
    return [f"{check}: {why}" for check, rule in level.items() for why in rule(spec)]
