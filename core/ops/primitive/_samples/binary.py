"""Conformance data of ``primitive/binary.py``: every layout pairing, NaN and signed
zeros, divisors away from zero, powers of positive bases, and the malformed calls (shape
mismatch, implicit broadcast, mixed devices or dtypes) that must raise."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from .. import binary
from .unary import elementwise_edges

EDGES = elementwise_edges(
    (0, 5),
    {"layout": "dense", "layout_b": "broadcast"},
    {"label": "mixed layouts", "shape": (6, 5), "layout": "transposed", "layout_b": "broadcast"},
    {"label": "mixed layouts 2", "shape": (4, 6), "layout": "offset", "layout_b": "sliced"},
)

GENERATORS: dict[str, Any] = {
    "add": (smp.normal, smp.normal),
    "sub": (smp.normal, smp.normal),
    "mul": (smp.normal, smp.normal),
    "div": (smp.normal, smp.signed_away_from_zero),
    "maximum": (smp.grid, smp.grid),  # a grid makes equal operands common
    "minimum": (smp.grid, smp.grid),
}


def _binary_samples(op: str) -> smp.Samples:
    gens = GENERATORS[op]

    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        a, b = (g(rng, p["shape"]) for g in gens)
        if p.get("special"):
            specials = (np.nan, np.inf, -np.inf, 0.0, -0.0)
            a, b = smp.with_specials(a, rng, *specials), smp.with_specials(b, rng, *specials)
        lay_b = str(p.get("layout_b", p["layout"]))
        return smp.Example(
            smp.label(p), [smp.Arr(a, layout=p["layout"]), smp.Arr(b, layout=lay_b)], params=p
        )

    def draw(d: smp.Draw) -> smp.Params:
        return {"shape": d.shape()}

    return smp.Samples(build, EDGES, draw, bench={"shape": (1024, 1024)})


SCALAR_VALUES: dict[str, tuple[float, ...]] = {
    "add_scalar": (1.5, -2.0, 0.0, 1e-3),
    "mul_scalar": (2.0, -0.5, 0.0, 1e3),
    "pow_scalar": (2.0, 3.0, -1.0, 0.5, -1.5, 0.0),
}


def _scalar_samples(op: str) -> smp.Samples:
    values = SCALAR_VALUES[op]

    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng, value = smp.rng_of(p), p["value"]
        if op == "pow_scalar" and not float(value).is_integer():
            x = smp.log_uniform(rng, p["shape"], 0.1, 10.0)  # fractional powers need x > 0
        elif op == "pow_scalar":
            x = smp.signed_away_from_zero(rng, p["shape"])
        else:
            x = smp.normal(rng, p["shape"], 2.0)
        if p.get("special"):
            x = smp.with_specials(x, rng, np.nan, np.inf, -np.inf, 0.0)
        return smp.Example(smp.label(p), [smp.Arr(x, layout=p["layout"]), value], params=p)

    def draw(d: smp.Draw) -> smp.Params:
        return {"shape": d.shape(), "value": d.choice(values)}

    edge = tuple({**e, "value": v} for e in EDGES for v in values[:1] if "layout_b" not in e)
    edge += tuple({**smp.edges({"label": "NaN and +-inf", "shape": (3, 9), "special": True})[0],
                   "value": v} for v in values)  # fmt: skip
    return smp.Samples(build, edge, draw, bench={"shape": (1024, 1024), "value": values[0]})


def _binary_errors(name: str, fn: Any) -> tuple[smp.ErrorSample, ...]:
    return (
        smp.error(f"{name}_shape_mismatch", name, lambda t: fn(t.f(3, 4), t.f(4, 3))),
        smp.error(f"{name}_no_implicit_broadcast", name, lambda t: fn(t.f(3, 4), t.f(1, 4))),
        smp.error(f"{name}_mixed_devices", name, lambda t: fn(t.f(2, 2), t.other_device(2, 2))),
        smp.error(f"{name}_mixed_dtypes", name, lambda t: fn(t.f(2), t.other_float(2)),
                  "other_float"),
        smp.error(f"{name}_index_dtype", name, lambda t: fn(t.i(3), t.i(3)), "index"),
    )  # fmt: skip


def _scalar_errors(name: str, fn: Any) -> tuple[smp.ErrorSample, ...]:
    return (smp.error(f"{name}_tensor_scalar", name, lambda t: fn(t.f(3), t.f(3))),
            smp.error(f"{name}_bool_scalar", name, lambda t: fn(t.f(3), True)))  # fmt: skip


SAMPLES = {
    **{name: smp.SampleSet(_binary_samples(name), _binary_errors(name, getattr(binary, name)))
       for name in GENERATORS},
    **{name: smp.SampleSet(_scalar_samples(name), _scalar_errors(name, getattr(binary, name)))
       for name in SCALAR_VALUES},
}  # fmt: skip
