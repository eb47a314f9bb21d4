"""GitHub's page-based pagination: `per_page` (default 30, at most 100), `page`, and the `Link` header.

GitHub links every page it can name, in the order `prev`, `next`, `last`, `first`, keeping the caller's
other query parameters; clients such as githubkit's `paginate` follow `rel="next"` verbatim, so the
header has to be right for a client to see every item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

T = TypeVar("T")

DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


def _positive_int(raw: str | None, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return value if value >= 1 else default


@dataclass(frozen=True)
class Page:
    number: int
    per_page: int

    @classmethod
    def from_query(cls, query: QueryParams) -> Page:
        per_page = min(_positive_int(query.get("per_page"), DEFAULT_PER_PAGE), MAX_PER_PAGE)
        return cls(number=_positive_int(query.get("page"), 1), per_page=per_page)

    def slice(self, items: Sequence[T]) -> list[T]:
        start = (self.number - 1) * self.per_page
        return list(items[start : start + self.per_page])

    def link_header(self, base_url: str, query: QueryParams, total: int) -> str | None:
        """The `Link` header for this page of `total` items at `base_url`, or None if one page holds all."""
        last = max((total + self.per_page - 1) // self.per_page, 1)
        others = [(key, value) for key, value in query.multi_items() if key != "page"]

        def url(page: int) -> str:
            return f"{base_url}?{urlencode([*others, ('page', str(page))])}"

        rels: list[tuple[str, int]] = []
        if self.number > 1:
            rels.append(("prev", min(self.number - 1, last)))
        if self.number < last:
            rels += [("next", self.number + 1), ("last", last)]
        if self.number > 1:
            rels.append(("first", 1))
        return ", ".join(f'<{url(page)}>; rel="{rel}"' for rel, page in rels) or None
