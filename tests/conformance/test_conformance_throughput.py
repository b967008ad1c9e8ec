"""The certificate's throughput rows: every op with a bench example and a cost model gets a
row without an error (matmul's cost model once unpacked four arguments from the two
positional ones the runner passed, an error row on every backend)."""

from __future__ import annotations

import numpy as np
import riftco
from riftco.conformance import throughput as tp
from riftco.ops import units
from riftco.ops.samples import Ctx


def _ctx() -> Ctx:
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    return Ctx(f32, (f32, f64), (np.dtype(np.int32), np.dtype(np.int64)))


def test_every_op_with_a_bench_example_gets_a_throughput_row_without_error() -> None:
    backend = riftco.device("cpu").backend
    rows = tp.measure(backend, _ctx())
    benched = [u.name for u in units() if u.samples and u.samples.bench and u.cost]
    assert sorted(r.op for r in rows) == sorted(benched)
    errors = [(r.op, r.error) for r in rows if r.error]
    assert errors == []
    for r in rows:
        assert r.seconds > 0 and np.isfinite(r.seconds), r
        assert r.gbytes_per_s > 0, r  # every op moves bytes


def test_cost_models_see_keyword_flags_at_their_places() -> None:
    """matmul's flags arrive as keywords: the cost sees them, and counts 2*M*N*K flops."""
    backend = riftco.device("cpu").backend
    a = riftco.ops.upload(backend, np.zeros((2, 5, 3), np.float32))
    b = riftco.ops.upload(backend, np.zeros((2, 7, 3), np.float32))
    unit = next(u for u in units() if u.name == "matmul")
    assert unit.cost is not None
    args = tp.call_arguments(riftco.ops.matmul, [a, b], {"transpose_b": True})
    assert args[2:] == [False, True]
    nbytes, flops = unit.cost(args)
    m, k, n, batch = 5, 3, 7, 2
    assert flops == 2 * batch * m * n * k
    assert nbytes == (2 * 5 * 3 + 2 * 7 * 3 + batch * m * n) * 4
