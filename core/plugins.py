"""Backend discovery through pluggy and the entry-point group ``riftco``.

Loading happens on first use (a device, ``auto`` or ``riftco backends``) and is forgiving:
no plugin can take riftco down. A plugin that fails to import (``sys.exit()`` included) or
whose import or ``riftco_backends`` hook does not finish in time, implements an unknown
hook, whose hook raises or answers garbage, or that claims a backend name already taken,
adds nothing and is listed as unavailable with the reason. Backends are probed lazily, only
the one asked for; imports, hooks and probes are all bounded in time
(``RIFTCO_PROBE_TIMEOUT``, see :mod:`riftco.plugin_checks`). ``RIFTCO_STRICT_PLUGINS=1``
turns each such fault into a :class:`PluginError` naming the plugin, raised when riftco
meets it; ``RIFTCO_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name.
"""

from __future__ import annotations

import difflib
import os
import threading
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .env_values import flag
from .errors import BackendUnavailableError, PluginError, UnknownBackendError
from .lazy_backend import LazyBackend
from .plugin_checks import (
    call_bounded,
    capabilities_dict,
    check_availability,
    check_devices,
    check_hook_answer,
    one_line,
    origin,
    priority_of,
    probe_timeout,
    protocol_problem,
    protocol_version_of,
    short_exc,
)

if TYPE_CHECKING:
    from .backend import Backend, DeviceInfo

ENTRY_POINT_GROUP = "riftco"
OWN_DISTRIBUTION = "riftco"
STRICT_HINT = " [RIFTCO_STRICT_PLUGINS=1]"


def _env_list(name: str) -> set[str]:
    return {s.strip() for s in os.environ.get(name, "").split(",") if s.strip()}


def _strict() -> bool:
    return flag("RIFTCO_STRICT_PLUGINS")


