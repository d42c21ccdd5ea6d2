"""Where the resident memory of a small-model training step goes, stage by stage.

``python -m benchmarks.step_memory CONFIG RUN_DIR [STEPS]`` on a folder that
``attnkit prepare CONFIG --out RUN_DIR`` made: in this process, it imports
torch and attnkit's training, loads the run's data (tokenizers, the mapped
store, the validation split), draws an epoch, builds the model and Adam, and
trains ``STEPS`` (default 50) steps as ``attnkit train`` does, on 2 threads.
It prints one JSON object: the resident size (RSS) and its peak (``VmHWM``)
in MB after each stage, and each step that raised the peak with its batch's
target shape ``(B, T)``: the peak of a step follows its longest target, not
the corpus.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(key))
    return round(int(line.split()[1]) / 1024)


def _stage(report: dict, name: str) -> None:
    report["stages"].append({"stage": name, "rss": _status("VmRSS"), "peak": _status("VmHWM")})


def main(config_path: str, run_dir: str, steps: int) -> dict:
    report: dict = {"stages": [], "steps_raising_the_peak": []}
    import torch

    _stage(report, "import torch")
    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.data.batching import make_batch
    from attnkit.nmt.models.registry import build_translator
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training import guided_alignment
    from attnkit.nmt.training.distributed import Group
    from attnkit.nmt.training.prepare import EpochOrder, prepare_data

    _stage(report, "import attnkit training")
    torch.set_num_threads(2)
    config = RunConfig.load(config_path)
    folder = RunFolder(Path(run_dir))
    data = prepare_data(config, folder, resuming=False, group=Group(), echo=lambda _: None)
    _stage(report, "data (tokenizers, mapped store, validation split)")
    batches = EpochOrder(config.train.seed).batches(data.train, config.train)
    _stage(report, "epoch order")
    torch.manual_seed(0)
    vocab = (data.src_tok.vocab_size, data.tgt_tok.vocab_size)
    model = build_translator(config.model, *vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr)
    report["parameters"] = sum(p.numel() for p in model.parameters())
    _stage(report, "model and Adam")
    for step, indices in zip(range(1, steps + 1), batches, strict=False):
        before = _status("VmHWM")
        batch = make_batch(data.train, indices)
        loss, _ = guided_alignment.training_loss(model, model, batch, config.train)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if _status("VmHWM") > before:
            shape = list(batch.tgt_out.shape)
            report["steps_raising_the_peak"].append([step, shape, _status("VmHWM")])
    _stage(report, f"{steps} steps")
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.step_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("config", help="the config the run folder was prepared with")
    parser.add_argument("run_dir", help="a folder made by attnkit prepare CONFIG --out RUN_DIR")
    parser.add_argument("steps", type=int, nargs="?", default=50, help="steps (default 50)")
    return parser


if __name__ == "__main__":
    args = _parser().parse_args()
    print(json.dumps(main(args.config, args.run_dir, args.steps)))
