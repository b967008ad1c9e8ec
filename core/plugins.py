"""Backend discovery through pluggy and the entry-point group ``riftco``.

Loading is lazy (first use of a device or ``riftco backends``) and forgiving: a plugin
that fails to import, or whose probe raises, is recorded as unavailable with the
exception text instead of breaking ``import riftco``. ``RIFTCO_STRICT_PLUGINS=1`` turns
such failures into errors; ``RIFTCO_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point
name. Two backends with one name, or a backend built for another protocol major version,
are refused with a message naming both sides.
"""

from __future__ import annotations

import difflib
import os
import threading
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from . import hookspecs
from .backend import PROTOCOL_VERSION, DeviceInfo, missing_primitives
from .errors import BackendUnavailableError, PluginError, UnknownBackendError

ENTRY_POINT_GROUP = "riftco"


@dataclass
class BackendEntry:
    """One backend as the registry knows it (what ``riftco backends`` prints)."""

    name: str
    cls: type | None
    plugin: str
    distribution: str
    dist_version: str
    available: bool
    reason: str = ""
    protocol_version: tuple[int, int] | None = None
    _devices: list[DeviceInfo] | None = field(default=None, repr=False)

    @property
    def priority(self) -> int:
        return int(getattr(self.cls, "priority", 0)) if self.cls else 0

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            if not self.available or self.cls is None:
                self._devices = []
            else:
                try:
                    self._devices = list(self.cls.devices())
                except Exception as exc:  # a probe must never break listing
                    self.available = False
                    self.reason = f"devices() raised {type(exc).__name__}: {exc}"
                    self._devices = []
        return self._devices

    def as_dict(self) -> dict[str, Any]:
        caps = self.cls.capabilities().as_dict() if self.cls is not None else None
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.dist_version,
            "protocol_version": list(self.protocol_version) if self.protocol_version else None,
            "priority": self.priority,
            "available": self.available,
            "reason": self.reason,
            "devices": [
                {"index": d.index, "name": d.name, "dtypes": list(d.dtypes), **d.details}
                for d in self.devices()
            ],
            "capabilities": caps,
        }


def _env_list(name: str) -> set[str]:
    return {s.strip() for s in os.environ.get(name, "").split(",") if s.strip()}


def _strict() -> bool:
    return os.environ.get("RIFTCO_STRICT_PLUGINS", "") not in ("", "0", "false", "no")


