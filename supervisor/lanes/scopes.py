"""Writer scopes: literal repository-relative paths, and when two of them overlap.

A scope names a file or a directory literally: no glob characters (``* ? [ ] { }``),
no ``..`` component, no leading ``/``, no backslash, no control character. It is
normalised by dropping empty and ``.`` components (so ``./src/`` is ``src``); what
is left must name something below the repository's top. Two scopes overlap when one
equals the other or contains it, compared component by component: ``src`` overlaps
``src/a.py``, but ``src/a.py`` does not overlap ``src/ab.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.errors import ErrorCode, PanewardenError, echo

GLOB_CHARACTERS = frozenset("*?[]{}")
MAX_SCOPE_CHARS = 1024


def _refuse(raw: str, why: str) -> PanewardenError:
    return PanewardenError(ErrorCode.INVALID_ARGUMENT, f"scope {echo(raw, 80)} {why}")


def normalise_scope(raw: str) -> str:
    """The normal form of one scope.

    Raises:
        PanewardenError: ``invalid_argument`` for anything but a literal
            repository-relative path.
    """
    if not raw or len(raw) > MAX_SCOPE_CHARS:
        raise _refuse(raw, f"must be 1..{MAX_SCOPE_CHARS} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in raw):
        raise _refuse(raw, "contains a control character")
    if "\\" in raw:
        raise _refuse(raw, "contains a backslash")
    if GLOB_CHARACTERS.intersection(raw):
        raise _refuse(raw, "contains a glob character; scopes are literal paths")
    if raw.startswith("/"):
        raise _refuse(raw, "is absolute; scopes are relative to the repository's top")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refuse(raw, "contains '..'")
    if not parts:
        raise _refuse(raw, "names no path below the repository's top")
    return "/".join(parts)


def normalise_scopes(raws: Iterable[str]) -> list[str]:
    """Each scope normalised, duplicates removed, in first-seen order."""
    seen: dict[str, None] = {}
    for raw in raws:
        seen.setdefault(normalise_scope(raw), None)
    return list(seen)


def overlaps(a: str, b: str) -> bool:
    """True when normalised scopes ``a`` and ``b`` are equal or one contains the other."""
    pa, pb = a.split("/"), b.split("/")
    shorter = min(len(pa), len(pb))
    return pa[:shorter] == pb[:shorter]


def first_overlap(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, str] | None:
    """The first pair (mine, theirs) that overlaps, if any."""
    others = list(theirs)
    for a in mine:
        for b in others:
            if overlaps(a, b):
                return a, b
    return None
