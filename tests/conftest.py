"""Test-wide settings.

Under CI (``CI`` set in the environment) hypothesis runs derandomized, so a
clean checkout always draws the same examples; locally it explores freely.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# ``precision: auto`` is bf16 on a CPU with avx512_bf16/amx_bf16; the suite's
# reference numbers and messages are float32 ones, so auto means fp32 here, in
# this process and in the commands it launches. bf16 is tested by asking for it.
os.environ["ATTNKIT_PRECISION"] = "fp32"

# Under pytest-xdist (``make test``: ``-n 2``) each worker takes one core's worth of
# threads: two workers of two threads would fight over a 2-core machine.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)