class BackendEntry:
    """One backend as the registry knows it (what ``riftco backends`` prints).

    The first look at ``available``, ``reason`` or ``devices()`` runs this backend's probes
    once (each bounded in time) and caches the answer; other backends are not touched. A
    *fault* (the plugin raised, timed out or answered garbage) is kept apart from an
    honest "unavailable" so that strict mode raises on faults only. ``cls`` is None for a
    plugin that failed before it could name a backend; the entry then carries the
    plugin's name and the reason (:attr:`is_placeholder`). A backend its plugin declared
    as a :class:`~riftco.LazyBackend` has its class imported on the first look at ``cls``
    or the first probe; an import that fails is a fault like a probe that raises.
    """

    def __init__(
        self,
        name: str,
        cls: type[Backend] | None,
        plugin: str,
        distribution: str,
        dist_version: str,
        problem: str = "",
        protocol_version: tuple[int, int] | None = None,
        priority: int = 0,
        lazy: LazyBackend | None = None,
    ) -> None:
        self.name = name
        self._cls = cls
        self._lazy = lazy
        self.plugin = plugin
        self.distribution = distribution
        self.dist_version = dist_version
        self.protocol_version = protocol_version
        self.priority = priority
        self._lock = threading.RLock()
        self.refused = cls is not None and bool(problem)  # does not fit the protocol
        self._probed = self.is_placeholder or bool(problem)
        self._available = not self._probed
        self._reason = problem
        self._fault = problem
        self._cause: BaseException | None = None
        self._devices: list[DeviceInfo] = []
        self._caps: dict[str, Any] | None = None

    def __repr__(self) -> str:
        state = "unprobed" if not self._probed else ("available" if self._available else "no")
        return f"<BackendEntry {self.name!r} plugin={self.plugin!r} {state}>"

    @property
    def is_placeholder(self) -> bool:
        """A plugin that failed before naming a backend: no class, now or later."""
        return self._cls is None and self._lazy is None

    @property
    def origin(self) -> str:
        """``package.module.ClassName`` (never imports a lazy backend)."""
        what = self._cls if self._cls is not None else self._lazy
        return origin(what) if what is not None else "?"

    @property
    def cls(self) -> type[Backend] | None:
        """The backend class; a lazy backend's is imported (once) here."""
        if self._cls is None and self._lazy is not None and not self._probed:
            with self._lock:
                if self._cls is None and not self._probed:
                    self._load()
        return self._cls

    def _load(self) -> None:
        """Import a lazy backend's class and check it as registration checks a class."""
        lazy = self._lazy
        assert lazy is not None
        try:
            cls = lazy.load()
        except (Exception, SystemExit) as exc:
            self._refuse(f"importing {lazy.target} raised {short_exc(exc)}", exc)
            return
        problem = lazy.mismatch(cls)
        try:
            version, bad_version = protocol_version_of(cls) if not problem else (None, "")
            problem = problem or bad_version or protocol_problem(cls)
        except Exception as exc:  # a metaclass property that raises, say
            problem, version = f"inspecting {lazy.origin} raised {short_exc(exc)}", None
        if problem:
            self._refuse(problem, None)
            return
        self._cls, self.protocol_version = cls, version

    def _refuse(self, reason: str, cause: BaseException | None) -> None:
        self.refused, self._probed = True, True
        self._set_fault(reason, cause)

    # -- probing --------------------------------------------------------------------------
    def probe(self, strict: bool | None = None) -> None:
        """Run the probes once; in strict mode (default: the environment) raise on a fault."""
        if not self._probed:
            with self._lock:
                if self.cls is not None and not self._probed:  # (imports a lazy class)
                    self._run_probes()
                    self._probed = True
        if self._fault and (_strict() if strict is None else strict):
            where = (
                f"backend {self.name!r} (plugin {self.plugin!r}, "
                f"distribution {self.distribution!r}): "
                if not self.is_placeholder
                else ""
            )
            raise PluginError(f"[plugins] {where}{self._fault}{STRICT_HINT}") from self._cause

    def _run_probes(self) -> None:
        cls = self.cls
        assert cls is not None  # entries without a class are born probed
        timeout = probe_timeout()
        out = call_bounded(cls.is_available, "is_available()", timeout)
        if out.error:
            self._set_fault(out.error, out.cause)
            return  # a faulty plugin gets no further calls (each could cost a timeout)
        ok, self._reason, self._fault = check_availability(out.value)
        if self._fault:
            self._set_fault(self._fault, None)
            return
        if ok:
            out = call_bounded(cls.devices, "devices()", timeout)
            problem = out.error or check_devices(out.value)
            if problem:
                self._set_fault(problem, out.cause)
                return
            self._devices = list(out.value)
        out = call_bounded(cls.capabilities, "capabilities()", timeout)
        caps, problem = (None, out.error) if out.error else capabilities_dict(out.value)
        if problem and ok:
            self._set_fault(problem, out.cause)
            return
        self._available, self._caps = ok, caps

    def _set_fault(self, reason: str, cause: BaseException | None) -> None:
        self._available, self._reason, self._fault, self._cause = False, reason, reason, cause
        self._devices = []

    # -- what the rest of riftco reads ----------------------------------------------------
    @property
    def available(self) -> bool:
        self.probe()
        return self._available

    @available.setter
    def available(self, value: bool) -> None:
        """Override the probe's verdict (tests, or a user taking a backend out of ``auto``)."""
        with self._lock:
            if value:
                self.probe(strict=False)
            self._probed, self._available = True, bool(value)

    @property
    def reason(self) -> str:
        self.probe()
        return self._reason

    @reason.setter
    def reason(self, value: str) -> None:
        with self._lock:
            self._reason = value

    def devices(self) -> list[DeviceInfo]:
        self.probe()
        return list(self._devices) if self._available else []

    def as_dict(self) -> dict[str, Any]:
        """The listing row: built from the cached probe, so it cannot raise (but in strict mode)."""
        self.probe()
        reserved = ("index", "name", "dtypes")
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.dist_version,
            "protocol_version": list(self.protocol_version) if self.protocol_version else None,
            "priority": self.priority,
            "available": self._available,
            "reason": self._reason,
            "devices": [
                {
                    "index": d.index,
                    "name": d.name,
                    "dtypes": list(d.dtypes),
                    **{k: v for k, v in d.details.items() if k not in reserved},
                }
                for d in self.devices()
            ],
            "capabilities": self._caps,
        }