def _short_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class Registry:
    """Holds the plugin manager, the backend entries and one backend instance per device."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.entries: dict[str, BackendEntry] = {}
        self.failed_plugins: dict[str, str] = {}
        self._instances: dict[tuple[str, int], Any] = {}
        self._lock = threading.RLock()
        self._plugin_dist: dict[str, tuple[str, str]] = {}
        if load_entry_points:
            self._load_entry_points()

    # -- loading ------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        disabled = _env_list("RIFTCO_DISABLE_PLUGINS")
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in disabled:
                continue
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            dist_version = dist.version if dist is not None else "?"
            try:
                plugin = ep.load()
            except Exception as exc:
                reason = f"plugin {ep.name!r} ({ep.value}) failed to import: {_short_exc(exc)}"
                if _strict():
                    raise PluginError(f"[plugins] {reason} [RIFTCO_STRICT_PLUGINS=1]") from exc
                self.failed_plugins[ep.name] = reason
                self.entries.setdefault(
                    ep.name,
                    BackendEntry(ep.name, None, ep.name, dist_name, dist_version, False, reason),
                )
                continue
            self.register(plugin, name=ep.name, distribution=(dist_name, dist_version))

    def register(
        self,
        plugin: Any,
        name: str | None = None,
        distribution: tuple[str, str] = ("<runtime>", ""),
    ) -> list[str]:
        """Register a plugin object (module or instance with hookimpls); return backend names."""
        with self._lock:
            plugin_name = self.pm.register(plugin, name=name)
            if plugin_name is None:
                raise PluginError(f"[plugins] plugin {name!r} is already registered or blocked")
            self._plugin_dist[plugin_name] = distribution
            added: list[str] = []
            try:
                self._add_plugin_backends(plugin_name, distribution, added)
            except BaseException:
                # all or nothing: a refused plugin leaves no half-registered backends behind
                for backend_name in added:
                    self.entries.pop(backend_name, None)
                self.pm.unregister(name=plugin_name)
                self._plugin_dist.pop(plugin_name, None)
                raise
            return added

    def _add_plugin_backends(
        self, plugin_name: str, distribution: tuple[str, str], added: list[str]
    ) -> None:
        for impl in self.pm.hook.riftco_backends.get_hookimpls():
            if impl.plugin_name != plugin_name:
                continue
            try:
                classes = list(impl.function() or [])
            except Exception as exc:
                reason = f"plugin {plugin_name!r} hook riftco_backends raised: {_short_exc(exc)}"
                if _strict():
                    raise PluginError(f"[plugins] {reason}") from exc
                self.failed_plugins[plugin_name] = reason
                self.entries.setdefault(
                    plugin_name,
                    BackendEntry(plugin_name, None, plugin_name, *distribution, False, reason),
                )
                continue
            for cls in classes:
                added.append(self._add_backend(cls, plugin_name, distribution))

    def _add_backend(self, cls: type, plugin: str, distribution: tuple[str, str]) -> str:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"[plugins] plugin {plugin!r} returned {cls!r}, which has no string 'name'"
            )
        if name in self.entries and self.entries[name].cls is not None:
            other = self.entries[name]
            raise PluginError(
                f"[plugins] two backends are named {name!r}: "
                f"{other.cls.__module__}.{other.cls.__qualname__} from distribution "
                f"{other.distribution!r} (plugin {other.plugin!r}) and "
                f"{cls.__module__}.{cls.__qualname__} from distribution {distribution[0]!r} "
                f"(plugin {plugin!r}); uninstall one or block it with RIFTCO_DISABLE_PLUGINS"
            )
        version = tuple(getattr(cls, "protocol_version", (0, 0)))
        entry = BackendEntry(name, cls, plugin, distribution[0], distribution[1], True, "", version)
        problem = ""
        if version[:1] != PROTOCOL_VERSION[:1]:
            problem = (
                f"backend {name!r} implements protocol {version[0]}.{version[1]} but riftco "
                f"speaks protocol {PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]} "
                "(major versions differ)"
            )
        elif missing := missing_primitives(cls):
            problem = f"backend {name!r} lacks required methods: {', '.join(missing)}"
        if problem:
            if _strict():
                raise PluginError(f"[plugins] {problem}")
            entry.available, entry.reason = False, problem
        else:
            try:
                ok, reason = cls.is_available()
                entry.available, entry.reason = bool(ok), str(reason or "")
            except Exception as exc:
                if _strict():
                    raise PluginError(f"[plugins] backend {name!r} is_available() raised") from exc
                entry.available = False
                entry.reason = f"is_available() raised {_short_exc(exc)}"
        self.entries[name] = entry
        return name

    def unregister(self, name: str) -> None:
        """Remove a backend (tests and interactive use); cached instances go with it."""
        with self._lock:
            entry = self.entries.pop(name, None)
            if entry is not None and self.pm.has_plugin(entry.plugin):
                self.pm.unregister(name=entry.plugin)
            for key in [k for k in self._instances if k[0] == name]:
                del self._instances[key]

    # -- lookup --------------------------------------------------------------------------
    def entry(self, name: str) -> BackendEntry:
        try:
            return self.entries[name]
        except KeyError:
            known = sorted(self.entries)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownBackendError(
                f"[device] unknown backend {name!r}{hint} "
                f"(registered: {', '.join(known) or 'none'})"
            ) from None

    def instance(self, name: str, index: int = 0) -> Any:
        """The one backend instance for ``name:index``; raises if unavailable."""
        key = (name, index)
        inst = self._instances.get(key)
        if inst is not None:
            return inst
        with self._lock:
            entry = self.entry(name)
            if not entry.available or entry.cls is None:
                raise BackendUnavailableError(
                    f"[device] backend {name!r} is unavailable: {entry.reason}"
                )
            devices = entry.devices()
            if not 0 <= index < len(devices):
                raise BackendUnavailableError(
                    f"[device] backend {name!r} has {len(devices)} device(s); "
                    f"index {index} is out of range"
                )
            inst = self._instances.get(key)
            if inst is None:
                inst = entry.cls(index)
                self._instances[key] = inst
            return inst

    def auto(self) -> tuple[str, str]:
        """Name of the highest-priority available backend with a device, and why."""
        candidates = sorted(
            (e for e in self.entries.values() if e.available and e.devices()),
            key=lambda e: (-e.priority, e.name),
        )
        if not candidates:
            raise BackendUnavailableError("[device] no backend is available for 'auto'")
        best = candidates[0]
        skipped = [
            f"{e.name} ({e.reason})"
            for e in self.entries.values()
            if e.priority > best.priority and not e.available
        ]
        why = f"highest priority ({best.priority}) among available backends"
        if skipped:
            why += "; unavailable: " + ", ".join(skipped)
        return best.name, why


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Registry()
    return _registry


def reset_registry(registry: Registry | None = None) -> Registry:
    """Replace the process-wide registry (tests; re-reading environment variables)."""
    global _registry
    with _registry_lock:
        _registry = registry if registry is not None else Registry()
    return _registry


def register(plugin: Any, name: str | None = None) -> list[str]:
    """Register a plugin at runtime, without an installed entry point."""
    return get_registry().register(plugin, name=name)
