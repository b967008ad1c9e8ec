"""What ``add_layer_norm`` (residual add fused with LayerNorm) saves, before/after.

Two measurements per backend, A/B interleaved in one run (the machines are shared):

* the op alone on the ``make train`` model's rows ``(B*T, C) = (1024, 128)``: forward
  ``add`` + ``layer_norm`` vs ``add_layer_norm``; backward ``layer_norm_backward`` +
  ``add`` (autograd's accumulation) vs ``add_layer_norm_backward``;
* the ``make train`` model's whole step (4 layers, 4 heads, width 128, context 64,
  batch 16; forward, backward, AdamW; eager, no capture): the same weights in two models,
  one built as before (each ``LayerNorm.add_forward`` replaced by ``x + r`` then the
  LayerNorm: main's graph), steps alternating between them.

Prints a table and the JSON (also written to bench/results/fusion_add_layer_norm.json).

    python bench/fusion_add_layer_norm.py [--backends cpu,native,opencl] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, round_robin, table, write_json  # noqa: E402
from riftco import ops  # noqa: E402
from riftco.autograd import Variable  # noqa: E402
from riftco.nn import GPT, GPTConfig  # noqa: E402
from riftco.nn.layers import LayerNorm  # noqa: E402
from riftco.optim import AdamW  # noqa: E402

CONFIG = GPTConfig()  # what `make train` trains: riftco train's defaults
BATCH = 16


def _unfused_add_forward(self: LayerNorm, x: Variable, r: Variable) -> tuple[Variable, Variable]:
    s = x + r
    return s, self(s)


@contextmanager
def unfused() -> Iterator[None]:
    """The model's graph as it was before add_layer_norm (plain add, then LayerNorm)."""
    fused = LayerNorm.add_forward
    LayerNorm.add_forward = _unfused_add_forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        LayerNorm.add_forward = fused  # type: ignore[method-assign]


def interleaved_ms(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median ms per call of each function, calls alternating round-robin after warm-up."""
    return {k: sec * 1e3 for k, sec in round_robin(fns, repeat, warmup=2).items()}


def op_rows(backend: str, repeat: int) -> list[dict[str, Any]]:
    dev = riftco.device(backend)
    rng = np.random.default_rng(0)
    rows, c = BATCH * CONFIG.context, CONFIG.width

    def t(*shape: int) -> riftco.Tensor:
        return riftco.tensor(rng.standard_normal(shape).astype(np.float32), device=dev)

    x, r, dy, ds, gamma, beta = t(rows, c), t(rows, c), t(rows, c), t(rows, c), t(c), t(c)
    s, _, mean, rstd = ops.add_layer_norm(x, r, gamma, beta)
    sync = dev.backend.synchronize

    def before_fwd() -> None:
        ops.layer_norm(ops.add(x, r), gamma, beta)
        sync()

    def after_fwd() -> None:
        ops.add_layer_norm(x, r, gamma, beta)
        sync()

    def before_bwd() -> None:
        ops.add(ds, ops.layer_norm_backward(dy, s, gamma, mean, rstd)[0])
        sync()

    def after_bwd() -> None:
        ops.add_layer_norm_backward(dy, ds, s, gamma, mean, rstd)
        sync()

    ms = interleaved_ms({"bf": before_fwd, "af": after_fwd, "bb": before_bwd, "ab": after_bwd},
                        repeat)  # fmt: skip
    return [
        {"backend": backend, "what": f"op {p} ({rows}x{c})", "before_ms": ms["b" + k],
         "after_ms": ms["a" + k], "ratio": ms["b" + k] / ms["a" + k]}
        for k, p in (("f", "forward"), ("b", "backward"))
    ]  # fmt: skip


def step_rows(backend: str, steps: int) -> list[dict[str, Any]]:
    dev = riftco.device(backend)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, CONFIG.vocab, (2, BATCH, CONFIG.context)).astype(np.int32)
               for _ in range(4)]  # fmt: skip
    out = []
    for mode in ("materialized", "flash"):
        cfg = GPTConfig(**{**CONFIG.to_dict(), "attention": mode})
        runs = {}
        for name in ("before", "after"):
            model = GPT(cfg, device=dev, seed=0)
            opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

            def step(model: GPT = model, opt: AdamW = opt, name: str = name) -> float:
                xb, yb = batches[int(rng.integers(len(batches)))]
                if name == "before":
                    with unfused():
                        loss = model.loss(riftco.tensor(xb, device=dev),
                                          riftco.tensor(yb, device=dev))  # fmt: skip
                else:
                    loss = model.loss(riftco.tensor(xb, device=dev), riftco.tensor(yb, device=dev))
                loss.backward()
                opt.step()
                return float(loss.item())  # the sync point

            runs[name] = step
        ms = interleaved_ms(runs, steps)
        out.append({"backend": backend, "what": f"train step ({mode[:5]})",
                    "before_ms": ms["before"], "after_ms": ms["after"],
                    "ratio": ms["before"] / ms["after"]})  # fmt: skip
    return out


def available(names: list[str]) -> tuple[list[str], list[str]]:
    reg = riftco.get_registry()
    ok, skipped = [], []
    for n in names:
        e = reg.entries.get(n)
        if e is not None and e.available and e.devices():
            ok.append(n)
        else:
            skipped.append(f"{n}: {'unknown' if e is None else e.reason or 'no device'}")
    return ok, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cpu,native,opencl")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per model and mode")
    ap.add_argument("--repeat", type=int, default=100, help="timed calls per op variant")
    args = ap.parse_args()
    host = machine()
    backends, skipped = available(args.backends.split(","))
    rows: list[dict[str, Any]] = []
    for b in backends:
        rows += op_rows(b, args.repeat)
        rows += step_rows(b, args.steps)
    print(f"machine: {host['summary']}")
    for line in skipped:
        print(f"skipped {line}")
    print(table(rows, ["backend", "what", "before_ms", "after_ms", "ratio"]))
    payload = {"machine": host, "config": CONFIG.to_dict(), "batch": BATCH, "steps": args.steps,
               "repeat": args.repeat, "rows": rows, "skipped": skipped}  # fmt: skip
    path = write_json("fusion_add_layer_norm", payload)
    print(json.dumps({"rows": rows, "skipped": skipped, "json": str(path)}, indent=1))


if __name__ == "__main__":
    main()
