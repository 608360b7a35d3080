"""What ``loadmaster simulate`` imports before it simulates: only what every run needs.

The plugin registry and the trace formats name their modules and import one when it is first used
(``scheduling/registry.py``, ``traces/formats.py``); these tests check that the lazy tables say
exactly what the modules hold, and that importing the command leaves the rest unimported.
"""

from __future__ import annotations

import json
import subprocess
import sys

from loadmaster.scheduling.plugins.admission import ADMISSION_PLUGINS
from loadmaster.scheduling.plugins.baselines import BASELINE_PLUGINS
from loadmaster.scheduling.plugins.las import LAS_PLUGINS
from loadmaster.scheduling.plugins.sharing import SHARING_PLUGINS
from loadmaster.scheduling.registry import PLUGIN_CLASSES, PLUGINS
from loadmaster.traces import FORMATS
from loadmaster.traces.formats import _Reader


def test_the_registry_holds_each_fragment_in_order_and_each_plugin_under_its_own_name() -> None:
    fragments = {**BASELINE_PLUGINS, **ADMISSION_PLUGINS, **SHARING_PLUGINS, **LAS_PLUGINS}
    names = list(PLUGINS)
    assert names[: len(fragments)] == list(fragments)
    assert len(names) == len(set(names)) == len(PLUGIN_CLASSES)
    for name in names:
        cls = PLUGINS[name]
        assert cls.name == name
        assert fragments.get(name, cls) is cls


def test_an_unknown_plugin_is_absent_without_an_import() -> None:
    assert "no-such-plugin" not in PLUGINS
    assert PLUGINS.get("no-such-plugin") is None


def test_each_format_reads_with_the_reader_of_its_module() -> None:
    modules = {
        "swf": "swf",
        "sacct": "sacct",
        "csv": "generic",
        "openb": "openb",
        "pai": "pai",
        "philly": "philly",
        "helios": "helios",
        "tiresias": "tiresias",
        "gavel": "gavel",
        "pollux": "pollux",
    }
    assert set(FORMATS) == set(modules)
    for name, fmt in FORMATS.items():
        reader = fmt.read
        assert isinstance(reader, _Reader)
        assert reader.module == f"loadmaster.traces.{modules[name]}"
        assert callable(reader.resolve())


def _imported_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_simulate_leaves_plugins_readers_and_parquet_unimported() -> None:
    loaded = _imported_after("import loadmaster.cli.simulate")
    assert not [m for m in loaded if m.startswith("loadmaster.scheduling.plugins.")]
    readers = ("swf", "sacct", "generic", "openb", "pai", "philly", "helios", "tiresias", "gavel", "pollux")
    assert not [m for m in loaded if m.removeprefix("loadmaster.traces.") in readers]
    assert "pyarrow.parquet" not in loaded
    assert "gzip" not in loaded


def test_building_the_fifo_profile_imports_only_the_plugins_of_the_builtin_profiles() -> None:
    loaded = _imported_after("from loadmaster.config import load_profiles\nload_profiles('builtin')")
    assert "loadmaster.scheduling.plugins.fifo" in loaded
    assert "loadmaster.scheduling.plugins.sharing" not in loaded


def test_selecting_one_builtin_profile_imports_only_its_own_plugins() -> None:
    loaded = _imported_after(
        "from loadmaster.config import load_selected\nload_selected(['fifo'], '--profiles')"
    )
    plugins = {
        m.removeprefix("loadmaster.scheduling.plugins.")
        for m in loaded
        if m.startswith("loadmaster.scheduling.plugins.")
    }
    assert plugins == {"fifo", "gang", "firstfit"}  # the profile's: fifo, gang, first-fit
