"""Plugin discovery: runtime registration, entry points that fail, strict mode, conflicts."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import riftco
from helpers import plugin_for
from plugin_fakes import FakeEntryPoint, install_entry_points, write_dist
from riftco import plugins
from riftco.backend import PRIMITIVE_OPS, BackendBase
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import BackendUnavailableError, PluginError
from riftco.plugins import Registry

#: In-tree GPU plugins: their import may fail on this machine, which strict mode reports first.
GPU_PLUGINS = "metal,opencl,cuda"


class Extra(CPUBackend):
    name = "extra"
    priority = 3


class FutureProtocol(CPUBackend):
    name = "future"
    protocol_version = (2, 0)


class NewerMinor(CPUBackend):
    name = "newer-minor"
    protocol_version = (1, 7)


class Incomplete(BackendBase):
    """Only a handful of primitives."""

    name = "incomplete"

    def neg(self, x):  # pragma: no cover - never called
        return x

    def exp(self, x):  # pragma: no cover
        return x


class ProbeRaises(CPUBackend):
    name = "probe-raises"

    @classmethod
    def is_available(cls):
        raise OSError("driver exploded while probing")


class DevicesRaise(CPUBackend):
    name = "devices-raise"

    @classmethod
    def devices(cls):
        raise RuntimeError("cannot enumerate devices")


@pytest.fixture
def entry_points(registry, monkeypatch):
    """Add fake entry points next to the installed ones; return a loader of a new registry."""

    def install(*fakes: FakeEntryPoint) -> Registry:
        return install_entry_points(monkeypatch, *fakes)

    return install


def broken() -> FakeEntryPoint:
    return FakeEntryPoint("broken", ImportError("libfoo.so: cannot open shared object file"))


# -- runtime registration ----------------------------------------------------------------------
def test_runtime_plugin_on_the_global_registry(registry):
    assert plugins.get_registry() is registry
    assert riftco.register(plugin_for(Extra), name="extra-plugin") == ["extra"]
    entry = registry.entry("extra")
    assert entry.available and entry.cls is Extra and entry.distribution == "<runtime>"
    x = riftco.ones(2, device="extra")
    assert type(x.backend) is Extra and x.tolist() == [1.0, 1.0]
    registry.unregister("extra")
    assert "extra" not in registry.entries
    with pytest.raises(riftco.UnknownBackendError):
        riftco.device("extra")


class ExtraTwo(CPUBackend):
    name = "extra-two"


def test_unregistering_one_backend_keeps_the_plugins_other_backend():
    reg = Registry(load_entry_points=False)
    plugin = plugin_for(Extra, ExtraTwo)
    assert reg.register(plugin, name="two-backends") == ["extra", "extra-two"]
    reg.unregister("extra")
    assert "extra" not in reg.entries and reg.pm.has_plugin("two-backends")
    assert reg.instance("extra-two").name == "extra-two"
    with pytest.raises(PluginError, match="already registered"):
        reg.register(plugin, name="two-backends")  # still there: it provides extra-two
    reg.unregister("extra-two")
    assert not reg.pm.has_plugin("two-backends")
    assert reg.register(plugin, name="two-backends") == ["extra", "extra-two"]


def test_fresh_registry_without_entry_points():
    reg = Registry(load_entry_points=False)
    assert reg.entries == {}
    assert reg.register(plugin_for(Extra), distribution=("my-dist", "1.0")) == ["extra"]
    assert reg.entry("extra").distribution == "my-dist" and reg.entry("extra").dist_version == "1.0"
    assert reg.auto()[0] == "extra"
    assert reg.instance("extra") is reg.instance("extra", 0)
    assert plugins.get_registry().entries.get("extra") is None  # the global one is untouched


def test_registry_reset_restores(registry):
    riftco.register(plugin_for(Extra))
    fresh = plugins.reset_registry()
    assert fresh is plugins.get_registry() and "extra" not in fresh.entries
    assert fresh.entry("cpu").available


def test_in_tree_backend_satisfies_protocol():
    assert isinstance(CPUBackend(), riftco.Backend)
    assert plugins.get_registry().entry("cpu").protocol_version == riftco.PROTOCOL_VERSION


# -- failing plugins ---------------------------------------------------------------------------
def test_plugin_failing_import_is_listed_unavailable(entry_points):
    reg = entry_points(broken())
    entry = reg.entry("broken")
    assert not entry.available and entry.cls is None
    assert "failed to import" in entry.reason
    assert "ImportError: libfoo.so: cannot open shared object file" in entry.reason
    assert entry.distribution == "fake-dist" and entry.dist_version == "9.9"
    assert "broken" in reg.failed_plugins
    with pytest.raises(BackendUnavailableError, match=r"'broken' is unavailable: .*libfoo\.so"):
        riftco.device("broken")
    assert riftco.ones(1).tolist() == [1.0]  # everything else still works


def test_strict_mode_raises_plugin_error(entry_points, monkeypatch):
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    monkeypatch.setenv("RIFTCO_DISABLE_PLUGINS", GPU_PLUGINS)  # may be half-installed here
    with pytest.raises(PluginError, match=r"'broken'.*libfoo\.so.*RIFTCO_STRICT_PLUGINS=1") as info:
        entry_points(broken())
    assert isinstance(info.value.__cause__, ImportError)


@pytest.mark.parametrize("value", ["0", "false", ""])
def test_strict_mode_off_values(entry_points, monkeypatch, value):
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", value)
    assert not entry_points(broken()).entry("broken").available


def test_disable_plugins_blocks_by_name(entry_points, monkeypatch):
    monkeypatch.setenv("RIFTCO_DISABLE_PLUGINS", " broken , other")
    reg = entry_points(broken(), FakeEntryPoint("extra", plugin_for(Extra)))
    assert "broken" not in reg.entries and "broken" not in reg.failed_plugins
    assert reg.entry("extra").available and reg.entry("cpu").available
    monkeypatch.setenv("RIFTCO_DISABLE_PLUGINS", "cpu")
    reg = entry_points()
    with pytest.raises(riftco.UnknownBackendError, match="unknown backend 'cpu'"):
        reg.entry("cpu")


def test_hook_that_raises_is_listed_unavailable(registry, monkeypatch):
    class Bad:
        @riftco.hookimpl
        def riftco_backends(self):
            raise RuntimeError("hook went wrong")

    assert registry.register(Bad(), name="bad-hook") == []
    entry = registry.entry("bad-hook")
    assert not entry.available and "RuntimeError: hook went wrong" in entry.reason
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="hook went wrong"):
        registry.register(Bad(), name="bad-hook-2")


def test_probe_that_raises_is_listed_unavailable(registry, monkeypatch):
    registry.register(plugin_for(ProbeRaises))
    entry = registry.entry("probe-raises")
    assert not entry.available and "OSError: driver exploded while probing" in entry.reason
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    registry.unregister("probe-raises")
    assert registry.register(plugin_for(ProbeRaises)) == ["probe-raises"]  # probing is lazy
    with pytest.raises(PluginError, match=r"'probe-raises'.*is_available\(\) raised OSError"):
        registry.entry("probe-raises").available  # noqa: B018 - strict: the probe's fault raises
    assert registry.entry("cpu").available  # an honest probe never raises, strict or not


def test_devices_that_raise_mark_unavailable(registry):
    registry.register(plugin_for(DevicesRaise))
    entry = registry.entry("devices-raise")
    assert entry.devices() == [] and not entry.available
    assert "cannot enumerate devices" in entry.reason
    assert entry.as_dict()["available"] is False


# -- malformed backends ----------------------------------------------------------------------
class OtherCPU(CPUBackend):
    name = "dup"


class YetAnother(CPUBackend):
    name = "dup"


def test_duplicate_names_from_entry_points_name_both_distributions(entry_points, monkeypatch):
    fakes = (
        FakeEntryPoint("second", plugin_for(YetAnother), ("beta-dist", "2.0")),
        FakeEntryPoint("first", plugin_for(OtherCPU), ("alpha-dist", "1.0")),
    )
    reg = entry_points(*fakes)
    assert reg.entry("dup").cls is OtherCPU  # load order is by distribution: alpha first
    loser = reg.entry("second")
    assert not loser.available and loser.cls is None
    message = reg.failed_plugins["second"]
    assert loser.reason == message and "two backends are named 'dup'" in message
    assert "'alpha-dist'" in message and "'beta-dist'" in message
    assert "OtherCPU" in message and "YetAnother" in message
    assert "RIFTCO_DISABLE_PLUGINS=second" in message
    assert reg.entry("cpu").available
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    monkeypatch.setenv("RIFTCO_DISABLE_PLUGINS", GPU_PLUGINS)
    with pytest.raises(PluginError, match=r"plugin 'second'.*two backends are named 'dup'"):
        entry_points(*fakes)


def test_duplicate_runtime_name_is_refused_and_rolled_back(registry, monkeypatch):
    class FakeCPU(CPUBackend):
        name = "cpu"

    bad = plugin_for(Extra, FakeCPU)
    assert registry.register(bad, name="mine", distribution=("my-dist", "0")) == []
    assert "extra" not in registry.entries  # nothing half-registered
    assert registry.entry("cpu").cls is CPUBackend
    assert re.search(r"'cpu'.*distribution 'riftco'.*'my-dist'", registry.failed_plugins["mine"])
    assert not registry.pm.has_plugin("mine")
    assert registry.register(plugin_for(Extra), name="mine") == ["extra"]  # name is free again
    assert "mine" not in registry.failed_plugins and "mine" not in registry.entries
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"'cpu'.*distribution 'riftco'.*'my-dist'"):
        registry.register(plugin_for(FakeCPU), name="mine-2", distribution=("my-dist", "0"))


def test_registering_one_plugin_twice_is_a_caller_error(registry):
    plugin = plugin_for(Extra)
    registry.register(plugin, name="once")
    with pytest.raises(PluginError, match="'again' is already registered"):
        registry.register(plugin, name="again")
    with pytest.raises(PluginError, match="'once' is already registered"):
        registry.register(plugin_for(Extra), name="once")


def test_protocol_major_mismatch_names_both_versions(registry, monkeypatch):
    registry.register(plugin_for(FutureProtocol, NewerMinor))
    entry = registry.entry("future")
    assert not entry.available
    major, minor = riftco.PROTOCOL_VERSION
    assert "protocol 2.0" in entry.reason and f"protocol {major}.{minor}" in entry.reason
    with pytest.raises(BackendUnavailableError, match="protocol 2.0"):
        riftco.device("future")
    assert registry.entry("newer-minor").available  # minor versions are compatible
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    with pytest.raises(
        PluginError, match=rf"protocol 2\.0 but riftco speaks protocol {major}\.{minor}"
    ):
        Registry(load_entry_points=False).register(plugin_for(FutureProtocol))


def test_missing_primitives_are_listed(registry):
    registry.register(plugin_for(Incomplete))
    entry = registry.entry("incomplete")
    assert not entry.available
    missing = set(PRIMITIVE_OPS) - {"neg", "exp"}
    assert all(op in entry.reason for op in missing) and "lacks required methods" in entry.reason
    assert "neg," not in entry.reason


def test_backend_without_a_name_is_refused(registry, monkeypatch):
    class Nameless(CPUBackend):
        name = ""

    assert registry.register(plugin_for(Nameless), name="nameless") == []
    entry = registry.entry("nameless")
    assert not entry.available and "has no string 'name'" in entry.reason
    assert not registry.pm.has_plugin("nameless")
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="plugin 'nameless-2'.*has no string 'name'"):
        registry.register(plugin_for(Nameless), name="nameless-2")


# -- installed entry points, for real ------------------------------------------------------------
BROKEN_MODULE = """
    raise ImportError("this plugin's native library is missing")
