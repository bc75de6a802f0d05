"""Scopes are literal repository-relative paths; overlap is by whole path components."""

from __future__ import annotations

import pytest

from protocol.errors import PanewardenError
from supervisor.lanes.scopes import first_overlap, normalise_scope, normalise_scopes, overlaps


def test_sibling_files_do_not_overlap_but_a_directory_and_its_file_do() -> None:
    assert not overlaps("src/a.py", "src/ab.py")
    assert not overlaps("src/ab.py", "src/a.py")
    assert overlaps("src", "src/a.py") and overlaps("src/a.py", "src")
    assert overlaps("src/a.py", "src/a.py")
    assert not overlaps("src", "srcs") and not overlaps("docs", "src")
    assert first_overlap(["tests", "src/a.py"], ["src/ab.py", "src"]) == ("src/a.py", "src")
    assert first_overlap(["src/a.py"], ["src/ab.py", "src/a.pyc"]) is None


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("src", "src"),
        ("src/", "src"),
        ("./src/a.py", "src/a.py"),
        ("src//a.py", "src/a.py"),
        ("src/./a.py/", "src/a.py"),
        ("a b/c-d_e.txt", "a b/c-d_e.txt"),
        (".github/workflows", ".github/workflows"),
    ],
)
def test_scopes_are_normalised(raw: str, normal: str) -> None:
    assert normalise_scope(raw) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "",
        ".",
        "./",
        "/src",
        "src/../docs",
        "..",
        "src\\a.py",
        "src/*.py",
        "src/a?.py",
        "src/[ab].py",
        "src/{a,b}.py",
        "src/a\n.py",
        "src/\x7f",
        "x" * 1025,
    ],
)
def test_anything_but_a_literal_relative_path_is_refused(raw: str) -> None:
    with pytest.raises(PanewardenError) as caught:
        normalise_scope(raw)
    assert caught.value.code.value == "invalid_argument"


def test_duplicates_collapse_in_first_seen_order() -> None:
    assert normalise_scopes(["src/", "docs", "./src"]) == ["src", "docs"]
