"""Every riftco environment variable with a junk value: a clear error naming the variable,
or the documented default, never a raw traceback and never a junk value read as "on"
(issue 31: ``RIFTCO_STRICT_PLUGINS=junk`` and ``RIFTCO_KERNEL_CACHE=junk`` meant on,
``RIFTCO_NATIVE_POOL_MB=junk`` failed the native plugin's hook with a bare int() error)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import riftco
from riftco import plugins
from riftco.env_values import EnvironmentValueError, choice, flag, whole_number
from riftco.kernel_host.cache import cache_enabled

#: Every variable riftco reads (RIFTCO_* in core, backends and conformance).
VARIABLES = [
    "RIFTCO_BACKEND", "RIFTCO_STRICT_PLUGINS", "RIFTCO_DISABLE_PLUGINS", "RIFTCO_PROBE_TIMEOUT",
    "RIFTCO_VALIDATE", "RIFTCO_VALIDATE_SLACK", "RIFTCO_METAL_STANDIN",
    "RIFTCO_STANDIN_GROUP_SIZE", "RIFTCO_FAST_MATH", "RIFTCO_OPENCL_GROUP_SIZE",
    "RIFTCO_CUDA_GROUP_SIZE", "RIFTCO_CUDA_WIDE_MIN_TILES", "RIFTCO_CUDA_PROBE_TIMEOUT",
    "RIFTCO_NATIVE_MATMUL", "RIFTCO_NATIVE_POOL_MB", "RIFTCO_CACHE_DIR", "RIFTCO_KERNEL_CACHE",
    "RIFTCO_CUDA_SYNC", "RIFTCO_CUDA_POOLS", "RIFTCO_METAL_RUNTIME", "RIFTCO_STANDIN_MODEL_RUNS",
    "RIFTCO_NATIVE_HALF",
]  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]


def test_the_sweep_names_every_variable_riftco_reads():
    """A variable added to the code joins the junk sweep below (or this test names it)."""
    found = set()
    for folder in ("core", "backends", "conformance"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(re.findall(r"[\"'](RIFTCO_[A-Z0-9_]+)[\"']", path.read_text()))
    assert sorted(found - set(VARIABLES)) == []


@pytest.mark.parametrize(
    ("var", "takes"),
    [("RIFTCO_METAL_STANDIN", "must be one of"), ("RIFTCO_CUDA_SYNC", "must be one of"),
     ("RIFTCO_STANDIN_GROUP_SIZE", "must be a whole number"),
     ("RIFTCO_CUDA_POOLS", "must be one of")],
)  # fmt: skip
def test_metal_and_cuda_switches_refuse_junk(monkeypatch, var, takes):
    from riftco.backends.cuda import runtime as cuda_runtime
    from riftco.backends.metal import backend as metal_backend
    from riftco.backends.metal import standin

    if var == "RIFTCO_STANDIN_GROUP_SIZE":
        pytest.importorskip("pyopencl", reason="the stand-in device needs OpenCL")
    monkeypatch.setenv(var, "junk")
    readers = {
        "RIFTCO_METAL_STANDIN": metal_backend._use_standin,
        "RIFTCO_STANDIN_GROUP_SIZE": lambda: standin.Device(0),
        "RIFTCO_CUDA_SYNC": cuda_runtime.sync_each_launch,
        "RIFTCO_CUDA_POOLS": cuda_runtime.pools_wanted,
    }
    with pytest.raises(EnvironmentValueError, match=f"{var}='junk' {takes}"):
        readers[var]()


def test_flag(monkeypatch):
    for value, on in (("", False), ("1", True), ("Yes", True), ("off", False), ("FALSE", False)):
        monkeypatch.setenv("RIFTCO_X", value)
        assert flag("RIFTCO_X") is on
    monkeypatch.setenv("RIFTCO_X", "junk")
    with pytest.raises(EnvironmentValueError, match=r"\[env\] RIFTCO_X='junk' must be one of"):
        flag("RIFTCO_X")


def test_whole_number_and_choice(monkeypatch):
    monkeypatch.setenv("RIFTCO_X", " 12 ")
    assert whole_number("RIFTCO_X", 3, "MiB") == 12
    for junk in ("-1", "1.5", "many"):
        monkeypatch.setenv("RIFTCO_X", junk)
        with pytest.raises(EnvironmentValueError, match="whole number of MiB >= 0"):
            whole_number("RIFTCO_X", 3, "MiB")
    monkeypatch.setenv("RIFTCO_X", "NumPy")
    assert choice("RIFTCO_X", ("blas", "numpy"), "blas") == "numpy"
    monkeypatch.setenv("RIFTCO_X", "gpu")
    with pytest.raises(EnvironmentValueError, match="must be one of blas, numpy"):
        choice("RIFTCO_X", ("blas", "numpy"), "blas")


def test_strict_plugins_junk_is_an_error_not_on(registry, monkeypatch):
    monkeypatch.setenv("RIFTCO_STRICT_PLUGINS", "junk")
    with pytest.raises(EnvironmentValueError, match="RIFTCO_STRICT_PLUGINS='junk'"):
        plugins.reset_registry()


def test_kernel_cache_junk_is_an_error_not_on(monkeypatch):
    monkeypatch.setenv("RIFTCO_KERNEL_CACHE", "junk")
    with pytest.raises(EnvironmentValueError, match="RIFTCO_KERNEL_CACHE='junk'"):
        cache_enabled()


@pytest.mark.parametrize(
    ("var", "said"),
    [
        ("RIFTCO_NATIVE_POOL_MB", "whole number of MiB"),
        ("RIFTCO_NATIVE_MATMUL", "blas, numpy"),
        ("RIFTCO_NATIVE_HALF", "auto, portable"),
    ],  # fmt: skip
)
def test_native_settings_junk_names_the_variable(registry, monkeypatch, var, said):
    pytest.importorskip("riftco.backends.native.backend")
    monkeypatch.setenv(var, "junk")
    with pytest.raises(riftco.RiftcoError, match=f"{var}='junk' must be .*{said}"):
        riftco.device("native")


@pytest.mark.parametrize("var", VARIABLES)
def test_no_variable_with_junk_gives_a_traceback(var, tmp_path):
    script = (
        "import riftco, riftco.cli\n"
        "riftco.cli.main(['backends'])\n"
        "for name in ('cpu', 'native', 'opencl'):\n"
        "    try:\n"
        "        riftco.ops.exp(riftco.ones(2, device=name)).numpy()\n"
        "    except riftco.RiftcoError as exc:\n"
        "        print('error:', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    env[var] = "junk"
    run = subprocess.run(  # in tmp_path: RIFTCO_CACHE_DIR=junk makes ./junk there
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
        cwd=tmp_path,
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr[-1500:]
    assert run.returncode == 0
