"""Where a job may run beyond resources: node taints and job tolerations, node affinity terms.

These are Kubernetes' rules, as typed data with their matching functions, so
that the scheduling plugins (and a simulated cluster with tainted or labelled
nodes) apply them exactly as kube-scheduler does. Each function cites the
upstream code it follows; docs/kubernetes.md lists what differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: tuple[str, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SELECTOR_OPERATORS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
"""The taint a cordoned node stands for: a job tolerating it may use a cordoned node (kube-scheduler's
NodeUnschedulable plugin)."""
NAME_FIELD = "metadata.name"
"""The one node field a ``matchFields`` requirement may name."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint: jobs that do not tolerate it stay off (NoSchedule, NoExecute) or avoid it (Prefer)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A job's toleration of taints; empty ``key`` with ``Exists`` tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """As ``Toleration.ToleratesTaint`` (k8s.io/api core/v1 toleration.go).

        An empty effect matches every effect and an empty key every key;
        ``Exists`` matches any value, ``Equal`` (or no operator) the same
        value; ``Lt``/``Gt`` compare integer values (taint below/above the
        toleration's; not integers: no match). Other operators match nothing.
        """
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator == "Exists":
            return True
        if self.operator in ("Lt", "Gt"):
            mine, theirs = _int64(self.value), _int64(taint.value)
            if mine is None or theirs is None:
                return False
            return theirs < mine if self.operator == "Lt" else theirs > mine
        return False


def tolerated(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    """True when any of ``tolerations`` tolerates ``taint`` (``TolerationsTolerateTaint``)."""
    return any(t.tolerates(taint) for t in tolerations)


def _int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: a base-10 integer with an optional sign, in int64 range."""
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: ``key`` ``operator`` ``values`` (a ``matchExpressions`` entry)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def problem(self) -> str | None:
        """Why the requirement is invalid (apimachinery ``labels.NewRequirement``), or None."""
        if self.operator not in SELECTOR_OPERATORS:
            return f"operator {self.operator!r} is not one of {', '.join(SELECTOR_OPERATORS)}"
        if self.operator in ("In", "NotIn") and not self.values:
            return f"{self.operator} needs at least one value"
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            return f"{self.operator} takes no values"
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or _int64(self.values[0]) is None):
            return f"{self.operator} needs exactly one integer value"
        return None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """As apimachinery's ``labels.Requirement.Matches``; an invalid requirement matches nothing.

        ``NotIn`` and ``DoesNotExist`` match a node without the label; ``Gt``
        and ``Lt`` need the label and an integer value.
        """
        if self.problem() is not None:
            return False
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        mine, bound = _int64(value) if present else None, _int64(self.values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if self.operator == "Gt" else mine < bound


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A ``nodeSelectorTerm``: its label expressions and field expressions, all ANDed."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    """Only ``metadata.name`` with ``In`` or ``NotIn`` and one value is valid, as upstream."""

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """As component-helpers ``nodeSelectorTerm.match``: an empty or invalid term matches nothing."""
        if not self.expressions and not self.fields:
            return False
        if not all(r.matches(labels) for r in self.expressions):
            return False
        return all(_field_matches(r, node_name) for r in self.fields)


def _field_matches(requirement: Requirement, node_name: str) -> bool:
    if requirement.operator not in ("In", "NotIn") or len(requirement.values) != 1:
        return False  # a parse error upstream: the term matches no node
    if requirement.key != NAME_FIELD:
        return requirement.operator == "NotIn"  # the node has no such field: "!=" holds, "=" does not
    return (node_name == requirement.values[0]) == (requirement.operator == "In")


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    """A ``preferredSchedulingTerm``: nodes matching ``term`` gain ``weight`` (1-100) in the score."""

    weight: int
    term: SelectorTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """A job's node affinity: ``required`` terms (ORed; None: no requirement) and preferred terms."""

    required: tuple[SelectorTerm, ...] | None = None
    preferred: tuple[PreferredTerm, ...] = ()

    def allows(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """True when no terms are required or any required term matches (``NodeSelector.Match``)."""
        if self.required is None:
            return True
        return any(term.matches(node_name, labels) for term in self.required)

    def preference(self, node_name: str, labels: Mapping[str, str]) -> int:
        """Sum of the weights of the preferred terms the node matches (``PreferredSchedulingTerms.Score``)."""
        return sum(p.weight for p in self.preferred if p.weight and p.term.matches(node_name, labels))
