"""The optional ops' specifications are complete where a backend author reads them.

Each optional method's protocol docstring (its op unit in ``core/ops/fused/``) states its
math, a ``Special values:`` paragraph (NaN, infinities, -0.0, empty shapes) and a
``Composite:`` paragraph naming the other optional ops core's composite calls. Checked
against the code: the composite is traced on a backend that has every optional op, and
the special values a docstring states as ``op(x) = y`` (GELU and its derivative) or in
the phrases listed below are computed on the CPU reference.
"""

from __future__ import annotations

import inspect
import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import riftco
from helpers import plugin_for
from riftco import ops
from riftco.backend import FUSED_OPS
from riftco.backends.cpu.backend import CPUBackend
from riftco.conformance.inputs import upload_args
from riftco.ops import unit
from riftco.ops.fused.gelu import gelu_backward_composite, gelu_composite
from riftco.ops.samples import Ctx

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INDEX = (np.dtype(np.int32), np.dtype(np.int64))


def _doc(op: str) -> str:
    return inspect.getdoc(unit(op).method) or ""


def _paragraph(op: str, title: str) -> str:
    """The paragraph of ``op``'s docstring that starts with ``title``, joined into one line."""
    for para in _doc(op).split("\n\n"):
        if para.startswith(title):
            return " ".join(para.split())
    raise AssertionError(f"{op}: its protocol docstring has no '{title}' paragraph")


@pytest.mark.parametrize("op", FUSED_OPS)
def test_docstring_names_every_kind_of_special_value(op: str) -> None:
    text = _paragraph(op, "Special values")
    for word in ("NaN", "inf", "-0.0", "mpty"):  # Empty / empty
        assert word in text, f"{op}: 'Special values' says nothing about {word!r}: {text}"


class _Recorder(CPUBackend):
    """The CPU reference with a note of every optional op called on it."""

    name = "spec-recorder"
    calls: list[str] = []


def _noting(op: str) -> Callable[..., Any]:
    method = getattr(CPUBackend, op)

    def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _Recorder.calls.append(op)
        return method(self, *args, **kwargs)

    return noted


for _op in FUSED_OPS:
    setattr(_Recorder, _op, _noting(_op))


def _composite_calls(op: str, backend: Any) -> set[str]:
    """The optional ops core's composite of ``op`` calls, over every edge sample."""
    u = unit(op)
    assert u.samples is not None and u.composite is not None
    ctx = Ctx(FLOATS[0], FLOATS, INDEX)
    seen: set[str] = set()
    for params in u.samples.edges:
        ex = u.samples.build(params, ctx)
        args = upload_args(ex, backend, ctx.dtype, reference=False)
        _Recorder.calls.clear()
        with np.errstate(all="ignore"):
            u.samples.call(u.composite, args, ex.kwargs)
        seen.update(_Recorder.calls)
    return seen


def test_composite_paragraph_names_the_optional_ops_it_calls(registry: Any) -> None:
    registry.register(plugin_for(_Recorder), name="spec-recorder-plugin")
    backend = registry.instance("spec-recorder", 0)
    wrong = {}
    for op in FUSED_OPS:
        named = set(re.findall(r"``(\w+)``", _paragraph(op, "Composite"))) & set(FUSED_OPS)
        called = _composite_calls(op, backend)
        if named - {op} != called:
            wrong[op] = f"names {sorted(named - {op})}, calls {sorted(called)}"
        if not called:
            assert "primitives only" in _paragraph(op, "Composite"), op
    assert not wrong, wrong


_VALUE = {"NaN": math.nan, "+inf": math.inf, "-inf": -math.inf, "-0.0": -0.0, "0.0": 0.0}
_CLAIM = re.compile(r"``(gelu'?)\((NaN|[+-]inf|-0\.0)\) = (NaN|[+-]inf|-0\.0|[\d.]+)``")


def _gelu_claims() -> list[tuple[str, str, str, str]]:
    found = []
    for op in ("gelu", "gelu_backward", "linear_gelu", "linear_gelu_backward"):
        for fn, x, y in _CLAIM.findall(_doc(op)):
            found.append((op, fn, x, y))
    return found


def test_gelu_docstrings_state_special_values_the_reference_computes() -> None:
    claims = _gelu_claims()
    stated = {(fn, x) for _, fn, x, _ in claims}
    for fn in ("gelu", "gelu'"):  # every special input is stated for both functions
        assert {(fn, x) for x in ("NaN", "+inf", "-inf", "-0.0")} <= stated, fn
    backend = riftco.device("cpu").backend
    for op, fn, x, y in claims:
        want = _VALUE.get(y, None)
        want = float(y) if want is None else want
        for dtype in FLOATS:
            for form in ("tanh", "none"):
                xs = ops.upload(backend, np.array([_VALUE[x]], dtype))
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    if fn == "gelu":
                        got = [ops.gelu(xs, form), gelu_composite(xs, form)]
                    else:
                        dy = ops.upload(backend, np.ones(1, dtype))
                        got = [ops.gelu_backward(dy, xs, form),
                               gelu_backward_composite(dy, xs, form)]  # fmt: skip
                for value in (float(ops.download(g)[0]) for g in got):
                    same = (math.isnan(want) and math.isnan(value)) or (
                        value == want and math.copysign(1, value) == math.copysign(1, want)
                    )
                    assert same, f"{op} says {fn}({x}) = {y}; {dtype} {form} gives {value}"


