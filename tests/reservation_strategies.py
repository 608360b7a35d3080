"""What the reservation property tests draw from: a 4-node x 4-GPU cluster and task placements on it."""

from __future__ import annotations

from hypothesis import strategies as st

from builders import a_cluster
from loadmaster.model import TaskPlacement

NODES = a_cluster().nodes(4, gpus=4).build()

placements = st.builds(
    TaskPlacement,
    node=st.integers(0, 3),
    gpu_indices=st.lists(st.integers(0, 3), min_size=0, max_size=3, unique=True).map(tuple),
    gpu_milli=st.sampled_from([250, 500, 1000]),
    cpu_milli=st.integers(0, 3000),
    memory_mib=st.integers(0, 9000),
)
"""One task's placement on ``NODES``: whole or fractional GPUs, some CPU and memory."""
