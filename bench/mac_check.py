"""One command on a Mac: is Metal correct, does it train, how fast is it, in one folder.

    make mac-check                         # on a Mac (the real Metal backend)
    python bench/mac_check.py [--quick] [--out DIR] [--steps 300] [--bench-steps 20]
                              [--runtimes objc,metalcompute]
    RIFTCO_METAL_STANDIN=1 make mac-check MAC_CHECK_ARGS=--quick   # Linux: the stand-ins

Nobody who works on riftco has a Mac, so the first real run is a user's. This checks each
Metal runtime in turn (riftco's own ``objc``, the default, then ``metalcompute``; set
through ``RIFTCO_METAL_RUNTIME``) and writes everything into DIR (default
``runs/mac-check-<UTC time>``) plus ``DIR.zip`` to attach to an issue:

- ``machine.json``: macOS version, chip, Rosetta or not, Python, metalcompute, riftco
  (git commit), PyTorch and MLX versions, what ``auto`` picks (what `make train` uses),
  whether this install's requirements bring metalcompute here, and which runtimes could
  start (and why not); ``backends.txt``.
- per runtime, in ``DIR/<runtime>/``:
  - ``conformance.txt``/``.json`` (and ``.html`` when ``riftco conformance`` offers
    ``--html``): ``riftco conformance metal``, every op against the float64 CPU reference;
    for ``objc`` a second pass under ``MTL_SHADER_VALIDATION=1``
    (``conformance-validation.*``);
  - ``train.log``, ``loss.png``: ``riftco train --backend metal --steps 300``;
  - ``long_run.json``: the ``make train`` model for 2,500 steps in this process
    (bench/metal_long_run.py): ms/step, command buffers, host waits and memory at steps
    100, 1,000 and 2,500 (does anything grow?);
  - ``bench.json``: ms per training step of the bench model (bench/train_step.py, config
    small) on metal (both attention modes), for the first runtime against native and,
    when installed, PyTorch on MPS and MLX on the GPU; every contender starts from the
    same weights and the first losses must agree;
  - ``calls.json``: Metal calls per training step (dispatches by kernel, command buffers,
    parameter buffers, host waits) and the cost of one dispatch, round trip and parameter
    buffer: the numbers docs/METAL.md lists as open.
- ``summary.md``: what passed and what did not, and which runtime to trust, in a form to
  paste into an issue.

Exit status 0 when every part passed (a runtime other than the first that cannot start
here, e.g. metalcompute without a wheel for this Python, is a SKIP), else 1; the folder is
written either way. ``--quick`` shrinks every part (CI runs it on the stand-ins in
seconds); it checks the plumbing, not Metal's numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import train_step as ts  # noqa: E402  (first: it sets the BLAS thread count before numpy)

# isort: split
import numpy as np  # noqa: E402
import references as refs  # noqa: E402
import references_mlx as mlx_refs  # noqa: E402
import riftco  # noqa: E402
from common import cpu_model, summarize, table  # noqa: E402
from riftco.nn import GPT, GPTConfig  # noqa: E402

ROOT = HERE.parent
RUNTIMES = ("objc", "metalcompute")
RUNTIME_ENV = "RIFTCO_METAL_RUNTIME"
#: Runs riftco's CLI with this very interpreter (no reliance on a `riftco` script on PATH).
RIFTCO = [sys.executable, "-c", "import sys; from riftco.cli import main; sys.exit(main())"]
#: A Mac's first run compiles every kernel family: generous, but a hang still ends.
TIMEOUT_S = 3600

FULL = {
    "conformance_ops": "",
    "max_examples": 0,  # 0: the conformance default
    "steps": 300,
    "train_args": [],  # `riftco train` defaults: the `make train` model
    "bench_config": "small",
    "bench_steps": 20,
    "bench_warmup": 3,
    "micro_repeat": 200,
    "long_steps": 2500,  # the make-train model, as make train runs it
    "long_model": "train",
}
QUICK = {
    "conformance_ops": "softmax,matmul",
    "max_examples": 2,
    "steps": 6,
    "train_args": [
        "--layers",
        "1",
        "--heads",
        "2",
        "--width",
        "32",
        "--context",
        "16",
        "--batch-size",
        "4",
        "--eval-every",
        "3",
        "--eval-iters",
        "1",
        "--sample-tokens",
        "20",
    ],  # fmt: skip
    "bench_config": "tiny",
    "bench_steps": 2,
    "bench_warmup": 1,
    "micro_repeat": 20,
    "long_steps": 6,
    "long_model": "tiny",
}
BENCH_CONFIGS = {
    **ts.CONFIGS,
    "tiny": {"context": 16, "batch": 4, "layers": 1, "heads": 2, "width": 32},
}
#: First losses of contenders starting from the same weights must agree this closely.
FIRST_LOSS_RTOL = 2e-3


# -- helpers ------------------------------------------------------------------------------------
def _run(cmd: list[str], timeout: int = 30) -> str:
    """stdout of a small system command, or '' when it is missing or fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def run_riftco(
    args: list[str], log: Path, timeout: int = TIMEOUT_S, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``riftco ARGS`` (with ``env`` added to this process's environment), writing the
    command and its whole output to ``log``."""
    shown = " ".join([*(f"{k}={v}" for k, v in (env or {}).items()), "riftco", *args])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([*RIFTCO, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})  # fmt: skip
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        rc, text = 124, (out.decode() if isinstance(out, bytes) else out) + "\n[timed out]\n"
    took = time.perf_counter() - t0
    log.write_text(f"$ {shown}\n{text}\n[exit status {rc}, {took:.1f} s]\n", encoding="utf-8")
    return rc, text


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("riftco", "metalcompute", "numpy", "torch", "mlx", "pyopencl"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _git() -> str:
    commit = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if commit and _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]):
        commit += " (with local changes)"
    return commit


def _installed_requires_metalcompute() -> str:
    """Whether this install's own metadata asks for metalcompute on this machine."""
    try:
        from importlib.metadata import requires

        from packaging.requirements import Requirement
    except ImportError as exc:
        return f"unknown ({exc})"
    for line in requires("riftco") or []:
        req = Requirement(line)
        if req.name == "metalcompute" and (req.marker is None or req.marker.evaluate()):
            return f"yes ({line})"
    return "no: this machine is outside the default install's markers (docs/METAL.md)"


def machine_info(backend: str) -> dict[str, Any]:
    """Facts a bug report needs; every probe is optional and says so when it fails."""
    mac = platform.mac_ver()[0]
    info: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "os": f"macOS {mac}" if mac else platform.platform(),
        "kernel": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "versions": _versions(),
        "git": _git(),
        "default_install_brings_metalcompute": _installed_requires_metalcompute(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("RIFTCO_")},
    }
    if sys.platform == "darwin":
        info["chip"] = _run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "unknown"
        info["memory_bytes"] = _run(["sysctl", "-n", "hw.memsize"])
        # 1 under Rosetta: an x86_64 Python on Apple silicon (no metalcompute wheel)
        info["rosetta"] = _run(["sysctl", "-n", "sysctl.proc_translated"]) == "1"
        gpu = _run(["system_profiler", "-json", "SPDisplaysDataType"], timeout=60)
        try:
            cards = json.loads(gpu).get("SPDisplaysDataType", []) if gpu else []
            info["gpu"] = [{k: c.get(k) for k in ("sppci_model", "sppci_cores")} for c in cards]
        except ValueError:
            info["gpu"] = "unknown"
    else:
        info["chip"] = cpu_model()
    reg = riftco.get_registry()
    try:
        name, why = reg.auto()
        info["auto"] = {"backend": name, "why": why}
    except Exception as exc:  # no backend at all: say so rather than stop
        info["auto"] = {"backend": None, "why": str(exc)}
    entry = reg.entries.get(backend.split(":")[0])
    if entry is None:
        info["metal"] = {"available": False, "reason": f"no backend named {backend!r}"}
    else:
        devices = entry.devices() if entry.available else []
        info["metal"] = {
            "available": bool(entry.available and devices),
            "reason": entry.reason or ("" if devices else "no device"),
            "devices": [{"name": d.name, "details": dict(d.details)} for d in devices],
        }
    devices = info["metal"].get("devices", [])
    runtimes = {f"{d['details'].get('runtime', '')} {d['details'].get('runtime_why', '')}"
                for d in devices}  # fmt: skip
    info["standin"] = any("stand-in" in r or "fake" in r for r in runtimes)
    info["metal_runtime"] = "; ".join(sorted(r.strip() for r in runtimes))
    return info


# -- the parts ------------------------------------------------------------------------------------
def part_conformance(
    out: Path, backend: str, prof: dict[str, Any], name: str = "conformance",
    env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    report = out / f"{name}.json"
    args = ["conformance", backend, "--json", str(report)]
    if prof["conformance_ops"]:
        args += ["--ops", prof["conformance_ops"]]
    if prof["max_examples"]:
        args += ["--max-examples", str(prof["max_examples"])]
    if "--html" in _run([*RIFTCO, "conformance", "--help"], timeout=300):
        args += ["--html", str(out / f"{name}.html")]
    rc, text = run_riftco(args, out / f"{name}.txt", env=env)
    if not report.exists():
        last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
        return {"status": "fail", "detail": f"no JSON report (exit status {rc}): {last[0]}"}
    data = json.loads(report.read_text())
    s = data.get("summary", {})
    failed = [
        f"{dev['device']} {case['id']}: {case['status']}"
        for dev in data.get("devices", [])
        for case in dev.get("cases", [])
        if case.get("status") in ("fail", "error", "xpass")
    ]
    numeric = sum(
        case.get("group") == "numeric"
        for dev in data.get("devices", [])
        for case in dev.get("cases", [])
    )
    ok = rc == 0 and data.get("passed") is True and numeric > 0
    detail = f"{s.get('pass', 0)} of {s.get('total', 0)} cases passed"
    if not numeric:  # e.g. an --ops pattern that matched no op: nothing was checked
        detail += ", none of them numeric: no op was checked"
    if failed:
        detail += "; failing: " + ", ".join(failed[:12]) + (" ..." if len(failed) > 12 else "")
    return {"status": "pass" if ok else "fail", "detail": detail, "exit_status": rc,
            "summary": s, "failing": failed}  # fmt: skip


_SUMMARY = re.compile(
    r"summary: (?P<steps>\d+) steps, train loss (?P<train>[^\s,]+)(?: \([^)]*\))?, "
    r"val loss (?P<val>[^\s,]+)(?: \([^)]*\))?, "
    r"(?P<tok>[\d,.]+) tokens/s, (?P<ms>[\d.]+) ms/step, wall (?P<wall>[\d.]+) s, "
    r"backend (?P<device>\S+)"
)
_BASELINE = re.compile(r"unigram baseline (?P<nats>[\d.]+) nats/char")


def parse_train_log(text: str) -> dict[str, Any]:
    """The numbers of a `riftco train` log (its closing summary line and the baseline)."""
    m = _SUMMARY.search(text)
    if m is None:
        return {}
    out: dict[str, Any] = {
        "steps": int(m["steps"]),
        "train_loss": float(m["train"]),
        "val_loss": float(m["val"]),
        "tokens_per_s": float(m["tok"].replace(",", "")),
        "ms_per_step": float(m["ms"]),
        "wall_s": float(m["wall"]),
        "device": m["device"],
    }
    b = _BASELINE.search(text)
    out["unigram_baseline"] = float(b["nats"]) if b else None
    return out


def part_train(out: Path, backend: str, prof: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir:  # checkpoints stay out of the folder
        args = ["train", "--backend", backend, "--steps", str(prof["steps"]),
                "--out", run_dir, "--no-progress", *prof["train_args"]]  # fmt: skip
        rc, text = run_riftco(args, out / "train.log")
        plot = Path(run_dir) / "loss.png"
        if plot.exists():
            shutil.copy(plot, out / "loss.png")
    res = parse_train_log(text)
    problems = []
    if rc != 0:
        problems.append(f"exit status {rc}")
    if not res:
        problems.append("no summary line in train.log")
    else:
        if res["device"].split(":")[0] != backend.split(":")[0]:
            problems.append(f"trained on {res['device']}, not {backend}")
        if not (math.isfinite(res["train_loss"]) and math.isfinite(res["val_loss"])):
            problems.append("loss is not finite")
        base = res.get("unigram_baseline")
        if prof["steps"] >= 200 and base and not res["val_loss"] < base:
            problems.append(f"val loss {res['val_loss']} is not below the unigram {base}")
    detail = (
        f"{res['steps']} steps on {res['device']}: val loss {res['val_loss']:.3f} "
        f"(unigram baseline {res.get('unigram_baseline')}), {res['ms_per_step']:.1f} ms/step"
        if res
        else "see train.log"
    )
    if problems:
        detail = "; ".join(problems) + " — " + detail
    return {"status": "fail" if problems else "pass", "detail": detail, **res}


def _bench_model(config: str, mode: str = "materialized") -> tuple[GPTConfig, int]:
    c = BENCH_CONFIGS[config]
    cfg = GPTConfig(vocab=ts.VOCAB, context=c["context"], layers=c["layers"], heads=c["heads"],
                    width=c["width"], attention=mode)  # fmt: skip
    return cfg, c["batch"]


def _reference_contenders(
    cfg: GPTConfig, batches: list, weights: dict, device: str
) -> tuple[dict[str, tuple[Callable[[], float], dict[str, Any]]], list[str]]:
    runs: dict[str, tuple[Callable[[], float], dict[str, Any]]] = {}
    skipped: list[str] = []
    torch_version = refs.torch_version()
    if torch_version is None:
        skipped.append("PyTorch: not installed (optional; pip install torch)")
    else:
        import torch

        tdev = "mps" if device == "gpu" else "cpu"
        if tdev == "mps" and not torch.backends.mps.is_available():
            skipped.append(f"PyTorch {torch_version}: MPS is not available here")
        else:
            step = refs.torch_step(weights, cfg, batches, ts.LR, ts.WEIGHT_DECAY, ts.THREADS, tdev)
            runs[f"torch {tdev}"] = (step, {"framework": f"torch {torch_version}", "device": tdev})
    mlx_version = mlx_refs.mlx_version()
    if mlx_version is None:
        skipped.append("MLX: not installed (optional; pip install mlx)")
    else:
        try:
            step = mlx_refs.mlx_step(weights, cfg, batches, ts.LR, ts.WEIGHT_DECAY, device)
            runs[f"mlx {device}"] = (step, {"framework": f"mlx {mlx_version}", "device": device})
        except Exception as exc:  # e.g. no GPU stream on this machine
            skipped.append(f"MLX {mlx_version} on {device}: {type(exc).__name__}: {exc}")
    return runs, skipped


def part_bench(
    out: Path, backend: str, prof: dict[str, Any], ref_device: str, others: bool = True
) -> dict[str, Any]:
    """ms per training step of the bench model on ``backend`` and, with ``others``, on
    native and the optional references (the second runtime's run leaves those out)."""
    cfg0, batch = _bench_model(prof["bench_config"])
    batches = ts.make_batches(cfg0, batch)
    runs: dict[str, tuple[Callable[[], float], dict[str, Any]]] = {}
    skipped: list[str] = []
    for name in (backend, "native") if others else (backend,):
        for mode in ts.MODES:
            cfg, _ = _bench_model(prof["bench_config"], mode)
            try:
                step, _ = ts.riftco_step(name, cfg, batches)
            except Exception as exc:  # an unavailable backend is reported, not fatal
                skipped.append(f"riftco {name}/{mode}: {type(exc).__name__}: {exc}")
                break
            runs[f"riftco {name} {mode[:5]}"] = (
                step, {"framework": "riftco", "device": name, "attention": mode})  # fmt: skip
    weights = GPT(cfg0, device="cpu", seed=0).state_dict()
    ref_step, _ = ts.riftco_step("cpu", cfg0, batches)
    reference_loss = ref_step()  # riftco cpu (numpy): the first loss everyone must match
    if others:
        extra, why = _reference_contenders(cfg0, batches, weights, ref_device)
        runs.update(extra)
        skipped += why
    first: dict[str, float] = {}
    failed: dict[str, str] = {}
    for name, (step, _) in list(runs.items()):
        try:
            first[name] = step()
            for _ in range(prof["bench_warmup"] - 1):
                step()
        except Exception as exc:  # a contender that cannot run is reported, the rest go on
            failed[name] = f"{type(exc).__name__}: {exc}"
            del runs[name]
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(prof["bench_steps"]):
        rot = i % max(len(names), 1)  # rotate who goes first
        for name in names[rot:] + names[:rot]:
            t0 = time.perf_counter()
            runs[name][0]()
            samples[name].append(time.perf_counter() - t0)
    native = [summarize(samples[n])["median_ms"] for n in names if n.startswith("riftco native")]
    rows = []
    for name in names:
        s = summarize(samples[name])
        agree = abs(first[name] - reference_loss) <= FIRST_LOSS_RTOL * abs(reference_loss)
        rows.append({"contender": name, **runs[name][1], **s, "first_loss": first[name],
                     "vs_native": s["median_ms"] / min(native) if native else None,
                     "first_loss_agrees": agree})  # fmt: skip
    ours = [r for r in rows if r["device"] == backend]
    problems = [f"{n}: {e}" for n, e in failed.items() if n.startswith(f"riftco {backend}")]
    if not ours:
        problems.append(f"riftco {backend} did not run" + (f" ({skipped[0]})" if skipped else ""))
    problems += [
        f"{r['contender']}: first loss {r['first_loss']:.6f} differs from riftco cpu's "
        f"{reference_loss:.6f}"
        for r in rows
        if not r["first_loss_agrees"]
    ]
    (out / "bench.json").write_text(json.dumps({
        "config": {"name": prof["bench_config"], **BENCH_CONFIGS[prof["bench_config"]]},
        "vocab": ts.VOCAB, "steps": prof["bench_steps"], "warmup": prof["bench_warmup"],
        "threads": ts.THREADS, "reference_first_loss": reference_loss, "rows": rows,
        "skipped": skipped, "failed": failed,
    }, indent=2))  # fmt: skip
    best = min((r["median_ms"] for r in ours), default=float("nan"))
    detail = f"best riftco {backend} {best:.1f} ms/step" if ours else "no metal numbers"
    if problems:
        detail = "; ".join(problems) + " — " + detail
    return {"status": "fail" if problems else "pass", "detail": detail, "rows": rows,
            "skipped": skipped, "failed": failed}  # fmt: skip


def part_long_run(out: Path, backend: str, prof: dict[str, Any]) -> dict[str, Any]:
    """The ``make train`` model for 2,500 steps in this process (bench/metal_long_run.py):
    ms/step, command buffers, host waits and memory at steps 100, 1,000 and 2,500."""
    import metal_long_run as mlr

    rows = mlr.run(riftco.device(backend), prof["long_steps"], prof["long_model"],
                   say=lambda text: None)  # fmt: skip
    (out / "long_run.json").write_text(
        json.dumps(
            {"model": {prof["long_model"]: mlr.MODELS[prof["long_model"]]}, "rows": rows}, indent=2
        )
    )
    bad = [r["step"] for r in rows if not math.isfinite(r["loss"])]
    detail = "; ".join(
        f"step {r['step']}: {r['ms_per_step']:.1f} ms/step, {r['command_buffers']} command "
        f"buffer(s), {r['host_waits']} wait(s), peak RSS {r['peak_rss_mb']:.0f} MB"
        for r in rows
    )
    if bad:
        detail = f"loss not finite at steps {bad} — " + detail
    return {"status": "fail" if bad else "pass", "detail": detail, "rows": rows}


def part_calls(out: Path, backend: str, prof: dict[str, Any]) -> dict[str, Any]:
    """What one training step asks of Metal, and what one call costs here."""
    from riftco import ops

    cfg, batch = _bench_model(prof["bench_config"])
    batches = ts.make_batches(cfg, batch)
    dev = riftco.device(backend)
    be = dev.backend
    step, _ = ts.riftco_step(backend, cfg, batches)
    step()
    step()  # kernels compiled, optimizer state created, parameter buffers cached
    kernels: Counter[str] = Counter()
    original = be.launch

    def counting(family: str, kernel: str, *args: Any, **kwargs: Any) -> None:
        kernels[kernel] += 1
        original(family, kernel, *args, **kwargs)

    be.launch = counting
    try:
        be.reset_transfer_stats()
        step()
        stats = be.transfer_stats()
    finally:
        del be.launch  # back to the class's method
    n = prof["micro_repeat"]
    x = riftco.tensor(np.zeros(1, dtype=np.float32), device=dev)
    be.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        y = ops.add_scalar(x, 1.0)  # one dispatch each, queued back to back
    be.synchronize()
    dispatch_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        y = ops.add_scalar(x, 1.0)
        be.synchronize()  # dispatch plus the wait for its command buffer
    roundtrip_us = (time.perf_counter() - t0) / n * 1e6
    del y
    runtime = be.runtime
    t0 = time.perf_counter()
    for i in range(n):
        runtime.constant(np.asarray([i, n], dtype=np.int32).tobytes())
    param_buffer_us = (time.perf_counter() - t0) / n * 1e6
    result = {
        "per_training_step": {
            "dispatches": stats["launches"],
            "parameter_buffers_created": stats["param_buffers"],
            "uploads": stats["uploads"],
            "downloads": stats["downloads"],
            "host_waits": stats.get("drains"),
            "command_buffers": stats.get("command_buffers", stats["launches"]),
            "uploads_without_wait": stats.get("upload_waits_skipped"),
        },
        "dispatches_by_kernel": dict(kernels.most_common()),
        "dispatch_us_pipelined": dispatch_us,
        "dispatch_roundtrip_us": roundtrip_us,
        "parameter_buffer_us": param_buffer_us,
        "model": {"name": prof["bench_config"], **BENCH_CONFIGS[prof["bench_config"]]},
    }
    (out / "calls.json").write_text(json.dumps(result, indent=2))
    per = result["per_training_step"]
    detail = (
        f"{per['dispatches']} dispatches, {per['command_buffers']} command buffer(s) and "
        f"{per['host_waits']} host wait(s) per step; "
        f"{dispatch_us:.0f} us per queued dispatch, {roundtrip_us:.0f} us round trip"
    )
    return {"status": "pass", "detail": detail, **result}


# -- the report -----------------------------------------------------------------------------------
def write_summary(
    out: Path, info: dict[str, Any], parts: dict[str, dict[str, Any]], runtimes: list[str]
) -> str:
    v = info["versions"]
    chip = info.get("chip", "?")
    auto, brings = info["auto"], info["default_install_brings_metalcompute"]
    lines = [f"# riftco mac-check, {info['date_utc']} UTC", ""]
    if info.get("standin"):
        lines += [
            "**This ran on the OpenCL stand-in (RIFTCO_METAL_STANDIN=1), not on Metal:** it "
            "checks riftco's Metal host code and this script, not Apple's GPU.",
            "",
        ]
    lines += [
        f"- machine: {info['os']}, {chip}, {info['machine']}"
        + (" under Rosetta" if info.get("rosetta") else ""),
        f"- Python {info['python']}; metalcompute {v.get('metalcompute') or 'not installed'}; "
        f"riftco {v.get('riftco')} {info.get('git') or ''}".rstrip(),
        f"- `make train` (backend auto) uses: **{auto['backend']}** ({auto['why']})",
        f"- default install brings metalcompute here: {brings}",
        f"- Metal runtime: {info.get('metal_runtime') or '-'}",
    ]
    metal = info["metal"]
    if metal["available"]:
        names = ", ".join(d["name"] for d in metal["devices"])
        lines.append(f"- metal devices: {names}")
    else:
        lines.append(f"- metal: **unavailable**: {metal['reason']}")
    lines += ["", "| part | result | details |", "| --- | --- | --- |"]
    for name, res in parts.items():
        detail = str(res["detail"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {name} | {res['status'].upper()} | {detail} |")
    for runtime in runtimes:
        bench = parts.get(f"benchmark [{runtime}]", {})
        if bench.get("rows"):
            lines += ["", f"ms per training step (median), same weights and batches, metal on "
                      f"the {runtime} runtime:", "", "```"]  # fmt: skip
            columns = ["contender", "median_ms", "min_ms", "vs_native", "first_loss_agrees"]
            lines.append(table(bench["rows"], columns))
            lines.append("```")
        for why in bench.get("skipped", []):
            lines.append(f"- skipped: {why}")
    if any(k.endswith("]") for k in parts):
        lines += ["", f"Which Metal runtime to trust: {verdict(parts, runtimes)}."]
    ok = all(r["status"] != "fail" for r in parts.values())
    lines += [
        "",
        "Result: **" + ("all parts passed" if ok else "something failed") + "**.",
        f"Attach `{out.name}.zip` (this folder) to an issue; the files hold the logs.",
    ]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder to write (default runs/mac-check-<time>)")
    ap.add_argument("--backend", default="metal", help="metal or metal:N")
    ap.add_argument("--quick", action="store_true", help="tiny settings: the plumbing only")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 300)")
    ap.add_argument("--bench-steps", type=int, default=None, help="timed steps per contender")
    ap.add_argument("--conformance-ops", default=None, help="like riftco conformance --ops")
    ap.add_argument("--max-examples", type=int, default=None, help="conformance examples")
    ap.add_argument("--reference-device", choices=["gpu", "cpu"], default="gpu",
                    help="where PyTorch (mps/cpu) and MLX (gpu/cpu) run")  # fmt: skip
    ap.add_argument(
        "--runtimes", default=",".join(RUNTIMES), help="Metal runtimes to check, in order"
    )
    args = ap.parse_args(argv)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if not runtimes or any(r not in RUNTIMES for r in runtimes):
        print(f"mac-check: --runtimes takes {', '.join(RUNTIMES)}", file=sys.stderr)
        return 2
    prof = dict(QUICK if args.quick else FULL)
    for key in ("steps", "bench_steps", "conformance_ops", "max_examples"):
        if getattr(args, key) is not None:
            prof[key] = getattr(args, key)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out) if args.out else ROOT / "runs" / f"mac-check-{stamp}"
    if out.exists() and any(out.iterdir()):
        print(f"mac-check: {out} exists and is not empty; choose another --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info(args.backend)
    (out / "machine.json").write_text(json.dumps(info, indent=2, default=str))
    run_riftco(["backends"], out / "backends.txt", 300)
    parts: dict[str, dict[str, Any]] = {}
    if not info["metal"]["available"]:
        parts["metal backend"] = {"status": "fail", "detail": info["metal"]["reason"]}
    else:
        for runtime in runtimes:
            check_runtime(runtime, runtime == runtimes[0], out, args, prof, info, parts)
    print(write_summary(out, info, parts, runtimes))
    archive = shutil.make_archive(str(out), "zip", root_dir=out.parent, base_dir=out.name)
    print(f"mac-check: wrote {out}/ and {archive}")
    return 0 if all(r["status"] != "fail" for r in parts.values()) else 1


def check_runtime(
    runtime: str, first: bool, out: Path, args: argparse.Namespace, prof: dict[str, Any],
    info: dict[str, Any], parts: dict[str, dict[str, Any]],
) -> None:  # fmt: skip
    """Every part on one Metal runtime (RIFTCO_METAL_RUNTIME), into ``out/<runtime>/``.

    A runtime other than the first that cannot start here (metalcompute on Python 3.14,
    say) is a SKIP with its reason: the first (the default) must work."""
    os.environ[RUNTIME_ENV] = runtime  # the parts' subprocesses inherit it
    from riftco import plugins

    plugins.reset_registry()
    sub = out / runtime
    sub.mkdir(exist_ok=True)
    entry = riftco.get_registry().entries.get(args.backend.split(":")[0])
    devices = entry.devices() if entry is not None and entry.available else []
    facts = devices[0].details if devices else {}
    info.setdefault("runtimes", {})[runtime] = {
        "available": bool(devices), "reason": entry.reason if entry else "no metal backend",
        "runtime": facts.get("runtime"), "why": facts.get("runtime_why"),
    }  # fmt: skip
    (out / "machine.json").write_text(json.dumps(info, indent=2, default=str))
    if not devices or facts.get("runtime_why", "").startswith("the objc runtime could not"):
        reason = (entry.reason if entry and entry.reason else "") or facts.get("runtime_why", "")
        parts[f"metal backend [{runtime}]"] = {
            "status": "fail" if first else "skip", "detail": reason or "no device",
        }  # fmt: skip
        return
    backend = args.backend
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("conformance", lambda: part_conformance(sub, backend, prof)),
    ]
    if runtime == "objc":  # one pass under Metal's shader validation layer
        steps.append(
            (
                "conformance (shader validation)",
                lambda: part_conformance(
                    sub, backend, prof, "conformance-validation", {"MTL_SHADER_VALIDATION": "1"}
                ),
            )
        )
    steps += [
        (f"train ({prof['steps']} steps)", lambda: part_train(sub, backend, prof)),
        (f"long run ({prof['long_steps']} steps)", lambda: part_long_run(sub, backend, prof)),
        ("benchmark", lambda: part_bench(sub, backend, prof, args.reference_device, first)),
        ("calls per step", lambda: part_calls(sub, backend, prof)),
    ]  # fmt: skip
    for name, run in steps:
        label = f"{name} [{runtime}]"
        print(f"mac-check: {label} ...", flush=True)
        try:
            parts[label] = run()
        except Exception as exc:  # one broken part must not hide the others
            (sub / f"{name.split()[0]}-error.txt").write_text(traceback.format_exc())
            parts[label] = {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"}
        print(f"  {parts[label]['status']}: {parts[label]['detail']}", flush=True)


def verdict(parts: dict[str, dict[str, Any]], runtimes: list[str]) -> str:
    """Which runtime to trust, from what passed."""
    passed = [r for r in runtimes
              if any(k.endswith(f"[{r}]") for k in parts)
              and all(v["status"] != "fail" for k, v in parts.items() if k.endswith(f"[{r}]"))
              and not any(k == f"metal backend [{r}]" for k in parts)]  # fmt: skip
    if runtimes[0] in passed:
        return f"trust **{runtimes[0]}** (the default): every part passed on it" + (
            f"; {', '.join(passed[1:])} passed too" if passed[1:] else ""
        )
    if passed:
        return (
            f"trust **{passed[0]}** (`RIFTCO_METAL_RUNTIME={passed[0]}`): {runtimes[0]} "
            "failed a part here; please attach this folder to an issue"
        )
    return "trust **neither** runtime here; please attach this folder to an issue"


if __name__ == "__main__":
    sys.exit(main())
