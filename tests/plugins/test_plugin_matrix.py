"""One broken plugin at a time, every way a plugin can break: the rest of riftco is unaffected.

Each case installs one broken plugin through an entry point next to the real ones (the way
third-party plugins arrive) and checks what issue 12 asks: cpu still works and asking
for it probes nothing else, ``riftco backends`` and ``--json`` list every backend with the
broken one unavailable and the reason, ``auto`` picks what it would pick without the
broken plugin and says why it skipped it, and strict mode raises a PluginError naming it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
import riftco
from plugin_fakes import (
    FakeEntryPoint,
    install_entry_points,
    installed_plugins_but,
    use_entry_points,
    write_dist,
)
from riftco import plugins
from riftco.backend import PRIMITIVE_OPS, PROTOCOL_VERSION, Capabilities, DeviceInfo
from riftco.backends.cpu.backend import CPUBackend
from riftco.cli import main
from riftco.errors import BackendUnavailableError, PluginError, RiftcoError
from riftco.hookspecs import hookimpl

HANG = 0.5  # RIFTCO_PROBE_TIMEOUT for the hanging cases, seconds
RELEASE = threading.Event()  # hung probes wait on this; every test releases them at its end
PROBED: list[str] = []  # names of the broken backends whose probes ran


@pytest.fixture(autouse=True)
def _release_hung_probes():
    RELEASE.clear()
    PROBED.clear()
    yield
    RELEASE.set()


@pytest.fixture(scope="module", autouse=True)
def _warm_in_tree_probes():
    """Probe the installed backends once, so no slow first probe meets the short limit."""
    for entry in plugins.Registry().entries.values():
        entry.probe(strict=False)


# -- ways to break ------------------------------------------------------------------------------
def probe(result: Any = None, raises: BaseException | None = None, hang: bool = False) -> Any:
    """A classmethod probe that records the call, then hangs, raises or answers ``result``."""

    def run(cls: type) -> Any:
        PROBED.append(cls.name)
        if hang:
            RELEASE.wait(120)
        if raises is not None:
            raise raises
        return result

    return classmethod(run)


def backend(name: str, **members: Any) -> type:
    """A working cpu backend named ``name`` that ``auto`` would prefer, with ``members`` broken."""
    return type(f"Broken_{name.replace('-', '_')}", (CPUBackend,), {
        "name": name, "priority": 1000, **members
    })  # fmt: skip


def hook(answer: Any) -> Any:
    class Plugin:
        @hookimpl
        def riftco_backends(self) -> Any:
            return answer

    return Plugin()


def hook_raising(exc: BaseException) -> Any:
    class Plugin:
        @hookimpl
        def riftco_backends(self) -> Any:
            raise exc

    return Plugin()


class MisspelledHook:
    @hookimpl
    def riftco_backend(self) -> list[type]:  # one letter short of riftco_backends
        return [backend("bk-misspelled")]


class WrongHookSignature:
    @hookimpl
    def riftco_backends(self, config: Any) -> list[type]:  # the spec takes no arguments
        return [backend("bk-signature")]


class Structural:
    """A backend that implements the protocol without subclassing BackendBase."""

    name = "bk-structural"
    priority = 1000
    protocol_version = riftco.PROTOCOL_VERSION
    dtypes = CPUBackend.dtypes
    accepts_strided = True

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo(0, "structural device", ("float32",))]

    @classmethod
    def capabilities(cls) -> Capabilities:
        return Capabilities(frozenset(cls.dtypes), frozenset(), True)


for _op in PRIMITIVE_OPS:
    setattr(Structural, _op, lambda self, *args, **kwargs: None)

StructuralNoCapabilities = type(
    "StructuralNoCapabilities", (), {k: v for k, v in vars(Structural).items() if k not in (
        "capabilities", "__dict__", "__weakref__")} | {"name": "bk-no-caps"}
)  # fmt: skip


def failing_init(exc: BaseException) -> Any:
    def __init__(self: Any, device_index: int = 0) -> None:
        raise exc

    return __init__


@dataclass(frozen=True)
class Case:
    id: str
    plugin: Any  # what the entry point's load() returns, or the exception it raises
    listed: str  # the name `riftco backends` lists it under: a backend's, else the plugin's
    reason: str  # regex for the reason, in the listing and in auto's explanation
    starts: bool = False  # it probes fine, only starting it fails: listed as available
    hangs: bool = False

    @property
    def plugin_name(self) -> str:
        return f"mx-{self.id}"


def _plugin(case_id: str) -> str:
    return f"mx-{case_id}"


CASES = [
    # the plugin's module or hook
    Case("import-error", ImportError("libfoo.so: cannot open shared object file"),
         _plugin("import-error"), r"failed to import: ImportError: libfoo\.so"),
    Case("import-sys-exit", SystemExit(3), _plugin("import-sys-exit"),
         r"failed to import: SystemExit: 3 \(the plugin called sys\.exit\(\)\)"),
    Case("hook-raises", hook_raising(RuntimeError("no config file")), _plugin("hook-raises"),
         r"hook riftco_backends raised RuntimeError: no config file"),
    Case("hook-sys-exit", hook_raising(SystemExit(0)), _plugin("hook-sys-exit"),
         r"hook riftco_backends raised SystemExit: 0 \(the plugin called sys\.exit\(\)\)"),
    Case("misspelled-hook", MisspelledHook(), _plugin("misspelled-hook"),
         r"unknown hook\(s\) 'riftco_backend' \(did you mean 'riftco_backends'\?\)"),
    Case("hook-signature", WrongHookSignature(), _plugin("hook-signature"),
         r"does not fit riftco's hooks.*config"),
    Case("no-hook", object(), _plugin("no-hook"), r"implements no riftco hook"),
    # garbage from the hook
    Case("hook-int", hook(42), _plugin("hook-int"),
         r"returned 42 \(int\); expected a list of backend classes"),
    Case("hook-none", hook(None), _plugin("hook-none"), r"returned None \(NoneType\); expected"),
    Case("hook-str", hook("cpu"), _plugin("hook-str"), r"returned 'cpu' \(str\); expected a list"),
    Case("hook-non-class", hook([backend("bk-fine"), "cpu"]), _plugin("hook-non-class"),
         r"returned 'cpu' \(str\) at position 1; expected a backend class"),
    Case("nameless", hook([backend("")]), _plugin("nameless"), r"has no string 'name'"),
    Case("name-with-colon", hook([backend("gpu:0")]), _plugin("name-with-colon"),
         r"named 'gpu:0'; a name may not contain ':'"),
    Case("name-auto", hook([backend("auto")]), _plugin("name-auto"), r"auto is reserved"),
    Case("same-name-twice", hook([backend("bk-twice"), backend("bk-twice")]),
         _plugin("same-name-twice"), r"returned two backends named 'bk-twice'"),
    Case("duplicate-name", hook([backend("cpu")]), _plugin("duplicate-name"),
         r"two backends are named 'cpu'.*riftco keeps the first"),
    # the backend class against the protocol
    Case("protocol-none", hook([backend("bk-proto-none", protocol_version=None)]),
         "bk-proto-none", r"protocol_version = None \(NoneType\); expected a \(major, minor\)"),
    Case("protocol-str", hook([backend("bk-proto-str", protocol_version="1.0")]),
         "bk-proto-str", r"protocol_version = '1\.0' \(str\)"),
    Case("protocol-major", hook([backend("bk-proto-2", protocol_version=(2, 0))]),
         "bk-proto-2", r"implements protocol 2\.0 but riftco speaks protocol "
         + r"\.".join(map(str, PROTOCOL_VERSION))),
    Case("priority-str", hook([backend("bk-priority", priority="high")]), "bk-priority",
         r"priority = 'high' \(str\); expected an int"),
    Case("missing-primitive", hook([backend("bk-no-matmul", matmul=None)]), "bk-no-matmul",
         r"lacks required methods: matmul"),
    Case("structural-incomplete", hook([StructuralNoCapabilities]), "bk-no-caps",
         r"lacks required methods: capabilities"),
    # probes
    Case("available-raises", hook([backend("bk-avail-raise", is_available=probe(
        raises=OSError("driver exploded")))]), "bk-avail-raise",
         r"is_available\(\) raised OSError: driver exploded"),
    Case("available-sys-exit", hook([backend("bk-avail-exit", is_available=probe(
        raises=SystemExit(2)))]), "bk-avail-exit", r"is_available\(\) raised SystemExit: 2"),
    Case("available-garbage", hook([backend("bk-avail-true", is_available=probe(True))]),
         "bk-avail-true", r"is_available\(\) returned True \(bool\); expected \(bool, str\)"),
    Case("available-hangs", hook([backend("bk-avail-hang", is_available=probe(
        (True, ""), hang=True))]), "bk-avail-hang",
         rf"is_available\(\) timed out after {HANG:g} s", hangs=True),
    Case("devices-hang", hook([backend("bk-dev-hang", devices=probe([], hang=True))]),
         "bk-dev-hang", rf"devices\(\) timed out after {HANG:g} s", hangs=True),
    Case("devices-raise", hook([backend("bk-dev-raise", devices=probe(
        raises=RuntimeError("cannot enumerate")))]), "bk-dev-raise",
         r"devices\(\) raised RuntimeError: cannot enumerate"),
    Case("devices-not-list", hook([backend("bk-dev-str", devices=probe("gpu0"))]),
         "bk-dev-str", r"devices\(\) returned 'gpu0' \(str\); expected a list"),
    Case("devices-not-info", hook([backend("bk-dev-items", devices=probe(["gpu0"]))]),
         "bk-dev-items", r"devices\(\) returned 'gpu0' \(str\) at position 0"),
    Case("devices-bad-index", hook([backend("bk-dev-index", devices=probe(
        [DeviceInfo(3, "gpu")]))]), "bk-dev-index", r"lists index 3 at position 0"),
    Case("devices-bad-details", hook([backend("bk-dev-details", devices=probe(
        [DeviceInfo(0, "gpu", ("float32",), {"handle": object()})]))]), "bk-dev-details",
         r"has details .*expected a JSON-serialisable dict"),
    Case("capabilities-raise", hook([backend("bk-caps-raise", capabilities=probe(
        raises=KeyError("fp16")))]), "bk-caps-raise", r"capabilities\(\) raised KeyError"),
    Case("capabilities-hang", hook([backend("bk-caps-hang", capabilities=probe(
        hang=True))]), "bk-caps-hang", rf"capabilities\(\) timed out after {HANG:g} s",
         hangs=True),
    Case("capabilities-garbage", hook([backend("bk-caps-dict", capabilities=probe(
        {"fused": []}))]), "bk-caps-dict",
         r"capabilities\(\) returned .*expected riftco\.Capabilities"),
    # starting it
    Case("constructor-raises", hook([backend("bk-ctor", __init__=failing_init(
        RuntimeError("CL_OUT_OF_RESOURCES")))]), "bk-ctor",
         r"failed to start on device 0: RuntimeError: CL_OUT_OF_RESOURCES", starts=True),
    Case("constructor-sys-exit", hook([backend("bk-ctor-exit", __init__=failing_init(
        SystemExit(1)))]), "bk-ctor-exit", r"failed to start on device 0: SystemExit: 1",
         starts=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_broken_plugin_leaves_the_rest_working(case, registry, monkeypatch, capsys):
    if case.hangs:
        monkeypatch.setenv("RIFTCO_PROBE_TIMEOUT", str(HANG))
    expected = set(registry.entries)  # the fixture's registry: everything installed, intact
    best = registry.auto()[0]
    reg = install_entry_points(monkeypatch, FakeEntryPoint(case.plugin_name, case.plugin))

    # cpu works, and asking for it probes nothing else
    assert riftco.ones(2, device="cpu").tolist() == [1.0, 1.0]
    assert riftco.device("cpu").backend is reg.instance("cpu")
    assert PROBED == []

    # riftco backends --json and riftco backends list everything, the broken one with why
    assert main(["backends", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["backends"]}
    assert expected | {case.listed} <= set(rows)
    assert all(rows[name]["available"] == registry.entries[name].available for name in expected)
    row = rows[case.listed]
    if case.starts:
        assert row["available"] is True  # listing probes; it does not start backends
    else:
        assert row["available"] is False and re.search(case.reason, row["reason"]), row
    assert main(["backends"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert all(any(line.startswith(f"{name}  [") for line in lines) for name in expected)
    if not case.starts:
        line = next(line for line in lines if line.startswith(f"{case.listed}  ["))
        assert line.startswith(f"{case.listed}  [unavailable: ") and re.search(case.reason, line)

    # auto: what it picks without the broken plugin, naming it and why
    name, why = reg.auto()
    assert name == best, why
    assert case.listed in why and re.search(case.reason, why), why
    assert riftco.device("auto") == riftco.Device(best, 0)
    if case.starts:
        with pytest.raises(BackendUnavailableError, match=case.reason):
            riftco.device(case.listed)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_strict_mode_raises_plugin_error_naming_the_plugin(case, registry, monkeypatch, capsys):
    if case.hangs:
        monkeypatch.setenv("RIFTCO_PROBE_TIMEOUT", str(HANG))
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "1")
    monkeypatch.setenv("RIFTCO_DISABLE_PLUGINS", installed_plugins_but("cpu"))
    use_entry_points(monkeypatch, FakeEntryPoint(case.plugin_name, case.plugin))
    plugins._registry = None  # loaded on first use, as in a new process
    pattern = rf"^\[plugins\] .*'{re.escape(case.plugin_name)}'.*{case.reason}"
    if not case.starts:
        assert main(["backends"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("riftco backends: error: PluginError: ")
        assert re.search(pattern, err.removeprefix("riftco backends: error: PluginError: "))
    with pytest.raises(PluginError, match=pattern):
        plugins.get_registry().auto()


# -- beyond the matrix -------------------------------------------------------------------------
def test_structural_backend_without_backend_base_is_accepted(registry, monkeypatch, capsys):
    assert not issubclass(Structural, riftco.BackendBase)
    install_entry_points(monkeypatch, FakeEntryPoint("mx-structural", hook([Structural])))
    entry = plugins.get_registry().entry("bk-structural")
    assert entry.available and entry.reason == ""
    assert entry.devices() == [DeviceInfo(0, "structural device", ("float32",))]
    assert plugins.get_registry().auto()[0] == "bk-structural"
    assert main(["backends", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["backends"]}
    assert rows["bk-structural"]["capabilities"]["accepts_strided"] is True
    assert rows["bk-structural"]["devices"][0]["name"] == "structural device"


def test_a_hanging_probe_does_not_block_other_backends(registry, monkeypatch):
    monkeypatch.setenv("RIFTCO_PROBE_TIMEOUT", "60")
    hanging = backend("bk-slow", is_available=probe((True, ""), hang=True))
    registry.register(hook([hanging]), name="slow")
    asker = threading.Thread(target=lambda: registry.instance("bk-slow"), daemon=True)
    asker.start()
    deadline = time.monotonic() + 30
    while "bk-slow" not in PROBED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert PROBED == ["bk-slow"]  # the other thread is inside the hanging probe now
    assert riftco.ones(3, device="cpu").tolist() == [1.0, 1.0, 1.0]
    assert registry.entry("cpu").as_dict()["available"] is True
    assert asker.is_alive()  # cpu answered while bk-slow's probe was still hanging
    RELEASE.set()
    asker.join(30)
    assert not asker.is_alive() and registry.entry("bk-slow").available


def test_probe_results_are_cached(registry):
    counted = backend("bk-counted", is_available=probe((True, "")))
    registry.register(hook([counted]), name="counted")
    entry = registry.entry("bk-counted")
    assert PROBED == []  # registering probes nothing
    for _ in range(3):
        assert entry.available and entry.reason == "" and len(entry.devices()) == 1
    registry.auto()
    assert PROBED == ["bk-counted"]


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan"])
def test_bad_probe_timeout_is_a_clear_error(registry, monkeypatch, value):
    monkeypatch.setenv("RIFTCO_PROBE_TIMEOUT", value)
    with pytest.raises(RiftcoError, match=rf"^\[plugins\] RIFTCO_PROBE_TIMEOUT='{value}'; "):
        registry.entry("cpu").available  # noqa: B018


def test_auto_with_every_backend_broken_lists_each_reason(monkeypatch):
    reg = plugins.Registry(load_entry_points=False)
    reg.register(hook([backend("bk-a", is_available=probe((False, "no card")))]), name="a")
    reg.register(hook([backend("bk-b", __init__=failing_init(OSError("busy")))]), name="b")
    reg.register(hook(7), name="c")
    with pytest.raises(BackendUnavailableError) as info:
        reg.auto()
    message = str(info.value)
    assert message.startswith("[device] no backend is available for 'auto'; skipped: ")
    assert "bk-a (no card)" in message
    assert "bk-b (failed to start on device 0: OSError: busy)" in message
    assert "plugin 'c': hook riftco_backends returned 7 (int)" in message


def test_a_plugin_with_a_taken_entry_point_name_is_listed(registry, monkeypatch, capsys):
    impostor = FakeEntryPoint("cpu", hook([backend("cpu")]), ("evil-dist", "6.6"))
    reg = install_entry_points(monkeypatch, impostor)
    assert reg.entry("cpu").cls is CPUBackend and riftco.ones(1).tolist() == [1.0]
    reason = reg.failed_plugins["cpu"]
    assert "from distribution 'evil-dist'" in reason and "distribution 'riftco'" in reason
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "cpu  [available]" in out
    assert f"plugin cpu  [failed: {reason}]" in out  # its name belongs to riftco's cpu
    why = reg.auto()[1]
    assert "plugins that failed to load: plugin 'cpu'" in why and "'evil-dist'" in why


# -- installed plugins in a new process ----------------------------------------------------------
HANGING_MODULE = """
    import time
    import riftco
    from riftco.backends.cpu.backend import CPUBackend

    class Hang(CPUBackend):
        name = "hang"
        priority = 1000

        @classmethod
        def is_available(cls):
            time.sleep(3600)
            return True, ""

    @riftco.hookimpl
    def riftco_backends():
        return [Hang]
