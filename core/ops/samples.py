"""How an op unit describes its conformance samples, without depending on a test library.

Test data, not runtime: the units' samples live in ``primitive/_samples/`` and
``fused/_samples/`` (one module per op module, same name), which conformance and the tests
import through :meth:`OpUnit.sample_set`; ``import riftco`` loads neither them nor this
module.

A unit gives *edge* parameter sets (always run) and a ``draw(d)`` function that picks
parameters through the small :class:`Draw` interface; the conformance suite implements
``Draw`` with hypothesis (reproducible, derandomised), so core stays free of it. ``build``
turns parameters into an :class:`Example`: float64 host values per tensor argument, the
*layout* to present them in (dense, transposed, permuted, broadcast, sliced, offset, rows),
scalars and keyword arguments. Error samples are malformed calls that must raise a riftco
error naming the op before the backend sees anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

T = TypeVar("T")
Params = dict[str, Any]

#: Every layout a view can take. ``sliced``: every other element from offset 1 (strided
#: last axis); ``offset``: C-contiguous but starting at element 1 (``x[1:]`` of a flat
#: buffer); ``rows``: the first columns of a wider array (a sliced last axis, rows padded);
#: ``broadcast``: stride 0 along the first leading axis of size > 1.
LAYOUTS = ("dense", "transposed", "permuted", "broadcast", "sliced", "offset", "rows")

#: Sizes that are mostly *not* multiples of 8, 32 or 64 (tiles, group sizes), some that are.
SIZES = (1, 1, 2, 3, 5, 7, 8, 13, 17, 31, 32, 33, 63, 65, 67)
SMALL_SIZES = (1, 2, 3, 4, 5, 7, 9)
#: Drawn shapes stay below this many elements (edges may exceed it) to keep runs fast.
MAX_DRAWN_ELEMENTS = 20_000


class Draw(Protocol):
    """The choices a unit's ``draw`` may make (conformance implements them)."""

    def choice(self, options: Sequence[T]) -> T: ...
    def integer(self, lo: int, hi: int) -> int: ...
    def boolean(self) -> bool: ...
    def shape(self, min_rank: int = 1, max_rank: int = 3) -> tuple[int, ...]: ...
    def subset(self, items: Sequence[int], min_size: int = 1) -> tuple[int, ...]: ...


