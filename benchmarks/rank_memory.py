"""Memory of one against two data-parallel ranks on one machine (``torchrun``, CPU, gloo).

``python -m benchmarks.rank_memory [PAIRS]`` (default 1,000,000): the ``data``
suite's corpus of ``PAIRS`` pairs (:func:`.bench_data.corpus_dir`) and its small
RNN config (E=64, D=128, joint sentencepiece 8k, batch 64) are prepared once
(``attnkit prepare``: tokenizers and token store, kept in the corpus folder's
``prepared/`` and checked, so reused, on later runs), then each launch trains
a fresh copy of that folder in a fresh process tree::

    torchrun --standalone --nproc_per_node N -m attnkit train CONFIG --out RUN \\
        --no-progress --train.threads 1 --train.max_steps 50

for N = 1, then N = 2 (``OMP_NUM_THREADS=1``). The global batch is 64 either
way, so both launches train the same batches in the same order, each of the
two ranks on half of every batch. Every ``INTERVAL_S`` seconds it reads
``/proc/PID/smaps_rollup`` of the launcher (the torchrun agent) and of its
children, the ranks (found through the parent pids in ``/proc``: this kernel
has no ``/proc/PID/task/*/children``; each known by the ``RANK`` in its
environment), and keeps each rank's peak of each figure, the peak of the
ranks' sums, and each rank's kernel-kept peak RSS (``VmHWM``, which no
sampling misses). About once a second it also reads the ranks' full
``smaps`` for the mappings of the token store's files.

It prints one JSON object, in MB: per launch, each rank's peaks (``rss``,
``pss``, ``pss_anon``, ``pss_file``, ``anonymous``, ``vm_hwm``,
``store_rss``/``store_pss``: the token store's mapped pages, and
``pss_at_hwm``/``anonymous_at_hwm``: see below), the sums of the ranks' peaks,
the peaks of their sums, and the torchrun agent's own peaks (``agent``: one
per launch whatever N, **not** in the sums or the ratios). Ratios, the 2-rank
launch's sum of its ranks' peaks over the 1-rank launch's rank:

- ``rank_memory_2_vs_1_hwm``: peak RSS, exact (``VmHWM``); issue #26's figure
  (target <= 1.3). RSS counts a page that both ranks map (library text, the
  store's mapped lengths) in each;
- ``rank_memory_2_vs_1_pss_at_hwm``: PSS at that peak, which counts a page
  shared by k processes 1/k in each, so the ranks' PSS adds up to what they
  cost the machine. Estimated as the peak less the shared share (RSS - PSS) of
  the sample nearest it: what a step adds at its peak is private anonymous
  memory, which PSS counts in full. A shared *file* page is also divided with
  any other process that maps it (the agent, which imports torch too; any
  other torch process on the machine), so this part of PSS depends on what
  else runs;
- ``rank_memory_2_vs_1_anon_at_hwm``: anonymous memory (heap, tensors, Python
  objects) at that peak, likewise; each process's own, whatever else runs;
- ``rank_memory_2_vs_1_rss``, ``_pss``, ``_anon``: the same from the sampled
  peaks alone. A step's peak lasts a fraction of a second that a sample every
  ``INTERVAL_S`` may miss, so these move by several percent between runs.

``python -m benchmarks.rank_memory --stages [PAIRS]``: where a rank's memory
goes. The same launches (1, then 2 ranks) of this module's stage worker,
which goes through ``attnkit train``'s stages with the loop's own trainer
(``Trainer``: the process group, the data, the model under DDP and Adam, 50
training steps on the rank's share, rank 0's validation) and records its RSS,
anonymous part and ``VmHWM`` after each, and each step that raised the peak
with its share's target shape ``(B, T)``. Prints one JSON object: per launch,
a list of the ranks' records.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bench_data import CONFIG, _attnkit, corpus_dir

PAIRS = 1_000_000
STEPS = 50
INTERVAL_S = 0.15
STORE_EVERY = 7  # samples between two reads of the ranks' full smaps (about 1 s)
FIELDS = {"Rss": "rss", "Pss": "pss", "Pss_Anon": "pss_anon", "Pss_File": "pss_file"}
FIELDS["Anonymous"] = "anonymous"
ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The ``Key: value kB`` lines of ``/proc/PID/smaps_rollup`` (or of one ``smaps``
    mapping) as ``{key: kB}``; the first line, the address range, is skipped."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith(":") and parts[2] == "kB":
            found[parts[0][:-1]] = int(parts[1])
    return found


def mapped_under(smaps: str, prefix: str) -> dict[str, int]:
    """Rss and Pss (kB) of the mappings in ``/proc/PID/smaps`` text whose file lies
    under ``prefix``, summed."""
    total = {"Rss": 0, "Pss": 0}
    inside = False
    for line in smaps.splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header
            inside = len(parts) >= 6 and parts[5].startswith(prefix)
        elif inside and parts[0] in ("Rss:", "Pss:"):
            total[parts[0][:-1]] += int(parts[1])
    return total


def descendants(root: int) -> dict[int, int]:
    """The processes below ``root`` (children, their children, ...) as ``{pid: parent pid}``,
    from ``/proc/*/stat``."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # after "(comm)"
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        kids = [child for child, ppid in parent.items() if ppid == pid]
        found |= dict.fromkeys(kids, pid)
        todo += kids
    return found


def _rank(pid: int) -> str | None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    rank = [item[5:].decode() for item in environ if item.startswith(b"RANK=")]
    return rank[0] if rank else None


def _sample(pid: int) -> dict[str, float]:
    """The process's memory now, MB: the rollup's fields and ``VmHWM``."""
    rollup = parse_smaps_rollup(Path(f"/proc/{pid}/smaps_rollup").read_text())
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(line for line in status.splitlines() if line.startswith("VmHWM"))
    mb = {name: rollup[key] / 1024 for key, name in FIELDS.items()}
    return mb | {"vm_hwm": int(hwm.split()[1]) / 1024}


class _Peaks:
    """Running maxima of named figures, and the sample in which ``rss`` peaked."""

    def __init__(self) -> None:
        self.peak: dict[str, float] = {}
        self.at_rss_peak: dict[str, float] = {}

    def add(self, figures: dict[str, float]) -> None:
        if figures.get("rss", 0.0) > self.peak.get("rss", 0.0):
            self.at_rss_peak = figures
        for key, value in figures.items():
            self.peak[key] = max(self.peak.get(key, 0.0), value)

    def rounded(self) -> dict[str, float]:
        return {key: round(value, 1) for key, value in self.peak.items()}

    def at_hwm(self) -> dict[str, float]:
        """PSS and anonymous memory at the exact peak RSS (``VmHWM``), estimated: the
        peak less what the sample nearest it had of shared (RSS - PSS) and of file-backed
        (RSS - anonymous) pages, which a training step does not change."""
        hwm, near = self.peak["vm_hwm"], self.at_rss_peak
        return {
            "pss_at_hwm": round(hwm - (near["rss"] - near["pss"]), 1),
            "anonymous_at_hwm": round(hwm - (near["rss"] - near["anonymous"]), 1),
        }


def launch(config: Path, run: Path, nproc: int) -> dict:
    """One torchrun launch of ``attnkit train``, sampled until it exits (figures in MB)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--local_addr", "127.0.0.1", "--nproc_per_node", str(nproc), "-m", "attnkit",
               "train", str(config), "--out", str(run), "--no-progress",
               "--train.threads", "1", "--train.max_steps", str(STEPS)]  # fmt: skip
    log = run.with_suffix(".log")
    store = f"{run / 'store'}/"
    ranks: dict[str, _Peaks] = {}
    agent, others, sums, samples = _Peaks(), _Peaks(), _Peaks(), 0
    start = time.perf_counter()
    with open(log, "w") as err:
        agent_process = subprocess.Popen(
            command, env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=err
        )
        while agent_process.poll() is None:
            try:
                agent.add(_sample(agent_process.pid))
                now, below = {}, descendants(agent_process.pid)
                for pid, parent in below.items():
                    rank = _rank(pid) if parent == agent_process.pid else None
                    if rank is None:  # a rank's own child, if any: counted apart
                        others.add({"count": len(below) - nproc, **_sample(pid)})
                        continue
                    now[rank] = _sample(pid)
                    if samples % STORE_EVERY == 0:
                        mapped = mapped_under(Path(f"/proc/{pid}/smaps").read_text(), store)
                        now[rank] |= {"store_rss": mapped["Rss"] / 1024}
                        now[rank] |= {"store_pss": mapped["Pss"] / 1024}
                    ranks.setdefault(rank, _Peaks()).add(now[rank])
            except OSError:  # a process ended between listing and reading
                pass
            else:
                if len(now) == nproc:
                    sums.add({key: sum(f[key] for f in now.values()) for key in FIELDS.values()})
                samples += 1
            time.sleep(INTERVAL_S)
    if agent_process.returncode != 0:
        raise RuntimeError(f"torchrun failed ({agent_process.returncode}):\n{log.read_text()}")
    per_rank = {rank: ranks[rank].rounded() | ranks[rank].at_hwm() for rank in sorted(ranks)}
    return {
        "ranks": per_rank,
        "sum_of_peaks": {
            key: round(sum(r[key] for r in per_rank.values()), 1)
            for key in [*FIELDS.values(), "vm_hwm", "pss_at_hwm", "anonymous_at_hwm"]
        },
        "peak_of_sums": sums.rounded(),
        "agent": agent.rounded(),
        "other_processes": others.rounded(),  # below the ranks (none expected)
        "samples": samples,
        "seconds": round(time.perf_counter() - start, 1),
    }


def measure_prepare(pairs: int) -> tuple[Path, Path]:
    """The corpus's config and its prepared folder (``attnkit prepare``: built, or
    checked and reused)."""
    folder = corpus_dir(pairs)
    config = folder / "bench.yaml"
    config.write_text(CONFIG.format(steps=STEPS))
    prepared = folder / "prepared"
    threads = str(len(os.sched_getaffinity(0)))
    _attnkit("prepare", str(config), "--out", str(prepared), "--no-progress",
             "--train.threads", threads)  # fmt: skip
    return config, prepared


def measure(pairs: int) -> dict:
    """Prepare once, then one launch of 1 rank and one of 2, each on a fresh copy."""
    config, prepared = measure_prepare(pairs)
    store_mb = sum(p.stat().st_size for p in (prepared / "store").rglob("*")) / 2**20
    report: dict = {"pairs": pairs, "steps": STEPS, "threads_per_rank": 1}
    report |= {"interval_s": INTERVAL_S, "store_mb": round(store_mb, 1)}
    report |= {"agent_in_sums_and_ratios": False, "launches": {}}
    with tempfile.TemporaryDirectory(prefix="attnkit-bench-ranks-") as work:
        for nproc in (1, 2):
            run = Path(work) / f"ranks{nproc}"
            shutil.copytree(prepared, run, ignore=shutil.ignore_patterns(".lock"))
            report["launches"][str(nproc)] = launch(config, run, nproc)
    one = report["launches"]["1"]["ranks"]["0"]
    two = report["launches"]["2"]["sum_of_peaks"]
    for key in ("vm_hwm", "pss_at_hwm", "anonymous_at_hwm", "rss", "pss", "anonymous"):
        name = key.replace("vm_hwm", "hwm").replace("anonymous", "anon")
        report[f"rank_memory_2_vs_1_{name}"] = round(two[key] / one[key], 3)
    return report


def _own() -> dict[str, float]:
    """This process's RSS, its anonymous part and its peak RSS, MB."""
    mb = _sample(os.getpid())
    return {key: round(mb[key], 1) for key in ("rss", "anonymous", "vm_hwm")}


def stage_worker(config_path: str, run_dir: str) -> None:
    """One rank (under torchrun) going through ``attnkit train``'s stages with the loop's
    own trainer; writes its memory after each stage to ``RUN/stages-rankR.json``."""
    stages = {"python": _own()}
    import torch

    stages["import torch"] = _own()
    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.data.batching import make_batch
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training import objective
    from attnkit.nmt.training.distributed import join
    from attnkit.nmt.training.prepare import prepare_data
    from attnkit.nmt.training.trainer import Trainer

    stages["import attnkit training"] = _own()
    config, folder = RunConfig.load(config_path), RunFolder(Path(run_dir))
    raised = []
    with join(torch.device("cpu")) as group:
        stages["process group joined"] = _own()
        trainer = Trainer(config, folder, lambda _: None, False, group)
        data = prepare_data(config, folder, resuming=False, group=group, echo=lambda _: None)
        stages["data (tokenizers, store, validation split)"] = _own()
        trainer.setup(data)
        stages["model, DDP, Adam"] = _own()
        batches = trainer.order.batches(data.train, config.train)
        stages["epoch order"] = _own()
        for step, indices in enumerate(batches[:STEPS], 1):
            before = _own()["vm_hwm"]
            mine = group.share(indices)
            batch = make_batch(data.train, mine or indices[:1])
            trainer.train_step(batch, objective.target_tokens(data.train, indices), bool(mine))
            if step == 1:
                stages["first step (gradients, Adam state, DDP buckets)"] = _own()
            if _own()["vm_hwm"] > before:
                raised.append([step, list(batch.tgt_out.shape), _own()["vm_hwm"]])
        stages[f"{STEPS} steps"] = _own()
        trainer._scores()  # rank 0 validates, the others wait for its scores
        stages["validation (rank 0; the others wait)"] = _own()
        loaded = [name for name in ("matplotlib", "sacrebleu") if name in sys.modules]
        report = {"rank": group.rank, "stages": stages, "steps_raising_the_peak": raised}
        report |= {"parameters": sum(p.numel() for p in trainer.model.parameters())}
        (folder.path / f"stages-rank{group.rank}.json").write_text(
            json.dumps(report | {"loaded": loaded})
        )


def stages(pairs: int) -> dict:
    """The stage worker under torchrun, 1 then 2 ranks, on fresh copies of the prepared folder."""
    config, prepared = measure_prepare(pairs)
    report = {}
    with tempfile.TemporaryDirectory(prefix="attnkit-bench-ranks-") as work:
        for nproc in (1, 2):
            run = Path(work) / f"stages{nproc}"
            shutil.copytree(prepared, run, ignore=shutil.ignore_patterns(".lock"))
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--local_addr", "127.0.0.1", "--nproc_per_node", str(nproc), "-m",
                       "benchmarks.rank_memory", "--stage-worker", str(config),
                       str(run)]  # fmt: skip
            done = subprocess.run(command, env={**os.environ, **ENV}, capture_output=True,
                                  text=True, check=False)  # fmt: skip
            if done.returncode:
                raise RuntimeError(f"torchrun failed:\n{done.stderr[-3000:]}")
            ranks = sorted(run.glob("stages-rank*.json"))
            report[str(nproc)] = [json.loads(path.read_text()) for path in ranks]
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.rank_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "pairs", type=int, nargs="?", default=PAIRS, help=f"corpus size (default {PAIRS:,})"
    )
    parser.add_argument("--stages", action="store_true", help="where a rank's memory goes")
    return parser


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stage-worker"]:
        stage_worker(*sys.argv[2:4])
        sys.exit()
    args = _parser().parse_args()
    print(json.dumps((stages if args.stages else measure)(args.pairs), indent=1))