def _rows(op: str, *arrays: Any) -> list[np.ndarray]:
    backend = riftco.device("cpu").backend
    args = [ops.upload(backend, np.asarray(a)) if isinstance(a, (list, np.ndarray)) else a
            for a in arrays]  # fmt: skip
    with np.errstate(all="ignore"):
        out = getattr(ops, op)(*args)
    return [ops.download(o) for o in (out if isinstance(out, tuple) else (out,))]


_INF, _NAN = math.inf, math.nan
_IDS = np.array([0, 1, 2], np.int32)
#: (op, a phrase of its docstring, a check on the CPU reference that the phrase is true)
_PHRASES: list[tuple[str, str, Callable[[], bool]]] = [
    ("softmax", "a ``-inf`` entry gives 0",
     lambda: _rows("softmax", [[-_INF, 0.0, 0.0]])[0][0, 0] == 0.0),
    ("softmax", "a row that is all ``-inf`` gives NaN",
     lambda: np.isnan(_rows("softmax", [[-_INF, -_INF]])[0]).all()),
    ("softmax", "a ``+inf`` entry makes its row NaN",
     lambda: np.isnan(_rows("softmax", [[_INF, 0.0, 1.0]])[0]).all()),
    ("softmax", "a NaN anywhere in a row gives a NaN row",
     lambda: np.isnan(_rows("softmax", [[_NAN, 0.0], [1.0, 2.0]])[0]).sum() == 2),
    ("layer_norm", "makes its ``mean`` ``+-inf``",
     lambda: _rows("layer_norm", [[_INF, 1.0]], [1.0, 1.0], [0.0, 0.0], 1e-5)[1][0] == _INF),
    ("cross_entropy", "a ``+inf`` logit makes them NaN too",
     lambda: np.isnan(_rows("cross_entropy", [[_INF, 0.0]], np.array([1], np.int32))[0][0])),
    ("cross_entropy", "at the target it makes the loss ``+inf``",
     lambda: _rows("cross_entropy", [[-_INF, 0.0]], np.array([0], np.int32))[0][0] == _INF),
    ("cross_entropy", "An ignored row's loss is 0 even then",
     lambda: _rows("cross_entropy", [[_NAN, 0.0]], np.array([-1], np.int32))[0][0] == 0.0),
    ("embedding", "rows are copied exactly, NaN, ``+-inf`` and ``-0.0`` included",
     lambda: str(_rows("embedding", [[_NAN, _INF, -0.0]], np.array([0], np.int32))[0].tolist())
     == "[[nan, inf, -0.0]]"),
    ("flash_attention", "``lse[i] = log(i + 1)``",
     lambda: np.allclose(_rows("flash_attention", *[np.zeros((1, 1, 3, 2))] * 3, 1.0, True)[1],
                         np.log([1.0, 2.0, 3.0]))),
]  # fmt: skip


@pytest.mark.parametrize("op,phrase,check", _PHRASES, ids=[f"{o}: {p}" for o, p, _ in _PHRASES])
def test_stated_special_values_hold_on_the_reference(
    op: str, phrase: str, check: Callable[[], bool]
) -> None:
    assert phrase in " ".join(_doc(op).split()), f"{op}'s docstring no longer says {phrase!r}"
    assert check(), f"{op}: the CPU reference contradicts its docstring: {phrase!r}"


def test_adam_docstring_writes_out_the_adamw_update() -> None:
    text = _doc("adam_update")
    for piece in ("m    <- beta1 * m + (1 - beta1) * g", "v    <- beta2 * v + (1 - beta2) * g * g",
                  "mhat =  m / (1 - beta1 ** step)", "vhat =  v / (1 - beta2 ** step)",
                  "p    <- p - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)",
                  "decoupled"):  # fmt: skip
        assert piece in text, piece
    # and the reference does exactly that, two steps, against float64 by hand
    rng = np.random.default_rng(1)
    p, g1, g2 = rng.standard_normal((3, 5))
    lr, b1, b2, eps, wd = 0.1, 0.8, 0.95, 1e-3, 0.3
    backend = riftco.device("cpu").backend
    tensors = [ops.upload(backend, a.copy()) for a in (p, np.zeros(5), np.zeros(5))]
    want, m, v = p.copy(), np.zeros(5), np.zeros(5)
    for step, g in ((1, g1), (2, g2)):
        ops.adam_update(tensors[0], ops.upload(backend, g), tensors[1], tensors[2],
                        lr, b1, b2, eps, wd, step)  # fmt: skip
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1**step), v / (1 - b2**step)
        want = want - lr * (mhat / (np.sqrt(vhat) + eps) + wd * want)
    np.testing.assert_allclose(ops.download(tensors[0]), want, rtol=1e-12)
