"""Conformance data of ``primitive/binary.py``: every layout pairing, NaN and signed
zeros, divisors away from zero, powers of positive bases, and the malformed calls (shape
mismatch, implicit broadcast, mixed devices or dtypes) that must raise."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...samples import (
    Arr,
    Ctx,
    Draw,
    ErrorSample,
    Example,
    Params,
    Samples,
    SampleSet,
    edges,
    error,
    grid,
    label,
    log_uniform,
    normal,
    rng_of,
    signed_away_from_zero,
    with_specials,
)
from .. import binary
from .unary import elementwise_edges

EDGES = elementwise_edges(
    (0, 5),
    {"layout": "dense", "layout_b": "broadcast"},
    {"label": "mixed layouts", "shape": (6, 5), "layout": "transposed", "layout_b": "broadcast"},
    {"label": "mixed layouts 2", "shape": (4, 6), "layout": "offset", "layout_b": "sliced"},
)

GENERATORS: dict[str, Any] = {
    "add": (normal, normal),
    "sub": (normal, normal),
    "mul": (normal, normal),
    "div": (normal, signed_away_from_zero),
    "maximum": (grid, grid),  # a grid makes equal operands common
    "minimum": (grid, grid),
}


def _binary_samples(op: str) -> Samples:
    gens = GENERATORS[op]

    def build(p: Params, ctx: Ctx) -> Example:
        rng = rng_of(p)
        a, b = (g(rng, p["shape"]) for g in gens)
        if p.get("special"):
            specials = (np.nan, np.inf, -np.inf, 0.0, -0.0)
            a, b = with_specials(a, rng, *specials), with_specials(b, rng, *specials)
        lay_b = str(p.get("layout_b", p["layout"]))
        return Example(label(p), [Arr(a, layout=p["layout"]), Arr(b, layout=lay_b)], params=p)

    def draw(d: Draw) -> Params:
        return {"shape": d.shape()}

    return Samples(build, EDGES, draw, bench={"shape": (1024, 1024)})


SCALAR_VALUES: dict[str, tuple[float, ...]] = {
    "add_scalar": (1.5, -2.0, 0.0, 1e-3),
    "mul_scalar": (2.0, -0.5, 0.0, 1e3),
    "pow_scalar": (2.0, 3.0, -1.0, 0.5, -1.5, 0.0),
}


def _scalar_samples(op: str) -> Samples:
    values = SCALAR_VALUES[op]

    def build(p: Params, ctx: Ctx) -> Example:
        rng, value = rng_of(p), p["value"]
        if op == "pow_scalar" and not float(value).is_integer():
            x = log_uniform(rng, p["shape"], 0.1, 10.0)  # fractional powers need x > 0
        elif op == "pow_scalar":
            x = signed_away_from_zero(rng, p["shape"])
        else:
            x = normal(rng, p["shape"], 2.0)
        if p.get("special"):
            x = with_specials(x, rng, np.nan, np.inf, -np.inf, 0.0)
        return Example(label(p), [Arr(x, layout=p["layout"]), value], params=p)

    def draw(d: Draw) -> Params:
        return {"shape": d.shape(), "value": d.choice(values)}

    edge = tuple({**e, "value": v} for e in EDGES for v in values[:1] if "layout_b" not in e)
    edge += tuple({**edges({"label": "NaN and +-inf", "shape": (3, 9), "special": True})[0],
                   "value": v} for v in values)  # fmt: skip
    return Samples(build, edge, draw, bench={"shape": (1024, 1024), "value": values[0]})


def _binary_errors(name: str, fn: Any) -> tuple[ErrorSample, ...]:
    return (
        error(f"{name}_shape_mismatch", name, lambda t: fn(t.f(3, 4), t.f(4, 3))),
        error(f"{name}_no_implicit_broadcast", name, lambda t: fn(t.f(3, 4), t.f(1, 4))),
        error(f"{name}_mixed_devices", name, lambda t: fn(t.f(2, 2), t.other_device(2, 2))),
        error(f"{name}_mixed_dtypes", name, lambda t: fn(t.f(2), t.other_float(2)),
              "other_float"),
        error(f"{name}_index_dtype", name, lambda t: fn(t.i(3), t.i(3)), "index"),
    )  # fmt: skip


def _scalar_errors(name: str, fn: Any) -> tuple[ErrorSample, ...]:
    return (error(f"{name}_tensor_scalar", name, lambda t: fn(t.f(3), t.f(3))),
            error(f"{name}_bool_scalar", name, lambda t: fn(t.f(3), True)))  # fmt: skip


SAMPLES = {
    **{name: SampleSet(_binary_samples(name), _binary_errors(name, getattr(binary, name)))
       for name in GENERATORS},
    **{name: SampleSet(_scalar_samples(name), _scalar_errors(name, getattr(binary, name)))
       for name in SCALAR_VALUES},
}  # fmt: skip
