"""``riftco train`` and ``riftco sample``.

The defaults are the `make train` run: sized so a 2-core CPU finishes in about three
minutes with a validation loss well under the unigram baseline of tiny Shakespeare.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DomainError, RiftcoError
from .checks import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT
from .precision import PRECISIONS
from .progress import LINE_EVERY_S, MODES

if TYPE_CHECKING:
    from ..device import Device

DEFAULT_OUT = "runs/tiny-shakespeare"
DEFAULT_STEPS = 2500  # ~1.8 min on native, ~3 min on the numpy cpu backend (2-core CPU)

# Flags that define a run: --resume continues the saved run, so these may only repeat the
# saved value (section of state.json, key). --steps, --data, --out, --backend and the
# output flags may change.
RUN_FLAGS = {
    "batch_size": ("train", "batch_size"),
    "lr": ("train", "lr"),
    "warmup": ("train", "warmup"),
    "min_lr_ratio": ("train", "min_lr_ratio"),
    "weight_decay": ("train", "weight_decay"),
    "grad_clip": ("train", "grad_clip"),
    "eval_every": ("train", "eval_every"),
    "eval_iters": ("train", "eval_iters"),
    "seed": ("train", "seed"),
    "label_smoothing": ("train", "label_smoothing"),
    "precision": ("train", "precision"),
    "loss_scale_interval": ("train", "loss_scale_interval"),
    "context": ("model", "context"),
    "layers": ("model", "layers"),
    "heads": ("model", "heads"),
    "width": ("model", "width"),
    "attention": ("model", "attention"),
    "recompute": ("model", "recompute"),
}


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the ``None`` of options whose help already says what happens."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action) or ""


def _backend_help() -> str:
    """The backends registered here (names only: nothing is probed to build the help)."""
    from ..plugins import get_registry

    try:
        names = ", ".join(sorted(get_registry().entries))
    except RiftcoError:  # strict plugin mode with a broken plugin: say where to look
        names = "any registered backend"
    return (
        "auto (the highest-priority available backend; the run prints which and why) or "
        f"NAME[:N] with NAME one of: {names}. `riftco backends` shows which are available "
        "here and their devices"
    )


def _parser(prog: str, description: str, backend: str) -> argparse.ArgumentParser:
    """A parser with the options both commands share, so their spelling cannot drift."""
    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=_Help)
    p.add_argument("--backend", default=backend, help=_backend_help())
    return p


def build_train_parser() -> argparse.ArgumentParser:
    p = _parser(
        "riftco train",
        "Train the tiny character-level GPT (default corpus: tiny Shakespeare).",
        backend="auto",
    )
    p.add_argument("--data", default=None, help="UTF-8 text file (default: the embedded corpus)")
    p.add_argument(
        "--steps",
        type=POSITIVE_INT.arg(),
        default=None,
        help=f"optimizer steps (default {DEFAULT_STEPS}; with --resume: the saved run's)",
    )
    p.add_argument("--batch-size", type=POSITIVE_INT.arg(), default=16, help="sequences per step")
    p.add_argument("--context", type=POSITIVE_INT.arg(), default=64, help="characters per sequence")
    p.add_argument("--layers", type=POSITIVE_INT.arg(), default=4, help="transformer blocks")
    p.add_argument("--heads", type=POSITIVE_INT.arg(), default=4, help="attention heads")
    p.add_argument("--width", type=POSITIVE_INT.arg(), default=128, help="embedding width")
    p.add_argument("--lr", type=POSITIVE.arg(), default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=COUNT.arg(), default=50, help="linear warm-up steps")
    p.add_argument("--min-lr-ratio", type=UNIT.arg(), default=0.1, help="cosine floor / peak")
    p.add_argument(
        "--weight-decay", type=NON_NEGATIVE.arg(), default=0.1, help="AdamW, on matrices only"
    )
    p.add_argument(
        "--grad-clip", type=NON_NEGATIVE.arg(), default=1.0, help="global norm; 0 disables"
    )
    p.add_argument(
        "--attention",
        choices=["materialized", "flash"],
        default="materialized",
        help="flash never holds a (T, T) matrix on a GPU backend",
    )
    p.add_argument(
        "--recompute",
        choices=["none", "block"],
        default="none",
        help="recompute each block in backward to save activation memory",
    )
    p.add_argument(
        "--capture",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record the training step once and replay it without its Python "
        "(riftco.capture; the same bits as --no-capture)",
    )
    p.add_argument(
        "--label-smoothing",
        type=FRACTION.arg(),
        default=0.0,
        metavar="EPS",
        help="train against (1-EPS)*onehot + EPS/V via a compiled objective (0 = plain)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp32, or float32 master weights and AdamW state with the model's forward and "
        "backward on bfloat16 / float16 copies (fp16-mixed scales the loss dynamically and "
        "skips steps whose gradients overflow, saying so in the log)",
    )
    p.add_argument(
        "--loss-scale-interval", type=POSITIVE_INT.arg(), default=200, metavar="STEPS",
        help="fp16-mixed: steps without overflow before the loss scale doubles",
    )  # fmt: skip
    p.add_argument(
        "--eval-every", type=POSITIVE_INT.arg(), default=100, help="steps between validations"
    )
    p.add_argument("--eval-iters", type=POSITIVE_INT.arg(), default=8, help="validation batches")
    p.add_argument("--seed", type=COUNT.arg(), default=0, help="model init, batches and sample")
    p.add_argument("--out", default=DEFAULT_OUT, help="run directory for checkpoints and plot")
    p.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run saved in DIR exactly as configured there (flags that would "
        "change it are an error; --steps may extend it)",
    )
    p.add_argument(
        "--sample-tokens", type=COUNT.arg(), default=300, help="characters sampled at the end"
    )
    p.add_argument(
        "--progress",
        choices=MODES,
        default="auto",
        help="auto: a bar when stderr is a terminal, else a plain line every "
        f"{LINE_EVERY_S:g} s on stdout (logs, CI, notebooks)",
    )
    p.add_argument("--no-progress", action="store_true", help="same as --progress none")
    return p


def build_sample_parser() -> argparse.ArgumentParser:
    p = _parser(
        "riftco sample", "Generate text from a checkpoint written by riftco train.", backend="cpu"
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a riftco train --out DIR")
    p.add_argument("--prompt", default=None, help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=COUNT.arg(), default=300, help="characters to generate")
    p.add_argument("--temperature", type=NON_NEGATIVE.arg(), default=0.8, help="0 means greedy")
    p.add_argument("--top-k", type=COUNT.arg(), default=0, help="0 keeps every token")
    p.add_argument(
        "--seed", type=COUNT.arg(), default=0, help="sampling seed (same seed, same text)"
    )
    return p


def parse_train_args(argv: Sequence[str]) -> tuple[argparse.Namespace, set[str]]:
    """The arguments, and which options the command line set (defaults not counted)."""
    parser = build_train_parser()
    unset = object()
    # argparse fills in a default only where the namespace has no value yet.
    probe = argparse.Namespace(**{dest: unset for dest in vars(parser.parse_args([]))})
    parser.parse_args(list(argv), namespace=probe)
    given = {dest for dest, value in vars(probe).items() if value is not unset}
    return parser.parse_args(list(argv)), given


def resolve_backend(spec: str, log: Callable[[str], Any] = print) -> Device:
    """The device for ``spec``; say which backend runs and why (``auto``: the choice)."""
    from ..device import device
    from ..plugins import get_registry

    if spec.split(":")[0] == "auto":
        name, why = get_registry().auto()
        log(f"backend: auto chose {name} ({why})")
        return device(name + spec[len("auto") :])
    dev = device(spec)
    log(f"backend: {dev} (asked for with --backend {spec})")
    return dev


def _unigram_entropy(ids: np.ndarray, vocab: int) -> float:
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def train_main(argv: Sequence[str]) -> int:
    args, given = parse_train_args(argv)
    from .loop import DivergenceError

    try:
        return _train(args, given)
    except DivergenceError as exc:
        print(f"riftco train: error: {exc}", file=sys.stderr)
        return 1
    except RiftcoError as exc:
        print(f"riftco train: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # the host's (a batch's indices, say); a device's is a RiftcoError
        print(
            f"riftco train: error: out of host memory ({exc}); lower --batch-size (now "
            f"{args.batch_size}) or --context (now {args.context})",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        if not getattr(args, "training", False):  # before the run's own handler was set
            print("riftco train: interrupted before the first step; nothing was written",
                  file=sys.stderr)  # fmt: skip
        else:  # a second Ctrl-C or SIGTERM: no checkpoint for this step
            print("riftco train: stopped at once (second interrupt); no new checkpoint",
                  file=sys.stderr)  # fmt: skip
        return 130


def check_resume_flags(resume: str, args: argparse.Namespace, given: set[str]) -> dict[str, Any]:
    """``--resume`` continues the saved run; a flag that would change it is an error, not
    silently ignored (repeating the saved value is fine). Returns the saved state.json."""
    from .checkpoint import read_state, resolve

    state = read_state(resolve(resume))
    clashes = []
    for dest in sorted(given & RUN_FLAGS.keys()):
        section, key = RUN_FLAGS[dest]
        part = state.get(section)
        saved = part[key] if isinstance(part, dict) and key in part else _default(section, key)
        if saved != getattr(args, dest):
            flag = "--" + dest.replace("_", "-")
            clashes.append(f"{flag} {getattr(args, dest)} (the run has {saved})")
    if clashes:
        raise DomainError(
            f"[train] --resume {resume} continues that run as it was configured; "
            f"{', '.join(clashes)} would change it. Drop these flags, or start a new run "
            "with --out DIR (--steps, --data, --out, --backend and the output flags may change)"
        )
    return state


def _default(section: str, key: str) -> Any:
    """What a run saved without ``key`` (written before that setting existed) runs with on
    resume: its config's default (``restore.build`` fills it in), else None."""
    import dataclasses

    from ..nn import GPTConfig
    from .loop import TrainConfig

    fields = {
        f.name: f for f in dataclasses.fields({"train": TrainConfig, "model": GPTConfig}[section])
    }
    field = fields.get(key)
    return None if field is None or field.default is dataclasses.MISSING else field.default


