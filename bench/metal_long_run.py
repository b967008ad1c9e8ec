"""A long training run through both Metal runtimes on their Linux stand-ins: does it stay flat?

    python bench/metal_long_run.py [--steps 2500] [--runtime objc|metalcompute|both]
                                   [--model train|tiny] [--json FILE]

Issue 29: metalcompute 0.2.9 keeps every run (and its command buffer) in a dictionary it
never prunes and scans on every completion; riftco's own runtime (``objc_runtime.py``)
batches a step into one command buffer and releases what it owns. This trains the
``make train`` model (4 layers, width 128, context 64, batch 16; its step recorded once and
replayed, as ``make train`` does) for ``--steps`` steps and
prints, at steps 100, 1,000 and 2,500 (those within the run, and the last):

- objc runtime on the fake Objective-C runtime (``objc_fake.py``): live Objective-C
  objects (counted by the fake), command buffers, dispatches and host waits in that step,
  ms/step (mean of the 20 steps up to it);
- metalcompute runtime on ``standin.py`` with its run dictionary modelled
  (``RIFTCO_STANDIN_MODEL_RUNS=1``): live runs (each holding a command buffer), dictionary
  entries scanned by that step's completions, command buffers (one per dispatch), ms/step.

Also the parameter buffers the kernel host layer caches (``KernelBackend._constants``, an
LRU of 4,096 shared by both runtimes). The optimizer's step-dependent parameters (learning
rate, bias corrections) are made per launch and die with it (``launch(per_call=True)``):
cached, they had added two entries per step until the cache filled (step ~1,900).

Both run on PoCL on this machine's CPU: the ms/step are PoCL's, not a Mac's, and the
dictionary's scans are counted, not timed. Nothing here runs on Metal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import machine, table  # noqa: E402

MODELS = {
    "train": {"context": 64, "layers": 4, "heads": 4, "width": 128, "batch": 16},
    "tiny": {"context": 16, "layers": 1, "heads": 2, "width": 32, "batch": 4},
}
CHECKPOINTS = (100, 1000, 2500)
WINDOW = 20


def standin_device(kind: str) -> Any:
    """The ``metal`` device on ``kind``'s Linux stand-in (the metalcompute one with its run
    dictionary modelled)."""
    import riftco
    from riftco import plugins

    os.environ["RIFTCO_METAL_STANDIN"] = "1"
    os.environ["RIFTCO_METAL_RUNTIME"] = kind
    if kind == "metalcompute":
        from riftco.backends.metal import standin

        standin.RUNS.__init__()  # type: ignore[misc]
        standin.RUNS.enabled = True
    plugins.reset_registry()
    return riftco.device("metal")


def _peak_rss_mb() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def _live(backend: Any) -> dict[str, Any]:
    """What the runtime holds: counted objects on the fakes; memory everywhere."""
    out: dict[str, Any] = {
        "peak_rss_mb": _peak_rss_mb(),
        "reserved_mb": backend.memory_stats().get("reserved_bytes", 0) / 2**20,
        "param_buffers_cached": len(backend._constants),
    }
    library = getattr(getattr(backend.runtime, "objc", None), "library", None)
    if hasattr(library, "live"):  # the fake Objective-C runtime counts what is alive
        live = library.live()
        out.update(live_objects=sum(live.values()), live_command_buffers=live["MTLCommandBuffer"])
    elif getattr(backend, "runtime_kind", "") == "metalcompute":
        from riftco.backends.metal import standin

        if standin.RUNS.enabled:  # metalcompute's never-pruned run dictionary, modelled
            out.update(live_objects=standin.RUNS.entries,
                       live_command_buffers=standin.RUNS.entries)  # fmt: skip
    return out


def _scanned() -> int:
    from riftco.backends.metal import standin

    return standin.RUNS.scanned if standin.RUNS.enabled else 0


def run(device: Any, steps: int, model: str, capture: bool = True,
        say: Any = print) -> list[dict[str, Any]]:  # fmt: skip
    """Train ``model`` on ``device`` for ``steps`` steps; a row per checkpoint."""
    from riftco.nn import GPT, GPTConfig
    from riftco.train.data import CharDataset, load_text
    from riftco.train.loop import TrainConfig, Trainer

    m = MODELS[model]
    backend = device.backend
    kind = getattr(backend, "runtime_kind", "") or "?"
    text, source = load_text(None)
    data = CharDataset.from_text(text, m["context"], source)
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=m["context"], layers=m["layers"],
                    heads=m["heads"], width=m["width"])  # fmt: skip
    trainer = Trainer(GPT(cfg, device=device, seed=0), data,
                      TrainConfig(steps=steps, batch_size=m["batch"]), capture=capture)  # fmt: skip
    marks = sorted({s for s in CHECKPOINTS if s <= steps} | {steps})
    times: list[float] = []
    cpu: list[float] = []
    rows = []
    for step in range(1, steps + 1):
        measured = step in marks
        if measured:
            backend.reset_transfer_stats()
            scanned0 = _scanned()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = trainer.train_step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if measured:
            stats = backend.transfer_stats()
            window = times[-WINDOW:]
            rows.append({
                "runtime": kind, "step": step, "loss": float(loss),
                "ms_per_step": 1e3 * sum(window) / len(window),
                "cpu_ms_per_step": 1e3 * sum(cpu[-WINDOW:]) / len(window),
                "dispatches": stats["launches"],
                "command_buffers": stats.get("command_buffers", stats["launches"]),
                "host_waits": stats.get("drains"),
                "entries_scanned": _scanned() - scanned0,
                **_live(backend),
            })  # fmt: skip
            say(f"  {kind} step {step}: {rows[-1]}")
    return rows


COLUMNS = ["runtime", "step", "ms_per_step", "cpu_ms_per_step", "dispatches",
           "command_buffers", "host_waits", "live_objects", "param_buffers_cached",
           "live_command_buffers", "entries_scanned", "peak_rss_mb"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2500)
    p.add_argument("--runtime", choices=("objc", "metalcompute", "both"), default="both")
    p.add_argument("--model", choices=sorted(MODELS), default="train")
    p.add_argument("--no-capture", action="store_true", help="eager steps (make train replays)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    kinds = ("objc", "metalcompute") if args.runtime == "both" else (args.runtime,)
    rows = []
    for kind in kinds:
        rows += run(standin_device(kind), args.steps, args.model, not args.no_capture)
    result = {
        "machine": machine(),
        "model": {args.model: MODELS[args.model]},
        "capture": not args.no_capture,
        "steps": args.steps,
        "rows": rows,
        "note": "PoCL on a CPU, on riftco's fakes of Metal: not measured on a Mac",
    }
    print(json.dumps(result, indent=1))
    print(table(rows, COLUMNS))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
