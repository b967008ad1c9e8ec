"""``riftco backends [--json]`` and the top-level command dispatch."""

from __future__ import annotations

import json

import riftco
from helpers import plugin_for
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS, PROTOCOL_VERSION
from riftco.backends.cpu.backend import CPUBackend
from riftco.cli import main


class Unplugged(CPUBackend):
    name = "unplugged"
    priority = 9

    @classmethod
    def is_available(cls):
        return False, "cable not connected"


class OlderProtocol(CPUBackend):
    """A third-party backend written against protocol 1.0."""

    name = "older"
    priority = -50
    protocol_version = (1, 0)


CPU_DTYPES = "bfloat16, float16, float32, float64, int32, int64"


def test_backends_text_lists_cpu_available(registry, capsys):
    registry.register(plugin_for(OlderProtocol), name="older-plugin")
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = lines.index("cpu  [available]")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    cpu = lines[start:end]
    assert f"  device cpu:0  host CPU (numpy)  dtypes: {CPU_DTYPES}" in cpu
    assert any(x.startswith("  bfloat16, float16: run in half storage: none;") for x in cpu)
    version = ".".join(map(str, PROTOCOL_VERSION))
    assert any(f"distribution riftco {riftco.__version__}, protocol {version}" in x for x in cpu)
    assert "protocol 1.0" in lines[lines.index("older  [available]") + 1]  # its own, not ours
    fused = [x.split(": ", 1)[1] for x in cpu if x.startswith("  fused ")]
    assert len(fused) == 2  # every fused op is on the native or the composite line
    listed = [op for line in fused for op in line.split(", ")]
    assert sorted(op for op in listed if op != "-") == sorted(FUSED_OPS)


def test_backends_json_lists_cpu_with_capabilities(registry, capsys):
    assert main(["backends", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in data["backends"]}
    cpu = rows["cpu"]
    assert cpu["available"] is True and cpu["reason"] == ""
    assert cpu["protocol_version"] == list(PROTOCOL_VERSION) and cpu["distribution"] == "riftco"
    assert cpu["capabilities"]["dtypes"] == CPU_DTYPES.split(", ")
    assert cpu["capabilities"]["low_precision_ops"] == []
    assert cpu["capabilities"]["fused"] == {op: "native" for op in FUSED_OPS}
    assert cpu["capabilities"]["accepts_strided"] is True
    assert cpu["devices"][0]["index"] == 0 and "float64" in cpu["devices"][0]["dtypes"]
    assert isinstance(data["failed_plugins"], dict)


def test_backends_lists_unavailable_with_reason_and_priority_order(registry, capsys):
    registry.register(plugin_for(Unplugged), name="unplugged-plugin")
    main(["backends", "--json"])
    data = json.loads(capsys.readouterr().out)
    names = [row["name"] for row in data["backends"]]
    assert names.index("unplugged") < names.index("cpu")  # priority 9 before 0
    row = next(r for r in data["backends"] if r["name"] == "unplugged")
    assert row["available"] is False and row["reason"] == "cable not connected"
    assert row["devices"] == []
    main(["backends"])
    assert "unplugged  [unavailable: cable not connected]" in capsys.readouterr().out


def test_help_and_unknown_command(capsys):
    assert main([]) == 0
    assert "backends" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert main(["frobnicate"]) == 2
    captured = capsys.readouterr()
    assert "unknown command 'frobnicate'" in captured.err and "usage: riftco" in captured.out


class Detailed(CPUBackend):
    name = "detailed"
    priority = 8

    @classmethod
    def devices(cls):
        from riftco.backend import DeviceInfo

        details = {"pocl": "3.1+debian", "llvm": "15.0.6", "compute_units": 2,
                   "platform": "Portable Computing Language", "flags": "-O3 " * 40}  # fmt: skip
        return [DeviceInfo(0, "stand-in device", ("float32",), details)]


def test_backends_text_prints_device_details_sorted_and_short(registry, capsys):
    """The PoCL/LLVM versions must show without --json: one indented line per device."""
    registry.register(plugin_for(Detailed), name="detailed-plugin")
    assert main(["backends"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("  device detailed:0  stand-in device  dtypes: float32")
    line = lines[at + 1]
    assert line.startswith("    details: ")
    pairs = line.removeprefix("    details: ")
    keys = [p.split("=", 1)[0] for p in pairs.split(", ")]
    assert keys == ["compute_units", "flags", "llvm", "platform", "pocl"]
    assert "compute_units=2" in pairs and "llvm=15.0.6" in pairs and "pocl=3.1+debian" in pairs
    assert 'platform="Portable Computing Language"' in pairs
    assert len(line) < 200 and '..."' in line  # the 160-character flags value is cut
    cpu_at = lines.index(f"  device cpu:0  host CPU (numpy)  dtypes: {CPU_DTYPES}")
    assert lines[cpu_at + 1].startswith("    details: threads=")


def test_ops_lists_files_where_riftco_is_installed(capsys, tmp_path, monkeypatch):
    """`riftco ops` names the root it lists from (the source tree of an editable install,
    else the installed package) and files that exist under it, from any working folder."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    assert main(["ops"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.startswith("root: ") and "paths below are relative to it" in header
    folder = Path(header.removeprefix("root: ").split("  [", 1)[0])
    assert folder.is_absolute() and folder != tmp_path
    files = [row.split()[-1] for row in rows]
    assert len(files) == len(PRIMITIVE_OPS) + len(FUSED_OPS)
    assert all((folder / f).is_file() for f in files), [
        f for f in files if not (folder / f).is_file()
    ]
    assert any(f.endswith("ops/fused/gelu.py") for f in files)