def check_outputs(out: str) -> None:
    """Every path a run writes, checked before the first step (a run must not train for
    an hour and then fail at its first checkpoint): the run folder, and inside an existing
    one ``LATEST`` and ``loss.png`` (files, through links, never special files)."""
    from ..output_files import check_file, check_folder
    from .checkpoint import LATEST

    folder = check_folder(out, "train --out")
    if folder.is_dir():
        for name in (LATEST, "loss.png"):
            check_file(folder / name, "train --out")


def _train(args: argparse.Namespace, given: set[str]) -> int:
    from ..nn import GPT, GPTConfig
    from .data import CharDataset, load_text
    from .loop import TrainConfig, Trainer
    from .plot import plot_losses
    from .progress import describe
    from .sample import generate

    progress = "none" if args.no_progress else args.progress
    saved = check_resume_flags(args.resume, args, given) if args.resume else {}
    check_outputs(args.out if "out" in given or not args.resume else args.resume)
    dev = resolve_backend(args.backend)
    if args.resume:
        trainer = Trainer.resume(
            args.resume,
            device=dev,
            out=args.out if "out" in given else args.resume,
            steps=args.steps,
            data_path=args.data,
        )
        ckpt = trainer.last_checkpoint
        print(f"resumed {args.resume} at step {trainer.step} of {trainer.cfg.steps} ({ckpt})")
        if saved.get("format", 1) < 2:
            print(
                f"note: {ckpt} has no content hashes (an older riftco wrote it); it was loaded "
                "unverified, and the checkpoints this run writes carry them"
            )
    else:
        text, source = load_text(args.data)
        data = CharDataset.from_text(text, args.context, source)
        mcfg = GPTConfig(
            vocab=data.tokenizer.vocab_size,
            context=args.context,
            layers=args.layers,
            heads=args.heads,
            width=args.width,
            attention=args.attention,
            recompute=args.recompute,
        )
        cfg = TrainConfig(
            steps=args.steps or DEFAULT_STEPS,
            batch_size=args.batch_size,
            lr=args.lr,
            warmup=args.warmup,
            min_lr_ratio=args.min_lr_ratio,
            weight_decay=args.weight_decay,
            grad_clip=args.grad_clip,
            eval_every=args.eval_every,
            eval_iters=args.eval_iters,
            seed=args.seed,
            label_smoothing=args.label_smoothing,
            precision=args.precision,
            loss_scale_interval=args.loss_scale_interval,
        )
        model = GPT(mcfg, device=dev, seed=args.seed)
        trainer = Trainer(model, data, cfg, Path(args.out), args.data)
    trainer.capture = args.capture
    data, model, mcfg, cfg = trainer.data, trainer.model, trainer.model.config, trainer.cfg
    n_train, n_val = len(data.train), len(data.val)
    print(
        f"data: {data.source}, {n_train + n_val:,} characters, vocab {data.tokenizer.vocab_size}; "
        f"split {n_train:,} train / {n_val:,} validation; unigram baseline "
        f"{_unigram_entropy(data.train, data.tokenizer.vocab_size):.3f} nats/char"
    )
    print(
        f"model: {model.num_parameters():,} parameters: {mcfg.layers} layers, {mcfg.heads} "
        f"heads, width {mcfg.width}, context {mcfg.context}, {mcfg.attention} attention, "
        f"recompute {mcfg.recompute}; {np.dtype(model.params_dtype).name} on "
        f"{model.device}{_describe_precision(trainer)}"
    )
    loss = "cross-entropy" if not cfg.label_smoothing else f"label smoothing {cfg.label_smoothing}"
    start = f" (from step {trainer.step})" if trainer.step else ""
    print(
        f"run: {cfg.steps:,} steps{start}, batch {cfg.batch_size} x "
        f"{mcfg.context} characters; lr {cfg.lr:g} ({cfg.warmup} warm-up steps, cosine to "
        f"{cfg.min_lr_ratio:g}x), {loss}; validation every {cfg.eval_every} steps; "
        f"checkpoints in {trainer.out}"
    )
    print(f"progress: {describe(progress)}")
    sys.stdout.flush()
    from tqdm import tqdm

    def log(line: str) -> None:  # above the progress bar, and visible at once in a log file
        tqdm.write(line)
        sys.stdout.flush()

    args.training = True  # from here an interrupt is the run's (a checkpoint is saved)
    result = trainer.run(progress=progress, log=log)
    out = trainer.out
    if result.interrupted:
        import signal

        signum = result.stop_signal or signal.SIGINT
        print(
            f"interrupted by {signal.Signals(signum).name} at step {result.step}: checkpoint "
            f"saved to {result.checkpoint}"
        )
        print(f"continue with: riftco train --resume {out}")
        return 128 + int(signum)
    if args.sample_tokens > 0:
        text = generate(model, data.tokenizer, "\n", args.sample_tokens, seed=trainer.cfg.seed)
        print("--- sample ---" + text.rstrip() + "\n--------------")
    if out is not None:
        png = out / "loss.png"
        problem = plot_losses(
            result.train_losses, result.val_losses, png, title=f"{data.source} on {model.device}"
        )
        print(problem or f"loss curve: {png}")
        print(f"checkpoint: {result.checkpoint}")
    print(
        f"summary: {result.step} steps, train loss {result.final_train_loss:.3f} "
        f"({result.final_train_loss_label}), val loss {result.final_val_loss:.3f} "
        f"({result.final_val_loss_label}), {result.tokens_per_s:,.0f} tokens/s, "
        f"{result.ms_per_step:.1f} ms/step, wall {result.wall_s:.1f} s, backend {model.device}"
        + _scale_summary(trainer, result.skipped_steps)
    )
    return 0


