"""Checkpoints that are never half-written and never read back silently damaged.

A run directory holds ``ckpt-<step>-<tag>/`` folders and a ``LATEST`` file naming the
current one. Each checkpoint is written whole into a temporary folder beside them, renamed
into place (a new name, so the rename is atomic), and only then does ``LATEST`` move to it
(temp file + ``os.replace``). A crash at any point leaves ``LATEST`` naming a complete
checkpoint; older ones are deleted only after the switch.

Inside a checkpoint: ``model.safetensors`` (weights), ``optimizer.safetensors`` (its
arrays) and ``state.json`` (config, tokenizer, RNG state, step, optimizer scalars, loss
history), so the weights open with any safetensors reader.

Format 2 records the size and sha256 of both tensor files in ``state.json`` and a sha256 of
``state.json``'s own content, and every read checks them before safetensors parses a byte:
a flipped bit or a truncated copy is a :class:`CheckpointError` naming the file, not NaN
weights that train on. Format 1 checkpoints (no hashes) still load, marked unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_tensors
from safetensors.numpy import save_file

from ..errors import RiftcoError
from ..output_files import sync_folder, write_file

FORMAT = 2
READABLE_FORMATS = (1, 2)  # 1: no content hashes (read unverified)
LATEST = "LATEST"
STATE = "state.json"
MODEL = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"
FILES = "files"  # state.json: {file name: {"bytes": n, "sha256": hex}}
SELF_HASH = "state_sha256"  # state.json: sha256 of its other keys, canonically dumped
_NAME = re.compile(r"ckpt-\d+-[0-9a-f]+")


class CheckpointError(RiftcoError, ValueError):
    """A checkpoint is missing, incomplete or from an incompatible format."""


@dataclass
class Checkpoint:
    weights: dict[str, np.ndarray]
    optimizer: Any
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    verified: bool = True  # False for a format-1 checkpoint, which carries no hashes

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
            if obj["__array__"] not in arrays:
                raise CheckpointError(
                    f"[checkpoint] {OPTIMIZER} lacks the array {obj['__array__']!r} that "
                    f"{STATE} refers to"
                )
            return arrays[obj["__array__"]]
        if "__tuple__" in obj:
            return tuple(_unflatten(v, arrays) for v in obj["__tuple__"])
        if "__items__" in obj:
            return {k: _unflatten(v, arrays) for k, v in obj["__items__"]}
        return {k: _unflatten(v, arrays) for k, v in obj.items()}
    return obj


# -- writing ---------------------------------------------------------------------------------------
def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _digest(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _state_hash(state: dict[str, Any]) -> str:
    """sha256 of ``state`` without its own hash, in a canonical dump that a JSON round
    trip reproduces exactly (sorted keys; floats round-trip through ``repr``)."""
    body = {k: v for k, v in state.items() if k != SELF_HASH}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


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
        # Hash the bytes on disk, read back: what a later load will see.
        files = {f: _digest((tmp / f).read_bytes()) for f in (MODEL, OPTIMIZER)}
        state = {"format": FORMAT, **meta, "optimizer": skeleton, FILES: files}
        state[SELF_HASH] = _state_hash(state)
        (tmp / STATE).write_text(json.dumps(state, indent=1), encoding="utf-8")
        for f in (MODEL, OPTIMIZER, STATE):
            _fsync_file(tmp / f)
        final = run / name
        os.rename(tmp, final)
        sync_folder(run)
        write_file(run / LATEST, name + "\n", "checkpoint")
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
    latest = p / LATEST
    if latest.is_file():
        try:
            name = latest.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"[checkpoint] {str(latest)!r} cannot be read: {exc}") from None
        if not _NAME.fullmatch(name):
            raise CheckpointError(
                f"[checkpoint] {str(latest)!r} is damaged: it should name a ckpt-<step>-<tag> "
                f"folder but holds {name[:80]!r}"
            )
        target = p / name
        if not (target / STATE).is_file():
            raise CheckpointError(
                f"[checkpoint] {str(p)!r}: LATEST names {target.name!r}, which is missing or "
                f"has no {STATE}"
            )
        return target
    if (p / STATE).is_file():
        return p
    raise CheckpointError(
        f"[checkpoint] {str(p)!r} holds no checkpoint (neither a {LATEST} file nor {STATE}); "
        "pass the --out directory of a training run"
    )


def read_state(ckpt: Path) -> dict[str, Any]:
    """``state.json`` of the checkpoint folder ``ckpt``, parsed and checked against its hash."""
    path = ckpt / STATE
    try:
        state = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"[checkpoint] {str(path)!r} is missing") from None
    except UnicodeDecodeError as exc:
        raise CheckpointError(
            f"[checkpoint] {str(path)!r} is corrupt: not UTF-8 at byte {exc.start}"
        ) from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"[checkpoint] {str(path)!r} is corrupt or truncated: not valid JSON at line "
            f"{exc.lineno} column {exc.colno} ({exc.msg})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"[checkpoint] {str(path)!r} should hold a JSON object; it holds a "
            f"{type(state).__name__}"
        )
    fmt = state.get("format")
    if fmt not in READABLE_FORMATS:
        raise CheckpointError(
            f"[checkpoint] {str(path)!r} has format {fmt!r}; this riftco reads "
            f"{', '.join(map(str, READABLE_FORMATS))}"
        )
    if fmt >= 2:
        if SELF_HASH not in state:
            raise CheckpointError(f"[checkpoint] {str(path)!r} lacks its {SELF_HASH!r}")
        if state[SELF_HASH] != _state_hash(state):
            raise CheckpointError(
                f"[checkpoint] {str(path)!r} is corrupt: its content does not match the "
                f"sha256 recorded when it was written (edited or damaged since)"
            )
    required = ("step", "optimizer") + ((FILES,) if fmt >= 2 else ())
    missing = [k for k in required if k not in state]
    if missing:
        raise CheckpointError(f"[checkpoint] {str(path)!r} lacks the key(s) {missing}")
    if isinstance(state["step"], bool) or not isinstance(state["step"], int) or state["step"] < 0:
        raise CheckpointError(
            f"[checkpoint] {str(path)!r}: step should be an integer >= 0; got {state['step']!r}"
        )
    return state


def _read_tensors(ckpt: Path, name: str, state: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays in ``ckpt/name``; the recorded size and sha256 are checked first."""
    path = ckpt / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"[checkpoint] {str(path)!r} is missing") from None
    except OSError as exc:
        raise CheckpointError(f"[checkpoint] {str(path)!r} cannot be read: {exc}") from None
    if state["format"] >= 2:
        want = state[FILES].get(name) if isinstance(state[FILES], dict) else None
        if not isinstance(want, dict) or not {"bytes", "sha256"} <= want.keys():
            raise CheckpointError(
                f"[checkpoint] {str(ckpt / STATE)!r} records no size and sha256 for {name}"
            )
        if len(data) != want["bytes"]:
            what = "truncated" if len(data) < want["bytes"] else "longer than written"
            raise CheckpointError(
                f"[checkpoint] {str(path)!r} is {what}: {len(data):,} bytes, {STATE} recorded "
                f"{want['bytes']:,}"
            )
        got = hashlib.sha256(data).hexdigest()
        if got != want["sha256"]:
            raise CheckpointError(
                f"[checkpoint] {str(path)!r} is corrupt: sha256 {got[:16]}... but {STATE} "
                f"recorded {str(want['sha256'])[:16]}... (damaged since it was written)"
            )
    try:
        # Third-party parser over untrusted bytes: any failure is a damaged file.
        return load_tensors(data)
    except Exception as exc:
        raise CheckpointError(
            f"[checkpoint] {str(path)!r} is not a readable safetensors file: {exc}"
        ) from None


def load_checkpoint(path: str | os.PathLike[str], optimizer: bool = True) -> Checkpoint:
    """Read and verify a checkpoint; ``optimizer=False`` reads only the weights and
    ``state.json`` (what sampling needs), so a missing optimizer file does not matter."""
    ckpt = resolve(path)
    meta = read_state(ckpt)
    weights = _read_tensors(ckpt, MODEL, meta)
    opt = None
    if optimizer:
        arrays = _read_tensors(ckpt, OPTIMIZER, meta)
        try:
            opt = _unflatten(meta["optimizer"], arrays)
        except (TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"[checkpoint] {str(ckpt / STATE)!r}: the optimizer entry is malformed ({exc})"
            ) from None
    verified = meta["format"] >= 2
    for key in ("optimizer", FILES, SELF_HASH):
        meta.pop(key, None)
    return Checkpoint(weights, opt, meta, ckpt, verified=verified)
