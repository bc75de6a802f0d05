"""The recipes file: a table per recipe with a fixed argv; anything else refuses the file."""

from __future__ import annotations

import pytest

from protocol.errors import PanewardenError
from supervisor.lanes.recipes import parse_recipes, recipe_writable


def test_a_recipe_has_an_argv_an_optional_bound_and_outputs() -> None:
    recipes = parse_recipes(
        b"""
[recipes.tests]
argv = ["python3", "-m", "pytest", "-q"]

[recipes.docs]
argv = ["make", "html"]
timeout_s = 120
writable = ["build/html/", "./reports"]
"""
    )
    assert recipes["tests"].argv == ["python3", "-m", "pytest", "-q"]
    assert recipes["tests"].timeout_s == 600 and recipes["tests"].writable == []
    assert recipes["docs"].timeout_s == 120
    assert recipe_writable(recipes["docs"]) == ["build/html", "reports"]
    assert parse_recipes(b"") == {}


@pytest.mark.parametrize(
    "text",
    [
        b"[recipes.tests\nargv = []",  # not TOML
        b"[recipes.tests]\nargv = []",  # empty argv
        b'[recipes.tests]\nargv = "make test"',  # a string, not a list
        b'[recipes.tests]\nargv = ["make", ""]',  # an empty word
        b'[recipes.tests]\nargv = ["make"]\nshell = true',  # an unknown key
        b'[recipes.tests]\nargv = ["make"]\ntimeout_s = 0',
        b'[recipes.tests]\nargv = ["make"]\ntimeout_s = 3601',
        b'[recipes.tests]\nargv = ["make"]\nwritable = ["../out"]',
        b'[recipes.tests]\nargv = ["make"]\nwritable = ["/tmp"]',
        b'[recipes.tests]\nargv = ["make"]\nwritable = [".git/hooks"]',
        b'[recipes.tests]\nargv = ["make"]\nwritable = ["out/*"]',
        b'[recipes."Bad Name"]\nargv = ["make"]',
        b'[recipes.tests]\nargv = ["a\\u0000b"]',
        b'version = 2\n[recipes.tests]\nargv = ["make"]',
        b"\xff\xfe",
    ],
)
def test_a_file_that_is_not_valid_is_refused_whole(text: bytes) -> None:
    with pytest.raises(PanewardenError) as caught:
        parse_recipes(text)
    assert caught.value.code.value == "git_precondition"
    assert ".panewarden/recipes.toml" in caught.value.message
