"""Every path riftco writes (issue 31): conformance ``--json``/``--html``, a run's ``LATEST``
and ``loss.png``, the ops table. Written atomically through links (the link stays), never
over special files, no temporaries left on failure, and checked before the work starts.

Special files are FIFOs made in ``tmp_path``: before the fix, ``--json`` on a special file
replaced it (as root, ``/dev/full`` itself), so no test points the old code at ``/dev``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
import riftco
from riftco import output_files
from riftco.conformance import cli
from riftco.output_files import OutputPathError, check_file, check_folder, write_file

FAST = ["cpu", "--ops", "exp", "--max-examples", "1", "--quiet", "--no-throughput"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_conformance_json_writes_through_a_link(tmp_path, capsys):
    """Before: the link was replaced by a regular file."""
    target = tmp_path / "reports" / "cpu.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert cli.main([*FAST, "--json", str(link), "--html", str(tmp_path / "c.html")]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["passed"] is True
    assert _leftovers(tmp_path) == [] and _leftovers(target.parent) == []


def test_conformance_json_refuses_a_special_file_before_running(tmp_path, capsys):
    """Before: the FIFO was replaced by a regular file at the end of the run (as root,
    ``--json /dev/full`` replaced the device node)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert cli.main([*FAST, "--json", str(fifo)]) == 2
    captured = capsys.readouterr()
    assert "is a FIFO (named pipe), not a regular file" in captured.err
    assert "cases" not in captured.out  # refused before any case ran
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and _leftovers(tmp_path) == []


def test_conformance_json_into_a_missing_directory_is_clear(tmp_path, capsys):
    """Before: a raw FileNotFoundError traceback, after the whole run."""
    assert cli.main([*FAST, "--html", str(tmp_path / "nowhere" / "c.html")]) == 2
    err = capsys.readouterr().err
    assert "[conformance --html]" in err and "does not exist (create it first)" in err
    assert "Traceback" not in err


def test_a_failed_write_leaves_no_temporary_and_the_old_file(tmp_path, monkeypatch):
    """Before: ``.tmpPID`` files were left behind when the write or the rename failed."""
    path = tmp_path / "report.json"
    path.write_text("old")

    def full(src: str, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output_files.os, "replace", full)
    with pytest.raises(OutputPathError, match=r"\[conformance --json\] could not write .*space"):
        write_file(path, "new", "conformance --json")
    assert path.read_text() == "old" and _leftovers(tmp_path) == []


def test_write_keeps_an_existing_files_mode_and_a_dangling_links_target(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o600)
    write_file(path, "new", "x")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "made-through-link.txt")
    write_file(link, "hi", "x")
    assert link.is_symlink() and (tmp_path / "made-through-link.txt").read_text() == "hi"
    assert stat.S_IMODE((tmp_path / "made-through-link.txt").stat().st_mode) == 0o644


@pytest.mark.parametrize("kind", ["directory", "fifo", "file-as-parent"])
def test_check_file_refuses_what_cannot_take_a_file(tmp_path, kind):
    if kind == "directory":
        path, said = tmp_path, "is a directory, not a regular file"
    elif kind == "fifo":
        path, said = tmp_path / "p", r"is a FIFO \(named pipe\)"
        os.mkfifo(path)
    else:
        (tmp_path / "f").write_text("")
        path, said = tmp_path / "f" / "x.json", "f' is not a directory"
    with pytest.raises(OutputPathError, match=said):
        check_file(path, "x")


def test_check_folder(tmp_path):
    assert check_folder(tmp_path / "new" / "deeper", "train --out") == tmp_path / "new" / "deeper"
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputPathError, match="is a regular file, not a directory"):
        check_folder(tmp_path / "file", "train --out")
    with pytest.raises(OutputPathError, match="cannot create the directory"):
        check_folder(tmp_path / "file" / "run", "train --out")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    with pytest.raises(OutputPathError, match="is a link to .*missing'.* does not exist"):
        check_folder(tmp_path / "dangling", "train --out")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert check_folder(tmp_path / "link", "train --out") == tmp_path / "link"


# -- riftco train --out ------------------------------------------------------------------------
TRAIN = ["--steps", "2", "--batch-size", "2", "--context", "8", "--layers", "1", "--width", "16",
         "--heads", "2", "--eval-every", "1", "--eval-iters", "1", "--sample-tokens", "0",
         "--backend", "cpu", "--no-progress"]  # fmt: skip


def _train(argv: list[str]) -> int:
    from riftco.train.cli import train_main

    return train_main(argv)


def test_train_out_an_existing_file_fails_before_the_first_step(tmp_path, capsys):
    """Before: trained until the first checkpoint, then FileExistsError."""
    (tmp_path / "FILE").write_text("")
    assert _train([*TRAIN, "--out", str(tmp_path / "FILE")]) == 2
    captured = capsys.readouterr()
    assert "[train --out]" in captured.err and "is a regular file, not a directory" in captured.err
    assert "step" not in captured.out and "data:" not in captured.out


@pytest.mark.parametrize("name", ["LATEST", "loss.png"])
def test_train_out_with_an_unwritable_file_inside_fails_first(tmp_path, capsys, name):
    run = tmp_path / "run"
    (run / name).mkdir(parents=True)  # a folder where the run writes a file
    assert _train([*TRAIN, "--out", str(run)]) == 2
    assert f"{name}' is a directory, not a regular file" in capsys.readouterr().err


def test_train_writes_latest_and_the_plot_through_links(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (run / "loss.png").symlink_to(elsewhere / "loss.png")
    assert _train([*TRAIN, "--out", str(run)]) == 0
    assert (run / "loss.png").is_symlink()
    assert (elsewhere / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert (run / "LATEST").read_text().startswith("ckpt-")
    assert _leftovers(run) == [] and _leftovers(elsewhere) == []
    assert riftco.device("cpu")  # nothing else disturbed
