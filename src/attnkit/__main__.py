"""``python -m attnkit``: the ``attnkit`` command (what ``torchrun -m attnkit`` starts)."""

import sys

from .cli import main

sys.exit(main())
