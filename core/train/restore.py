"""Rebuilding a model, tokenizer and optimizers from a checkpoint, or a ``[checkpoint]`` error.

:mod:`.checkpoint` guarantees the files are the ones written; this module checks that what
they say fits together (config keys, dtype, tensor names and shapes, optimizer moments) so
that a hand-edited or foreign checkpoint fails with the file named, before any weight is
copied, instead of a ``KeyError`` or ``TypeError`` from deep inside the trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..device import Device
from ..dtypes import is_float
from ..errors import RiftcoError
from ..nn import GPT, GPTConfig
from ..optim import AdamW
from .checkpoint import MODEL, OPTIMIZER, STATE, Checkpoint, CheckpointError
from .tokenizer import CharTokenizer

T = TypeVar("T")
PARAM_DTYPES = ("float32", "float64")


def _where(ckpt: Checkpoint, name: str = STATE) -> str:
    return repr(str(ckpt.path / name)) if ckpt.path is not None else name


def field_of(ckpt: Checkpoint, key: str) -> Any:
    """``ckpt.meta[key]``, or an error naming the checkpoint's ``state.json``."""
    if key not in ckpt.meta:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt)} lacks the key {key!r}; it was not written by riftco train"
        )
    return ckpt.meta[key]


def build(ckpt: Checkpoint, key: str, make: Callable[..., T], what: str) -> T:
    """``make(**ckpt.meta[key])`` with a bad entry reported as the checkpoint's fault."""
    value = field_of(ckpt, key)
    if not isinstance(value, dict):
        raise CheckpointError(f"[checkpoint] {_where(ckpt)}: {key!r} should be an object")
    try:
        return make(**value)
    except (TypeError, ValueError, RiftcoError) as exc:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt)}: {key!r} is not a valid {what}: {exc}"
        ) from None


def tokenizer_from(ckpt: Checkpoint) -> CharTokenizer:
    value = field_of(ckpt, "tokenizer")
    try:
        return CharTokenizer.from_dict(value)
    except (TypeError, ValueError, KeyError, AttributeError, RiftcoError) as exc:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt)}: 'tokenizer' is not a valid vocabulary: {exc}"
        ) from None


def _model_config(**fields: Any) -> GPTConfig:
    """Checkpoints written before the rename name ``recompute`` ``checkpointing``."""
    if "checkpointing" in fields and "recompute" not in fields:
        fields["recompute"] = fields.pop("checkpointing")
    return GPTConfig(**fields)


def model_from(ckpt: Checkpoint, device: str | Device | None, seed: int = 0) -> GPT:
    """The GPT that ``state.json`` describes, holding the weights of ``model.safetensors``."""
    mcfg = build(ckpt, "model", _model_config, "model config")
    dtype = field_of(ckpt, "dtype")
    if dtype not in PARAM_DTYPES:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt)}: dtype should be one of {PARAM_DTYPES}; got {dtype!r}"
        )
    for name, arr in ckpt.weights.items():
        if is_float(arr.dtype) and not np.isfinite(arr.astype(np.float32)).all():
            bad = int(arr.size - np.isfinite(arr).sum())
            raise CheckpointError(
                f"[checkpoint] {_where(ckpt, MODEL)}: {name!r} holds {bad} non-finite "
                f"value(s) of {arr.size}; the weights are unusable"
            )
    model = GPT(mcfg, device=device, dtype=np.dtype(dtype), seed=seed)
    try:
        model.load_state_dict(ckpt.weights)
    except RiftcoError as exc:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt, MODEL)} does not fit the model {STATE} describes "
            f"({mcfg.layers} layers, width {mcfg.width}, vocab {mcfg.vocab}, {dtype}): {exc}"
        ) from None
    return model


def model_and_tokenizer(
    ckpt: Checkpoint, device: str | Device | None, seed: int = 0
) -> tuple[GPT, CharTokenizer]:
    """Model and tokenizer, checked against each other (one id per vocabulary entry)."""
    tok = tokenizer_from(ckpt)
    model = model_from(ckpt, device, seed)
    if tok.vocab_size != model.config.vocab:
        raise CheckpointError(
            f"[checkpoint] {_where(ckpt)}: the tokenizer has {tok.vocab_size} characters but "
            f"the model's vocab is {model.config.vocab}"
        )
    return model, tok


def load_optimizers(ckpt: Checkpoint, optimizers: Sequence[AdamW]) -> None:
    """Restore each optimizer from the checkpoint; moments must match their parameters in
    shape and dtype (the optimizer would otherwise cast them silently)."""
    states = ckpt.optimizer
    where = _where(ckpt, OPTIMIZER)
    if not isinstance(states, list) or len(states) != len(optimizers):
        raise CheckpointError(
            f"[checkpoint] {where}: expected {len(optimizers)} optimizer states; got "
            f"{len(states) if isinstance(states, list) else type(states).__name__}"
        )
    for k, (opt, state) in enumerate(zip(optimizers, states, strict=True)):
        entries = state.get("state") if isinstance(state, dict) else None
        if not isinstance(entries, list) or len(entries) != len(opt.params):
            raise CheckpointError(
                f"[checkpoint] {where}: optimizer {k} should hold {len(opt.params)} entries"
            )
        for i, (p, st) in enumerate(zip(opt.params, entries, strict=True)):
            if st is None:
                continue
            for key in ("m", "v"):
                arr = st.get(key) if isinstance(st, dict) else None
                if not isinstance(arr, np.ndarray):
                    raise CheckpointError(f"[checkpoint] {where}: optimizer {k}[{i}] lacks {key}")
                if tuple(arr.shape) != tuple(p.shape) or arr.dtype != np.dtype(p.dtype):
                    raise CheckpointError(
                        f"[checkpoint] {where}: optimizer {k}[{i}].{key} is "
                        f"{arr.dtype.name}{list(arr.shape)}; its parameter is "
                        f"{np.dtype(p.dtype).name}{list(p.shape)}"
                    )
        try:
            opt.load_state_dict(state)
        except (TypeError, ValueError, KeyError, RiftcoError) as exc:
            raise CheckpointError(f"[checkpoint] {where}: optimizer {k}: {exc}") from None