"""
GOOD_MODULE = """
    import riftco
    from riftco.backends.cpu.backend import CPUBackend

    class Third(CPUBackend):
        name = "third"
        priority = 7

    @riftco.hookimpl
    def riftco_backends():
        return [Third]
"""


def test_installed_entry_points_load(registry, tmp_path, monkeypatch):
    write_dist(tmp_path, "riftco_third_party", "riftco_test_third", GOOD_MODULE)
    write_dist(tmp_path, "riftco_broken_party", "riftco_test_broken", BROKEN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = plugins.reset_registry()
    third = reg.entry("third")
    assert third.available and third.distribution == "riftco_third_party"
    assert third.dist_version == "1.2.3" and reg.auto()[0] == "third"
    bad = reg.entry("riftco_test_broken")
    assert not bad.available and "native library is missing" in bad.reason
    monkeypatch.delitem(sys.modules, "riftco_test_third", raising=False)


def test_import_riftco_survives_a_broken_plugin(tmp_path):
    write_dist(tmp_path, "riftco_broken_party", "riftco_test_broken", BROKEN_MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    env["PYTHONPATH"] = str(tmp_path)
    script = (
        "import riftco, riftco.cli; print(riftco.ones(2).tolist()); "
        "raise SystemExit(riftco.cli.main(['backends']))"
    )
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "[1.0, 1.0]" in run.stdout
    assert "riftco_test_broken  [unavailable:" in run.stdout
    assert "native library is missing" in run.stdout
    env["RIFTCO_STRICT_PLUGINS"] = "1"
    env["RIFTCO_DISABLE_PLUGINS"] = GPU_PLUGINS
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "PluginError" in run.stderr
    assert "native library is missing" in run.stderr
