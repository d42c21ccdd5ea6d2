"""Test-wide settings.

Under CI (``CI`` set in the environment) hypothesis runs derandomized, so a
clean checkout always draws the same examples; locally it explores freely.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
