"""CLI command: export a trained run to a deployment engine.

``attnkit export RUN_DIR [OUT] [--format ctranslate2] [--quantization int8|int8_float32|float32]
[--checkpoint best|last|averaged]``
"""

from __future__ import annotations

import argparse

from .errors import UsageError
from .run_dir import check_run_folder, checkpoint_option

FORMATS = ("ctranslate2",)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the export command."""
    p = subparsers.add_parser(
        "export",
        help="export a trained Transformer run to CTranslate2 for deployment",
        description=(
            "Write a CTranslate2 model folder (model.bin, vocabularies, the run's tokenizer "
            "files, a README model card) from a Transformer run, for fast CPU inference "
            "with the ctranslate2 library. 'attnkit translate RUN --engine ctranslate2' and "
            "'attnkit evaluate RUN --engine ctranslate2' then use it. Needs "
            "pip install 'attnkit[export]'."
        ),
    )
    p.add_argument(
        "run_dir", help="run folder written by 'attnkit train' (model.arch: transformer)"
    )
    p.add_argument(
        "out",
        nargs="*",  # at most one; a list so that it may also follow the options
        default=[],
        help="model folder to write (default: RUN_DIR/ctranslate2, where --engine ctranslate2 "
        "looks); an earlier export there is replaced",
    )
    p.add_argument("--format", choices=FORMATS, default="ctranslate2", help="(default ctranslate2)")
    p.add_argument(
        "--quantization",
        choices=("float32", "int8", "int8_float32"),
        default="float32",
        help="weights on disk: float32 (exact, default) or 8-bit integers (about 4x smaller)",
    )
    checkpoint_option(p)
    p.set_defaults(func=run_export, trailing_positionals="out")


def run_export(args: argparse.Namespace) -> int:
    from ..nmt.export.ctranslate2 import EngineUnavailable, export_run

    if len(args.out) > 1:
        raise UsageError(f"give one output folder, got {len(args.out)}: {' '.join(args.out)}")
    out = args.out[0] if args.out else None
    check_run_folder(args.run_dir)
    try:
        info = export_run(args.run_dir, out, args.quantization, checkpoint=args.checkpoint)
    except EngineUnavailable as err:
        raise UsageError(str(err)) from None
    size = info.size_bytes / 2**20
    print(f"exported: {info.path} (CTranslate2, {info.quantization}, {size:.1f} MiB)")
    return 0
