"""OpUnit: everything riftco knows about one backend operation, in one record.

Each op module under ``riftco.ops`` (``primitive/`` for the required protocol methods,
``fused/`` for the optional ones) declares its units next to the public function that
validates and dispatches, the composite fallback and the VJP.
Dispatch, autograd, the conformance suite, ``riftco backends`` and the op table in
docs/BACKENDS.md all read this one registry, so an op's facts cannot drift apart (the idea
of PyTorch's OpInfo and of a JAX primitive's registered rules).

The registry is filled by importing the op modules (``riftco.ops`` imports every module
of its ``primitive`` and ``fused`` packages); :func:`register` adds a unit at runtime, for
an op that lives outside riftco, and gives each op's public function its protocol method's
specification as docstring, so ``help(riftco.ops.layer_norm)`` says what the op does.

A unit's conformance data (samples, error and domain samples) is test data: it lives in a
sibling module, ``<package>/_samples/<module>.py``, that only conformance and the tests
import (PyTorch keeps OpInfo's sample inputs in its testing code for the same reason), so
``import riftco`` does not build it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..dtypes import FLOAT_DTYPES, LOW_PRECISION, SMALLEST_SUBNORMAL, UNIT_ROUNDOFF

if TYPE_CHECKING:
    from ..tensor import Tensor
    from .samples import ErrorSample, Example, Samples, SampleSet

Kind = Literal["memory", "primitive", "fused"]


@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol * scale + rtol * |expected| + floor``, element by element.

    ``floor`` is absolute and scale-free: one subnormal step of a low-precision output,
    where the dtype's spacing stops being relative (float16 below 2^-14)."""

    atol: float
    rtol: float
    floor: float = 0.0

    def __str__(self) -> str:
        text = f"atol={self.atol:.0e} rtol={self.rtol:.0e}"
        return text + (f" floor={self.floor:.0e}" if self.floor else "")

    def as_dict(self) -> dict[str, float]:
        out = {"atol": self.atol, "rtol": self.rtol}
        return out | ({"floor": self.floor} if self.floor else {})


EXACT = Tolerance(0.0, 0.0)
#: Correctly rounded float32 results (add, mul, neg, ...) are within 0.5 ulp.
F32 = Tolerance(1e-6, 2e-6)
#: A float64 backend other than the reference may fuse or reorder; allow a few ulps.
F64 = Tolerance(1e-12, 1e-12)


@dataclass(frozen=True)
class Tolerances:
    """Per-dtype tolerances of one op against the cpu float64 reference.

    ``scale(example)`` is the magnitude an accumulating op's rounding error grows with
    (``n * rms`` of the terms summed): ``atol`` is per unit of it. ``exact`` ops (masks,
    copies, indices) must match bit for bit in value."""

    float32: Tolerance = F32
    float64: Tolerance = F64
    exact: bool = False
    scale: Callable[[Example], float] | None = None
    why: str = ""
    #: the op takes a forward output rounded to a low-precision dtype (``out``) that a
    #: valid implementation may use as given or rebuild from the other operands (they
    #: agree while ``out`` is exact): the two differ by up to u relative per element of
    #: it, and this function of the example bounds what that moves a result element by,
    #: per unit of u; a low-precision comparison allows that much more, absolutely
    rebuilds_saved: Callable[[Example], float] | None = None

    def for_dtype(self, dtype: np.dtype | str) -> Tolerance:
        dt = np.dtype(dtype)
        if self.exact or dt not in FLOAT_DTYPES:
            return EXACT
        if dt == np.float32:
            return self.float32
        if dt == np.float64:
            return self.float64
        return low_precision(self.float32, dt)

    def for_example(self, dtype: np.dtype, example: Example) -> Tolerance:
        """``for_dtype``, plus what a rebuilt saved output may cost on this example."""
        tol = self.for_dtype(dtype)
        dt = np.dtype(dtype)
        if self.rebuilds_saved is None or dt not in LOW_PRECISION:
            return tol
        extra = UNIT_ROUNDOFF[dt] * self.rebuilds_saved(example)
        return Tolerance(tol.atol, tol.rtol, tol.floor + extra)


