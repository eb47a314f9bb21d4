"""How commands print: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Left-aligned columns under upper-case headers; None prints as '-'."""
    cells = [[("-" if row.get(column) is None else str(row.get(column))) for column in columns] for row in rows]
    widths = [max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.upper().ljust(width) for column, width in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(data: Any, columns: Sequence[str], as_json: bool) -> str:
    if as_json:
        return json.dumps(data, indent=2, default=str)
    rows = data if isinstance(data, list) else [data]
    return table(rows, columns)
