"""The files and folders riftco is asked to write: reports, certificates, plots, a run's
checkpoints. One rule for all of them (issue 31):

* a file is replaced atomically (a temporary beside it, then ``os.replace``), so a reader
  or a crash sees the old file or the new one, never half of one;
* through a symbolic link the link's *target* is replaced (the link stays a link), as
  ``open(path, "w")`` would write through it;
* anything that is not a regular file (a device node such as ``/dev/full``, a FIFO, a
  socket, a folder) is refused, never replaced: as root, ``os.replace`` over a device node
  would delete it;
* the temporary is removed on every failure, and a failure is an :class:`OutputPathError`
  naming the option, the path and the reason;
* paths are checked (:func:`check_file`, :func:`check_folder`) before the work that
  produces them starts, so a long run does not fail at its first write.

riftco's own caches (compiled kernels, the native build) live in folders it owns and keep
their own atomic writes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from .errors import RiftcoError

#: Permissions of a new file (an existing one keeps its own): as ``open`` gives under the
#: usual umask 022; ``mkstemp`` alone would make it private.
NEW_FILE_MODE = 0o644


class OutputPathError(RiftcoError, ValueError):
    """A path riftco was asked to write cannot take the file or folder."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _via(path: Path, real: Path) -> str:
    return f" (the target of the link {str(path)!r})" if real != path.absolute() else ""


def check_file(path: str | os.PathLike[str], what: str) -> Path:
    """The real path a new version of file ``path`` would be written to (links followed);
    :class:`OutputPathError` if it is not a regular file or cannot be made there."""
    p = Path(path)
    real = Path(os.path.realpath(p))
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):  # the folder checks below say which
        st = None
    except OSError as exc:
        raise OutputPathError(f"[{what}] {str(p)!r} cannot be examined: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputPathError(
            f"[{what}] {str(real)!r}{_via(p, real)} is {_kind(st.st_mode)}, not a regular "
            "file; riftco writes only regular files (name a file path)"
        )
    folder = real.parent
    if not folder.is_dir():
        why = "is not a directory" if folder.exists() else "does not exist (create it first)"
        raise OutputPathError(f"[{what}] cannot write {str(p)!r}: {str(folder)!r} {why}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"[{what}] cannot write {str(p)!r}: no permission to create files in {str(folder)!r}"
        )
    return real


def check_folder(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a folder riftco may create files in (it is one, or can be made: its
    nearest existing ancestor is a writable directory); :class:`OutputPathError` if not."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            kind = _kind(os.stat(p).st_mode) if not p.is_file() else "a regular file"
            raise OutputPathError(
                f"[{what}] {str(p)!r} is {kind}, not a directory; name a new or existing directory"
            )
        if not os.access(p, os.W_OK | os.X_OK):
            raise OutputPathError(f"[{what}] no permission to create files in {str(p)!r}")
        return p
    if p.is_symlink():  # a dangling link: mkdir would fail on the link itself
        raise OutputPathError(
            f"[{what}] {str(p)!r} is a link to {os.readlink(p)!r}, which does not exist; "
            "create that directory or name another"
        )
    ancestor = p.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(
            f"[{what}] cannot create the directory {str(p)!r}: {str(ancestor)!r} is "
            f"{_kind(os.stat(ancestor).st_mode)}, not a directory"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"[{what}] cannot create the directory {str(p)!r}: no permission to create "
            f"files in {str(ancestor)!r}"
        )
    return p


def write_file(path: str | os.PathLike[str], data: str | bytes, what: str) -> Path:
    """Replace the file ``path`` (through links) with ``data`` atomically; see the module
    docstring. Returns the real path written."""
    real = check_file(path, what)
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    blob = data.encode("utf-8") if isinstance(data, str) else data
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except OSError as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise OutputPathError(
            f"[{what}] could not write {str(path)!r}: {exc.strerror or exc}"
        ) from exc
    except BaseException:  # KeyboardInterrupt mid-write: no temporary left behind
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    sync_folder(real.parent)
    return real


def sync_folder(path: Path) -> None:
    """fsync a directory (a rename in it is durable after this), where the OS allows it."""
    if os.name != "posix":  # NOTE: directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
