"""The error contract of every raw op: a riftco error whose message starts with ``[op]``,
raised before any backend method runs.

Operands live on ``spy`` (a CPU backend that records every backend method looked up on
it); mixed-device cases put one operand on ``spy2``. Each case builds its operands, clears
the record, calls the op and asserts both the error and an empty record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pytest
import riftco
from helpers import add_backend
from riftco import ops
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import (
    DeviceMismatchError,
    DomainError,
    DTypeError,
    RiftcoError,
    ShapeError,
)

_RECORDED = frozenset(PRIMITIVE_OPS) | frozenset(FUSED_OPS) | {"result", "wrap"}


class Spy(CPUBackend):
    name = "spy"
    calls: ClassVar[list[str]] = []

    def __getattribute__(self, attr: str) -> Any:
        if attr in _RECORDED:
            Spy.calls.append(attr)
        return super().__getattribute__(attr)


class Spy2(Spy):
    name = "spy2"


class Spy32(Spy):
    name = "spy32"
    dtypes = frozenset({np.dtype(np.float32), np.dtype(np.int32)})


@pytest.fixture
def spies(registry):
    for cls in (Spy, Spy2, Spy32):
        add_backend(registry, cls)
    Spy.calls.clear()
    yield Spy.calls
    Spy.calls.clear()


def T(*shape: int, dtype: str = "float64", dev: str = "spy", values: Any = None) -> riftco.Tensor:
    if values is None:
        values = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)
    return riftco.tensor(np.asarray(values, dtype=dtype), device=dev)


def I(values: Any, dtype: str = "int32", dev: str = "spy") -> riftco.Tensor:  # noqa: E743
    return T(dtype=dtype, dev=dev, values=values)


def Q(**kw: Any) -> riftco.Tensor:
    """One of q, k, v, dout or out: ``[B=1, H=2, T=3, D=4]``."""
    return T(1, 2, 3, 4, **kw)


Build = Callable[[], tuple[Any, ...]]  # -> (function, *arguments)
CASES: list[tuple[str, str, type[RiftcoError], Build]] = []


def case(op: str, why: str, exc: type[RiftcoError], build: Build) -> None:
    CASES.append((op, why, exc, build))


def fn(name: str) -> Callable[..., Any]:
    return getattr(ops, name)


# -- elementwise -----------------------------------------------------------------------------
for o in ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "abs"):
    case(o, "int dtype", DTypeError, lambda o=o: (fn(o), I([1, 2])))
    case(o, "not a tensor", DTypeError, lambda o=o: (fn(o), np.ones(2)))
for o in ("add", "sub", "mul", "div", "maximum", "minimum"):
    case(o, "shapes", ShapeError, lambda o=o: (fn(o), T(2, 3), T(3, 2)))
    case(o, "dtypes", DTypeError, lambda o=o: (fn(o), T(3), T(3, dtype="float32")))
    case(o, "int dtype", DTypeError, lambda o=o: (fn(o), I([1]), I([2])))
    case(o, "devices", DeviceMismatchError, lambda o=o: (fn(o), T(3), T(3, dev="spy2")))
for o in ("add_scalar", "mul_scalar", "pow_scalar"):
    case(o, "int dtype", DTypeError, lambda o=o: (fn(o), I([1]), 2.0))
    case(o, "string scalar", DTypeError, lambda o=o: (fn(o), T(2), "2"))
    case(o, "bool scalar", DTypeError, lambda o=o: (fn(o), T(2), True))
    case(o, "tensor scalar", DTypeError, lambda o=o: (fn(o), T(2), T(1)))
case("where", "shapes", ShapeError, lambda: (ops.where, T(3), T(3), T(4)))
case("where", "dtypes", DTypeError, lambda: (ops.where, T(3, dtype="float32"), T(3), T(3)))
case("where", "devices", DeviceMismatchError, lambda: (ops.where, T(3, dev="spy2"), T(3), T(3)))
case("compare", "unknown op", ShapeError, lambda: (ops.compare, T(3), T(3), "gte"))
case("compare", "shapes", ShapeError, lambda: (ops.compare, T(3), T(2), "lt"))
case("compare", "int dtype", DTypeError, lambda: (ops.compare, I([1]), I([1]), "lt"))
case("compare", "devices", DeviceMismatchError, lambda: (ops.compare, T(3), T(3, dev="spy2"), "eq"))  # noqa: E501
case("cast", "unknown dtype", DTypeError, lambda: (ops.cast, T(3), "complex64"))
case("cast", "index to half", DTypeError, lambda: (ops.cast, T(3, dtype="int32"), "float16"))
case("cast", "half to index", DTypeError,
     lambda: (ops.cast, ops.cast(T(3), "float16"), "int64"))  # fmt: skip
case(
    "cast",
    "backend lacks dtype",
    DTypeError,
    lambda: (ops.cast, T(3, dtype="float32", dev="spy32"), "float64"),
)  # noqa: E501

# -- reductions ------------------------------------------------------------------------------
for o in ("sum", "max", "mean"):
    case(o, "axis range", ShapeError, lambda o=o: (fn(o), T(2, 3), 2))
    case(o, "repeated axis", ShapeError, lambda o=o: (fn(o), T(2, 3), (1, -1)))
    case(o, "int dtype", DTypeError, lambda o=o: (fn(o), I([[1, 2]]), 0))
case("max", "empty axis", ShapeError, lambda: (ops.max, T(2, 0), 1))
case("argmax", "int dtype", DTypeError, lambda: (ops.argmax, I([[1, 2]])))
case("argmax", "rank 0", ShapeError, lambda: (ops.argmax, T()))
case("argmax", "empty axis", ShapeError, lambda: (ops.argmax, T(3, 0)))
case("sum_to_shape", "shapes", ShapeError, lambda: (ops.sum_to_shape, T(2, 3), (2,)))
case("sum_to_shape", "rank", ShapeError, lambda: (ops.sum_to_shape, T(3), (1, 3, 1)))

# -- linear algebra and layout ---------------------------------------------------------------
case("matmul", "rank", ShapeError, lambda: (ops.matmul, T(3), T(3, 2)))
case("matmul", "batch dims", ShapeError, lambda: (ops.matmul, T(2, 3, 4), T(3, 4, 5)))
case("matmul", "inner dims", ShapeError, lambda: (ops.matmul, T(3, 4), T(5, 2)))
case("matmul", "inner dims transposed", ShapeError, lambda: (ops.matmul, T(3, 4), T(4, 2), True))
case("matmul", "dtypes", DTypeError, lambda: (ops.matmul, T(2, 2), T(2, 2, dtype="float32")))
case("matmul", "int dtype", DTypeError, lambda: (ops.matmul, I([[1]]), I([[1]])))
case("matmul", "devices", DeviceMismatchError, lambda: (ops.matmul, T(2, 2), T(2, 2, dev="spy2")))
CAT = ops.concatenate_last_axis
case("concatenate_last_axis", "empty", ShapeError, lambda: (CAT, []))
case("concatenate_last_axis", "lead dims", ShapeError, lambda: (CAT, [T(2, 3), T(3, 3)]))
case("concatenate_last_axis", "rank 0", ShapeError, lambda: (CAT, [T(), T()]))
case("concatenate_last_axis", "dtypes", DTypeError, lambda: (CAT, [T(2), T(2, dtype="float32")]))
case(
    "concatenate_last_axis", "devices", DeviceMismatchError, lambda: (CAT, [T(2), T(2, dev="spy2")])
)  # noqa: E501
case("split_last_axis", "sizes sum", ShapeError, lambda: (ops.split_last_axis, T(2, 5), [2, 2]))
case("split_last_axis", "zero size", ShapeError, lambda: (ops.split_last_axis, T(2, 5), [5, 0]))
case("split_last_axis", "rank 0", ShapeError, lambda: (ops.split_last_axis, T(), [1]))
case("fill_", "view", ShapeError, lambda: (ops.fill_, T(4, 4).T, 1.0))
case("assign_", "shapes", ShapeError, lambda: (ops.assign_, T(3), T(4)))
case("assign_", "dtypes", DTypeError, lambda: (ops.assign_, T(3), T(3, dtype="float32")))
case("assign_", "devices", DeviceMismatchError, lambda: (ops.assign_, T(3), T(3, dev="spy2")))
case("assign_", "partial view", ShapeError, lambda: (ops.assign_, T(4)[:2], T(2)))
case("full_like", "not a tensor", DTypeError, lambda: (ops.full_like, [1.0], 0.0))
case("full_like", "negative dim", ShapeError, lambda: (ops.full_like, T(3), 0.0, (2, -1)))

# -- fused -----------------------------------------------------------------------------------
case("gelu", "int dtype", DTypeError, lambda: (ops.gelu, I([1])))
case("gelu", "approximate", ShapeError, lambda: (ops.gelu, T(3), "erf"))
case("gelu_backward", "shapes", ShapeError, lambda: (ops.gelu_backward, T(3), T(4)))
case("gelu_backward", "int x", DTypeError, lambda: (ops.gelu_backward, T(3), I([1, 2, 3])))
case(
    "gelu_backward",
    "devices",
    DeviceMismatchError,
    lambda: (ops.gelu_backward, T(3), T(3, dev="spy2")),
)  # noqa: E501
case("gelu_backward", "approximate", ShapeError, lambda: (ops.gelu_backward, T(3), T(3), "exact"))
case("softmax", "rank 0", ShapeError, lambda: (ops.softmax, T()))
case("softmax", "int dtype", DTypeError, lambda: (ops.softmax, I([1, 2])))
SMB = ops.softmax_backward
case("softmax_backward", "shapes", ShapeError, lambda: (SMB, T(2, 3), T(3, 2)))
case("softmax_backward", "int y", DTypeError, lambda: (SMB, T(2), I([1, 0])))
case("softmax_backward", "rank 0", ShapeError, lambda: (SMB, T(), T()))
case("softmax_backward", "devices", DeviceMismatchError, lambda: (SMB, T(2), T(2, dev="spy2")))
LN = ops.layer_norm
case("layer_norm", "gamma shape", ShapeError, lambda: (LN, T(2, 4), T(3), T(4)))
case("layer_norm", "beta shape", ShapeError, lambda: (LN, T(2, 4), T(4), T(1, 4)))
case("layer_norm", "eps", ShapeError, lambda: (LN, T(2, 4), T(4), T(4), 0.0))
case("layer_norm", "rank 0", ShapeError, lambda: (LN, T(), T(1), T(1)))
case("layer_norm", "int gamma", DTypeError, lambda: (LN, T(2, 2), I([1, 1]), T(2)))
case("layer_norm", "dtypes", DTypeError, lambda: (LN, T(2, 2), T(2, dtype="float32"), T(2)))
case("layer_norm", "devices", DeviceMismatchError, lambda: (LN, T(2, 2), T(2), T(2, dev="spy2")))
LNB = ops.layer_norm_backward
case(
    "layer_norm_backward",
    "mean shape",
    ShapeError,
    lambda: (LNB, T(2, 3), T(2, 3), T(3), T(3), T(2)),
)  # noqa: E501
case(
    "layer_norm_backward",
    "rstd shape",
    ShapeError,
    lambda: (LNB, T(2, 3), T(2, 3), T(3), T(2), T(2, 1)),
)  # noqa: E501
case(
    "layer_norm_backward", "dy shape", ShapeError, lambda: (LNB, T(3, 2), T(2, 3), T(3), T(2), T(2))
)  # noqa: E501
case("layer_norm_backward", "rank 0", ShapeError, lambda: (LNB, T(), T(), T(1), T(), T()))
case(
    "layer_norm_backward",
    "int rstd",
    DTypeError,
    lambda: (LNB, T(1, 3), T(1, 3), T(3), T(1), I([1])),
)  # noqa: E501
case(
    "layer_norm_backward",
    "devices",
    DeviceMismatchError,
    lambda: (LNB, T(1, 3), T(1, 3), T(3, dev="spy2"), T(1), T(1)),
)  # noqa: E501
EMB, EMBB = ops.embedding, ops.embedding_backward
case("embedding", "table rank", ShapeError, lambda: (EMB, T(2, 3, 4), I([0])))
case("embedding", "float ids", DTypeError, lambda: (EMB, T(4, 3), T(2)))
case("embedding", "int table", DTypeError, lambda: (EMB, I([[1, 2]]), I([0])))
case("embedding", "devices", DeviceMismatchError, lambda: (EMB, T(4, 3), I([0], dev="spy2")))
case(
    "embedding",
    "backend lacks int64",
    DTypeError,
    lambda: (
        EMB,
        T(4, 3, dtype="float32", dev="spy32"),
        riftco.device("spy32").backend.from_numpy(np.zeros(2, np.int64)),
    ),
)  # noqa: E501
case("embedding_backward", "dy shape", ShapeError, lambda: (EMBB, T(3, 4), I([0, 1]), 5))
case("embedding_backward", "dy rank 0", ShapeError, lambda: (EMBB, T(), I(0), 5))
case("embedding_backward", "float ids", DTypeError, lambda: (EMBB, T(2, 4), T(2), 5))
case("embedding_backward", "num_embeddings", ShapeError, lambda: (EMBB, T(2, 4), I([0, 0]), 0))
case(
    "embedding_backward",
    "devices",
    DeviceMismatchError,
    lambda: (EMBB, T(2, 4, dev="spy2"), I([0, 1]), 5),
)  # noqa: E501
CE, CEB = ops.cross_entropy, ops.cross_entropy_backward
case("cross_entropy", "logits rank", ShapeError, lambda: (CE, T(2, 3, 4), I([0, 1])))
case("cross_entropy", "targets shape", ShapeError, lambda: (CE, T(2, 4), I([0, 1, 2])))
case("cross_entropy", "float targets", DTypeError, lambda: (CE, T(2, 4), T(2)))
case("cross_entropy", "int logits", DTypeError, lambda: (CE, I([[1, 2]]), I([0])))
case("cross_entropy", "devices", DeviceMismatchError, lambda: (CE, T(2, 4), I([0, 1], dev="spy2")))
case(
    "cross_entropy_backward",
    "dloss shape",
    ShapeError,
    lambda: (CEB, T(3), T(2, 4), I([0, 1]), T(2)),
)  # noqa: E501
case(
    "cross_entropy_backward",
    "lse shape",
    ShapeError,
    lambda: (CEB, T(2), T(2, 4), I([0, 1]), T(2, 1)),
)  # noqa: E501
case(
    "cross_entropy_backward",
    "int lse",
    DTypeError,
    lambda: (CEB, T(2), T(2, 4), I([0, 1]), I([0, 0])),
)  # noqa: E501
case(
    "cross_entropy_backward", "float targets", DTypeError, lambda: (CEB, T(2), T(2, 4), T(2), T(2))
)  # noqa: E501
case(
    "cross_entropy_backward",
    "devices",
    DeviceMismatchError,
    lambda: (CEB, T(2, dev="spy2"), T(2, 4), I([0, 1]), T(2)),
)  # noqa: E501
for o in ("attention", "flash_attention"):
    case(o, "rank", ShapeError, lambda o=o: (fn(o), T(2, 3, 4), T(2, 3, 4), T(2, 3, 4), 0.5))
    case(o, "qkv shapes", ShapeError, lambda o=o: (fn(o), Q(), T(1, 2, 4, 4), Q(), 0.5))
    case(o, "dtypes", DTypeError, lambda o=o: (fn(o), Q(), Q(), Q(dtype="float32"), 0.5))
    case(o, "devices", DeviceMismatchError, lambda o=o: (fn(o), Q(), Q(dev="spy2"), Q(), 0.5))
    case(o, "scale type", DTypeError, lambda o=o: (fn(o), Q(), Q(), Q(), "0.5"))
ATB, FLB = ops.attention_backward, ops.flash_attention_backward
case(
    "attention_backward",
    "probs shape",
    ShapeError,
    lambda: (ATB, Q(), Q(), Q(), Q(), T(1, 2, 3, 4), 0.5),
)  # noqa: E501
case(
    "attention_backward",
    "dout shape",
    ShapeError,
    lambda: (ATB, T(1, 2, 3, 5), Q(), Q(), Q(), T(1, 2, 3, 3), 0.5),
)  # noqa: E501
case(
    "attention_backward",
    "int probs",
    DTypeError,
    lambda: (ATB, Q(), Q(), Q(), Q(), I(np.zeros((1, 2, 3, 3))), 0.5),
)  # noqa: E501
case(
    "attention_backward",
    "devices",
    DeviceMismatchError,
    lambda: (ATB, Q(), Q(), Q(), Q(), T(1, 2, 3, 3, dev="spy2"), 0.5),
)  # noqa: E501
case(
    "flash_attention_backward",
    "lse shape",
    ShapeError,
    lambda: (FLB, Q(), Q(), Q(), Q(), Q(), T(1, 2, 3, 1), 0.5),
)  # noqa: E501
case(
    "flash_attention_backward",
    "out shape",
    ShapeError,
    lambda: (FLB, Q(), Q(), Q(), Q(), T(1, 2, 3, 3), T(1, 2, 3), 0.5),
)  # noqa: E501
case(
    "flash_attention_backward",
    "int lse",
    DTypeError,
    lambda: (FLB, Q(), Q(), Q(), Q(), Q(), I(np.zeros((1, 2, 3))), 0.5),
)  # noqa: E501
case(
    "flash_attention_backward",
    "devices",
    DeviceMismatchError,
    lambda: (FLB, Q(), Q(), Q(), Q(), Q(), T(1, 2, 3, dev="spy2"), 0.5),
)  # noqa: E501
ADAM = ops.adam_update
case("adam_update", "grad shape", ShapeError, lambda: (ADAM, T(3), T(4), T(3), T(3), 0.1))
case("adam_update", "int grad", DTypeError, lambda: (ADAM, T(3), I([1, 1, 1]), T(3), T(3), 0.1))
case("adam_update", "view param", ShapeError, lambda: (ADAM, T(6)[::2], T(3), T(3), T(3), 0.1))
case(
    "adam_update",
    "step 0",
    ShapeError,
    lambda: (ADAM, T(3), T(3), T(3), T(3), 0.1, 0.9, 0.99, 1e-8, 0.0, 0),
)  # noqa: E501
case(
    "adam_update",
    "devices",
    DeviceMismatchError,
    lambda: (ADAM, T(3), T(3), T(3, dev="spy2"), T(3), 0.1),
)  # noqa: E501


@pytest.mark.parametrize(
    "op,why,exc,build", CASES, ids=[f"{op}-{why.replace(' ', '_')}" for op, why, _, _ in CASES]
)
def test_error_before_any_backend_call(spies, op, why, exc, build):
    function, *args = build()  # operands are uploaded (and recorded) here
    spies.clear()
    with pytest.raises(exc) as info:
        function(*args)
    assert str(info.value).startswith(f"[{op}]"), str(info.value)
    assert spies == [], f"{op} ({why}) reached the backend: {spies}"


# Range checks on ids need their values: a download (to_numpy) and nothing else.
RANGE_CASES: dict[str, Build] = {
    "embedding": lambda: (EMB, T(4, 3), I([0, 4])),
    "embedding/negative": lambda: (EMB, T(4, 3), I([[-1, 0]])),
    "embedding_backward": lambda: (EMBB, T(2, 3), I([5, 0]), 5),
    "cross_entropy": lambda: (CE, T(2, 4), I([0, 4])),
    "cross_entropy/-2": lambda: (CE, T(2, 4), I([-2, 1], "int64")),
    "cross_entropy_backward": lambda: (CEB, T(2), T(2, 4), I([0, 9]), T(2)),
}


@pytest.mark.parametrize("name", sorted(RANGE_CASES))
def test_index_range_checked_before_compute(spies, name):
    function, *args = RANGE_CASES[name]()
    spies.clear()
    with pytest.raises(DomainError, match=r"^\[" + name.split("/")[0] + r"\] .* must lie in \["):
        function(*args)
    assert set(spies) <= {"to_numpy"}, spies


def test_spy_records_backend_calls(spies):
    a, b = T(3), T(3)
    spies.clear()
    ops.add(a, b)
    ops.gelu(a)
    assert "add" in spies and "gelu" in spies


def test_every_raw_op_has_an_error_case():
    """Every public raw op is covered here or, for the op units, by their own error samples."""
    covered = {op for op, *_ in CASES}
    covered |= {u.name for u in ops.units() if u.errors}
    covered |= {u.function.__name__ for u in ops.units() if u.errors and u.function}
    helpers = {"same_backend", "is_native", "contiguous", "composite", "register", "unit",
               "units", "flush_deferred", "OpUnit", "Out", "COMPARE_OPS"}  # fmt: skip
    public = set(ops.__all__) - helpers
    assert public - covered == set()
    no_inputs = {"synchronize", "memory_stats"}
    assert [u.name for u in ops.units() if not u.errors and u.name not in no_inputs] == []


def test_error_classes_are_riftco_and_builtin():
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(DeviceMismatchError, ValueError)
    assert issubclass(DomainError, ValueError)
    err = riftco.errors.op_error(ShapeError, "thing", "went wrong")
    assert isinstance(err, ShapeError) and str(err) == "[thing] went wrong"
    assert str(riftco.UnknownBackendError("[device] plain")) == "[device] plain"  # no quotes


def test_validator_hook_sees_every_dispatch(spies, monkeypatch):
    seen = []

    class Hook:
        def before(self, unit, backend, args):
            seen.append(unit.name)

        def after(self, unit, backend, args, out, state):
            pass

    monkeypatch.setattr(ops.dispatch, "validator", Hook())
    x = T(2, 3)
    ops.softmax(ops.exp(x))
    assert seen == ["exp", "softmax"]
    assert math.isclose(float(ops.sum(ops.softmax(x), 1).numpy()[0]), 1.0)
