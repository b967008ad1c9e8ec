"""``riftco train`` / ``riftco sample`` as a user meets them: the opening lines, honest help,
readable progress in a log, refused settings, --resume that cannot silently drop flags,
and signals and divergence seen from the shell (exit codes)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import plugin_for
from riftco.backends.cpu.backend import CPUBackend
from riftco.cli import main
from riftco.train.checkpoint import load_checkpoint
from riftco.train.cli import (
    build_sample_parser,
    build_train_parser,
    parse_train_args,
    sample_main,
    train_main,
)
from riftco.train.data import load_text
from riftco.train.progress import LineProgress

SMALL = ["--context", "8", "--layers", "1", "--heads", "1", "--width", "16", "--batch-size", "4"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "head.txt"
    path.write_text(load_text(None)[0][:20_000], encoding="utf-8")
    return path


def _quiet(out, data, steps=4):
    return [
        "--backend", "cpu", "--data", str(data), "--steps", str(steps), *SMALL,
        "--eval-every", "2", "--eval-iters", "1", "--out", str(out),
        "--sample-tokens", "0", "--no-progress",
    ]  # fmt: skip


def test_first_lines_say_backend_data_model_and_run(tmp_path, text_file, capsys):
    assert train_main(_quiet(tmp_path / "run", text_file)) == 0
    lines = capsys.readouterr().out.splitlines()
    text = text_file.read_text(encoding="utf-8")
    n, vocab, c, t, layers = len(text), len(set(text)), 16, 8, 1
    n_train = int(n * 0.9)
    # GPT-2 layout: token + position embeddings, per block 2 LayerNorms (4C), qkv (3C^2 +
    # 3C), projection (C^2 + C), MLP (4C^2 + 4C + 4C^2 + C); final LayerNorm, untied head.
    params = vocab * c + t * c + layers * (12 * c * c + 13 * c) + 2 * c + c * vocab
    assert lines[0] == "backend: cpu:0 (asked for with --backend cpu)"
    assert lines[1].startswith(
        f"data: {text_file}, {n:,} characters, vocab {vocab}; split {n_train:,} train / "
        f"{n - n_train:,} validation; unigram baseline "
    )
    assert lines[2] == (
        f"model: {params:,} parameters: 1 layers, 1 heads, width 16, context 8, materialized "
        "attention, recompute none; float32 on cpu:0"
    )
    assert lines[3].startswith("run: 4 steps, batch 4 x 8 characters; lr 0.003 (50 warm-up")
    assert lines[3].endswith(f"checkpoints in {tmp_path / 'run'}")
    assert lines[4] == "progress: off"


def test_help_names_the_registered_backends(registry, capsys):
    class Plugged(CPUBackend):
        name = "zz_thirdparty"

    registry.register(plugin_for(Plugged), name="zz-plugin")
    names = sorted(registry.entries)
    assert "zz_thirdparty" in names and "cpu" in names
    for parser in (build_train_parser(), build_sample_parser()):
        flat = " ".join(parser.format_help().split())
        assert f"NAME one of: {', '.join(names)}." in flat
        assert "riftco backends" in flat and "metal[:N]" not in flat
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    assert "zz_thirdparty" in " ".join(capsys.readouterr().out.split())
    assert main(["backends", "--json"]) == 0  # the help names what `riftco backends` lists
    listed = sorted(row["name"] for row in json.loads(capsys.readouterr().out)["backends"])
    assert listed == names


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lr", "nan"], "argument --lr: must be a finite number > 0; got nan"),
        (["--lr", "inf"], "argument --lr: must be a finite number > 0; got inf"),
        (["--weight-decay", "nan"], "argument --weight-decay: must be a finite number >= 0"),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0; got -1"),
        (["--warmup", "-5"], "argument --warmup: must be an integer >= 0; got -5"),
        (["--min-lr-ratio", "2"], "argument --min-lr-ratio: must be a finite number >= 0 and"),
    ],
)
def test_train_refuses_bad_numbers(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_main(["--backend", "cpu", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--temperature", "nan"], "argument --temperature: must be a finite number >= 0; got nan"),
        (["--temperature", "-1"], "argument --temperature: must be a finite number >= 0; got -1"),
        (["--top-k", "-3"], "argument --top-k: must be an integer >= 0; got -3"),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0; got -1"),
    ],
)
def test_sample_refuses_bad_numbers(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        sample_main(["--checkpoint", str(tmp_path), *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_parse_train_args_knows_what_was_given():
    args, given = parse_train_args(["--lr", "0.003", "--no-progress", "--resume", "x"])
    assert given == {"lr", "no_progress", "resume"}
    assert args.lr == 0.003 and args.layers == 4  # defaults still filled in


def test_resume_refuses_flags_that_change_the_run(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert train_main(_quiet(out, text_file)) == 0
    capsys.readouterr()
    resume = ["--resume", str(out), "--backend", "cpu", "--no-progress", "--sample-tokens", "0"]
    assert train_main([*resume, "--lr", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "[train] --resume" in err and "--lr 0.01 (the run has 0.003)" in err
    assert train_main([*resume, "--layers", "8", "--batch-size", "2", "--attention", "flash"]) == 2
    err = capsys.readouterr().err
    for part in (
        "--attention flash (the run has materialized)",
        "--batch-size 2 (the run has 4)",
        "--layers 8 (the run has 1)",
    ):
        assert part in err
    assert load_checkpoint(out).step == 4  # nothing ran, nothing was written
    # Repeating the saved value changes nothing, and --steps may extend the run.
    assert train_main([*resume, "--lr", "0.003", "--layers", "1", "--steps", "6"]) == 0
    assert "summary: 6 steps" in capsys.readouterr().out


def test_line_progress_prints_every_few_seconds():
    now = [0.0]
    stream = io.StringIO()
    bar = LineProgress(100, 0, stream=stream, every_s=10.0, clock=lambda: now[0])
    for step in range(1, 101):
        now[0] = step * 0.5  # 2 steps a second: a line every 20 steps
        bar.update(step, f"loss {step}")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    steps = [int(line.split("/")[0].removeprefix("step ")) for line in lines]
    assert steps == [1, 21, 41, 61, 81, 100]
    assert lines[1] == "step 21/100 (21%): loss 21; elapsed 0:10, left ~0:40"
    stopped = LineProgress(100, 0, stream=(s := io.StringIO()), every_s=10.0, clock=lambda: 0.0)
    for step in (1, 2, 3):
        stopped.update(step, "x")
    stopped.close()  # a run that stops early reports where it stopped
    assert s.getvalue().splitlines()[-1].startswith("step 3/100")


def _riftco(args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "0"}
    env.pop("RIFTCO_BACKEND", None)
    cmd = [sys.executable, "-c", "import sys; from riftco.cli import main; sys.exit(main())"]
    return subprocess.Popen(
        [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw
    )


def test_redirected_run_writes_plain_lines(tmp_path, text_file):
    args = _quiet(tmp_path / "run", text_file, steps=6)
    args.remove("--no-progress")
    proc = _riftco(["train", *args])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "\r" not in out and "\r" not in err  # no carriage-return redraws in a log
    assert "progress: a line every 10 s (stderr is not a terminal)" in out
    assert "step 1/6 (17%): step loss " in out and "step 6/6 (100%): step loss " in out


def test_sigterm_from_outside_saves_and_exits_143(tmp_path, text_file):
    out_dir = tmp_path / "run"
    args = _quiet(out_dir, text_file, steps=100_000)
    args[args.index("--no-progress")] = "--progress=lines"
    proc = _riftco(["train", *args])
    seen = []
    for line in proc.stdout:  # wait until training has started
        seen.append(line)
        if line.startswith("step 1/"):
            break
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=120)
    text = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, err
    stopped = next(line for line in text.splitlines() if line.startswith("interrupted by"))
    step = int(stopped.split(" at step ")[1].split(":")[0])
    assert stopped.startswith("interrupted by SIGTERM at step")
    assert f"continue with: riftco train --resume {out_dir}" in text
    assert load_checkpoint(out_dir).step == step >= 1


def test_divergence_exits_non_zero_with_a_clear_message(tmp_path, text_file):
    args = _quiet(tmp_path / "run", text_file, steps=30)
    args += ["--lr", "1e30", "--warmup", "0", "--grad-clip", "0"]
    proc = _riftco(["train", *args], cwd=Path(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert "riftco train: error: [train] the" in err and "training stopped" in err
    assert "Traceback" not in err and "summary:" not in out