def _describe_precision(trainer: Any) -> str:
    """Nothing for fp32 (the line reads as before mixed precision existed)."""
    prec, cfg = trainer.precision, trainer.cfg
    if prec.compute is None:
        return ""
    text = f"; {prec.name}: float32 masters and AdamW state, {prec.compute.name} compute"
    if trainer.scaler is not None:
        text += (
            f", loss scale {trainer.scaler.scale:g} (doubled after "
            f"{cfg.loss_scale_interval} steps without overflow)"
        )
    return text


def _scale_summary(trainer: Any, skipped: int) -> str:
    if trainer.scaler is None:
        return ""
    return f", {skipped} steps skipped on overflow, final loss scale {trainer.scaler.scale:g}"


def sample_main(argv: Sequence[str]) -> int:
    args = build_sample_parser().parse_args(list(argv))
    try:
        from .checkpoint import load_checkpoint
        from .restore import model_and_tokenizer
        from .sample import generate

        dev = resolve_backend(args.backend, log=lambda m: print(m, file=sys.stderr))
        ckpt = load_checkpoint(args.checkpoint, optimizer=False)  # weights only
        if not ckpt.verified:
            print(
                f"note: {ckpt.path} has no content hashes (an older riftco wrote it); loaded "
                "unverified",
                file=sys.stderr,
            )
        model, tok = model_and_tokenizer(ckpt, dev)
        top_k = args.top_k if args.top_k > 0 else None
        print(
            generate(model, tok, args.prompt or "", args.tokens, args.temperature, top_k, args.seed)
        )
    except RiftcoError as exc:
        print(f"riftco sample: error: {exc}", file=sys.stderr)
        return 2
    return 0
