"""The local attention explorer: a small web app over trained runs and the lessons.

- :func:`create_app` (``app.py``) builds the FastAPI application: the page
  (``static/``, shipped in the package, no network at run time) and the JSON
  API ``POST /translate`` and ``POST /explain`` (docs/serve.md).
- ``payload.py`` turns translations into JSON; ``export.py`` writes them into
  one self-contained HTML file (:func:`write_html`, for ``translate --html``).

``attnkit serve RUN_DIR`` (:mod:`attnkit.cli.serve`) loads the runs and starts
uvicorn on 127.0.0.1. Nothing else in attnkit imports this package.
:class:`Limits` (``limits.py``) loads without the web stack; the names of
``app.py`` are imported on first use, so ``attnkit serve --help`` stays light.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .export import html_page, write_html
from .limits import Limits

if TYPE_CHECKING:  # imported by __getattr__ at run time (the web stack)
    from .app import MissingRun as MissingRun
    from .app import ServedRun as ServedRun
    from .app import create_app as create_app

_FROM_APP = ("MissingRun", "ServedRun", "create_app")

__all__ = ["Limits", "MissingRun", "ServedRun", "create_app", "html_page", "write_html"]


def __getattr__(name: str) -> Any:
    if name in _FROM_APP:
        return getattr(import_module(".app", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
