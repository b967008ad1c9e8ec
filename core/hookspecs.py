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

import pluggy

PROJECT = "riftco"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def riftco_backends() -> list[type]:
    """Return the backend classes this plugin provides.

    Each class implements :class:`riftco.Backend` (usually by subclassing
    :class:`riftco.BackendBase`) and declares ``name``, ``priority`` and
    ``protocol_version``. Keep this hook cheap and free of device probing: probing happens
    in the class's ``is_available()`` so a broken driver only marks the backend
    unavailable instead of breaking ``import riftco``.
    """
    raise NotImplementedError
