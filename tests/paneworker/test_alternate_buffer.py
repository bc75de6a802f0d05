"""The pyte screen's alternate buffer is built only when a program first shows it.

Most panes never leave the main buffer, and a blank alternate buffer of 120x40 cells
is rows of references in every idle worker. These check the behaviour is the same as
with a buffer built up front: blank when first entered (even after a resize), its
text kept across ``?47`` switches, blank again after a clearing exit.
"""

from __future__ import annotations

from paneworker.screen.emulator.pyte_model import PyteModel


def _screen(model: PyteModel) -> list[str]:
    return [line.rstrip() for line in model.display_lines()]


def _unmade(model: PyteModel) -> bool:
    return model._screen._other_buffer == []  # what is measured here is the allocation


def test_not_built_until_entered_then_blank_at_the_current_size() -> None:
    model = PyteModel(40, 10, 100)
    model.feed(b"main text\r\n")
    assert _unmade(model)
    model.resize(30, 6)
    model.feed(b"\x1b[?47h")
    assert not _unmade(model)
    assert _screen(model) == [""] * 6
    model.feed(b"\x1b[H" + b"x" * 31)  # wraps at the new width
    assert _screen(model)[:2] == ["x" * 30, "x"]


def test_text_kept_across_switches_that_do_not_clear() -> None:
    model = PyteModel(40, 10, 100)
    model.feed(b"main\x1b[?47h\x1b[Halt")
    assert _screen(model)[0] == "alt"
    model.feed(b"\x1b[?47l")
    assert _screen(model)[0] == "main"
    model.feed(b"\x1b[?47h")
    assert _screen(model)[0] == "alt"


def test_a_clearing_exit_leaves_it_blank_and_unmade_again() -> None:
    model = PyteModel(40, 10, 100)
    model.feed(b"main\x1b[?1047h\x1b[Halt")
    model.feed(b"\x1b[?1047l")
    assert _screen(model)[0] == "main"
    assert _unmade(model)
    model.feed(b"\x1b[?47h")
    assert _screen(model) == [""] * 10


def test_1049_clears_on_entry_and_restores_the_main_buffer() -> None:
    model = PyteModel(40, 10, 100)
    model.feed(b"main\x1b[?47h\x1b[Hold alt\x1b[?47l")
    model.feed(b"\x1b[?1049h")
    assert _screen(model) == [""] * 10
    model.feed(b"\x1b[Hnew\x1b[?1049l")
    assert _screen(model)[0] == "main"
