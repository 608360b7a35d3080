"""What an XID code means, in a line an operator can act on.

From NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid
Catalog", Ampere and newer): the common codes of a training cluster with their description and the
catalog's immediate action, shortened. A code not listed reads "see NVIDIA's Xid catalog".
"""

from __future__ import annotations

XID_MEANINGS: dict[int, str] = {
    8: "GPU stopped processing (idle timeout): restart the application",
    13: "graphics engine exception, usually the application (bad memory access): restart it",
    31: "GPU memory page fault, usually the application's illegal address: restart it",
    43: "GPU stopped processing (a user application's fault): restart the application",
    45: "preemptive cleanup after earlier errors (processes killed): check the errors before it",
    48: "double-bit ECC error: drain the node and reset the GPU",
    61: "internal micro-controller warning: contact support if it repeats",
    62: "internal micro-controller halt: reset the GPU",
    63: "ECC page retirement or row remapping recorded: reset the GPU to apply it",
    64: "ECC page retirement or row remapping failed: reset, then service the GPU",
    74: "NVLink error: check the links, reset the GPU",
    79: "GPU has fallen off the bus: reset the GPU or reboot the node, then service it",
    92: "high single-bit ECC error rate: watch it; service if it persists",
    94: "contained ECC error: restart the affected application",
    95: "uncontained ECC error: drain the node and reset the GPU",
    119: "GSP firmware RPC timeout: reset the GPU",
    120: "GSP firmware error: reset the GPU",
}


def xid_meaning(code: float | int) -> str:
    """The meaning of an XID code ("" for 0: no error)."""
    number = int(code)
    if number == 0:
        return ""
    return XID_MEANINGS.get(number, f"XID {number}: see NVIDIA's Xid catalog")
