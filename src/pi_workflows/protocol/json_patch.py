"""RFC 6902 JSON Patch: checking a patch's shape and applying it to a JSON document.

Shared by the server (``store/settings.py`` applies a settings change) and the clients (the
CLI refuses a malformed ``--patch`` before sending it). Applying uses the ``jsonpatch``
library (docs/dependencies.md), imported on first use so a process that never patches
never loads it. Never changes the document it is given.
"""

from __future__ import annotations

import json
from typing import Any, Final

MAX_PATCH_OPERATIONS: Final = 100
"""The most operations one patch may hold."""

OPERATIONS: Final = ("add", "remove", "replace", "move", "copy", "test")
"""RFC 6902's six operations."""


class PatchError(ValueError):
    """A patch that is malformed or does not apply to the document: ``str()`` is one line
    naming the operation (by index) and what is wrong."""


def patch_problem(patch: object) -> str | None:
    """Why ``patch`` is not an RFC 6902 patch (one line), or ``None``: a non-empty list of at
    most ``MAX_PATCH_OPERATIONS`` objects, each with a known ``op``, a string ``path`` (a
    JSON Pointer: empty or starting with ``/``), ``value`` for add, replace and test, and a
    string ``from`` for move and copy."""
    if not isinstance(patch, list):
        return "a JSON Patch is a JSON list of operations, such as"\
            ' [{"op": "replace", "path": "/level", "value": 2}]'  # fmt: skip
    if not patch:
        return "the JSON Patch has no operations"
    if len(patch) > MAX_PATCH_OPERATIONS:
        return f"the JSON Patch has {len(patch)} operations; the limit is {MAX_PATCH_OPERATIONS}"
    for index, operation in enumerate(patch):
        where = f"operation {index}"
        if not isinstance(operation, dict):
            return f"{where} is not a JSON object"
        op = operation.get("op")
        if op not in OPERATIONS:
            return f"{where} has op {json.dumps(op)}; use one of {', '.join(OPERATIONS)}"
        for name in ("path", *(("from",) if op in ("move", "copy") else ())):
            pointer = operation.get(name)
            if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
                return f'{where} ({op}) needs {name!r}, a JSON Pointer such as "/level"'
        if op in ("add", "replace", "test") and "value" not in operation:
            return f"{where} ({op}) needs a 'value'"
    return None


def apply_patch(document: Any, patch: list[Any]) -> Any:
    """The document ``patch`` makes of ``document`` (a new value); ``PatchError`` when the
    patch is malformed or an operation does not apply (a missing path, a failed test)."""
    problem = patch_problem(patch)
    if problem is not None:
        raise PatchError(problem)
    import jsonpatch  # noqa: PLC0415 - lazy, see the module docstring
    import jsonpointer  # noqa: PLC0415

    current = document
    for index, operation in enumerate(patch):
        try:
            current = jsonpatch.JsonPatch([operation]).apply(current)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise PatchError(
                f"operation {index} ({operation['op']} {operation['path']}) does not apply:"
                f" {detail}"[:300]
            ) from None
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise PatchError(
                f"operation {index} ({operation['op']} {operation['path']}) does not apply:"
                f" {type(exc).__name__}"
            ) from None
    return current


__all__ = ["MAX_PATCH_OPERATIONS", "OPERATIONS", "PatchError", "apply_patch", "patch_problem"]
