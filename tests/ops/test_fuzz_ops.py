"""Hypothesis fuzz of every public op with arbitrary arguments, valid or not, on every backend.

Conformance draws *valid* inputs and checks the numbers; this checks that no input takes
riftco down. For every op unit (``riftco.ops.units()``, so a new op module is fuzzed
without an edit here) each example starts from one of the unit's own samples, uploaded in
a drawn layout, and then applies a few drawn mutations: a tensor with other values (NaN,
+-inf, huge, denormal, ids out of range), another dtype (float32/float64/int32/int64, so
mixtures), another shape (0-d, empty, an axis more or less, a dim off by one), another
layout (transposed, broadcast, sliced, offset views), a view method called with odd
arguments (negative, float or astronomically large dims), a tensor on another device, a
scalar of the wrong type or range (negative sizes, NaN, strings, None), an argument more
or less, or the same tensor passed twice. Ops without samples (``allocate``,
``from_numpy``) get drawn shapes, dtypes and arrays of every kind.

The property, per call: it returns results that download (``.numpy()`` on each, so a
deferred ``DomainError`` surfaces here) or it raises a ``riftco.RiftcoError`` whose message
starts with ``[``; the only other exception allowed is Python's own ``TypeError`` for a
call whose arguments do not bind to the function's signature (docs/DECISIONS.md). Inputs
of an op that is not in place are bit-for-bit unchanged afterwards, and an in-place op that
raised left its tensors unchanged. A hang fails too: faulthandler ends the run with every
thread's traceback after ``_HANG_S`` seconds. A crash ends the process, which fails
``make test``.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="the fuzz draws its inputs with hypothesis")
import riftco  # noqa: E402
from hypothesis import HealthCheck, given, note, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from riftco import ops  # noqa: E402
from riftco.conformance.draw import drawn_params  # noqa: E402
from riftco.conformance.inputs import upload as upload_arr  # noqa: E402
from riftco.conformance.inputs import upload_args  # noqa: E402
from riftco.errors import RiftcoError  # noqa: E402
from riftco.ops.opunit import OpUnit  # noqa: E402
from riftco.ops.primitive.memory import storage_array  # noqa: E402
from riftco.ops.samples import LAYOUTS, Arr, Ctx, Example  # noqa: E402
from riftco.tensor import Tensor  # noqa: E402

#: Examples per (backend, op): 49 units x 5 backends (no CUDA here) take ~20 s on 2 cores
#: with warm kernel caches (~50 s when every OpenCL program compiles cold).
#: ``RIFTCO_FUZZ_EXAMPLES=200`` digs deeper (minutes); the examples stay derandomised.
MAX_EXAMPLES = int(os.environ.get("RIFTCO_FUZZ_EXAMPLES", "20"))
#: ``RIFTCO_FUZZ_SEED=N`` explores other examples than the derandomised default run.
SEED = os.environ.get("RIFTCO_FUZZ_SEED")
#: A single example never takes this long unless something hangs.
_HANG_S = 300

ALL_DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))
_FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 3.4e38, -3.4e38, 1e308,
                   5e-324, 1e-45, 1.0, -1.0, 1e4, -1e4)  # fmt: skip
_INT_SPECIALS = (0, 1, 2, 3, -1, -2, 7, 64, 10**6, 2**31 - 1, -(2**31), 2**40, -(2**62))
#: Wrong-type and out-of-range scalars. Sizes stay tiny or absurd (>= 2**40): an absurd one
#: must fail at once, while a merely large one would really be allocated and touched.
_SCALARS = (None, "x", "lt", "tanh", "none", "float32", np.nan, np.inf, -np.inf, 0, -1, 1, 2,
            -5, 2**40, 2**63, -(2**63) - 1, 1e308, -1e-300, 1.5, 0.0, True, False,
            np.float32(2.0), np.int64(3), np.float64(np.nan), [1, 2], (), (0, 0), (5,), (-1,),
            1j, b"lt", np.dtype("float16"), np.float32, int, object())  # fmt: skip
_SHAPE_DIMS = (0, 1, 1, 2, 3, 4, 5, 7, 8)


# -- backends ----------------------------------------------------------------------------------
def _registry_backend(name: str, index: int = 0) -> Any:
    entry = riftco.get_registry().entry(name)
    if not entry.available:
        pytest.skip(f"{name} is unavailable here: {entry.reason}")
    if index >= len(entry.devices()):
        pytest.skip(f"{name} has no device {index}")
    return riftco.device(f"{name}:{index}").backend


def _metal_standin() -> Any:
    try:
        from riftco.backends.opencl.runtime import enumerate_devices
    except Exception as exc:  # pyopencl missing or broken
        pytest.skip(f"the Metal stand-in needs OpenCL: {type(exc).__name__}: {exc}")
    devices, why = enumerate_devices()
    if not devices:
        pytest.skip(f"the Metal stand-in needs an OpenCL device: {why}")
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    return MetalBackend(0, mc_module=standin)


_FACTORIES: dict[str, Callable[[], Any]] = {
    "cpu": lambda: _registry_backend("cpu"),
    "native": lambda: _registry_backend("native"),
    "cffi_example": lambda: _registry_backend("cffi_example"),
    "opencl:0": lambda: _registry_backend("opencl", 0),
    "metal-standin": _metal_standin,
    "cuda:0": lambda: _registry_backend("cuda", 0),
}
_made: dict[str, Any] = {}


def _backend(spec: str) -> Any:
    if spec not in _made:
        try:
            _made[spec] = _FACTORIES[spec]()
        except pytest.skip.Exception:
            raise
        except RiftcoError as exc:
            pytest.skip(f"{spec} cannot start here: {exc}")
    return _made[spec]


# -- building arguments --------------------------------------------------------------------------
class Fuzzer:
    """Draws tensors and scalars for one example on one backend (``data`` is hypothesis')."""

    def __init__(self, data: Any, backend: Any) -> None:
        self.data = data
        self.backend = backend
        self.cpu = riftco.device("cpu").backend
        self.float_dtypes = tuple(d for d in ALL_DTYPES if d.kind == "f" and d in backend.dtypes)
        self.index_dtypes = tuple(d for d in ALL_DTYPES if d.kind == "i" and d in backend.dtypes)

    def draw(self, strategy: Any, label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def choice(self, options: Any, label: str) -> Any:
        return self.draw(st.sampled_from(list(options)), label)

    def seed(self) -> int:
        return int(self.draw(st.integers(0, 2**16), "seed"))

    def shape(self) -> tuple[int, ...]:
        return tuple(self.draw(st.lists(st.sampled_from(_SHAPE_DIMS), max_size=4), "shape"))

    def values(self, shape: tuple[int, ...], dtype: np.dtype, special: bool) -> np.ndarray:
        rng = np.random.default_rng(self.seed())
        if dtype.kind == "i":
            out = rng.integers(0, 8, size=shape).astype(np.float64)
            pool: tuple[float, ...] = _INT_SPECIALS
        else:
            out = rng.standard_normal(shape)
            pool = _FLOAT_SPECIALS
        if special and out.size:
            flat = out.reshape(-1)
            picks = rng.random(flat.size) < 0.4
            picks[rng.integers(flat.size)] = True
            flat[picks] = rng.choice(np.asarray(pool, dtype=np.float64), size=int(picks.sum()))
        if dtype.kind == "i":
            info = np.iinfo(dtype)
            return np.clip(out, info.min, info.max).astype(dtype)
        with np.errstate(over="ignore", under="ignore"):
            return out.astype(dtype)

    def put(self, host: np.ndarray, layout: str | None = None) -> Tensor:
        """``host`` on the backend in a drawn layout; a dtype it lacks lands on cpu instead
        (a device mismatch is one more wrong input)."""
        lay = layout or self.choice(("dense",) + LAYOUTS, "layout")
        backend = self.backend if host.dtype in self.backend.dtypes else self.cpu
        kind = "index" if host.dtype.kind == "i" else "float"
        arr = Arr(host.astype(np.float64) if kind == "float" else host, kind, lay, host.dtype)
        return upload_arr(arr, backend, host.dtype)

    def tensor(self) -> Tensor:
        dtype = self.choice(ALL_DTYPES, "dtype")
        shape = self.shape()
        return self.put(self.values(shape, dtype, self.draw(st.booleans(), "special")))

    def scalar(self) -> Any:
        if self.draw(st.integers(0, 9), "tensor instead of scalar") == 0:
            return self.tensor()
        return self.choice(_SCALARS, "scalar")


# -- the call ------------------------------------------------------------------------------------
def _valid_call(fz: Fuzzer, unit: OpUnit) -> tuple[list[Any], dict[str, Any]]:
    """One of the unit's own samples (an edge or a drawn one) on the backend under test."""
    samples = unit.samples
    assert samples is not None
    dtype = fz.choice(fz.float_dtypes, "float dtype")
    ctx = Ctx(dtype, fz.float_dtypes, fz.index_dtypes or (np.dtype(np.int32),))
    if samples.draw is not None and fz.draw(st.booleans(), "drawn sample"):
        params = drawn_params(samples, fz.data)
    else:
        params = dict(fz.choice(samples.edges, "edge"))
    example: Example = samples.build(params, ctx)
    note(f"sample: {example.describe()} [{dtype.name}]")
    args = upload_args(example, fz.backend, dtype, reference=False)
    return args, dict(example.kwargs)


def _memory_call(fz: Fuzzer, unit: OpUnit) -> tuple[list[Any], dict[str, Any]]:
    """``allocate(backend, shape, dtype)`` and ``upload(backend, array)`` with anything."""
    target = fz.choice((fz.backend, fz.backend, fz.backend, "cpu", None), "backend argument")
    if unit.name == "allocate":
        shape: Any = fz.choice(
            (fz.shape(), fz.shape(), (2, -1), (-3,), (2**40, 2**20), (2**62,), (2**31,) * 3,
             (10**30,), (2.5, 2), ("3",), None, 3, (None,), ((2,), 2)),
            "allocate shape",
        )  # fmt: skip
        dtype = fz.choice(
            (*ALL_DTYPES, "float32", np.float64, "int32", "float16", "bool", "complex64",
             "uint8", None, "nope", float, object, np.dtype("f4,f4")),
            "allocate dtype",
        )  # fmt: skip
        return [target, shape, dtype], {}
    kind = fz.choice(
        ("float32", "float64", "int32", "int64", "float16", "bool", "uint8", "int8",
         "complex64", "object", "str", "view", "0-d", "list", "scalar", "tensor", "none"),
        "array kind",
    )  # fmt: skip
    shape = fz.shape()
    if kind in ("list", "scalar", "tensor", "none"):
        array: Any = {"list": [[1.0, 2.0], [3.0]], "scalar": 2.5, "none": None}.get(kind)
        if kind == "tensor":
            array = fz.tensor()
    elif kind == "object":
        array = np.empty(shape, dtype=object)
    elif kind == "str":
        array = np.full(shape, "ab")
    elif kind == "view":
        array = np.arange(60, dtype=np.float32).reshape(3, 4, 5)[:, ::2, 1:].transpose(2, 0, 1)
    elif kind == "0-d":
        array = np.array(np.float32(np.nan))
    else:
        array = np.zeros(shape, dtype=kind)
    return [target, array], {}


def _mutate(fz: Fuzzer, args: list[Any], kwargs: dict[str, Any], fn: Callable[..., Any]) -> str:
    """Apply one drawn mutation in place; returns what it did (for the report)."""
    tensor_slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    list_slots = [i for i, a in enumerate(args) if isinstance(a, list)]
    scalar_slots = [i for i, a in enumerate(args) if not isinstance(a, (Tensor, list))]
    kinds = ["arity"]  # only what applies, so no kind falls through to another
    if tensor_slots:
        kinds += ["values", "values", "dtype", "shape", "shape", "layout", "device", "view"]
    if scalar_slots:
        kinds += ["scalar", "scalar"]
    if kwargs:
        kinds += ["kwarg"]
    if len(tensor_slots) >= 2:
        kinds += ["alias"]
    if list_slots:
        kinds += ["list", "list"]
    what = fz.choice(kinds, "mutation")
    if what in ("values", "dtype", "shape", "layout", "device") and tensor_slots:
        i = fz.choice(tensor_slots, "tensor argument")
        old: Tensor = args[i]
        host = old.numpy()
        if what == "values":
            host = fz.values(host.shape, host.dtype, special=True)
        elif what == "dtype":
            dtype = fz.choice([d for d in ALL_DTYPES if d != host.dtype], "new dtype")
            with np.errstate(all="ignore"):
                host = (np.nan_to_num(host) if dtype.kind == "i" else host).astype(dtype)
        elif what == "shape":
            host = fz.values(_other_shape(fz, host.shape), host.dtype, special=False)
        if what == "device":
            other = fz.cpu if fz.backend is not fz.cpu else fz.backend
            args[i] = ops.upload(other, host) if host.dtype in other.dtypes else old
            return f"arg {i} on {other.name}"
        args[i] = fz.put(host)
        return f"arg {i}: {what} -> {args[i].shape} {args[i].dtype.name}"
    if what == "view" and tensor_slots:
        i = fz.choice(tensor_slots, "tensor argument")
        return _view(fz, args, i)
    if what == "scalar" and scalar_slots:
        i = fz.choice(scalar_slots, "scalar argument")
        args[i] = fz.scalar()
        return f"arg {i} -> {args[i]!r}"
    if what == "kwarg" and kwargs:
        key = fz.choice(sorted(kwargs), "keyword")
        kwargs[key] = fz.scalar()
        return f"{key}= -> {kwargs[key]!r}"
    if what == "alias" and len(tensor_slots) >= 2:
        i, j = fz.draw(st.permutations(tensor_slots), "alias pair")[:2]
        args[j] = args[i]
        return f"arg {j} is arg {i}"
    if what == "list" and list_slots:
        i = fz.choice(list_slots, "list argument")
        how = fz.choice(("empty", "extra tensor", "extra scalar", "drop", "tuple"), "list edit")
        items = list(args[i])
        if how == "empty":
            items = []
        elif how == "extra tensor":
            items.append(fz.tensor())
        elif how == "extra scalar":
            items.append(fz.scalar())
        elif items:
            items.pop(fz.draw(st.integers(0, len(items) - 1), "dropped item"))
        args[i] = tuple(items) if how == "tuple" else items
        return f"arg {i}: list {how}"
    # arity: one argument fewer or more (possibly unbindable: see the property)
    if args and fz.draw(st.booleans(), "drop an argument"):
        args.pop()
        return "last argument dropped"
    args.append(fz.tensor() if fz.draw(st.booleans(), "extra tensor") else fz.scalar())
    return "extra argument"


#: Tensor view methods with arguments from sensible to absurd: a view either works (and
#: the op then sees it) or raises a riftco error, never anything else.
_DIMS = (0, 1, 2, 3, -1, -3, 2**62, 2**63, 2.5, "2", None, True, np.int64(2))


def _view(fz: Fuzzer, args: list[Any], i: int) -> str:
    x: Tensor = args[i]
    how = fz.choice(("broadcast_to", "reshape", "transpose", "permute", "getitem",
                     "expand_dims", "T"), "view")  # fmt: skip
    lead = tuple(fz.draw(st.lists(st.sampled_from(_DIMS), max_size=2), "dims"))
    try:
        if how == "broadcast_to":
            y = x.broadcast_to(lead + x.shape)
        elif how == "reshape":
            y = x.reshape(lead + (-1,) if fz.draw(st.booleans(), "infer") else lead)
        elif how == "transpose":
            y = x.transpose(*lead[:2]) if len(lead) == 2 else x.transpose()
        elif how == "permute":
            y = x.permute(*lead) if lead else x.permute(*reversed(range(x.ndim)))
        elif how == "getitem":
            bounds = st.sampled_from((None, 0, 1, -1, 2, 100, -100, 1.5, "a"))
            index = tuple(
                fz.draw(
                    st.one_of(
                        st.sampled_from(_DIMS),
                        st.builds(slice, bounds, bounds, st.sampled_from((None, 1, 2, 0, -1))),
                    ),
                    "index",
                )  # fmt: skip
                for _ in range(fz.draw(st.integers(0, 3), "indices"))
            )
            y = x[index]
        elif how == "expand_dims":
            y = x.expand_dims(lead[0] if lead else 0)
        else:
            y = x.T
    except RiftcoError as exc:
        return f"arg {i}: {how} refused ({exc})"
    args[i] = y
    return f"arg {i}: {how} -> {y.shape} strides {y.strides}"


def _other_shape(fz: Fuzzer, shape: tuple[int, ...]) -> tuple[int, ...]:
    how = fz.choice(("0-d", "empty", "drop axis", "add axis", "dim +1", "dim -1", "random"),
                    "shape edit")  # fmt: skip
    dims = list(shape)
    if how == "0-d":
        return ()
    if how == "random" or not dims:
        return fz.shape()
    i = fz.draw(st.integers(0, len(dims) - 1), "axis")
    if how == "empty":
        dims[i] = 0
    elif how == "drop axis":
        dims.pop(i)
    elif how == "add axis":
        dims.insert(i, fz.choice((1, 2, 3), "new dim"))
    else:
        dims[i] = max(0, dims[i] + (1 if how == "dim +1" else -1))
    return tuple(dims)


# -- the property --------------------------------------------------------------------------------
def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _snapshot(args: list[Any], kwargs: dict[str, Any]) -> list[tuple[Tensor, bytes]]:
    seen: dict[int, Tensor] = {}
    for t in _tensors([*args, *kwargs.values()]):
        seen.setdefault(id(t.storage), t)
    return [(t, storage_array(t).tobytes()) for t in seen.values()]


def _drain(backend: Any) -> None:
    """Raise nothing left over from one example into the next (deferred errors included)."""
    for sync in (backend.synchronize, ops.flush_deferred):
        try:
            sync()
        except RiftcoError:
            pass


def _binds(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _check_one(unit: OpUnit, backend: Any, data: Any) -> None:
    fz = Fuzzer(data, backend)
    fn = unit.function
    assert fn is not None
    if unit.samples is None:
        args, kwargs = _memory_call(fz, unit)
    else:
        args, kwargs = _valid_call(fz, unit)
        for _ in range(fz.draw(st.integers(0, 3), "mutations")):
            note(_mutate(fz, args, kwargs, fn))
    before = _snapshot(args, kwargs)
    binds = _binds(fn, args, kwargs)
    raised: BaseException | None = None
    try:
        out = fn(*args, **kwargs)
        for t in _tensors(out):
            got = t.numpy()
            assert got.shape == t.shape and got.dtype == t.dtype, (got.shape, got.dtype, t)
        backend.synchronize()
    except RiftcoError as exc:
        raised = exc
        assert str(exc).startswith("["), f"riftco error without the [op] prefix: {exc!r}"
    except TypeError as exc:
        if binds:  # only the interpreter's own "wrong arguments" error is allowed
            raise
        raised = exc
    finally:
        _drain(backend)
    if unit.in_place and raised is None:
        return
    for t, bits in before:
        assert storage_array(t).tobytes() == bits, (
            f"[{unit.name}] changed an input of shape {t.shape} on {t.device}"
            + (f" although it raised {raised!r}" if raised is not None else "")
        )


def _fuzzed_units() -> list[OpUnit]:
    return [u for u in ops.units() if u.function is not None]


@pytest.mark.parametrize("op", [u.name for u in _fuzzed_units()])
@pytest.mark.parametrize("spec", list(_FACTORIES))
def test_fuzz_op(spec: str, op: str) -> None:
    backend = _backend(spec)
    unit = ops.unit(op)

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=SEED is None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: Any) -> None:
        _check_one(unit, backend, data)

    if SEED is not None:
        run = seed(int(SEED))(run)

    faulthandler.dump_traceback_later(_HANG_S, exit=True)
    try:
        run()
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_the_fuzz_covers_every_op_with_a_function() -> None:
    """A unit without ``function`` would escape the fuzz: only the two sync-like ones may."""
    left_out = sorted(u.name for u in ops.units() if u.function is None)
    assert left_out == ["memory_stats", "synchronize"]
    without_samples = sorted(u.name for u in _fuzzed_units() if u.samples is None)
    assert without_samples == ["allocate", "from_numpy"]  # what _memory_call draws for
