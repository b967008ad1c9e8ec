"""Module: a tree of parameters with names, device moves and state dicts.

Parameters are autograd ``Variable``s with ``requires_grad=True`` held as attributes;
child modules are attributes too (or lists of modules). Names follow attribute order
(``blocks.0.attn.qkv.weight``), which is also the order of ``parameters()``, so an
optimizer's state lines up with a checkpoint's weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import creation
from ..autograd import Variable
from ..device import Device
from ..errors import DTypeError, ShapeError
from ..ops.capture_hooks import bump_generation


def parameter(array: np.ndarray, device: str | Device | None = None) -> Variable:
    """A trainable leaf holding ``array`` (its dtype kept as is) on ``device``."""
    return Variable(creation.tensor(np.ascontiguousarray(array), device=device), requires_grad=True)


def _holds_parameters(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_parameters(v) for v in value)
    return isinstance(value, (Variable, Module))


class Module:
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        """Binding a new parameter or child where one was tells captured steps (which do not
        run the model's Python on replay) to record again (``riftco.replay``)."""
        old = vars(self).get(name)
        if old is not None and old is not value and _holds_parameters(old):
            bump_generation()
        object.__setattr__(self, name, value)

    # -- the tree ------------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield f"{name}.{i}", item

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Variable]]:
        for name, value in vars(self).items():
            if isinstance(value, Variable) and value.requires_grad:
                yield prefix + name, value
        for name, child in self.named_children():
            yield from child.named_parameters(f"{prefix}{name}.")

    def parameters(self) -> list[Variable]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.value.size for p in self.parameters())

    # -- devices and state ---------------------------------------------------------------------
    def to(self, device: str | Device) -> Module:
        """Move every parameter (in place, so optimizers holding them keep working)."""
        for p in self.parameters():
            p.to(device)
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host copies of every parameter, by name."""
        return {name: p.value.numpy() for name, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Copy ``state`` into the parameters; every name, shape and dtype must match.

        Everything is checked before anything is written, so a bad state dict leaves the
        module untouched.
        """
        params = dict(self.named_parameters())
        missing = [k for k in params if k not in state]
        unexpected = [k for k in state if k not in params]
        if missing or unexpected:
            raise ShapeError(
                f"[load_state_dict] {type(self).__name__}: missing {missing or 'none'}, "
                f"unexpected {unexpected or 'none'}"
            )
        arrays = {}
        for name, p in params.items():
            arr = np.asarray(state[name].numpy() if hasattr(state[name], "numpy") else state[name])
            if tuple(arr.shape) != tuple(p.shape):
                raise ShapeError(
                    f"[load_state_dict] parameter {name!r} has shape {tuple(arr.shape)} in the "
                    f"state dict but {tuple(p.shape)} in the model"
                )
            if arr.dtype != p.dtype:
                raise DTypeError(
                    f"[load_state_dict] parameter {name!r} is {arr.dtype.name} in the state "
                    f"dict but {np.dtype(p.dtype).name} in the model (no implicit casts)"
                )
            arrays[name] = arr
        for name, p in params.items():
            p.assign(creation.tensor(arrays[name], device=p.device))
