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

from ..errors import RiftcoError

if TYPE_CHECKING:
    from ..device import Device

DEFAULT_OUT = "runs/tiny-shakespeare"
DEFAULT_STEPS = 2500  # ~1.8 min on native, ~3 min on the numpy cpu backend (2-core CPU)
_BACKEND_HELP = "auto, cpu, opencl[:N], metal[:N]"


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the ``None`` of options whose help already says what happens."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action)


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive; got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _parser(prog: str, description: str, backend: str) -> argparse.ArgumentParser:
    """A parser with the options both commands share, so their spelling cannot drift."""
    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=_Help)
    p.add_argument("--backend", default=backend, help=_BACKEND_HELP)
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
        type=_positive(int),
        default=None,
        help=f"optimizer steps (default {DEFAULT_STEPS}; with --resume: the saved run's)",
    )
    p.add_argument("--batch-size", type=_positive(int), default=16, help="sequences per step")
    p.add_argument("--context", type=_positive(int), default=64, help="characters per sequence")
    p.add_argument("--layers", type=_positive(int), default=4, help="transformer blocks")
    p.add_argument("--heads", type=_positive(int), default=4, help="attention heads")
    p.add_argument("--width", type=_positive(int), default=128, help="embedding width")
    p.add_argument("--lr", type=_positive(float), default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50, help="linear warm-up steps")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor / peak")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW, on matrices only")
    p.add_argument("--grad-clip", type=float, default=1.0, help="global norm; 0 disables")
    p.add_argument(
        "--attention",
        choices=["materialized", "flash"],
        default="materialized",
        help="flash never holds a (T, T) matrix on a GPU backend",
    )
    p.add_argument(
        "--checkpointing",
        choices=["none", "block"],
        default="none",
        help="recompute each block in backward to save activation memory",
    )
    p.add_argument(
        "--label-smoothing",
        type=float,
        default=0.0,
        metavar="EPS",
        help="train against (1-EPS)*onehot + EPS/V via a compiled objective (0 = plain)",
    )
    p.add_argument(
        "--eval-every", type=_positive(int), default=100, help="steps between validations"
    )
    p.add_argument("--eval-iters", type=_positive(int), default=8, help="validation batches")
    p.add_argument("--seed", type=int, default=0, help="model init, batches and sample")
    p.add_argument("--out", default=DEFAULT_OUT, help="run directory for checkpoints and plot")
    p.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run saved in DIR (model and schedule from there)",
    )
    p.add_argument("--sample-tokens", type=int, default=300, help="characters sampled at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def build_sample_parser() -> argparse.ArgumentParser:
    p = _parser(
        "riftco sample", "Generate text from a checkpoint written by riftco train.", backend="cpu"
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a riftco train --out DIR")
    p.add_argument("--prompt", default=None, help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=300, help="characters to generate")
    p.add_argument("--temperature", type=float, default=0.8, help="0 means greedy")
    p.add_argument("--top-k", type=int, default=0, help="0 keeps every token")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (same seed, same text)")
    return p


def resolve_backend(spec: str, log: Callable[[str], Any] = print) -> Device:
    """The device for ``spec``; for ``auto``, say which backend was chosen and why."""
    from .. import device, get_registry

    if spec.split(":")[0] == "auto":
        name, why = get_registry().auto()
        log(f"backend: auto chose {name} ({why})")
        spec = name + spec[len("auto") :]
    return device(spec)


def _unigram_entropy(ids: np.ndarray, vocab: int) -> float:
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def train_main(argv: Sequence[str]) -> int:
    args = build_train_parser().parse_args(list(argv))
    try:
        return _train(args)
    except RiftcoError as exc:
        print(f"riftco train: error: {exc}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from ..nn import GPT, GPTConfig
    from .data import CharDataset, load_text
    from .loop import TrainConfig, Trainer
    from .plot import plot_losses
    from .sample import generate

    dev = resolve_backend(args.backend)
    if args.resume:
        trainer = Trainer.resume(
            args.resume,
            device=dev,
            out=args.out if args.out != DEFAULT_OUT else args.resume,
            steps=args.steps,
            data_path=args.data,
        )
        print(f"resumed {args.resume} at step {trainer.step} of {trainer.cfg.steps}")
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
            checkpointing=args.checkpointing,
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
        )
        model = GPT(mcfg, device=dev, seed=args.seed)
        trainer = Trainer(model, data, cfg, Path(args.out), args.data)
    data, model, mcfg = trainer.data, trainer.model, trainer.model.config
    print(
        f"data: {data.source}, {len(data.train) + len(data.val):,} chars, vocab "
        f"{data.tokenizer.vocab_size}, unigram baseline "
        f"{_unigram_entropy(data.train, data.tokenizer.vocab_size):.3f} nats/char"
    )
    print(
        f"model: {model.num_parameters():,} parameters ({mcfg.layers} layers, {mcfg.heads} "
        f"heads, width {mcfg.width}, context {mcfg.context}, {mcfg.attention} attention, "
        f"checkpointing {mcfg.checkpointing}) on {model.device}"
    )
    from tqdm import tqdm

    def log(line: str) -> None:  # above the progress bar, and visible at once in a log file
        tqdm.write(line)
        sys.stdout.flush()

    result = trainer.run(progress=not args.no_progress, log=log)
    out = trainer.out
    if result.interrupted:
        print(f"interrupted at step {result.step}: checkpoint saved to {result.checkpoint}")
        print(f"continue with: riftco train --resume {out}")
        return 130
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
        f"summary: {result.step} steps, train loss {result.final_train_loss:.3f}, val loss "
        f"{result.final_val_loss:.3f}, {result.tokens_per_s:,.0f} tokens/s, "
        f"{result.ms_per_step:.1f} ms/step, wall {result.wall_s:.1f} s, backend {model.device}"
    )
    return 0


def sample_main(argv: Sequence[str]) -> int:
    args = build_sample_parser().parse_args(list(argv))
    try:
        from ..nn import GPT, GPTConfig
        from .checkpoint import load_checkpoint
        from .sample import generate
        from .tokenizer import CharTokenizer

        dev = resolve_backend(args.backend, log=lambda m: print(m, file=sys.stderr))
        ckpt = load_checkpoint(args.checkpoint)
        model = GPT(GPTConfig(**ckpt.meta["model"]), device=dev, dtype=np.dtype(ckpt.meta["dtype"]))
        model.load_state_dict(ckpt.weights)
        tok = CharTokenizer.from_dict(ckpt.meta["tokenizer"])
        top_k = args.top_k if args.top_k > 0 else None
        print(
            generate(model, tok, args.prompt or "", args.tokens, args.temperature, top_k, args.seed)
        )
    except RiftcoError as exc:
        print(f"riftco sample: error: {exc}", file=sys.stderr)
        return 2
    return 0
