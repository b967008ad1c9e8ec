"""Per-batch cost of a compiled loss head vs the autograd tape, same loss.

The loss head is softmax cross-entropy over ``[N, 65]`` logits with integer targets (the
tiny transformer's vocabulary). Contenders, timed interleaved in one run:

- ``compiled``: ``CompiledObjective.loss_and_grad`` (one-hot on device, flat schedule,
  differentiated once at setup);
- ``compiled_dense``: the same schedule fed a prebuilt one-hot (the graph alone);
- ``autograd``: ``Variable`` + ``riftco.autograd.cross_entropy`` + ``backward()`` (fused
  cross-entropy kernel, a fresh tape per batch), when riftco.autograd is present.

Run: ``python bench/objective.py [--backend cpu] [--repeat 30]``. Prints a table, writes
bench/results/objective.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, summarize, table, time_calls, write_json  # noqa: E402
from riftco.symbolic import one_hot, softmax_cross_entropy_objective  # noqa: E402

VOCAB = 65


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--sizes", default="64,256,1024,4096")
    args = ap.parse_args()
    dev = riftco.device(args.backend)
    try:
        from riftco.autograd import Variable, cross_entropy
    except ImportError:
        Variable = cross_entropy = None  # noqa: N806
    obj = softmax_cross_entropy_objective(VOCAB)
    rng = np.random.default_rng(0)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        z = riftco.tensor(rng.standard_normal((n, VOCAB)).astype(np.float32), device=dev)
        ids = riftco.tensor(rng.integers(0, VOCAB, n).astype(np.int32), device=dev)
        dense = one_hot(ids, VOCAB, z)

        def compiled(z=z, ids=ids) -> None:
            obj.loss_and_grad(z, ids)[1].backend.synchronize()

        def compiled_dense(z=z, dense=dense) -> None:
            obj.loss_and_grad(z, dense)[1].backend.synchronize()

        def tape(z=z, ids=ids) -> None:
            v = Variable(z, requires_grad=True)
            cross_entropy(v, ids).backward()
            v.grad.backend.synchronize()

        contenders = {"compiled": compiled, "compiled_dense": compiled_dense}
        if Variable is not None:
            contenders["autograd"] = tape
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(args.repeat):  # interleaved: the machine is shared and noisy
            for name, fn in contenders.items():
                samples[name] += time_calls(fn, repeat=1, warmup=0)
        row: dict = {"N": n}
        for name, s in samples.items():
            row[f"{name}_ms"] = summarize(s)["median_ms"]
        if "autograd_ms" in row:
            row["compiled/autograd"] = row["compiled_ms"] / row["autograd_ms"]
            row["dense/autograd"] = row["compiled_dense_ms"] / row["autograd_ms"]
        rows.append(row)
    columns = list(rows[0].keys())
    print(f"softmax cross-entropy head over [N, {VOCAB}] on {dev}; median of {args.repeat}")
    print(table(rows, columns))
    path = write_json(
        "objective",
        {"machine": machine(), "backend": str(dev), "vocab": VOCAB, "rows": rows,
         "nodes": {"loss": len(obj.loss_program.schedule),
                   "gradient": len(obj.gradient_program.schedule),
                   "joint": len(obj.program.schedule)}},
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
