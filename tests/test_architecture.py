"""The walls between attnkit's rooms (docs/architecture.md), checked on the source's imports.

Every ``import``/``from … import`` in ``src/attnkit`` is resolved to a module
name (relative imports included, at any depth, also inside functions) and
checked against the rules below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "attnkit"

# The architectures: only nmt.models.registry (the factory) and each architecture's own
# package may import them (and attnkit.nmt, the package face that hands on their classes);
# everything else talks to the Translator interface.
ARCHITECTURES = ("attnkit.nmt.models.rnn", "attnkit.nmt.models.transformer")


# The translator's rooms, from the ground floor up (docs/architecture.md). A module
# imports only from its own floor or the floors below it, so every import between
# rooms points down; ``attnkit.nmt`` itself (the package face) is not on a floor.
NMT_FLOORS = (
    ("attnkit.nmt.vocab_ids", "attnkit.nmt.device", "attnkit.nmt.precision"),
    ("attnkit.nmt.models",),
    ("attnkit.nmt.config",),
    ("attnkit.nmt.data",),
    ("attnkit.nmt.runs",),
    ("attnkit.nmt.decoding",),
    ("attnkit.nmt.export",),
    ("attnkit.nmt.analysis",),
    ("attnkit.nmt.training",),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Fully qualified attnkit modules (or names inside them) imported by ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "attnkit" or name.startswith("attnkit.")}


def _inside(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


SOURCES = sorted(PACKAGE.rglob("*.py"))
EDGES = [(_module_name(p), target) for p in SOURCES for target in sorted(_imports(p))]


def _violations(rule) -> list[str]:
    return [f"{source} imports {target}" for source, target in EDGES if rule(source, target)]


def test_the_source_tree_was_found_and_parsed():
    modules = {source for source, _ in EDGES}
    assert {"attnkit.nmt.decoding.search", "attnkit.attention.multihead", "attnkit.cli"} <= modules


def _floor(module: str) -> int | None:
    for floor, rooms in enumerate(NMT_FLOORS):
        if any(_inside(module, room) for room in rooms):
            return floor
    return None


def test_every_translator_module_stands_on_a_floor():
    modules = {source for source, _ in EDGES} | {_module_name(p) for p in SOURCES}
    homeless = [m for m in modules if _inside(m, "attnkit.nmt") and m != "attnkit.nmt"]
    assert [m for m in homeless if _floor(m) is None] == []


def test_translator_rooms_import_only_downwards():
    def rule(source: str, target: str) -> bool:
        below, above = _floor(source), _floor(target)
        return below is not None and above is not None and above > below

    assert _violations(rule) == []


def test_attention_core_imports_nothing_above_it():
    assert (
        _violations(
            lambda s, t: _inside(s, "attnkit.attention") and not _inside(t, "attnkit.attention")
        )
        == []
    )


def test_nothing_imports_the_cli_or_the_server():
    # attnkit.__main__ (`python -m attnkit`, what `torchrun -m attnkit` runs) is the
    # command's second entry point beside the console script: it belongs to the CLI.
    def rule(source: str, target: str) -> bool:
        upper = ("attnkit.cli", "attnkit.serve", "attnkit.__main__")
        return any(_inside(target, room) for room in upper) and not any(
            _inside(source, room) for room in upper
        )

    assert _violations(rule) == []


def test_plot_draws_and_never_imports_attention_or_the_translator():
    def rule(source: str, target: str) -> bool:
        return _inside(source, "attnkit.plot") and (
            _inside(target, "attnkit.attention") or _inside(target, "attnkit.nmt")
        )

    assert _violations(rule) == []


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_only_the_factory_imports_an_architecture(arch):
    def rule(source: str, target: str) -> bool:
        allowed = source == "attnkit.nmt.models.registry" or _inside(source, arch)
        return _inside(target, arch) and not allowed and source != "attnkit.nmt"

    assert _violations(rule) == []


def test_the_translator_imports_no_lessons():
    def rule(source: str, target: str) -> bool:
        lessons = ("attnkit.lessons",)
        return _inside(source, "attnkit.nmt") and any(_inside(target, r) for r in lessons)

    assert _violations(rule) == []


def test_lessons_use_only_the_core_and_plot():
    def rule(source: str, target: str) -> bool:
        allowed = ("attnkit.lessons", "attnkit.attention", "attnkit.plot")
        return _inside(source, "attnkit.lessons") and not any(_inside(target, r) for r in allowed)

    assert _violations(rule) == []


def test_test_files_have_unique_basenames():
    """The tests have no __init__ files, so pytest imports each by its basename: two
    files of one name in different folders fail the whole collection."""
    names = [p.name for p in (SRC.parent / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# What each room may import of attnkit beside itself (docs/architecture.md's table);
# "attnkit.__version__" is the package's version string, read by the export's model card.
MAY_IMPORT = {
    "attnkit.nmt": (
        "attnkit.attention",
        "attnkit.plot",
        "attnkit.atomic",
        "attnkit.processes",
        "attnkit.lazy",
        "attnkit.__version__",
    ),
    "attnkit.plot": ("attnkit.atomic",),
    "attnkit.serve": ("attnkit.nmt", "attnkit.lessons", "attnkit.atomic", "attnkit.lazy"),
}


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_a_room_imports_only_what_the_architecture_table_allows(room):
    allowed = (room, *MAY_IMPORT[room])

    def rule(source: str, target: str) -> bool:
        if not _inside(source, room) or target == "attnkit":  # the package: see its names
            return False
        return not any(_inside(target, r) for r in allowed)

    assert _violations(rule) == []