def cap(shape: Sequence[int]) -> tuple[int, ...]:
    """Halve the largest dims until the shape holds at most MAX_DRAWN_ELEMENTS elements."""
    out = list(shape)
    while int(np.prod(out)) > MAX_DRAWN_ELEMENTS:
        i = int(np.argmax(out))
        out[i] = max(1, out[i] // 2 + 1 if out[i] > 2 else 1)
    return tuple(out)


@dataclass(frozen=True)
class Ctx:
    """What a sample's build may depend on: the tested dtype and the declared dtypes."""

    dtype: np.dtype
    float_dtypes: tuple[np.dtype, ...]
    index_dtypes: tuple[np.dtype, ...]

    def index_dtype(self, seed: int) -> np.dtype:
        """Rotate through the declared index dtypes so each gets exercised."""
        return self.index_dtypes[seed % len(self.index_dtypes)]


@dataclass
class Arr:
    """One tensor argument: float64 host values, what they are, and how they are laid out.

    ``kind``: "float" (the tested dtype), "index" (ids, targets), "mask" (1/0 floats) or
    "stat" (a saved statistic, mean, rstd, lse, or a loss gradient: held in the tested
    dtype's compute dtype, float32 for float16/bfloat16)."""

    value: np.ndarray
    kind: str = "float"
    layout: str = "dense"
    index_dtype: np.dtype | None = None

    def __post_init__(self) -> None:
        self.value = np.asarray(self.value)
        if self.layout == "broadcast":
            axis = broadcast_axis(self.value.shape)
            if axis is None:  # nothing to broadcast along: still present a strided view
                self.layout = "sliced"
            else:
                first = np.take(self.value, [0], axis=axis)
                self.value = np.broadcast_to(first, self.value.shape).copy()

    def describe(self) -> str:
        lay = "" if self.layout == "dense" else f" {self.layout}"
        return f"{tuple(self.value.shape)}{lay}"


def broadcast_axis(shape: tuple[int, ...]) -> int | None:
    """The axis a "broadcast" layout repeats along: the first leading axis of size > 1, or
    a vector's only axis.

    Never the last axis of a matrix or more, so a row-wise op (softmax, LayerNorm) still
    sees varied rows."""
    for axis, dim in enumerate(shape[:-1]):
        if dim > 1:
            return axis
    if len(shape) == 1 and shape[0] > 1:
        return 0
    return None


@dataclass
class Example:
    """One call of an op: arguments (``Arr`` for tensors), keyword arguments, a label."""

    label: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    params: Params = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for a in self.args:
            if isinstance(a, Arr):
                parts.append(a.describe())
            elif isinstance(a, list) and a and isinstance(a[0], Arr):
                parts.append("[" + ", ".join(x.describe() for x in a) + "]")
            elif isinstance(a, np.dtype):
                parts.append(a.name)
            else:
                parts.append(repr(a))
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        seed = f" seed={self.params['seed']}" if "seed" in self.params else ""
        return f"{self.label}: ({', '.join(parts)}){seed}"

    def arrays(self) -> list[Arr]:
        out: list[Arr] = []
        for a in self.args:
            if isinstance(a, Arr):
                out.append(a)
            elif isinstance(a, list):
                out.extend(x for x in a if isinstance(x, Arr))
        return out


def _plain_call(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


@dataclass(frozen=True)
class Samples:
    """A unit's conformance samples.

    ``edges`` always run (with ``seed`` 0 and the dense layout unless they say otherwise);
    ``draw`` adds drawn parameter sets (each also gets a ``seed`` and a ``layout`` unless it
    chose them). ``call(fn, args, kwargs)`` returns the outputs to compare; in-place ops
    return the tensors they wrote."""

    build: Callable[[Params, Ctx], Example]
    edges: tuple[Params, ...] = ()
    draw: Callable[[Draw], Params] | None = None
    call: Callable[[Callable[..., Any], list[Any], dict[str, Any]], Any] = _plain_call
    needs_index: bool = False
    #: layouts the drawn examples may use (``draw`` may still pick its own)
    layouts: tuple[str, ...] = LAYOUTS
    #: one large parameter set for the throughput measurement (GB/s, GFLOP/s)
    bench: Params | None = None


def edges(*items: Params) -> tuple[Params, ...]:
    """Edge parameter sets with the defaults filled in (seed 0, dense layout)."""
    return tuple({"seed": 0, "layout": "dense", **item} for item in items)


#: What every op over the last axis (softmax, LayerNorm, RMSNorm, GELU, ...) is checked on:
#: rows and columns one past 64, 256 and 1024 (the chunk, team, tile and group sizes kernels
#: use; marked ``boundary``, as :func:`past_boundaries` marks its edges), a long row,
#: size-1 axes, odd sizes, and each layout a view of rows can take.
ROW_EDGES: tuple[Params, ...] = (
    {"label": "65 rows (one past a 64-row chunk)", "shape": (65, 8), "boundary": True},
    {"label": "257 rows", "shape": (257, 5), "boundary": True},
    {"label": "1025 rows", "shape": (1025, 3), "boundary": True},
    {"label": "65 columns", "shape": (3, 65), "boundary": True},
    {"label": "257 columns", "shape": (2, 257), "boundary": True},
    {"label": "1025 columns", "shape": (2, 1025), "boundary": True},
    {"label": "long row (4097)", "shape": (2, 4097)},
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "T=1", "shape": (1, 1, 33)},
    {"label": "odd sizes", "shape": (3, 5, 67)},
    {"label": "transposed", "shape": (9, 33), "layout": "transposed"},
    {"label": "broadcast", "shape": (4, 17), "layout": "broadcast"},
    {"label": "sliced", "shape": (3, 65), "layout": "sliced"},
    {"label": "offset x[1:]", "shape": (4, 9), "layout": "offset"},
    {"label": "rows x[:, :k]", "shape": (5, 12), "layout": "rows"},
)


def row_edges(*items: Params) -> tuple[Params, ...]:
    """:data:`ROW_EDGES` then ``items``, as :func:`edges` fills them in: the one list of
    row-op edges the row ops' sample modules share (they add their own after it)."""
    return edges(*ROW_EDGES, *items)


#: The chunk, tile and group sizes kernels split rows and reduced axes into (LayerNorm's
#: 64-row partial sums, 64-key flash blocks, 256-slot and 1024-thread groups).
BOUNDARIES = (64, 256, 1024)
#: (rows, columns) one past each boundary, kept thin so the edges stay cheap.
PAST_BOUNDARIES = ((65, 257), (257, 65), (1025, 3), (3, 1025))


def past_boundaries(make: Callable[[int, int], Params]) -> tuple[Params, ...]:
    """Edges whose rows and whose columns go one past each of :data:`BOUNDARIES`, so a
    kernel that drops or double-counts a last partial chunk fails on edges alone.
    ``make(rows, columns)`` gives one edge's parameters. Marked ``boundary``: the capture
    section, which checks recording and replay rather than kernels, leaves them out."""
    return edges(*({**make(r, c), "boundary": True} for r, c in PAST_BOUNDARIES))


#: (M, K, N) of a product: each of the three one past each boundary, kept thin.
PAST_BOUNDARIES_MKN = (
    (65, 257, 3), (257, 3, 65), (3, 65, 257), (1025, 3, 2), (2, 1025, 3), (3, 2, 1025),
)  # fmt: skip


def past_boundaries_mkn(make: Callable[[int, int, int], Params]) -> tuple[Params, ...]:
    """:func:`past_boundaries` for products: rows M, reduced K and columns N each one past
    each boundary. ``make(m, k, n)`` gives one edge's parameters."""
    return edges(*({**make(m, k, n), "boundary": True} for m, k, n in PAST_BOUNDARIES_MKN))


def rng_of(params: Params) -> np.random.Generator:
    return np.random.default_rng(int(params.get("seed", 0)))


def label(params: Params) -> str:
    return str(params.get("label", "drawn"))


# -- error samples -----------------------------------------------------------------------------
class ErrorInputs(Protocol):
    """Tensors on the backend under test (through a spy that records backend calls)."""

    backend: Any  # the spy itself, for calls that take a backend
    float_dtype: np.dtype  # the backend's first float dtype

    def f(self, *shape: int) -> Any:
        """Zeros of the backend's first float dtype."""
        ...

    def i(self, *shape: int) -> Any:
        """Zeros of the backend's first index dtype (samples needing it declare ``index``)."""
        ...

    def index_values(self, values: Any) -> Any:
        """An index tensor holding ``values`` (samples needing it declare ``index``)."""
        ...

    def other_device(self, *shape: int) -> Any:
        """Float zeros on a second instance of the backend (a different device)."""
        ...

    def other_float(self, *shape: int) -> Any:
        """Zeros of a second float dtype the backend supports (``other_float``)."""
        ...

    def unsupported_dtype(self) -> np.dtype:
        """A riftco dtype the backend does not support (``unsupported``)."""
        ...


@dataclass(frozen=True)
class ErrorSample:
    """A malformed call: ``run(inputs)`` must raise a riftco error starting with ``[op]``."""

    name: str
    op: str
    run: Callable[[ErrorInputs], Any]
    needs: frozenset[str] = frozenset()


def error(name: str, op: str, run: Callable[[ErrorInputs], Any], *needs: str) -> ErrorSample:
    return ErrorSample(name, op, run, frozenset(needs))


@dataclass(frozen=True)
class SampleSet:
    """Everything conformance runs for one unit: numeric samples (``None`` for ops with no
    outputs to compare), error samples and domain samples (bad values: ``DomainError``)."""

    samples: Samples | None = None
    errors: tuple[ErrorSample, ...] = ()
    domain: tuple[ErrorSample, ...] = ()


# -- value generators ----------------------------------------------------------------------------
def normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return rng.standard_normal(shape) * scale


def log_uniform(
    rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float
) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=shape))


def signed_away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return log_uniform(rng, shape, 0.1, 10.0) * rng.choice([-1.0, 1.0], size=shape)


def grid(rng: np.random.Generator, shape: tuple[int, ...], levels: int = 5) -> np.ndarray:
    """Values on a coarse grid so ties and equalities really occur."""
    return rng.integers(-levels, levels + 1, size=shape).astype(np.float64) / 2.0


def with_specials(x: np.ndarray, rng: np.random.Generator, *values: float) -> np.ndarray:
    """``x`` with about a third of its elements replaced by ``values`` (NaN, +-inf, ...)."""
    out = np.array(x, dtype=np.float64)
    if out.size:
        flat = out.reshape(-1)
        picks = rng.random(flat.size) < 0.34
        picks[0] = True  # at least one special value per example
        flat[picks] = rng.choice(np.asarray(values, dtype=np.float64), size=int(picks.sum()))
    return out
