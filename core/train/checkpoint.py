"""Checkpoints that are never half-written.

A run directory holds ``ckpt-<step>-<tag>/`` folders and a ``LATEST`` file naming the
current one. Each checkpoint is written whole into a temporary folder beside them, renamed
into place (a new name, so the rename is atomic), and only then does ``LATEST`` move to it
(temp file + ``os.replace``). A crash at any point leaves ``LATEST`` naming a complete
checkpoint; older ones are deleted only after the switch.

Inside a checkpoint: ``model.safetensors`` (weights), ``optimizer.safetensors`` (its
arrays) and ``state.json`` (config, tokenizer, RNG state, step, optimizer scalars, loss
history), so the weights open with any safetensors reader.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from ..errors import RiftcoError

FORMAT = 1
LATEST = "LATEST"
STATE = "state.json"
MODEL = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"


class CheckpointError(RiftcoError, ValueError):
    """A checkpoint is missing, incomplete or from an incompatible format."""


@dataclass
class Checkpoint:
    weights: dict[str, np.ndarray]
    optimizer: Any
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def step(self) -> int:
        return int(self.meta["step"])


# -- nested optimizer state <-> (arrays, JSON skeleton) ----------------------------------------
def _flatten(obj: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, np.ndarray):
        arrays[key] = np.ascontiguousarray(obj)
        return {"__array__": key}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _flatten(v, f"{key}.{k}", arrays) for k, v in obj.items()}
        return {"__items__": [[k, _flatten(v, f"{key}.{k}", arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        out = [_flatten(v, f"{key}.{i}", arrays) for i, v in enumerate(obj)]
        return {"__tuple__": out} if isinstance(obj, tuple) else out
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CheckpointError(f"[checkpoint] cannot store {type(obj).__name__} at {key!r}")


def _unflatten(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, list):
        return [_unflatten(v, arrays) for v in obj]
    if isinstance(obj, dict):
        if "__array__" in obj:
            return arrays[obj["__array__"]]
        if "__tuple__" in obj:
            return tuple(_unflatten(v, arrays) for v in obj["__tuple__"])
        if "__items__" in obj:
            return {k: _unflatten(v, arrays) for k, v in obj["__items__"]}
        return {k: _unflatten(v, arrays) for k, v in obj.items()}
    return obj


# -- writing ---------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    if os.name != "posix":  # NOTE: directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never a mix."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    weights: dict[str, np.ndarray],
    optimizer: Any,
    meta: dict[str, Any],
) -> Path:
    """Write a complete checkpoint into ``run_dir`` and point ``LATEST`` at it."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    step = int(meta["step"])
    name = f"ckpt-{step:08d}-{secrets.token_hex(3)}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=run))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a checkpoint is as readable as its run
        opt_arrays: dict[str, np.ndarray] = {}
        skeleton = _flatten(optimizer, "opt", opt_arrays)
        save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(tmp / MODEL))
        save_file(opt_arrays, str(tmp / OPTIMIZER))
        state = {"format": FORMAT, **meta, "optimizer": skeleton}
        (tmp / STATE).write_text(json.dumps(state, indent=1), encoding="utf-8")
        for f in (MODEL, OPTIMIZER, STATE):
            _fsync_file(tmp / f)
        final = run / name
        os.rename(tmp, final)
        _fsync_dir(run)
        write_text_atomic(run / LATEST, name + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in run.iterdir():
        if old.name != name and old.is_dir() and old.name.startswith(("ckpt-", ".tmp-ckpt-")):
            shutil.rmtree(old, ignore_errors=True)
    return final


# -- reading ---------------------------------------------------------------------------------------
def resolve(path: str | os.PathLike[str]) -> Path:
    """The checkpoint folder for a run directory (via ``LATEST``) or a checkpoint folder."""
    p = Path(path)
    if (p / LATEST).is_file():
        target = p / (p / LATEST).read_text(encoding="utf-8").strip()
        if not (target / STATE).is_file():
            raise CheckpointError(
                f"[checkpoint] {str(p)!r}: LATEST names {target.name!r}, which is missing"
            )
        return target
    if (p / STATE).is_file():
        return p
    raise CheckpointError(
        f"[checkpoint] {str(p)!r} holds no checkpoint (neither a {LATEST} file nor {STATE}); "
        "pass the --out directory of a training run"
    )


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    ckpt = resolve(path)
    meta = json.loads((ckpt / STATE).read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT:
        raise CheckpointError(
            f"[checkpoint] {str(ckpt)!r} has format {meta.get('format')!r}; "
            f"this riftco reads {FORMAT}"
        )
    weights = load_file(str(ckpt / MODEL))
    optimizer = _unflatten(meta.pop("optimizer"), load_file(str(ckpt / OPTIMIZER)))
    return Checkpoint(weights, optimizer, meta, ckpt)
