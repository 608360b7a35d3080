"""``loadmaster serve``: the JSON API and the GPU-tile dashboard over a live (demo) cluster."""

from loadmaster.serve.app import create_app
from loadmaster.serve.auth import Principal, Role, TokenTable
from loadmaster.serve.demo import Demo, DemoOptions, build_demo, scaled_lab
from loadmaster.serve.live import LiveSimulator

__all__ = [
    "Demo",
    "DemoOptions",
    "LiveSimulator",
    "Principal",
    "Role",
    "TokenTable",
    "build_demo",
    "create_app",
    "scaled_lab",
]
