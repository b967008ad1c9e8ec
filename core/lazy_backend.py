"""A backend a plugin names now and riftco imports only when it is asked for.

A backend over a large array library (torch takes about two seconds to import) that hands
riftco its class from the plugin hook makes every riftco program pay that import, even one
that only ever runs ``riftco.device("cpu")``. The hook may instead return a
:class:`LazyBackend`: the name and the priority riftco needs to list and rank the backend,
and where the class lives. riftco imports it the first time the backend itself is needed
(its probes, ``riftco backends``, ``auto`` reaching its rank, a device of it), then checks
that the class has the name and priority declared here; a mismatch or a failed import
makes the backend unavailable with the reason, like any other broken plugin.

::

    @riftco.hookimpl
    def riftco_backends():
        return [riftco.LazyBackend("torch", "riftco_torch.backend:TorchBackend", priority=5)]
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyBackend:
    """``name`` and ``priority`` as the class declares them; ``target`` is
    ``"package.module:ClassName"``."""

    name: str
    target: str
    priority: int = 0

    @property
    def origin(self) -> str:
        """``package.module.ClassName``: how riftco names the class in messages."""
        return self.target.replace(":", ".")

    def problem(self) -> str:
        """Why this declaration cannot be used ('' if it can); checked without importing."""
        module, _, attr = self.target.partition(":")
        if not (isinstance(self.target, str) and module and attr and ":" not in attr):
            return (
                f"LazyBackend {self.name!r} has target {self.target!r}; expected "
                "'package.module:ClassName'"
            )
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            return f"LazyBackend {self.name!r} has priority {self.priority!r}; expected an int"
        return ""

    def load(self) -> Any:
        """Import the module and return the class (exceptions are the caller's to report)."""
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def mismatch(self, cls: Any) -> str:
        """Why the imported object is not the backend declared here ('' if it is)."""
        if not isinstance(cls, type):
            return f"{self.target} is {type(cls).__name__}, not a backend class"
        name, priority = getattr(cls, "name", None), getattr(cls, "priority", None)
        if name != self.name or priority != self.priority:
            return (
                f"{self.origin} has name {name!r} and priority {priority!r}, but its plugin "
                f"declared LazyBackend({self.name!r}, priority={self.priority!r}); make them "
                "agree"
            )
        return ""
