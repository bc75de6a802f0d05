"""Verification recipes: the repository's own ``.panewarden/recipes.toml``, as it is at
the lane's accepted base commit.

Only the base commit's version counts, as ``writer_start`` read it and recorded it in
the lane's lease (:func:`capture`): a writer cannot add or change a recipe by editing
its worktree, nor by forging the base commit's objects afterwards — ``verify`` parses
the recorded bytes (:func:`recipe_captured`), never the object store again.
The file is TOML, one table per recipe::

    [recipes.tests]
    argv = ["python3", "-m", "unittest", "discover", "-s", "tests"]
    timeout_s = 300           # optional, 1..3600, default 600
    writable = ["build/out"]  # optional: worktree-relative paths the recipe may write

``argv`` is run as it stands (no shell) in the worktree; a caller names a recipe, never
a command. ``writable`` entries follow the scope rules (literal, relative, no ``..``)
and may not name ``.git``. Unknown keys, a bad type or a bound exceeded refuse the file.
"""

from __future__ import annotations

import tomllib
from typing import Annotated

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.records import WriterTerms
from supervisor.lanes.repo.git import Git
from supervisor.lanes.scopes import normalise_scope

RECIPES_PATH = ".panewarden/recipes.toml"
RECIPES_LIMIT_BYTES = 64 * 1024
RECIPE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DEFAULT_RECIPE_TIMEOUT_S = 600
MAX_RECIPE_TIMEOUT_S = 3600

Word = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class Recipe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One recipe: a fixed argv, its time bound and the paths it may write."""

    argv: Annotated[list[Word], msgspec.Meta(min_length=1, max_length=256)]
    timeout_s: Annotated[int, msgspec.Meta(ge=1, le=MAX_RECIPE_TIMEOUT_S)] = (
        DEFAULT_RECIPE_TIMEOUT_S
    )
    writable: Annotated[list[Word], msgspec.Meta(max_length=32)] = []

    def __post_init__(self) -> None:
        if any("\0" in word for word in self.argv):
            raise ValueError("argv: a NUL character")
        for raw in self.writable:
            try:
                path = normalise_scope(raw)
            except PanewardenError as exc:
                raise ValueError(f"writable: {exc.message}") from None
            if path.split("/")[0] == ".git":
                raise ValueError(f"writable: {raw!r} is inside .git")


class RecipesFile(msgspec.Struct, forbid_unknown_fields=True):
    """The whole file."""

    recipes: dict[Annotated[str, msgspec.Meta(pattern=RECIPE_NAME_PATTERN)], Recipe] = (
        msgspec.field(default_factory=dict)
    )


def _bad_file(why: str) -> PanewardenError:
    return PanewardenError(
        ErrorCode.GIT_PRECONDITION, f"{RECIPES_PATH} at the base commit is not valid: {why}"
    )


def parse_recipes(data: bytes) -> dict[str, Recipe]:
    """The recipes of a recipes file's bytes.

    Raises:
        PanewardenError: ``git_precondition`` for a file that is not valid.
    """
    try:
        table = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _bad_file(str(exc)) from None
    try:
        return msgspec.convert(table, RecipesFile).recipes
    except msgspec.ValidationError as exc:
        raise _bad_file(str(exc)) from None


def recipe_writable(recipe: Recipe) -> list[str]:
    """The recipe's writable paths, normalised."""
    return [normalise_scope(raw) for raw in recipe.writable]


async def capture(git: Git, worktree: str, base_commit: str) -> bytes | None:
    """The recipes file's bytes at ``base_commit`` (None: it has none), for the lease.

    Raises:
        PanewardenError: ``git_precondition`` (unreadable, or over the size bound).
    """
    return await git.show(worktree, base_commit, RECIPES_PATH, RECIPES_LIMIT_BYTES)


def recipe_captured(terms: WriterTerms, name: str) -> Recipe:
    """Recipe ``name`` from the recipes file ``writer_start`` recorded for the lane.

    Raises:
        PanewardenError: ``not_found`` (no recipes file at the base, or no such recipe),
            ``git_precondition`` (an invalid file, or a lease from before recipes were
            recorded: start a new lane).
    """
    if not terms.recipes_captured:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION,
            "this writer lease predates recorded recipes; release it and start a new lane",
        )
    return _recipe_of(terms.base_recipes, terms.base_commit, name)


def _recipe_of(data: bytes | None, base_commit: str, name: str) -> Recipe:
    if data is None:
        raise PanewardenError(
            ErrorCode.NOT_FOUND, f"the base commit {base_commit[:12]} has no {RECIPES_PATH}"
        )
    recipes = parse_recipes(data)
    recipe = recipes.get(name)
    if recipe is None:
        raise PanewardenError(
            ErrorCode.NOT_FOUND,
            f"no recipe {name!r} in {RECIPES_PATH} at {base_commit[:12]} "
            f"(it has: {', '.join(sorted(recipes)) or 'none'})",
        )
    return recipe
