"""Conformance data of ``primitive/memory.py``: views in every layout, fills of special
values, and the malformed allocations and transfers that must raise."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..memory import allocate, copy_strided, download, fill_, upload

_VIEW_EDGES = smp.edges(
    *({"label": lay, "shape": (5, 33), "layout": lay} for lay in smp.LAYOUTS),
    {"label": "0-d", "shape": ()},
    {"label": "empty", "shape": (3, 0)},
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "permuted rank 4", "shape": (2, 3, 4, 5), "layout": "permuted"},
    {"label": "offset rank 3", "shape": (2, 3, 7), "layout": "offset"},
)


def _draw_view(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(1, 4), "layout": d.choice(smp.LAYOUTS)}


def _build_view(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    return smp.Example(
        smp.label(p), [smp.Arr(smp.normal(smp.rng_of(p), p["shape"]), layout=p["layout"])], params=p
    )


def _build_fill(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x = smp.Arr(smp.normal(smp.rng_of(p), p["shape"]))
    return smp.Example(f"{smp.label(p)}, value {p['value']!r}", [x, p["value"]], params=p)


def _call_fill(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    x, value = args
    fill_(x, value)
    return x


def _draw_fill(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(1, 3), "value": d.choice((0.0, -0.0, 1.5, -3.25e8, 7.0))}


_FILL_EDGES = smp.edges(
    *({"label": "special", "shape": (3, 5), "value": v} for v in (np.nan, np.inf, -np.inf, -0.0)),
    {"label": "empty", "shape": (0,), "value": 1.0},
)
_VIEWS = smp.Samples(
    _build_view, _VIEW_EDGES, _draw_view, bench={"shape": (1024, 1024), "layout": "transposed"}
)

SAMPLES = {
    "allocate": smp.SampleSet(errors=(
        smp.error("allocate_negative_dim", "allocate",
                  lambda t: allocate(t.backend, (2, -1), t.float_dtype)),
        smp.error("allocate_unsupported_dtype", "allocate",
                  lambda t: allocate(t.backend, (2,), t.unsupported_dtype()), "unsupported"),
    )),
    "from_numpy": smp.SampleSet(errors=(
        smp.error("from_numpy_unsupported_dtype", "from_numpy",
                  lambda t: upload(t.backend, np.zeros(2, t.unsupported_dtype())), "unsupported"),
        smp.error("from_numpy_bool", "from_numpy", lambda t: upload(t.backend, np.zeros(2, bool))),
    )),
    "to_numpy": smp.SampleSet(_VIEWS, (
        smp.error("to_numpy_of_list", "to_numpy", lambda t: download([1.0])),  # type: ignore[arg-type]
    )),
    "copy_strided": smp.SampleSet(_VIEWS, (
        smp.error("copy_strided_of_array", "copy_strided", lambda t: copy_strided(np.zeros(2))),
    )),
    "fill": smp.SampleSet(
        smp.Samples(_build_fill, _FILL_EDGES, _draw_fill, call=_call_fill,
                    bench={"shape": (1024, 1024), "value": 1.0}),
        (smp.error("fill_view", "fill_", lambda t: fill_(t.f(4, 6).transpose(), 1.0)),),
    ),
}  # fmt: skip
