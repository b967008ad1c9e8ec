"""Device strings, ``auto``, the per-thread default device and RIFTCO_BACKEND."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import riftco
from helpers import add_backend, plugin_for
from riftco.backends.cpu.backend import CPUBackend
from riftco.device import parse
from riftco.errors import BackendUnavailableError, UnknownBackendError


class Fast(CPUBackend):
    name = "fast"
    priority = 50


class Faster(CPUBackend):
    """Highest priority, but unavailable: auto must skip it and say why."""

    name = "faster"
    priority = 100

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        return False, "no faster hardware in this machine"


class TwoDevices(CPUBackend):
    name = "twodev"

    @classmethod
    def devices(cls):
        return [riftco.DeviceInfo(0, "first"), riftco.DeviceInfo(1, "second")]


def test_parse_forms(registry):
    assert riftco.device("cpu") == riftco.Device("cpu", 0)
    assert riftco.device(" cpu:0 ") == riftco.Device("cpu", 0)
    assert str(riftco.device("cpu")) == "cpu:0"
    dev = riftco.Device("cpu", 0)
    assert riftco.device(dev) is dev
    assert hash(riftco.Device("cpu")) == hash(dev)


def test_device_index_selects_instance(registry):
    add_backend(registry, TwoDevices)
    d0, d1 = riftco.device("twodev:0"), riftco.device("twodev:1")
    assert d0.backend is not d1.backend and d1.backend.device_index == 1
    assert riftco.device("twodev:1").backend is d1.backend  # one instance per device
    x = riftco.zeros(2, device="twodev:1")
    assert x.device == riftco.Device("twodev", 1)
    with pytest.raises(BackendUnavailableError, match=r"has 2 device\(s\); index 2"):
        riftco.device("twodev:2")


@pytest.mark.parametrize(
    "spec,pattern",
    [("", "empty device string"), ("cpu:x", "bad device index"), ("cpu:-1", "bad device index")],
)  # noqa: E501
def test_bad_device_strings(registry, spec, pattern):
    with pytest.raises(UnknownBackendError, match=r"^\[device\] " + pattern):
        riftco.device(spec)


def test_unknown_backend_did_you_mean(registry):
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'cpuu'; did you mean 'cpu'\?"):
        riftco.device("cpuu")
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'zzz' \(registered: .*cpu"):
        riftco.device("zzz")
    assert isinstance(UnknownBackendError("x"), riftco.RiftcoError)


def test_cpu_index_out_of_range(registry):
    with pytest.raises(BackendUnavailableError, match=r"'cpu' has 1 device\(s\); index 3"):
        riftco.device("cpu:3")


def test_unavailable_backend_raises_with_reason_never_falls_back(registry):
    registry.register(plugin_for(Faster), name="faster-plugin")
    assert "faster" in registry.entries and not registry.entries["faster"].available
    with pytest.raises(BackendUnavailableError, match="no faster hardware in this machine"):
        riftco.device("faster")
    with pytest.raises(BackendUnavailableError, match="no faster hardware"):
        riftco.zeros(3, device="faster")
    with pytest.raises(BackendUnavailableError, match="no faster hardware"):
        with riftco.default_device("faster"):
            pass  # pragma: no cover


def test_auto_picks_highest_priority_available(registry):
    usable = [e for e in registry.entries.values() if e.available and e.devices()]
    best = max(usable, key=lambda e: e.priority)  # whatever this machine offers (cpu, native...)
    assert parse("auto").name == best.name
    registry.register(plugin_for(Fast, Faster), name="speed")
    name, why = registry.auto()
    assert name == "fast"
    assert "priority (50)" in why and "faster (no faster hardware in this machine)" in why
    assert riftco.device("auto") == riftco.Device("fast", 0)


def test_auto_without_any_available_backend(registry):
    for name in list(registry.entries):
        registry.entries[name].available = False
    with pytest.raises(BackendUnavailableError, match=r"no backend is available for 'auto'"):
        riftco.device("auto")


def test_riftco_backend_env_sets_default(registry, monkeypatch):
    add_backend(registry, Fast)
    assert riftco.get_default_device() == riftco.Device("cpu", 0)
    monkeypatch.setenv("RIFTCO_BACKEND", "fast")
    assert riftco.get_default_device() == riftco.Device("fast", 0)
    assert riftco.zeros(2).device == riftco.Device("fast", 0)
    monkeypatch.setenv("RIFTCO_BACKEND", "auto")
    assert riftco.get_default_device().name == "fast"


def test_riftco_backend_env_unavailable_raises(registry, monkeypatch):
    registry.register(plugin_for(Faster), name="faster-plugin")
    monkeypatch.setenv("RIFTCO_BACKEND", "faster")
    with pytest.raises(BackendUnavailableError, match="no faster hardware"):
        riftco.zeros(2)
    monkeypatch.setenv("RIFTCO_BACKEND", "nope")
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'"):
        riftco.get_default_device()


def test_default_device_nests_and_restores(registry):
    add_backend(registry, Fast)
    with riftco.default_device("fast") as dev:
        assert dev == riftco.Device("fast", 0)
        assert riftco.tensor([1.0]).device == dev
        with riftco.default_device("cpu"):
            assert riftco.ones(1).device.name == "cpu"
        assert riftco.randn(2, seed=0).device.name == "fast"
    assert riftco.zeros(1).device.name == "cpu"
    with pytest.raises(RuntimeError):
        with riftco.default_device("fast"):
            raise RuntimeError("boom")
    assert riftco.get_default_device().name == "cpu"  # restored after an exception


def test_default_device_is_per_thread(registry):
    add_backend(registry, Fast)
    barrier = threading.Barrier(2, timeout=10)
    seen: dict[str, str] = {}

    def worker():
        barrier.wait()  # the main thread is inside its block now
        seen["worker"] = riftco.zeros(1).device.name
        with riftco.default_device("fast"):
            seen["worker_in_block"] = riftco.get_default_device().name
            barrier.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    with riftco.default_device("fast"):
        barrier.wait()
        barrier.wait()  # the worker is inside its own block now
        seen["main"] = riftco.get_default_device().name
    seen["main_after"] = riftco.get_default_device().name
    thread.join()
    assert seen == {
        "worker": "cpu",  # the main thread's block does not leak into other threads
        "worker_in_block": "fast",
        "main": "fast",
        "main_after": "cpu",
    }


def test_mixed_devices_never_move_silently(registry):
    add_backend(registry, Fast)
    a = riftco.tensor(np.ones(3))
    b = riftco.tensor(np.ones(3), device="fast")
    with pytest.raises(riftco.DeviceMismatchError, match=r"^\[add\].*cpu:0, fast:0.*\.to\(\)"):
        riftco.ops.add(a, b)
    assert (a + b.to("cpu")).tolist() == [2.0, 2.0, 2.0]
