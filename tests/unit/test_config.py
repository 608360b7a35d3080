"""Cluster, profile and workload files: good ones load; bad ones name file, line, field, what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.config import load_cluster, load_profiles, load_selected, load_workload
from loadmaster.errors import ConfigError
from loadmaster.scheduling import Profile
from loadmaster.workload import offered_load

GOOD_CLUSTER = """\
name: tiny
resource_types:
  a100:
    gpu_model: A100
    gpu_memory_mib: 81920
    cpu_milli_per_gpu: 8000
    memory_mib_per_gpu: 65536
pools:
  training:
    node_groups:
      - name: gpu
        count: 4
        resource_type: a100
        gpus: 8
        racks: 2
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_builtin_clusters_match_their_descriptions() -> None:
    lab = load_cluster("lab")
    assert lab.nodes.pools == ("training", "interactive")
    assert lab.nodes.pool_gpus("training") == 16 * 8
    training = [n for n in lab.nodes.nodes if n.pool == "training"]
    assert {lab.nodes.resource_types[n.resource_type].interconnect for n in training} == {"infiniband"}
    large = load_cluster("large")
    assert len(large.nodes) == 1000
    assert large.nodes.total_gpus == 8000


def test_node_bundles_default_to_gpus_times_per_gpu_share(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path, "c.yaml", GOOD_CLUSTER))
    node = cluster.nodes.nodes[0]
    assert (node.cpu_milli, node.memory_mib) == (8 * 8000, 8 * 65536)
    assert [n.rack for n in cluster.nodes.nodes] == ["default/gpu-r0"] * 2 + ["default/gpu-r1"] * 2


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "allowed"),
    [
        ("gpus: 8", "gpus: -1", 14, "pools.training.node_groups[0].gpus", "greater than or equal to 0"),
        ("gpus: 8", "gpus: lots", 14, "pools.training.node_groups[0].gpus", "valid integer"),
        ("resource_type: a100", "resource_type: h100", 13, "resource_type", "defined: a100"),
        ("racks: 2", "rack: 2", 15, "pools.training.node_groups[0].rack", "allowed: name, count"),
        ("count: 4", "count: 0", 12, "node_groups[0].count", "greater than or equal to 1"),
        ("name: tiny\n", "", 1, "name", "required field is missing"),
    ],
)
def test_bad_cluster_files_name_line_field_and_allowed(
    tmp_path: Path, old: str, new: str, line: int, field: str, allowed: str
) -> None:
    path = write(tmp_path, "bad.yaml", GOOD_CLUSTER.replace(old, new))
    with pytest.raises(ConfigError) as caught:
        load_cluster(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert field in message
    assert allowed in message


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "name: x\npools: [\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:3: not valid YAML"):
        load_cluster(path)


def test_unknown_cluster_name_lists_builtins() -> None:
    with pytest.raises(ConfigError, match="built-in: lab, large"):
        load_cluster("nosuch")


def test_builtin_profiles_all_load() -> None:
    profiles = load_profiles()
    shipped = {"kube-default", "fifo", "sds", "nsml", "slurm", "fair"}
    assert shipped | {"binpack", "spread", "random", "binpack-skip", "priority"} <= set(profiles)


def test_selected_builtin_profiles_are_the_full_set_s_in_the_asked_order() -> None:
    everything = load_profiles()
    chosen = load_selected(["slurm", "fifo", "slurm"], "--profiles")
    assert [_shape(p) for p in chosen] == [_shape(everything[n]) for n in ("slurm", "fifo", "slurm")]
    assert chosen[0] is chosen[2]  # built once


def _shape(profile: Profile) -> tuple[object, ...]:
    """A profile's name, actions and plugins with their settings (plugins compare by identity)."""
    return (profile.name, profile.actions, [(type(p), vars(p)) for p in profile.plugins])


def test_an_unknown_selected_profile_lists_every_profile_of_the_file() -> None:
    with pytest.raises(ConfigError, match=r"unknown profile 'nosuch'; available: kube-default, fifo, sds, "):
        load_selected(["fifo", "nosuch"], "--profiles")


def test_a_user_file_is_validated_whole_even_when_one_profile_is_chosen(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.yaml",
        "profiles:\n  good:\n    plugins: [fifo]\n"
        "  broken:\n    actions: [allocate]\n    plugins: [fifo, bogus]\n",
    )
    with pytest.raises(ConfigError, match=r"p.yaml:6: profiles.broken.plugins\[1\].*unknown plugin 'bogus'"):
        load_selected(["good"], "--profiles", str(path))


@pytest.mark.parametrize(
    ("plugins", "line", "message"),
    [
        ("[fifo, gang, bogus]", 4, "unknown plugin 'bogus'; allowed: "),
        ("[fifo, binpack, spread]", 4, "binpack + spread cannot be combined"),
        ("[{name: fifo, args: {strict: maybe}}, gang]", 4, "profiles.p.plugins[0].args.strict"),
        ("[{name: fifo, args: {stict: true}}]", 4, "arguments of fifo: strict"),
        ("[fifo, priority]", 4, "list priority first"),
        ("[fifo, gang, gang]", 4, "listed twice"),
        ("[{name: binpack, weight: -1}]", 4, "must be > 0"),
    ],
)
def test_bad_profiles_name_line_field_and_allowed(
    tmp_path: Path, plugins: str, line: int, message: str
) -> None:
    path = write(tmp_path, "p.yaml", f"profiles:\n  p:\n    actions: [allocate]\n    plugins: {plugins}\n")
    with pytest.raises(ConfigError) as caught:
        load_profiles(path)
    assert str(caught.value).startswith(f"{path}:{line}: profiles.p.")
    assert message in str(caught.value)


def test_bad_action_lists_the_allowed_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "profiles:\n  p:\n    actions: [admit, schedule]\n    plugins: [fifo]\n")
    with pytest.raises(
        ConfigError, match=r"p.yaml:3: profiles.p.actions\[1\]: unknown action 'schedule'; allowed"
    ):
        load_profiles(path)


def test_builtin_workload_reaches_its_load_on_each_pool() -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=3000)
    assert len(workload.jobs) == 3000
    for pool in cluster.nodes.pools:
        jobs = [t for t in workload.jobs if t.job.pool == pool]
        assert {t.job.queue for t in jobs} == {pool}
        assert offered_load(jobs, cluster.nodes.pool_gpus(pool)) == pytest.approx(0.85, rel=0.1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs: 10\nload: 0.5\npools: {gpu: {share: 1}}\n", "cluster lab has no pool 'gpu'; pools: training"),
        ("jobs: 10\nload: -1\npools: {training: {share: 1}}\n", "load: Input should be greater than 0"),
        ("jobs: 10\nload: 1\npools: {training: {share: 1}}\nparams: {userz: 3}\n", "params.userz: unknown"),
        ("jobs: 10\nload: 1\nkind: swf\npools: {training: {share: 1}}\n", "kind: Input should be 'lab'"),
    ],
)
def test_bad_workload_files(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "w.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_workload(path, load_cluster("lab"))
    assert str(caught.value).startswith(path)
    assert message in str(caught.value)
