"""Mixed precision for the training loop: float32 masters, half compute copies, loss scaling.

The optimizer only ever sees float32: the parameters (masters), AdamW's moments and the
gradients it reads stay float32, because a half-precision weight cannot absorb an update
smaller than its own spacing (2^-11 of itself in float16, 2^-8 in bfloat16) and most
late-training updates are that small. Each step casts the masters to the compute dtype
(``riftco.ops.cast``, inside the step, so a captured step replays the casts too), runs the
model's forward and backward on those copies, and the cast's VJP brings each copy's
gradient back to float32 onto its master. The loss stays float32 (cross-entropy keeps
float32 loss rows for half logits).

float16 has 5 exponent bits: gradients below 2^-24 flush to zero and above 65504
overflow. Dynamic loss scaling (PyTorch's GradScaler) multiplies the backward seed by a
power of two, ``S``, so small gradients stay representable, and divides the float32
master gradients by ``S`` before the update (exact: both are powers of two). A step whose
gradients overflowed is skipped (no optimizer update) and ``S`` halves; ``interval`` good
steps in a row double it. bfloat16 has float32's exponent range and needs no scaling.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes, ops
from ..autograd import Variable, cast
from ..device import Device
from ..errors import DomainError, DTypeError
from ..nn.module import Module

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
INITIAL_SCALE = 2.0**16  # PyTorch GradScaler's init_scale
GROWTH = 2.0
BACKOFF = 0.5
# Below this the scaled seed is under float16's smallest subnormal: every gradient would
# flush to zero, so overflow down here means the float16 forward itself is broken.
MIN_SCALE = 2.0**-24


@dataclass(frozen=True)
class Precision:
    """How a step computes: ``compute`` is the dtype of the parameters' copies the model
    runs on (None: the parameters themselves, no copies); ``scaled``: dynamic loss scaling."""

    name: str
    compute: np.dtype | None
    scaled: bool


def precision(name: str) -> Precision:
    """The :class:`Precision` called ``name`` (one of :data:`PRECISIONS`)."""
    if name == "fp32":
        return Precision(name, None, False)
    if name == "bf16-mixed":
        bf16 = dtypes.bfloat16
        if bf16 is None:
            raise DTypeError(
                "[train] precision bf16-mixed needs the bfloat16 dtype, which comes from the "
                "ml_dtypes package; install it (pip install 'riftco[bfloat16]') or use "
                "fp16-mixed or fp32"
            )
        return Precision(name, np.dtype(bf16), False)
    if name == "fp16-mixed":
        return Precision(name, dtypes.float16, True)
    raise DomainError(f"[train] precision must be one of {', '.join(PRECISIONS)}; got {name!r}")


def check_device(prec: Precision, device: Device, params_dtype: np.dtype) -> None:
    """Refuse, before the first step, a backend that does not declare the compute dtype or
    masters that are not float32 (mixed precision keeps float32 master weights)."""
    if prec.compute is None:
        return
    if np.dtype(params_dtype) != dtypes.float32:
        raise DTypeError(
            f"[train] precision {prec.name} keeps float32 master weights; the model's "
            f"parameters are {np.dtype(params_dtype).name}. Build the model in float32"
        )
    declared = device.backend.dtypes
    if prec.compute not in declared:
        names = ", ".join(sorted(d.name for d in declared))
        raise DTypeError(
            f"[train] precision {prec.name} computes in {prec.compute.name}, which backend "
            f"{device.backend.name!r} does not declare (it declares {names}); use "
            "--precision fp32 or a backend that declares it (`riftco backends` lists them)"
        )


# -- compute copies --------------------------------------------------------------------------------
def _bindings(module: Module) -> list[tuple[Module, str, Variable]]:
    """Every (module, attribute, parameter) of the tree, in ``named_parameters`` order."""
    out = [
        (module, name, value)
        for name, value in vars(module).items()
        if isinstance(value, Variable) and value.requires_grad
    ]
    for _, child in module.named_children():
        out.extend(_bindings(child))
    return out


@contextmanager
def compute_copies(model: Module, dtype: np.dtype | None) -> Iterator[None]:
    """Inside the block the model's parameter attributes hold ``dtype`` copies of the
    masters (none when ``dtype`` is None); the masters are bound again on leaving.

    The block must span backward as well as forward: recomputed regions (``recompute=
    "block"``) run their forward again during backward and must read the same copies.
    The bindings bypass ``Module.__setattr__``'s re-record notice on purpose: a captured
    step makes the copies itself from the masters it reads afresh on every replay, so
    nothing a replay reads changes."""
    if dtype is None:
        yield
        return
    bound = _bindings(model)
    copies: dict[int, Variable] = {}
    try:
        for module, name, p in bound:
            if id(p) not in copies:  # a tied parameter is cast once
                copies[id(p)] = cast(p, dtype)
            object.__setattr__(module, name, copies[id(p)])
        yield
    finally:
        for module, name, p in bound:
            object.__setattr__(module, name, p)


def unscale(params: Sequence[Variable], inv_scale: float) -> None:
    """Divide every gradient by the loss scale (``inv_scale`` = 1/S, a power of two, so the
    product is exact), published as the gradient a captured step replays."""
    from ..ops.capture_hooks import published

    for p in params:
        if p.grad is not None:
            published(p, ops.mul_scalar(p.grad, inv_scale))


# -- dynamic loss scaling --------------------------------------------------------------------------
@dataclass
class LossScaler:
    """PyTorch GradScaler's rule: an overflowing step is skipped and halves the scale;
    ``interval`` good steps in a row double it. The scale stays a power of two, so scaling
    and unscaling round nothing. ``events`` is the trajectory: ``(step, old, new, skipped)``."""

    interval: int
    scale: float = INITIAL_SCALE
    good_steps: int = 0  # finite steps since the last change (PyTorch's growth tracker)
    skipped: int = 0
    events: list[tuple[int, float, float, bool]] = field(default_factory=list)

    def update(self, step: int, finite: bool) -> str | None:
        """Count ``step``'s outcome; returns the log line when the scale changed."""
        old = self.scale
        if not finite:
            self.scale, self.good_steps = old * BACKOFF, 0
            self.skipped += 1
            self.events.append((step, old, self.scale, True))
            return (
                f"step {step}: loss scale {old:g} -> {self.scale:g}, skipped: the scaled "
                "gradients overflowed (inf or NaN); no optimizer update this step"
            )
        self.good_steps += 1
        if self.good_steps < self.interval:
            return None
        self.scale, self.good_steps = old * GROWTH, 0
        self.events.append((step, old, self.scale, False))
        return (
            f"step {step}: loss scale {old:g} -> {self.scale:g} after {self.interval} steps "
            "without overflow"
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "good_steps": self.good_steps,
            "skipped": self.skipped,
            "events": [list(e) for e in self.events],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved scaler; anything malformed is a ValueError naming the key."""
        scale = state["scale"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"scale should be a number; got {scale!r}")
        mantissa, _ = np.frexp(float(scale))
        if not (MIN_SCALE <= float(scale) < np.inf) or mantissa != 0.5:
            raise ValueError(f"scale should be a power of two >= 2^-24; got {scale!r}")
        counts = {k: state[k] for k in ("good_steps", "skipped")}
        for k, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{k} should be an integer >= 0; got {v!r}")
        events = [(int(s), float(a), float(b), bool(k)) for s, a, b, k in state.get("events", [])]
        self.scale = float(scale)
        self.good_steps, self.skipped = counts["good_steps"], counts["skipped"]
        self.events = events