def _distribution_of(ep: Any) -> tuple[str, str]:
    try:
        dist = ep.dist
        if dist is None:
            return "?", "?"
        return str(dist.metadata["Name"]), str(dist.version)
    except Exception:  # a malformed METADATA file names nothing, it breaks nothing
        return "?", "?"


def _load_order(ep: Any) -> tuple[bool, str, str]:
    """riftco's own plugins first, then by distribution: who keeps a contested name is fixed."""
    dist = _distribution_of(ep)[0]
    return dist != OWN_DISTRIBUTION, dist.lower(), str(ep.name)


def _priority_order(entry: BackendEntry) -> tuple[int, str]:
    return -entry.priority, entry.name


class Registry:
    """Holds the plugin manager, the backend entries and one backend instance per device."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.entries: dict[str, BackendEntry] = {}
        self.failed_plugins: dict[str, str] = {}
        self._instances: dict[tuple[str, int], Any] = {}
        self._start_failures: dict[tuple[str, int], tuple[str, BaseException]] = {}
        self._lock = threading.RLock()
        if load_entry_points:
            self._load_entry_points()

    # -- loading ------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        """Import every plugin, each in a daemon thread bounded by ``RIFTCO_PROBE_TIMEOUT``
        (docs/DECISIONS.md, "Plugin imports and hooks are bounded in time")."""
        disabled = _env_list("RIFTCO_DISABLE_PLUGINS")
        try:
            found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception as exc:
            reason = f"reading the installed entry points raised {short_exc(exc)}"
            self._plugin_failed("<entry points>", ("?", "?"), reason, exc)
            return
        loaded: dict[str, str] = {}  # entry-point name -> distribution
        for ep in sorted(found, key=_load_order):
            if ep.name in disabled:
                continue
            dist = _distribution_of(ep)
            if ep.name in loaded:  # never imported: its name already belongs to a plugin
                reason = (
                    f"plugin {ep.name!r} ({ep.value}) from distribution {dist[0]!r} has the "
                    f"entry-point name of a plugin from distribution {loaded[ep.name]!r}; "
                    "riftco keeps the first; uninstall one"
                )
                self._plugin_failed(ep.name, dist, reason, None)
                continue
            loaded[ep.name] = dist[0]
            out = call_bounded(ep.load, "its import", probe_timeout())
            if out.error:  # raised (sys.exit() included), or still importing at the limit
                why = out.error if out.cause is None else short_exc(out.cause)
                reason = f"plugin {ep.name!r} ({ep.value}) failed to import: {why}"
                self._plugin_failed(ep.name, dist, reason, out.cause)
                continue
            plugin = out.value
            try:
                self.register(plugin, name=ep.name, distribution=dist)
            except PluginError as exc:  # two entry points load one module
                if _strict():
                    raise
                self._plugin_failed(ep.name, dist, str(exc).removeprefix("[plugins] "), exc)

    def register(
        self,
        plugin: Any,
        name: str | None = None,
        distribution: tuple[str, str] = ("<runtime>", ""),
    ) -> list[str]:
        """Register a plugin object (module or instance with hookimpls); return backend names.

        A plugin that breaks the rules adds nothing: it is recorded in ``failed_plugins``
        and listed as unavailable (strict mode: PluginError). Registering the same object or
        plugin name twice is the caller's mistake and always raises.
        """
        with self._lock:
            label = name or self.pm.get_canonical_name(plugin)
            try:
                plugin_name = self.pm.register(plugin, name=name)
            except ValueError as exc:
                raise PluginError(
                    f"[plugins] plugin {label!r} is already registered: {exc}"
                ) from None
            except pluggy.PluginValidationError as exc:
                reason = f"plugin {label!r} does not fit riftco's hooks: {one_line(str(exc))}"
                self._plugin_failed(label, distribution, reason, exc)
                return []
            if plugin_name is None:
                raise PluginError(f"[plugins] plugin {label!r} is blocked")
            problem, cause, classes = self._hook_answer(plugin, plugin_name)
            entries = (
                [] if problem else [self._make_entry(c, plugin_name, distribution) for c in classes]
            )
            problem = problem or self._name_clash(entries, plugin_name, distribution)
            if not problem and _strict():
                fault = next((e._fault for e in entries if e._fault), "")
                problem = f"plugin {plugin_name!r}: {fault}" if fault else ""
            if problem:
                self.pm.unregister(name=plugin_name)  # all or nothing
                self._plugin_failed(plugin_name, distribution, problem, cause)
                return []
            if self.failed_plugins.pop(plugin_name, None) is not None:  # it failed before
                placeholder = self.entries.get(plugin_name)
                if placeholder is not None and placeholder.is_placeholder:
                    del self.entries[plugin_name]
            for entry in entries:
                self.entries[entry.name] = entry
            return [entry.name for entry in entries]

    def _hook_answer(
        self, plugin: Any, plugin_name: str
    ) -> tuple[str, BaseException | None, list[type[Any]]]:
        """``(problem, cause, classes)`` from the plugin's hooks; problem names the plugin."""
        who = f"plugin {plugin_name!r}"
        try:
            self.pm.check_pending()  # a misspelled hook name would otherwise do nothing at all
        except pluggy.PluginValidationError:
            unknown = sorted(
                c.name for c in self.pm.get_hookcallers(plugin) or [] if not c.has_spec()
            )
            if unknown:
                known = sorted(n for n in dir(hookspecs) if n.startswith("riftco_"))
                hints = [difflib.get_close_matches(u, known, n=1) for u in unknown]
                hint = "; ".join(f"did you mean {h[0]!r}?" for h in hints if h)
                return (
                    f"{who} implements unknown hook(s) {', '.join(map(repr, unknown))}"
                    + (f" ({hint})" if hint else "")
                    + f"; riftco's hooks are: {', '.join(known)}",
                    None,
                    [],
                )
        impls = [
            i for i in self.pm.hook.riftco_backends.get_hookimpls() if i.plugin_name == plugin_name
        ]
        if not impls:
            return (
                f"{who} implements no riftco hook (mark riftco_backends with @riftco.hookimpl)",
                None,
                [],
            )
        classes: list[type[Any]] = []
        for impl in impls:
            out = call_bounded(impl.function, "hook riftco_backends", probe_timeout())
            if out.error:
                return f"{who}: {out.error}", out.cause, []
            answer: Any = out.value
            problem = check_hook_answer(answer)
            if problem:
                return f"{who}: {problem}", None, []
            classes.extend(answer)
        return "", None, classes

    def _make_entry(
        self, cls: type[Any] | LazyBackend, plugin: str, distribution: tuple[str, str]
    ) -> BackendEntry:
        """An entry for ``cls``, unavailable (a fault) when the class does not fit the protocol.

        A LazyBackend's class is checked when it is imported (``BackendEntry.cls``)."""
        if isinstance(cls, LazyBackend):
            return BackendEntry(cls.name, None, plugin, *distribution, priority=cls.priority,
                                lazy=cls)  # fmt: skip
        try:
            version, problem = protocol_version_of(cls)
            priority, bad_priority = priority_of(cls)
            problem = problem or bad_priority or protocol_problem(cls)
        except Exception as exc:  # a metaclass property that raises, say
            version, priority = None, 0
            problem = f"inspecting backend {cls.name!r} raised {short_exc(exc)}"
        return BackendEntry(cls.name, cls, plugin, *distribution, problem, version, priority)

    def _name_clash(self, entries: list[BackendEntry], plugin: str, dist: tuple[str, str]) -> str:
        for entry in entries:
            other = self.entries.get(entry.name)
            if other is None or other.is_placeholder or entry.is_placeholder:
                continue  # a failed plugin's placeholder gives way to a real backend
            return (
                f"plugin {plugin!r}: two backends are named {entry.name!r}: "
                f"{other.origin} from distribution "
                f"{other.distribution!r} (plugin {other.plugin!r}) and "
                f"{entry.origin} from distribution "
                f"{dist[0]!r} (plugin {plugin!r}); riftco keeps the first; uninstall one "
                f"or block it with RIFTCO_DISABLE_PLUGINS={plugin}"
            )
        return ""

    def _plugin_failed(
        self, plugin: str, dist: tuple[str, str], reason: str, cause: BaseException | None
    ) -> None:
        if _strict():
            raise PluginError(f"[plugins] {reason}{STRICT_HINT}") from cause
        self.failed_plugins[plugin] = reason
        if plugin not in self.entries:
            self.entries[plugin] = BackendEntry(plugin, None, plugin, *dist, problem=reason)

    def unregister(self, name: str) -> None:
        """Remove a backend (tests and interactive use); cached instances go with it.

        The plugin that provided it stays registered while it still provides another
        backend (one plugin may register several): only its last backend takes it along.
        """
        with self._lock:
            entry = self.entries.pop(name, None)
            if entry is not None:
                shared = any(e.plugin == entry.plugin for e in self.entries.values())
                if not shared and self.pm.has_plugin(entry.plugin):
                    self.pm.unregister(name=entry.plugin)
                if entry.is_placeholder:
                    self.failed_plugins.pop(entry.plugin, None)
            for cache in (self._instances, self._start_failures):
                for key in [k for k in cache if k[0] == name]:
                    del cache[key]

    # -- lookup --------------------------------------------------------------------------
    def entry(self, name: str) -> BackendEntry:
        """The entry for ``name`` (no probing: looking up a backend costs nothing)."""
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
        """The one backend instance for ``name:index``; raises if unavailable or it cannot start.

        A constructor that raises is remembered (it is not retried on every call) and
        reported as BackendUnavailableError with the exception; strict mode: PluginError.
        """
        key = (name, index)
        inst = self._instances.get(key)
        if inst is not None:
            return inst
        entry = self.entry(name)
        with entry._lock:  # per backend: a slow start never holds up another backend
            inst = self._instances.get(key)
            if inst is not None:
                return inst
            failed = self._start_failures.get(key)
            if failed is None:
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
                try:
                    inst = entry.cls(index)  # type: ignore[call-arg]
                except (Exception, SystemExit) as exc:
                    failed = (f"failed to start on device {index}: {short_exc(exc)}", exc)
                    self._start_failures[key] = failed
                else:
                    self._instances[key] = inst
                    return inst
            message, cause = failed
            if _strict():
                raise PluginError(
                    f"[plugins] backend {name!r} (plugin {entry.plugin!r}, distribution "
                    f"{entry.distribution!r}) {message}{STRICT_HINT}"
                ) from cause
            raise BackendUnavailableError(f"[device] backend {name!r} {message}") from cause

    def auto(self) -> tuple[str, str]:
        """The highest-priority backend that probes fine and starts on device 0, and why.

        Candidates are tried in priority order, so only backends ranked above the choice
        are probed; each one skipped is named with its reason.
        """
        ranked = sorted(self.entries.values(), key=_priority_order)
        # refused at load time: named whatever their rank (a bad priority has no rank)
        refused = {e.name for e in ranked if e.refused}
        skipped = [f"{e.name} ({e.reason})" for e in ranked if e.refused]
        for entry in ranked:
            if entry.is_placeholder or entry.name in refused:
                continue  # a failed plugin: named below, whatever its priority would be
            if not entry.available:  # a lazy class is imported here, once its rank comes
                skipped.append(f"{entry.name} ({entry.reason})")
                continue
            if not entry.devices():
                skipped.append(f"{entry.name} (no devices)")
                continue
            try:
                self.instance(entry.name, 0)
            except BackendUnavailableError as exc:
                failed = self._start_failures.get((entry.name, 0))
                skipped.append(f"{entry.name} ({failed[0] if failed else exc})")
                continue
            why = f"highest priority ({entry.priority}) among available backends"
            return entry.name, why + self._auto_notes(skipped)
        raise BackendUnavailableError(
            "[device] no backend is available for 'auto'" + self._auto_notes(skipped)
        )

    def _auto_notes(self, skipped: list[str]) -> str:
        notes = ""
        if skipped:
            notes += "; skipped: " + ", ".join(skipped)
        if self.failed_plugins:
            notes += "; plugins that failed to load: " + "; ".join(self.failed_plugins.values())
        return notes


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
