"""A plugin whose import or ``riftco_backends`` hook never returns must not hang riftco
(issue 31: before, every riftco command hung, ``riftco.device("cpu")`` included). Both
are bounded by ``RIFTCO_PROBE_TIMEOUT`` like probes; the plugin is listed unavailable,
named, with the limit it overran."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import riftco
from plugin_fakes import FakeEntryPoint, install_entry_points, write_dist
from riftco import hookimpl
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import PluginError

SLEEPING_MODULE = """
    import time
    time.sleep(3600)  # an import that blocks (a network mount, a lock, a device driver)
"""


class SleepingImport(FakeEntryPoint):
    def load(self) -> object:
        time.sleep(3600)
        return super().load()


class Quiet(CPUBackend):
    name = "quiet"


class SleepingHook:
    @hookimpl
    def riftco_backends(self) -> list[type]:
        time.sleep(3600)
        return [Quiet]


@pytest.mark.parametrize(
    ("fake", "said"),
    [
        (SleepingImport("sleepy", object()), "plugin 'sleepy' (fake_sleepy.plugin) failed to "
         "import: its import timed out after 0.5 s (RIFTCO_PROBE_TIMEOUT)"),
        (FakeEntryPoint("sleepy", SleepingHook()), "plugin 'sleepy': hook riftco_backends "
         "timed out after 0.5 s (RIFTCO_PROBE_TIMEOUT)"),
    ],
    ids=["import", "hook"],
)  # fmt: skip
def test_a_blocking_plugin_is_refused_in_time(registry, monkeypatch, fake, said):
    monkeypatch.setenv("RIFTCO_PROBE_TIMEOUT", "0.5")
    start = time.monotonic()
    reg = install_entry_points(monkeypatch, fake)
    assert riftco.device("cpu").backend.name == "cpu"
    assert time.monotonic() - start < 10
    assert reg.failed_plugins["sleepy"] == said
    entry = reg.entry("sleepy")
    assert not entry.available and entry.reason == said
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="sleepy.*timed out after 0.5 s"):
        install_entry_points(monkeypatch, fake)


def test_a_real_plugin_module_that_blocks_on_import(tmp_path):
    """The issue's reproduction: an installed plugin whose module sleeps at import."""
    write_dist(tmp_path, "riftco_sleepy_party", "riftco_test_sleepy", SLEEPING_MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    env.update(PYTHONPATH=str(tmp_path), RIFTCO_PROBE_TIMEOUT="1")
    script = (
        "import riftco, riftco.cli; print(riftco.device('cpu')); "
        "raise SystemExit(riftco.cli.main(['backends']))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "riftco_test_sleepy  [unavailable:" in run.stdout
    assert "its import timed out after 1 s (RIFTCO_PROBE_TIMEOUT)" in run.stdout
