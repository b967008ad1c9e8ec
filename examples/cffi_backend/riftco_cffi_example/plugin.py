"""The entry point riftco loads (group ``riftco``, name ``cffi_example``).

Keep this cheap: no compiling, no probing. ``CffiBackend.is_available()`` reports a missing
build instead of raising, so a broken install never breaks ``import riftco``.
"""

from __future__ import annotations

import riftco


@riftco.hookimpl
def riftco_backends() -> list[type]:
    from .backend import CffiBackend

    return [CffiBackend]
