"""The on-disk kernel cache: keyed by everything that changes a binary, atomic, checked,
and built once when several processes (or threads) miss at the same time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from riftco.kernel_host.cache import KernelCache, cache_enabled, entries_in


def _cache(tmp_path: Path, device: str = "dev A | driver 1") -> KernelCache:
    return KernelCache("test", device, root=tmp_path)


def _builder(calls: list[str], binary: bytes = b"\x7fBIN\x00", log: str = ""):
    def build() -> tuple[bytes, str]:
        calls.append("built")
        return binary, log

    return build


def test_miss_builds_and_stores_then_hits(tmp_path):
    cache, calls = _cache(tmp_path), []
    first = cache.get_or_build("src", ["-O"], "k.cl", _builder(calls, log="warning: w"))
    second = _cache(tmp_path).get_or_build("src", ["-O"], "k.cl", _builder(calls))
    assert calls == ["built"]
    assert second.binary == first.binary == b"\x7fBIN\x00"
    assert second.log == "warning: w" and second.program == "k.cl" and second.options == ("-O",)


@pytest.mark.parametrize(
    "change",
    [
        {"source": "src2"},
        {"options": ["-O", "-cl-fast-relaxed-math"]},
        {"device": "dev A | driver 2"},
    ],
    ids=["source", "options", "driver"],
)
def test_anything_that_changes_the_binary_changes_the_key(tmp_path, change):
    calls: list[str] = []
    _cache(tmp_path).get_or_build("src", ["-O"], "k", _builder(calls))
    args = {"source": "src", "options": ["-O"], "device": "dev A | driver 1", **change}
    _cache(tmp_path, args["device"]).get_or_build(args["source"], args["options"], "k",
                                                  _builder(calls))  # fmt: skip
    assert calls == ["built", "built"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated (a killed writer without atomic rename)
        lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]),  # one flipped bit in the binary
        lambda b: b"garbage",  # not an entry at all
        lambda b: b.replace(b'"size": ', b'"size": 1', 1),  # a header that lies
        lambda b: b"",
    ],
    ids=["truncated", "bitflip", "foreign", "bad-header", "empty"],
)
def test_damaged_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    cache, calls = _cache(tmp_path), []
    cache.get_or_build("src", [], "k", _builder(calls))
    (path,) = cache.folder.glob("*.bin")
    path.write_bytes(damage(path.read_bytes()))
    assert cache.load(cache.key("src", [])) is None
    again = cache.get_or_build("src", [], "k", _builder(calls, binary=b"fresh"))
    assert calls == ["built", "built"] and again.binary == b"fresh"
    assert cache.load(cache.key("src", [])).binary == b"fresh"


def test_a_failed_build_stores_nothing(tmp_path):
    cache = _cache(tmp_path)

    def broken() -> tuple[bytes, str]:
        raise RuntimeError("compiler error")

    with pytest.raises(RuntimeError, match="compiler error"):
        cache.get_or_build("src", [], "k", broken)
    assert cache.entries() == [] and not list(cache.folder.glob(".tmp-*"))


def test_concurrent_misses_build_once(tmp_path):
    calls: list[str] = []

    def slow() -> tuple[bytes, str]:
        calls.append("built")
        time.sleep(0.3)
        return b"bin", ""

    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(_cache(tmp_path).get_or_build("s", [], "k", slow))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["built"] and [r.binary for r in results] == [b"bin"] * 3


def test_unwritable_cache_still_builds(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache, calls = KernelCache("test", "dev", root=blocker), []
    got = cache.get_or_build("src", [], "k", _builder(calls))
    assert got.binary == b"\x7fBIN\x00" and calls == ["built"]


def test_entries_lists_what_riftco_backends_verbose_shows(tmp_path):
    cache = _cache(tmp_path)
    cache.get_or_build("a", [], "a.cl [float32]", _builder([], log="warning: x"))
    cache.get_or_build("b", [], "b.cl [float32]", _builder([]))
    (cache.folder / "junk.bin").write_bytes(b"junk")
    assert sorted(e.program for e in entries_in(cache.folder)) == [
        "a.cl [float32]",
        "b.cl [float32]",
    ]
    assert entries_in(tmp_path / "absent") == []


@pytest.mark.parametrize("value,on", [("0", False), ("off", False), ("1", True), ("", True)])
def test_switch(monkeypatch, value, on):
    monkeypatch.setenv("RIFTCO_KERNEL_CACHE", value)
    assert cache_enabled() is on


@pytest.fixture
def opencl_runtime(tmp_path, monkeypatch):
    clrt = pytest.importorskip("riftco.backends.opencl.runtime")
    devices, why = clrt.enumerate_devices()
    if not devices:
        pytest.skip(f"no OpenCL device: {why}")
    monkeypatch.setenv("RIFTCO_CACHE_DIR", str(tmp_path))
    return clrt, clrt.OpenCLRuntime(0)


def test_pocl_keeps_only_the_log(opencl_runtime, tmp_path):
    """PoCL caches programs itself; exporting its binary costs 10-20x the build, so
    riftco's entry holds the log alone. (The binary path is what GPU drivers take: nothing
    here has one. Programs are never released, since PoCL 3.0 crashed after a freed one,
    so a miss is made with a new source rather than by clearing the in-process table.)"""
    import numpy as np
    from riftco.kernel_host.sources import program_source

    clrt, runtime = opencl_runtime
    if not runtime.keeps_own_cache:
        pytest.skip(f"{runtime.device_name} is not PoCL")
    source = program_source("gelu", np.dtype(np.float32)) + f"\n/* {tmp_path.name} */\n"
    program = runtime.compile(source, "gelu.cl [float32]")
    program.kernel("gelu_tanh_forward")
    (entry,) = clrt.kernel_cache(runtime.device).entries()
    assert entry.binary == b"" and entry.log == program.build_log.text == ""
    assert entry.program == f"gelu.cl [float32] on {runtime.device_name}"
