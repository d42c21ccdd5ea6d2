"""Names a package imports on first use (PEP 562 ``__getattr__``) are visible to type
checkers too: each is imported under ``if TYPE_CHECKING:`` from the module its
``__getattr__`` takes it from, so ``py.typed`` gives mypy, pyright and editors the real
signatures of ``attnkit.MultiHeadAttention`` or ``attnkit.nmt.load_run``, not ``Any``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAZY_PACKAGES = [
    "attnkit",
    "attnkit.nmt",
    "attnkit.nmt.models.rnn",
    "attnkit.nmt.models.transformer",
    "attnkit.serve",
]


def _type_checking_imports(path: Path) -> dict[str, str]:
    """name -> the (relative) module that ``if TYPE_CHECKING:`` imports it from, re-exported
    as ``from M import X as X`` (the form a type checker treats as public)."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom), ast.unparse(inner)
                for alias in inner.names:
                    assert alias.asname == alias.name, ast.unparse(inner)
                    found[alias.name] = "." * inner.level + (inner.module or "")
    return found


def test_every_package_with_a_module_getattr_is_listed():
    with_getattr = {
        ".".join(path.parent.relative_to(SRC).parts)
        for path in SRC.rglob("__init__.py")
        if "__getattr__" in path.read_text(encoding="utf-8")
    }
    assert with_getattr == set(LAZY_PACKAGES)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_lazy_names_are_imported_for_type_checkers(package):
    module = importlib.import_module(package)
    declared = _type_checking_imports(SRC.joinpath(*package.split("."), "__init__.py"))
    lazy = {name for name in module.__all__ if name not in vars(module)}  # not yet imported
    assert lazy and lazy == declared.keys()
    for name, source in declared.items():
        assert getattr(importlib.import_module(source, package), name) is getattr(module, name)
