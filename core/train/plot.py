"""Loss-curve PNG. matplotlib is an optional extra, so without it we say how to get one."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

from ..output_files import OutputPathError, write_file

PLOT_HINT = "loss curve not drawn: matplotlib is not installed (pip install 'riftco[plot]')"


def plot_losses(
    train: Sequence[tuple[int, float]],
    val: Sequence[tuple[int, float]],
    path: str | os.PathLike[str],
    title: str = "",
) -> str | None:
    """Write ``path``; return None on success, else the one-line reason it was not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # NOTE: no display on servers / CI
        import matplotlib.pyplot as plt
    except ImportError:
        return PLOT_HINT
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train, strict=True), label="train", linewidth=1.0)
    if val:
        ax.plot(*zip(*val, strict=True), label="validation", marker="o", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/char)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    try:  # atomic, through links, no temporary left; a plot that cannot be written is news
        write_file(path, png.getvalue(), "train loss plot")
    except OutputPathError as exc:
        return f"loss curve not written: {exc}"
    return None
