"""Every riftco hook, in one documented module (the pytest/pluggy habit).

A plugin is a module (or object) registered under the entry-point group ``riftco`` that
implements some of these hooks with ``@riftco.hookimpl``. For example::

    # mybackend/plugin.py
    import riftco
    from .backend import MyBackend

    @riftco.hookimpl
    def riftco_backends():
        return [MyBackend]

    # pyproject.toml
    [project.entry-points.riftco]
    mybackend = "mybackend.plugin"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .backend import Backend
    from .lazy_backend import LazyBackend

PROJECT = "riftco"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def riftco_backends() -> list[type[Backend] | LazyBackend]:
    """Return the backend classes this plugin provides (a list; ``[]`` for none).

    An entry may be a :class:`riftco.LazyBackend` instead of the class: its name, its
    priority and ``"package.module:ClassName"``. riftco then imports the class only when
    that backend is needed, so a backend over a heavy library does not slow down
    ``import riftco`` or ``riftco.device("cpu")``; the class must declare the same name
    and priority.

    Each class implements :class:`riftco.Backend` (usually by subclassing
    :class:`riftco.BackendBase`; the protocol is structural, so any class with its members
    will do) and declares ``name``, ``priority`` and ``protocol_version``. Keep this hook
    cheap and free of device probing: it runs for every plugin when riftco loads them,
    while ``is_available()`` and ``devices()`` run only for the backend asked for, and
    under a time limit, so a broken driver marks only its backend unavailable.
    """
    raise NotImplementedError
