"""What training tells the user: the epoch's progress display, a validation's line, the
batch note under torchrun, what a failed write leaves and how to go on, and a resume on
training data that changed."""

from __future__ import annotations

import errno
import shlex
from pathlib import Path

from ...atomic import WriteError
from ..config import RunConfig
from ..runs.checkpoint import latest_good
from ..runs.run_folder import RunFolder
from .distributed import Group
from .progress import Progress
from .progress_lines import progress as progress_display

__all__ = [
    "after_write_failure",
    "batch_note",
    "data_changed",
    "epoch_bar",
    "validation_line",
]


def epoch_bar(total: int, p: Progress, enabled: bool):
    """A tqdm bar on a terminal; plain lines every 30 s when stderr is a file or pipe."""
    return progress_display(
        enabled,
        total=total,
        initial=p.epoch_batches_done,
        desc=f"epoch {p.epoch}",
        unit="batch",
        dynamic_ncols=True,
        mininterval=0.5,
    )


def validation_line(row: dict, improved: bool) -> str:
    """The line a validation prints: losses, perplexity, BLEU (``(best)``) and the rate."""
    aligned = row.get("train_alignment_loss")
    guided = "" if aligned is None else f" (alignment loss {aligned:.3f})"
    return (
        f"epoch {row['epoch']} step {row['step']}: train loss {row['train_loss']:.3f}{guided}, "
        f"valid loss {row['valid_loss']:.3f}, ppl {row['valid_ppl']:.2f}, BLEU "
        f"{row['valid_bleu']:.2f}{' (best)' if improved else ''}, lr {row['lr']:.2g}"
    )


def resume_command(run_dir: str | Path) -> str:
    """``attnkit train --resume RUN_DIR`` as a shell takes it: a folder with a space or a
    quote in its name is quoted, so the line pastes into a shell as one argument."""
    return f"attnkit train --resume {shlex.quote(str(run_dir))}"


def after_write_failure(folder: RunFolder, err: WriteError) -> str:
    """What a failed write leaves in ``folder``: its last whole checkpoint, and how to go on."""
    fix = "free some space" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "fix that"
    found = latest_good(folder.last)
    if found is None:
        return (
            f"the run folder {folder.path} holds no checkpoint yet; {fix} and start again "
            f"(the same command, or {resume_command(folder.path)})"
        )
    path, state = found
    step = state.get("progress", {}).get("step")
    return (
        f"nothing saved is lost: the last good checkpoint of the run in {folder.path} is "
        f"{path.name} (step {step}); {fix} and continue with: {resume_command(folder.path)}"
    )


def batch_note(config: RunConfig, group: Group) -> str:
    """Under torchrun: how the global batch is shared among the processes."""
    if not group.distributed:
        return ""
    size = config.train.batch_size
    return f"; train.batch_size {size} sentences per step in all, ~{size / group.world_size:g} each"


def data_changed(then: dict, now: dict) -> str | None:
    """The note for a resume whose training store no longer counts what the checkpoint's did
    (``then`` and ``now``: :class:`~attnkit.nmt.data.store.StoreCounts` as dicts), or None."""
    if then == now:
        return None
    return (
        f"note: the training data changed since this checkpoint ({then['pairs']:,} pairs, "
        f"{then['src_tokens']:,} + {then['tgt_tokens']:,} tokens then; {now['pairs']:,} pairs, "
        f"{now['src_tokens']:,} + {now['tgt_tokens']:,} now): the run goes on with the new "
        "data, so it no longer repeats the run it resumes"
    )