"""
EXITING_MODULE = """
    import sys
    sys.exit("plugin gave up")
"""
CTOR_MODULE = """
    import riftco
    from riftco.backends.cpu.backend import CPUBackend

    class Ctor(CPUBackend):
        name = "ctor"
        priority = 900

        def __init__(self, device_index=0):
            raise RuntimeError("device lost")

    @riftco.hookimpl
    def riftco_backends():
        return [Ctor]
"""
SCRIPT = """
import time, riftco, riftco.cli
from riftco.train.cli import resolve_backend
t = time.perf_counter()
print("cpu", riftco.ones(2, device="cpu").tolist(), f"{time.perf_counter() - t:.3f}")
rc = riftco.cli.main(["backends"])
print("device", resolve_backend("auto"))
raise SystemExit(rc)
"""


def test_installed_broken_plugins_in_a_new_process(tmp_path):
    write_dist(tmp_path, "riftco_mx_hang", "riftco_mx_hang", HANGING_MODULE)
    write_dist(tmp_path, "riftco_mx_exit", "riftco_mx_exit", EXITING_MODULE)
    write_dist(tmp_path, "riftco_mx_ctor", "riftco_mx_ctor", CTOR_MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    env.update(PYTHONPATH=str(tmp_path), RIFTCO_PROBE_TIMEOUT="1")
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    elapsed = time.monotonic() - start
    out = run.stdout
    assert run.returncode == 0, run.stderr
    assert "cpu [1.0, 1.0]" in out
    assert "hang  [unavailable: is_available() timed out after 1 s (RIFTCO_PROBE_TIMEOUT)]" in out
    assert (
        "riftco_mx_exit  [unavailable: plugin 'riftco_mx_exit' (riftco_mx_exit) failed to "
        "import: SystemExit: plugin gave up (the plugin called sys.exit())]" in out
    )
    assert "ctor  [available]" in out
    auto = next(line for line in out.splitlines() if line.startswith("backend: auto chose "))
    assert "skipped: hang (is_available() timed out after 1 s" in auto
    assert "ctor (failed to start on device 0: RuntimeError: device lost)" in auto
    assert "plugins that failed to load: plugin 'riftco_mx_exit'" in auto
    chosen = auto.removeprefix("backend: auto chose ").split(" ")[0]
    assert f"device {chosen}:0" in out
    assert elapsed < 120  # one 1 s timeout, and the hung thread did not hold the exit
