"""Reading riftco's environment variables: a value riftco does not understand is an error
naming the variable and what it takes, never a silent default (issue 31: junk in
``RIFTCO_STRICT_PLUGINS`` or ``RIFTCO_KERNEL_CACHE`` read as "on", in
``RIFTCO_NATIVE_POOL_MB`` a raw ``int()`` traceback from a plugin hook)."""

from __future__ import annotations

import os

from .errors import RiftcoError

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


class EnvironmentValueError(RiftcoError, ValueError):
    """An environment variable holds a value riftco cannot use."""


def flag(name: str, default: bool = False) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case); unset or empty gives ``default``."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise EnvironmentValueError(
        f"[env] {name}={raw!r} must be one of {'/'.join(_ON)} or {'/'.join(_OFF)}"
    )


def whole_number(name: str, default: int, what: str) -> int:
    """A whole number >= 0 (``what`` says its unit); unset or empty gives ``default``."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise EnvironmentValueError(f"[env] {name}={raw!r} must be a whole number of {what} >= 0")
    return value


def choice(name: str, options: tuple[str, ...], default: str) -> str:
    """One of ``options`` (any case); unset or empty gives ``default``."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value not in options:
        raise EnvironmentValueError(f"[env] {name}={raw!r} must be one of {', '.join(options)}")
    return value
