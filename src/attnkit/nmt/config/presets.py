"""The run configs shipped inside the package, found by name: ``attnkit train quick``.

The presets that need no files outside attnkit (the bundled Multi30k and the
toy tasks) live in ``attnkit/presets/``, so an installed wheel trains them
without a checkout; a checkout's ``configs/`` links to the same files and adds
the presets whose corpora live beside it (``align*.yaml``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "PRESETS",
    "config_path",
    "linked_config",
    "missing_config_message",
    "preset_names",
    "preset_path",
]

PRESETS = Path(__file__).resolve().parents[2] / "presets"
_MAX_LINK_BYTES = 4096  # a symbolic link written as a file holds a path (PATH_MAX)


def preset_names() -> list[str]:
    """The shipped presets' names, sorted (``["copy", ..., "transformer"]``)."""
    return sorted(path.stem for path in PRESETS.glob("*.yaml"))


def preset_path(name: str) -> Path | None:
    """The shipped preset ``NAME.yaml``, or None when there is none of that name (a name
    with a folder in it, such as ``../x``, is none)."""
    path = PRESETS / f"{name}.yaml"
    return path if Path(name).name == name and path.is_file() else None


def config_path(config: str) -> Path:
    """The file a CONFIG argument names: the path itself when it exists, else, for a
    bare name such as ``quick`` (no folder, no suffix), ``quick.yaml`` in the working
    directory (a preset copied here to be edited) or else the shipped preset of that name.

    Raises:
        FileNotFoundError: ``config`` is a bare name that is neither a file here nor a
            preset (the message lists the presets). Any other missing path is returned
            as it is, for the loader to name.
    """
    path = Path(config)
    if path.exists() or path.name != config or path.suffix:
        return path
    here = path.with_suffix(".yaml")
    if here.is_file():
        return here
    preset = preset_path(config)
    if preset is None:
        raise FileNotFoundError(missing_config_message(path))
    return preset


def linked_config(path: Path) -> Path | None:
    """The config that ``path`` stands for when it is a symbolic link written as a text file,
    else None.

    A checkout without symbolic links (``git config core.symlinks false``, the default of
    Git for Windows) writes the link ``configs/quick.yaml -> ../src/attnkit/presets/quick.yaml``
    as a file holding only ``../src/attnkit/presets/quick.yaml``: read as YAML, the
    README's ``attnkit train configs/quick.yaml`` failed with 'the top level must be a
    mapping of sections'. Such a file is one line naming an existing ``.yaml`` or ``.yml``
    file, relative to the folder of ``path``.
    """
    try:
        if not path.is_file() or path.stat().st_size > _MAX_LINK_BYTES:
            return None
        target = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not target or "\n" in target or Path(target).suffix not in (".yaml", ".yml"):
        return None
    linked = path.parent / target
    return linked if linked.is_file() else None


def missing_config_message(path: Path) -> str:
    """The error for a config file that does not exist (or is a folder). A bare name
    (``quik``) lists the presets; a path such as ``configs/quick.yaml`` (the README's,
    absent outside a checkout) whose file name is a shipped preset's names that preset,
    the same file."""
    if path.is_dir():
        return f"{path} is a folder, not a config file (give its config.yaml, or a preset)"
    message = f"config file not found: {path}"
    if not path.suffix and str(path) == path.name:
        return f"{message} (nor a preset of that name; the presets: {', '.join(preset_names())})"
    if path.suffix in (".yaml", ".yml") and preset_path(path.stem) is not None:
        name = path.stem
        message += (
            f" (attnkit ships a preset of that name: give it as {name}, "
            f"e.g. attnkit train {name} or RunConfig.preset({name!r}))"
        )
    return message
