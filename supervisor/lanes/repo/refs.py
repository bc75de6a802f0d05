"""Branch names as a coordinator writes them, resolved to full ref names to compare.

Git reports the checked-out branch as a full ref (``refs/heads/pb``); a request may name
the same branch ``pb``, ``heads/pb`` or ``refs/heads/pb``. Comparing the short name
with the text of a request let ``refs/heads/pb`` and ``heads/pb`` protect nothing, so
both sides are full ref names before any comparison:

- ``branch_ref``: the one ref a name means where a branch is expected (``git switch``
  reads it so): ``refs/…`` as it is, ``heads/X`` as ``refs/heads/X``, anything else
  as ``refs/heads/<name>``. ``branch`` must resolve to exactly the checked-out ref.
- ``protected_refs``: every ref an entry could mean. A protection errs on the side of
  protecting: ``heads/pb`` protects ``refs/heads/pb`` and a branch literally named
  ``heads/pb`` (``refs/heads/heads/pb``).
"""

from __future__ import annotations

from collections.abc import Iterable

BRANCH_PREFIX = "refs/heads/"


def branch_ref(name: str) -> str:
    """The full ref ``name`` means where a branch is expected."""
    if name.startswith("refs/"):
        return name
    if name.startswith("heads/"):
        return "refs/" + name
    return BRANCH_PREFIX + name


def protected_refs(names: Iterable[str]) -> frozenset[str]:
    """Every full ref the protected branch names could mean."""
    found: set[str] = set()
    for name in names:
        found.add(branch_ref(name))
        found.add(BRANCH_PREFIX + name)
    return frozenset(found)


def short_branch(ref: str) -> str:
    """A branch's name without ``refs/heads/`` (other refs are left whole)."""
    return ref.removeprefix(BRANCH_PREFIX)
