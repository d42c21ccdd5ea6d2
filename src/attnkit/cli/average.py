"""CLI command: average a run's last snapshots into its ``averaged`` checkpoint.

``attnkit average RUN_DIR [--last N] [--device DEVICE] [--precision auto|fp32|bf16]``
"""

from __future__ import annotations

import argparse

from .decoding import precision_option
from .errors import UsageError, stderr
from .run_dir import check_run_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the average command."""
    p = subparsers.add_parser(
        "average",
        help="average a run's last snapshots into its 'averaged' checkpoint",
        description=(
            "Write RUN_DIR/averaged.json: the element-wise mean of the model weights of the "
            "run's last snapshots (kept at each validation by a run trained with "
            "--train.average_last N), validated as training validates, with one line "
            "comparing its valid BLEU with the best checkpoint's (as recorded in training). "
            "A finished training writes it itself; this rebuilds it, e.g. from fewer "
            "snapshots. Then: attnkit translate RUN_DIR --checkpoint averaged."
        ),
    )
    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    p.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="average the newest N snapshots (N >= 2; default: every snapshot the run keeps)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="where to validate: cpu, cuda, cuda:N or auto (default: cpu)",
    )
    precision_option(p)
    p.set_defaults(func=run_average)


def run_average(args: argparse.Namespace) -> int:
    from ..nmt.runs.run_folder import RunFolder
    from ..nmt.training.averaged import average_run

    if args.last is not None and args.last < 2:
        raise UsageError(
            f"--last must be >= 2 (a mean of one snapshot is that snapshot), got {args.last}"
        )
    check_run_folder(args.run_dir)
    snapshots = RunFolder(args.run_dir).snapshots
    kept = snapshots.steps()
    if len(kept) < 2:
        raise UsageError(
            f"{args.run_dir} keeps {len(kept)} snapshot(s) in {snapshots.folder}; averaging needs "
            "2 or more: train with --train.average_last N (N >= 2; also on --resume)"
        )
    if args.last is not None and args.last > len(kept):
        steps = ", ".join(map(str, kept))
        raise UsageError(
            f"--last {args.last} is more than the {len(kept)} snapshots {args.run_dir} keeps "
            f"(steps {steps})"
        )
    averaged, choice = average_run(
        args.run_dir, count=args.last, device=args.device, precision=args.precision, echo=stderr
    )
    print(averaged.line())
    print(choice.line())
    return 0
