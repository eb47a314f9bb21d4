"""Nova's JSON-schema refusals, worded as Nova words them.

Nova validates request bodies with jsonschema and reports the first error as
`Invalid input for field/attribute <last path element>. Value: <value>. <jsonschema's reason>`, where the
value is Python's `str()` of the offending part of the body (so a dict shows as its repr and a string
without quotes). The checks here are the parameter types several request parsers share.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from corral_sandbox.cloud.errors import ApiError

TAG = re.compile(r"^[^,/]*$")
MAX_TAG_LENGTH = 60


def invalid(field: str, value: Any, reason: str) -> ApiError:
    return ApiError(400, f"Invalid input for field/attribute {field}. Value: {value}. {reason}")


def not_of_type(value: Any, *types: str) -> str:
    """jsonschema's reason for a value of the wrong JSON type: `None is not of type 'integer', 'string'`."""
    return f"{value!r} is not of type {', '.join(repr(name) for name in types)}"


def string_problem(value: Any, *, min_length: int = 0, max_length: int | None = None, pattern: str = "") -> str | None:
    """Why a `{'type': 'string', 'minLength', 'maxLength', 'pattern'}` schema rejects `value`, or None."""
    if not isinstance(value, str):
        return not_of_type(value, "string")
    if len(value) < min_length:
        return f"{value!r} should be non-empty" if min_length == 1 else f"{value!r} is too short"
    if max_length is not None and len(value) > max_length:
        return f"{value!r} is too long"
    if pattern and not re.search(pattern, value):
        return f"{value!r} does not match {pattern!r}"
    return None


def tag_problem(tag: Any) -> str | None:
    """Why Nova's `parameter_types.tag` schema rejects `tag` (jsonschema's words), or None."""
    return string_problem(tag, min_length=1, max_length=MAX_TAG_LENGTH, pattern=TAG.pattern)


def uuid_like(value: Any) -> bool:
    """oslo's `is_uuid_like`, which Nova's `uuid` format uses: any spelling `uuid.UUID` reads back."""
    try:
        return str(uuid.UUID(str(value))).replace("-", "") == str(value).lower().replace("-", "")
    except ValueError:
        return False
