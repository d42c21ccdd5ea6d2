"""The local attention explorer: a small web app over trained runs and the lessons.

- :func:`create_app` (``app.py``) builds the FastAPI application: the page
  (``static/``, shipped in the package, no network at run time) and the JSON
  API ``POST /translate`` and ``POST /explain`` (docs/serve.md).
- ``payload.py`` turns translations into JSON; ``export.py`` writes them into
  one self-contained HTML file (:func:`write_html`, for ``translate --html``).

``attnkit serve RUN_DIR`` (:mod:`attnkit.cli.serve`) loads the runs and starts
uvicorn on 127.0.0.1; ``attnkit translate --html`` (:mod:`attnkit.cli.nmt`) writes
the page. Nothing outside the CLI imports this package.
:class:`Limits` (``limits.py``) loads without the web stack; the names of
``app.py`` are imported on first use, so ``attnkit serve --help`` stays light.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .export import html_page, write_html
from .limits import Limits

if TYPE_CHECKING:  # imported by __getattr__ at run time (the web stack)
    from .app import MissingRun as MissingRun
    from .app import ServedRun as ServedRun
    from .app import create_app as create_app

_LAZY = dict.fromkeys(("MissingRun", "ServedRun", "create_app"), ".app")

__all__ = ["Limits", "MissingRun", "ServedRun", "create_app", "html_page", "write_html"]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
