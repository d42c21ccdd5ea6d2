"""Result tables: what each benchmark returns and how the runner prints it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """One printed table of measurements."""

    title: str
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)

    def add(self, *row: object) -> None:
        self.rows.append(list(row))

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "---|" * len(self.columns))
        lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"title": self.title, "columns": self.columns, "rows": self.rows}


@dataclass
class Result:
    """What one benchmark module's ``run`` returns."""

    tables: list[Table] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)