def low_precision(f32: Tolerance, dtype: np.dtype) -> Tolerance:
    """A float16/bfloat16 result's tolerance, derived from the float32 one.

    The op computes in float32 from the same rounded inputs the reference gets, so its
    float32 error (``f32``, which carries the op's conditioning and accumulation) is all
    the arithmetic costs; then one rounding to the output dtype, at most ``u`` relative
    (unit roundoff: 2^-11 float16, 2^-8 bfloat16), against the unrounded float64 expected
    value (``comparison.compare``): ``rtol + u``. Below the smallest normal the spacing is
    absolute: half a subnormal step (``floor``). An op that rounds twice (a half
    intermediate) or accumulates in half exceeds this on ordinary data, which is what the
    low-precision mutants in tests/conformance_mutants.py show."""
    u = UNIT_ROUNDOFF[dtype]
    return Tolerance(f32.atol, f32.rtol + u, floor=SMALLEST_SUBNORMAL[dtype] / 2)


EXACT_TOLERANCES = Tolerances(exact=True, why="exact by definition")


def rms(a: np.ndarray) -> float:
    """Root mean square of the finite elements (0 when none): the magnitude a ``scale``
    multiplies by the number of accumulated terms."""
    finite = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(finite * finite))) if finite.size else 0.0


#: ``(bytes moved, floating-point operations)`` of one call, for throughput reports.
Cost = tuple[int, int]


@dataclass(frozen=True, eq=False)
class OpUnit:
    """One backend method: its contract, its fallback, its derivative and its test samples.

    Declared as ``OpUnit(name, kind, method, module=..., ...)``: everything after the
    method is a keyword.

    * ``method``: the typed protocol method (its docstring is the op's specification:
      shapes, output dtype, NaN/Inf behaviour, determinism, in place or not).
    * ``composite``: the op built from primitives only (fused ops), used when a backend
      does not define the method; ``None`` for required methods.
    * ``vjp(g, args, outputs, needs)``: gradients for the positions in ``differentiable``
      (``None`` where ``needs`` is false), computed with raw ops only.
    * ``testing``: the conformance data, a :class:`~riftco.ops.samples.SampleSet` or the
      name of the module whose ``SAMPLES[name]`` is one (imported on first use). Read it
      as ``samples`` / ``errors`` (what conformance runs: ordinary, edge, nasty
      magnitudes; the malformed inputs that must raise before any backend call) and
      ``domain`` (bad values, ids out of range, that must raise ``DomainError``, on a
      device possibly at the next sync point).
    * ``cost(args)``: bytes and flops of one call, for the throughput column; ``args`` are
      the call's arguments in the public function's order, defaults filled in.
    * ``since``: the protocol version that added the method ((1, 0) for the first ones).
    """

    name: str
    kind: Kind
    method: Callable[..., Any]
    _: KW_ONLY
    #: the op module that declares the unit: ``core/ops/<primitive|fused>/<module>.py``
    #: (``"unary"`` for ``exp``); ops of one module share their samples and mutants
    module: str
    #: the public function conformance calls (``riftco.ops.<name>`` when ``None``)
    function: Callable[..., Any] | None = None
    outputs: tuple[str, ...] = ("out",)
    in_place: bool = False
    deterministic: bool = False
    #: refuses float16/bfloat16 operands (optimizer state stays float32: ``checks.full_precision``)
    full_precision: bool = False
    nan: str = "propagates NaN (IEEE)"
    composite: Callable[..., Any] | None = None
    vjp: Callable[..., tuple[Tensor | None, ...]] | None = None
    differentiable: tuple[int, ...] = ()
    tolerance: Tolerances = field(default_factory=Tolerances)
    #: a SampleSet, or the module holding ``SAMPLES[name]``: a name keeps ``import riftco``
    #: from building test data (see :func:`samples_module`)
    testing: SampleSet | str | None = None
    cost: Callable[[list[Any]], Cost] | None = None
    #: the protocol version that added the method (``PROTOCOL_VERSION`` is the newest of
    #: them): a backend declaring an older version may lack it and runs the composite
    since: tuple[int, int] = (1, 0)

    @property
    def fused(self) -> bool:
        return self.kind == "fused"

    @property
    def summary(self) -> str:
        """The first sentence of the protocol method's docstring."""
        doc = (self.method.__doc__ or "").strip().split("\n\n")[0]
        text = " ".join(line.strip() for line in doc.splitlines())
        end = text.find(". ")
        return text if end < 0 else text[: end + 1]

    def sample_set(self) -> SampleSet | None:
        """The unit's conformance data, importing its samples module the first time."""
        data = self.testing
        if isinstance(data, str):
            found: dict[str, SampleSet] = importlib.import_module(data).SAMPLES
            if self.name not in found:
                raise KeyError(f"[ops] {data} has no SAMPLES entry for op unit {self.name!r}")
            return found[self.name]
        return data

    @property
    def samples(self) -> Samples | None:
        data = self.sample_set()
        return None if data is None else data.samples

    @property
    def errors(self) -> tuple[ErrorSample, ...]:
        data = self.sample_set()
        return () if data is None else data.errors

    @property
    def domain(self) -> tuple[ErrorSample, ...]:
        """Values outside the op's domain: a DomainError at the call or at the next sync."""
        data = self.sample_set()
        return () if data is None else data.domain

    def is_native(self, backend: Any) -> bool:
        """True when ``backend``'s class defines this method (always for required ones)."""
        return callable(getattr(type(backend), self.name, None))

    def __repr__(self) -> str:
        return f"OpUnit({self.name!r}, {self.kind}, module={self.module!r})"


