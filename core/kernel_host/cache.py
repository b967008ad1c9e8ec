"""Compiled kernel programs on disk, shared by every process on the machine.

A kernel family takes seconds to compile (PoCL: 1-16 s each on a 2-core EPYC; NVRTC:
about a second), and a test run, a conformance pass and a training run each start a new
process that needs the same programs. So runtimes keep what their compiler produced (a
CUBIN, an OpenCL program binary) and what it said (the build log) in one file per program,
keyed by everything that decides the result: the runtime, the device and its driver, the
build options and the complete source. This is the scheme PyTorch's inductor and Triton
use for their kernels. Where a driver already keeps such a cache (PoCL: source, options
and device, both compile stages), an entry holds only the log: exporting a PoCL binary
costs far more than building from its cache (docs/DECISIONS.md).

Properties a user relies on:
- Writes are atomic (a temporary file renamed into place): a killed process leaves either
  the old entry or the new one, never half of one.
- Every entry carries the sha256 of its payload; a truncated, corrupted or foreign file is
  a miss (and is rebuilt and replaced), never an error and never a wrong kernel.
- While one process builds a program, others that need the same one wait for it instead of
  compiling it again (an advisory file lock per entry; without ``fcntl`` they just build).
- ``RIFTCO_KERNEL_CACHE=0`` turns it off; ``RIFTCO_CACHE_DIR`` moves it (default
  ``~/.cache/riftco``, shared with the native backend's build cache); deleting the folder
  is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..env_values import flag

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: entries are still shared, builds may repeat
    fcntl = None  # type: ignore[assignment]

CACHE_DIR_ENV = "RIFTCO_CACHE_DIR"
KERNEL_CACHE_ENV = "RIFTCO_KERNEL_CACHE"
_MAGIC = b"riftco-kernel 1\n"
_log = logging.getLogger("riftco.kernel_host.cache")


def cache_root() -> Path:
    """``RIFTCO_CACHE_DIR`` or ``~/.cache/riftco``: every on-disk cache riftco keeps."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "riftco"


def cache_enabled() -> bool:
    """False when ``RIFTCO_KERNEL_CACHE`` is 0/false/no/off, True when unset or
    1/true/yes/on; anything else is an error naming the variable."""
    return flag(KERNEL_CACHE_ENV, default=True)


@dataclass(frozen=True)
class CachedProgram:
    """One entry: the compiler's product, what it said, and what it was built from."""

    binary: bytes
    log: str
    program: str
    options: tuple[str, ...]


class KernelCache:
    """The entries of one device of one runtime, in ``<root>/kernels/<runtime>/<device>/``.

    ``device`` is a string naming everything about the device and its compiler that changes
    the binary (name, driver and compiler versions); it is hashed into the folder name and
    kept readable in each entry.
    """

    def __init__(self, runtime: str, device: str, root: Path | None = None) -> None:
        self.device = device
        digest = hashlib.sha256(device.encode()).hexdigest()[:16]
        self.folder = (root or cache_root()) / "kernels" / runtime / digest

    def key(self, source: str, options: Sequence[str]) -> str:
        h = hashlib.sha256()
        for part in (self.device, "\0".join(options), source):
            h.update(part.encode())
            h.update(b"\0\1")
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.bin"

    def load(self, key: str) -> CachedProgram | None:
        """The entry for ``key``, or None when it is absent or fails its checks."""
        try:
            data = self._path(key).read_bytes()
        except OSError:
            return None
        return _decode(data, str(self._path(key)))

    def store(
        self, key: str, binary: bytes, log: str, program: str, options: Sequence[str]
    ) -> None:
        """Write an entry atomically; a cache that cannot be written is skipped (logged at
        debug level): it only ever saves time."""
        header = {
            "device": self.device,
            "program": program,
            "options": list(options),
            "log": log,
            "size": len(binary),
            "sha256": hashlib.sha256(binary).hexdigest(),
            "created": time.time(),
        }
        blob = _MAGIC + json.dumps(header).encode() + b"\n" + binary
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".bin")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, self._path(key))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            _log.debug("kernel cache: could not write %s: %s", self._path(key), exc)

    def get_or_build(
        self,
        source: str,
        options: Sequence[str],
        program: str,
        build: Callable[[], tuple[bytes, str]],
    ) -> CachedProgram:
        """The entry for ``source`` built with ``options``: loaded, or made by ``build()``
        (``(binary, log)``) and stored. The build runs under the entry's lock, after a
        second look, so processes that miss at the same time compile it once."""
        key = self.key(source, options)
        hit = self.load(key)
        if hit is None:
            with self.lock(key):
                hit = self.load(key)
                if hit is None:
                    binary, log = build()
                    self.store(key, binary, log, program, options)
                    hit = CachedProgram(binary, log, program, tuple(options))
        return hit

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the build lock of ``key`` (waits while another process builds it)."""
        if fcntl is None:
            yield
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = open(self.folder / f"{key}.lock", "a+b")
        except OSError:
            yield  # an unwritable cache: build without coordination
            return
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def entries(self) -> list[CachedProgram]:
        """Every valid entry of this device, oldest first."""
        return entries_in(self.folder)


def entries_in(folder: str | Path) -> list[CachedProgram]:
    """The valid entries of one device's cache folder, oldest first (what ``riftco
    backends --verbose`` lists with their build logs)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.bin"), key=_mtime):
        with contextlib.suppress(OSError):
            entry = _decode(path.read_bytes(), str(path))
            if entry is not None:
                found.append(entry)
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _decode(data: bytes, where: str) -> CachedProgram | None:
    if not data.startswith(_MAGIC):
        _log.debug("kernel cache: %s is not an entry", where)
        return None
    head, sep, binary = data[len(_MAGIC) :].partition(b"\n")
    try:
        header = json.loads(head) if sep else None
        ok = (
            isinstance(header, dict)
            and header.get("size") == len(binary)
            and header.get("sha256") == hashlib.sha256(binary).hexdigest()
        )
    except ValueError:
        ok = False
    if not ok:
        _log.debug("kernel cache: %s is damaged; it will be rebuilt", where)
        return None
    assert isinstance(header, dict)
    return CachedProgram(
        binary,
        str(header.get("log", "")),
        str(header.get("program", "")),
        tuple(str(o) for o in header.get("options", [])),
    )
