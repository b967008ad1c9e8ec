"""The capture section: every op unit's edge samples, eager vs recorded and replayed.

``riftco.capture`` replays a step as the backend calls it recorded, so a backend whose
methods depend on something besides their arguments (a cached pointer of an earlier
call's buffer, state kept between calls, a launch that reads a stale binding) gives
other bits on replay than eagerly. For each unit and dtype, each edge sample is called
through ``capture`` until the fourth call is a replay, each time on freshly uploaded
inputs; the replay's outputs (and, for an in-place op, the tensors it writes) must equal,
bit for bit, those of an eager call on the same inputs. The replay's inputs are another
draw of the sample (another seed: same shapes, other values) than the recording's, so a
backend that kept a recorded call's buffer or values, which would still hold the same
numbers, cannot pass by accident. A unit whose call cannot be replayed
(``Captured.refused``) fails with the reason.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import riftco
from riftco.errors import DeviceLostError
from riftco.ops.dispatch import composite_of
from riftco.ops.opunit import OpUnit
from riftco.ops.samples import Arr, Ctx
from riftco.tensor import Tensor

from .inputs import tensors, upload_args
from .results import CaseResult
from .runner import _crash, _same_bits, _written, arrays


def capture_case_id(unit: OpUnit, dtype: np.dtype, composite: bool = False) -> str:
    return f"capture/{unit.name}[{dtype.name}{',composite' if composite else ''}]"


def capture_results(
    unit: OpUnit, ctx: Ctx, backend: Any, composite: bool = False
) -> list[CaseResult]:
    """``composite``: capture core's composite of a fused op the backend has natively (its
    views and intermediates are the replay's to rebuild)."""
    cid = capture_case_id(unit, ctx.dtype, composite)
    mode = "composite" if composite else "-"
    res = CaseResult(cid, unit.name, "capture", ctx.dtype.name, mode)
    if unit.name in NOT_CAPTURED:
        res.status, res.reason = "skip", NOT_CAPTURED[unit.name]
        return [res]
    with np.errstate(all="ignore"):  # inf - inf in an all -inf row is the contract
        _run(unit, ctx, backend, res, composite)
    return [res]


#: Units a captured step cannot contain, by design.
NOT_CAPTURED = {
    "to_numpy": "a download: a captured step returns its tensors and the caller reads them",
}


def _run(unit: OpUnit, ctx: Ctx, backend: Any, res: CaseResult, composite: bool) -> None:
    start = time.perf_counter()
    samples = unit.samples
    assert samples is not None
    function = unit.function or getattr(riftco.ops, unit.name)
    fn = composite_of(unit, function) if composite else function
    assert fn is not None
    written = _written(unit)
    try:
        variants = [
            p for e in samples.edges if not e.get("boundary") for p in _layouts(e, samples.layouts)
        ]  # the edges past kernels' chunk sizes test kernels, not recording
        for params in variants:
            ex = samples.build(params, ctx)
            other = _other_draw(samples, params, ctx, ex)

            def fresh(ex: Any = ex) -> list[Any]:
                return upload_args(ex, backend, ctx.dtype, reference=False)

            def outputs(args: list[Any], out: Any) -> list[np.ndarray]:
                got = arrays(out)
                for i in sorted(written):  # what an in-place op wrote, as the host sees it
                    if i < len(args):
                        got += [t.numpy() for t in tensors([args[i]])]
                return got

            args = fresh(other)
            want = outputs(args, samples.call(fn, args, other.kwargs))
            template = fresh()

            def step(*flat: Tensor, template: list[Any] = template, ex: Any = ex) -> Any:
                return samples.call(fn, _rebuild(template, list(flat)), ex.kwargs)

            cap = riftco.capture(step, warn=False)
            for call in range(4):  # as written, recorded twice, replayed (on other data)
                args = fresh(other if call == 3 else ex)
                got = outputs(args, cap(*tensors(args)))
            res.examples += 1
            seen = other.describe() + ("" if other is ex else f"; recorded on {ex.describe()}")
            if cap.stats.replayed != 1:
                res.status = "fail"
                res.reason = f"not replayed: {cap.refused or 'no plan after three calls'}"
                res.example = seen
                break
            bad = [
                i for i, (a, b) in enumerate(zip(got, want, strict=False)) if not _same_bits(a, b)
            ]
            if bad or len(got) != len(want):
                res.status = "fail"
                names = list(unit.outputs) + [f"out{i}" for i in range(len(unit.outputs), 64)]
                what = ", ".join(names[i] for i in bad) or f"{len(got)} outputs, {len(want)}"
                res.reason = f"replay differs from the eager call in {what}"
                res.example = seen
                break
    except DeviceLostError:  # the run's end (suite.run_target), not this case's error
        raise
    except Exception as exc:  # noqa: BLE001 - the case's error, never the run's
        res.status, res.reason = "error", _crash(exc)
    res.time_s = time.perf_counter() - start


def _other_draw(samples: Any, params: dict[str, Any], ctx: Ctx, ex: Any) -> Any:
    """The sample drawn with another seed when that gives the same call with other values
    (same argument shapes, kinds, layouts, numbers and keywords), else ``ex`` itself (a
    sample whose values are written out, or whose shapes follow the seed)."""
    step = max(1, len(ctx.index_dtypes))  # the seed also picks the index dtype: keep it
    other = samples.build({**params, "seed": int(params.get("seed", 0)) + step}, ctx)
    return other if _same_call(ex, other) else ex


def _same_call(a: Any, b: Any) -> bool:
    def sig(x: Any) -> Any:
        if isinstance(x, Arr):
            return ("arr", x.value.shape, x.kind, x.layout, x.index_dtype)
        if isinstance(x, list):
            return [sig(y) for y in x]
        return ("value", repr(x))

    return sig(a.args) == sig(b.args) and repr(a.kwargs) == repr(b.kwargs)


def _layouts(params: dict[str, Any], allowed: tuple[str, ...]) -> list[dict[str, Any]]:
    """The edge as it is, and as strided and transposed views where the unit takes them
    (a replay rebuilds every view of its arguments: offsets and strides must survive)."""
    if "layout" in params:
        return [params]
    return [params] + [
        {**params, "layout": lay} for lay in ("sliced", "transposed") if lay in allowed
    ]


def _rebuild(template: list[Any], flat: list[Tensor]) -> list[Any]:
    """``template``'s arguments with its tensors (lists included) taken from ``flat``."""
    out: list[Any] = []
    for a in template:
        if isinstance(a, Tensor):
            out.append(flat.pop(0))
        elif isinstance(a, list) and a and isinstance(a[0], Tensor):
            out.append([flat.pop(0) for _ in a])
        else:
            out.append(a)
    return out
