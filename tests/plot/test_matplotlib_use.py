"""Only attnkit.plot touches matplotlib, and never through pyplot's global state."""

import re
from pathlib import Path

from attnkit import plot

PLOT = Path(plot.__file__).parent
PACKAGE = PLOT.parent
IMPORTS_MATPLOTLIB = re.compile(r"^\s*(from|import) matplotlib", re.M)
IMPORTS_PYPLOT = re.compile(r"^\s*(from|import) matplotlib\.pyplot|import pyplot", re.M)


def test_plot_is_a_package_and_its_modules_draw():
    assert PLOT.name == "plot" and (PLOT / "__init__.py").is_file()
    drawing = {p.name for p in PLOT.glob("*.py") if IMPORTS_MATPLOTLIB.search(p.read_text())}
    assert {"heatmap.py", "masks.py", "curves.py"} <= drawing


def test_no_module_but_plot_touches_matplotlib_and_none_imports_pyplot():
    sources = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    users = {p for p, text in sources.items() if IMPORTS_MATPLOTLIB.search(text)}
    assert users and all(p.is_relative_to(PLOT) for p in users), sorted(map(str, users))
    assert [str(p) for p, text in sources.items() if IMPORTS_PYPLOT.search(text)] == []
