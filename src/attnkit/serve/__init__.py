"""The local attention explorer: a small web app over trained runs and the lessons.

- :func:`create_app` (``app.py``) builds the FastAPI application: the page
  (``static/``, shipped in the package, no network at run time) and the JSON
  API ``POST /translate`` and ``POST /explain`` (docs/serve.md).
- ``payload.py`` turns translations into JSON; ``export.py`` writes them into
  one self-contained HTML file (:func:`write_html`, for ``translate --html``).

``attnkit serve RUN_DIR`` (:mod:`attnkit.cli.serve`) loads the runs and starts
uvicorn on 127.0.0.1. Nothing else in attnkit imports this package.
"""

from .app import Limits, ServedRun, create_app
from .export import html_page, write_html

__all__ = ["Limits", "ServedRun", "create_app", "html_page", "write_html"]