def samples_module(module: str) -> str:
    """Where the conformance data of op module ``module`` lives: ``a.b.name`` ->
    ``a.b._samples.name``, one convention for every unit (pass ``__name__``)."""
    package, _, name = module.rpartition(".")
    return f"{package}._samples.{name}"


def specification(unit: OpUnit) -> str:
    """The docstring ``unit``'s public function carries: its own (if any), then the
    protocol method's, which is where the op's semantics are written."""
    assert unit.function is not None
    own = inspect.cleandoc(unit.function.__doc__ or "")
    spec = inspect.cleandoc(unit.method.__doc__ or "")
    if not spec or spec in own:
        return own
    if not own:
        return spec
    return f"{own}\n\nSpecification (protocol method ``{unit.name}``):\n\n{spec}"


_UNITS: dict[str, OpUnit] = {}


def register(*units: OpUnit) -> None:
    """Add units to the registry (op modules call this at import). Names are unique.

    Also gives each unit's public function its specification as docstring (see
    :func:`specification`): the semantics are written once, on the protocol method, and
    ``help()`` on the function a user calls finds them."""
    for unit in units:
        other = _UNITS.get(unit.name)
        if other is not None and other is not unit:
            raise ValueError(
                f"[ops] two op units are named {unit.name!r} ({other.module}, {unit.module})"
            )
        _UNITS[unit.name] = unit
        if unit.function is not None:
            try:
                unit.function.__doc__ = specification(unit)
            except (AttributeError, TypeError):  # a builtin or a bound method: keep its own
                pass


def unit(name: str) -> OpUnit:
    """The unit called ``name``; a clear error naming the known ones otherwise."""
    try:
        return _UNITS[name]
    except KeyError:
        raise KeyError(f"[ops] no op unit named {name!r}; known: {', '.join(_UNITS)}") from None


def units(kind: Kind | None = None) -> list[OpUnit]:
    """Every registered unit in registration (protocol) order, optionally of one kind."""
    return [u for u in _UNITS.values() if kind is None or u.kind == kind]


def fused_names() -> tuple[str, ...]:
    return tuple(u.name for u in _UNITS.values() if u.kind == "fused")


def required_names() -> tuple[str, ...]:
    return tuple(u.name for u in _UNITS.values() if u.kind != "fused")
