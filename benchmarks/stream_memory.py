"""Peak resident memory of ``attnkit translate RUN < input`` against the input's length.

``python -m benchmarks.stream_memory RUN_DIR 1000 1000000 [--buffer-size N]``
translates N lines of one word each (greedy, one thread) in a fresh process
per count and prints one JSON object per count with the process's peak
resident size (``ru_maxrss``) and the wall time. translate reads stdin in
buffers, so the peak should follow the buffer size, not the line count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROBE = (
    "import resource, sys\n"
    "from attnkit.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stderr.write(f'maxrss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')\n"
    "sys.exit(code)\n"
)


def peak_rss_kib(run_dir: str | Path, lines: int, buffer_size: int) -> tuple[int, int]:
    """``(peak RSS in KiB, output lines)`` of translating ``lines`` one-word lines."""
    import attnkit

    env = {
        **os.environ,
        "PYTHONPATH": str(Path(attnkit.__file__).parents[1]),
        "OMP_NUM_THREADS": "1",
    }
    argv = ["translate", str(run_dir), "--beam", "1", "--buffer-size", str(buffer_size)]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        input=b"Mann\n" * lines,
        capture_output=True,
        env=env,
        check=False,
    )
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0 or "maxrss_kib=" not in err:
        raise RuntimeError(f"translate failed ({proc.returncode}): {err[-500:]}")
    return int(err.rsplit("maxrss_kib=", 1)[1]), proc.stdout.count(b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("lines", type=int, nargs="+")
    parser.add_argument("--buffer-size", type=int, default=256)
    args = parser.parse_args()
    for lines in args.lines:
        start = time.perf_counter()
        kib, written = peak_rss_kib(args.run_dir, lines, args.buffer_size)
        seconds = time.perf_counter() - start
        row = {"lines": lines, "buffer_size": args.buffer_size, "peak_rss_mib": kib / 1024}
        print(json.dumps({**row, "output_lines": written, "seconds": round(seconds, 1)}))


if __name__ == "__main__":
    main()
