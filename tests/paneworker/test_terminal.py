"""The pane terminal on real byte streams: what is shown, what is answered, what is reported."""

from __future__ import annotations

import base64
import logging
import os
import random
import select
import sys
import time

import pytest
from ptyprocess import PtyProcess

from paneworker.screen.terminal import Terminal
from paneworker.status.osc7501 import StatusReport
from tests.paneworker.emulators import EMULATOR


class Rig:
    """A terminal plus everything it said back."""

    def __init__(self, cols: int = 40, rows: int = 8, history: int = 100) -> None:
        self.replies: list[bytes] = []
        self.reports: list[StatusReport] = []
        self.roots: list[StatusReport | None] = []
        self.term = Terminal(
            cols,
            rows,
            reply=self.replies.append,
            on_report=self.reports.append,
            history_lines=history,
            on_root_change=self.roots.append,
            emulator=EMULATOR,
        )

    def feed(self, data: bytes | str) -> Rig:
        self.term.feed(data.encode() if isinstance(data, str) else data)
        return self

    def alternate_active(self) -> bool:
        """A method, not a property: mypy keeps an asserted attribute narrowed across feeds."""
        return self.term.alternate_active

    @property
    def screen(self) -> list[str]:
        return self.term.display_lines()

    @property
    def text(self) -> str:
        return "\n".join(line for line in self.screen if line)

    @property
    def answered(self) -> bytes:
        return b"".join(self.replies)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# -- 1. OSC 7501 -------------------------------------------------------------------


def test_reports_are_never_shown_and_valid_ones_are_passed_on() -> None:
    rig = Rig().feed(
        "a\x1b]7501;state=working:app=claude\x07b"
        f"\x1b]7501;state=blocked:kind=permission:msg={b64('Run rm?')}\x1b\\c"
        "\x1b]7501;state=bogus\x07d\x1b]7501;state=idle:id=a//b\x1b\\e"
    )
    assert rig.screen[0] == "abcde"
    assert rig.reports == [
        StatusReport(state="working", app="claude"),
        StatusReport(state="blocked", kind="permission", msg="Run rm?"),
    ]
    assert rig.term.records.root == StatusReport(state="blocked", kind="permission", msg="Run rm?")
    assert rig.roots == rig.reports
    assert rig.replies == []


def test_probe_is_echoed_with_either_terminator_and_before_da1() -> None:
    rig = Rig().feed("\x1b]7501;?\x07\x1b[c\x1b]7501;?\x1b\\")
    assert rig.replies == [b"\x1b]7501;?\x1b\\", b"\x1b[?62;22c", b"\x1b]7501;?\x1b\\"]
    assert rig.text == ""


def test_over_limit_report_is_dropped_whole_without_printing_its_payload() -> None:
    payload = "state=working:x=" + "Z" * 4100
    rig = Rig(cols=80).feed(f"before\x1b]7501;{payload}\x07after")
    assert rig.screen[0] == "beforeafter"
    assert rig.reports == []
    # Exactly at the limit is still accepted: ESC ] + payload + ESC \ = 4096 bytes.
    body = "7501;state=done:x="
    fill = "Q" * (4096 - 2 - 2 - len(body))
    rig.feed(f"\x1b]{body}{fill}\x1b\\")
    assert rig.reports == [StatusReport(state="done")]
    rig.feed(f"\x1b]{body}{fill}Q\x1b\\")
    assert len(rig.reports) == 1


def test_ris_clears_records_and_osc133_a_drops_transient_ones() -> None:
    rig = Rig().feed("\x1b]7501;state=working\x07\x1b]7501;state=done:id=job\x07")
    rig.feed("\x1b]133;A\x07prompt")
    assert rig.term.records.root is None
    assert rig.term.records.get("job") == StatusReport(state="done", id="job")
    assert rig.roots == [StatusReport(state="working"), None]
    rig.feed("\x1b]7501;state=done\x07\x1bcafter")
    assert len(rig.term.records) == 0
    assert rig.roots[-2:] == [StatusReport(state="done"), None]
    assert rig.screen[0] == "after"


# -- 2. queries --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("\x1b[c", b"\x1b[?62;22c"),
        ("\x1b[0c", b"\x1b[?62;22c"),
        ("\x1b[>c", b"\x1b[>1;10;0c"),
        ("\x1b[>0c", b"\x1b[>1;10;0c"),
        ("\x1b[5n", b"\x1b[0n"),
        ("\x1b[>q", b"\x1bP>|panewarden(0.1)\x1b\\"),
        ("\x1b]10;?\x1b\\", b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"),
        ("\x1b]11;?\x07", b"\x1b]11;rgb:0000/0000/0000\x07"),
        ("\x1b]4;1;?\x1b\\", b"\x1b]4;1;rgb:cdcd/0000/0000\x1b\\"),
        ("\x1b]4;231;?\x1b\\", b"\x1b]4;231;rgb:ffff/ffff/ffff\x1b\\"),
        ("\x1b[14t", b"\x1b[4;240;800t"),
        ("\x1b[16t", b"\x1b[6;20;10t"),
        ("\x1b[18t", b"\x1b[8;12;80t"),
        ("\x1bP+q544e;636f6c6f7273\x1b\\", b"\x1bP0+r\x1b\\"),
        ("\x1b[?2026$p", b"\x1b[?2026;2$y"),
        ("\x1b[?9999$p", b"\x1b[?9999;0$y"),
        ("\x1b[?7$p", b"\x1b[?7;1$y"),
        ("\x1b[4$p", b"\x1b[4;2$y"),
        ("\x1b[?u", b""),  # kitty keyboard query: unanswered on purpose
        ("\x1b[?2027$p", b"\x1b[?2027;0$y"),
    ],
)
def test_queries_are_answered(query: str, answer: bytes) -> None:
    rig = Rig(cols=80, rows=12).feed(query)
    assert rig.answered == answer
    assert rig.text == ""


def test_cursor_position_report_is_one_based_and_follows_the_stream() -> None:
    rig = Rig(cols=10, rows=5).feed("\x1b[6n\x1b[3;4Hx\x1b[6n\x1b[5;1H0123456789\x1b[6n")
    assert rig.replies == [b"\x1b[1;1R", b"\x1b[3;5R", b"\x1b[5;10R"]
    assert rig.term.cursor == (4, 9)


def test_decrqm_follows_modes_as_they_change() -> None:
    rig = Rig().feed("\x1b[?2004$p\x1b[?2004h\x1b[?2004$p\x1b[?1049h\x1b[?1049$p")
    rig.feed("\x1b[?1049l\x1b[?1049$p\x1b[4h\x1b[4$p\x1b[?25l\x1b[?25$p")
    assert rig.replies == [
        b"\x1b[?2004;2$y",
        b"\x1b[?2004;1$y",
        b"\x1b[?1049;1$y",
        b"\x1b[?1049;2$y",
        b"\x1b[4;1$y",
        b"\x1b[?25;2$y",
    ]
    assert rig.term.bracketed_paste
    rig.feed("\x1b[?2004l")
    assert not rig.term.bracketed_paste


# -- 3. alternate screen -------------------------------------------------------------


def test_1049_restores_main_text_and_cursor_exactly() -> None:
    rig = Rig(cols=20, rows=4).feed("main one\r\nmain two\x1b[2;3H")
    rig.feed("\x1b[?1049h")
    assert rig.alternate_active()
    assert rig.screen == ["", "", "", ""]
    rig.feed("\x1b[HALT\r\n\x1b[4;10Hbottom")
    assert rig.screen == ["ALT", "", "", "         bottom"]
    rig.feed("\x1b[?1049l")
    assert not rig.alternate_active()
    assert rig.screen == ["main one", "main two", "", ""]
    assert rig.term.cursor == (1, 2)


@pytest.mark.parametrize("mode", ["47", "1047"])
def test_older_alternate_modes_switch_buffers(mode: str) -> None:
    rig = Rig(cols=20, rows=3).feed("keep me")
    rig.feed(f"\x1b[?{mode}h\x1b[Hother\x1b[?{mode}l")
    assert rig.screen[0] == "keep me"
    rig.feed(f"\x1b[?{mode}h")
    # ?47 keeps what the alternate buffer held; ?1047 cleared it on leaving.
    assert rig.screen[0] == ("other" if mode == "47" else "")


def test_alternate_screen_has_no_scrollback() -> None:
    rig = Rig(cols=10, rows=3).feed("a\r\nb\r\nc\r\nd")
    assert rig.term.history_lines() == ["a"]
    rig.feed("\x1b[?1049h" + "".join(f"x{n}\r\n" for n in range(20)))
    # The ghostty backend cannot reach the main screen's scrollback from the alternate one.
    assert rig.term.history_lines() == ([] if EMULATOR == "ghostty" else ["a"])
    rig.feed("\x1b[?1049l")
    assert rig.screen == ["b", "c", "d"]
    assert rig.term.history_lines() == ["a"]


# -- 4. strings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sequence",
    [
        "\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\",
        "\x1bP1;2|payload here\x1b\\",
        "\x1b^privacy message\x1b\\",
        "\x1bXstart of string\x1b\\",
        "\x1b_unterminated by ST but by BEL\x07",
        "\x1b]52;c;aGVsbG8=\x07",
        "\x1b]8;;https://example.com\x1b\\",
    ],
)
def test_string_sequences_are_parsed_and_dropped(sequence: str) -> None:
    rig = Rig().feed(f"Do you trust\x1b[1m{sequence}\x1b[0m this folder?")
    assert rig.screen[0] == "Do you trust this folder?"


def test_a_string_abandoned_by_a_new_escape_keeps_the_next_sequence() -> None:
    rig = Rig().feed("\x1b_Gi=1\x1b[31mred")
    assert rig.screen[0] == "red"
    assert rig.term.cells(0)[0].fg == "red"


# -- 5. SGR oddities -------------------------------------------------------------------


@pytest.mark.parametrize("sequence", ["\x1b[>4;?m", "\x1b[?4m", "\x1b[>4;1m", "\x1b[>4;2m"])
def test_modify_other_keys_is_ignored(sequence: str) -> None:
    rig = Rig().feed(f"a{sequence}b\x1b[>4m")
    assert rig.screen[0] == "ab"
    cell = rig.term.cells(0)[1]
    assert (cell.bold, cell.fg, cell.bg, cell.reverse) == (False, "default", "default", False)


def test_colon_sgr_is_applied_and_its_tail_never_printed() -> None:
    rig = Rig().feed("\x1b[38:2::255:128:0mA\x1b[48:2:1:2:3mB\x1b[4:3mC\x1b[38:5:196mD")
    rig.feed("\x1b[58:2::1:2:3mE\x1b[0;1;7mF")
    assert rig.screen[0] == "ABCDEF"
    cells = rig.term.cells(0)
    assert cells[0].fg == "ff8000"
    assert cells[1].bg == "010203"
    assert cells[3].fg == "ff0000"
    assert cells[4].fg == "ff0000"  # underline colour leaves the foreground alone
    assert (cells[5].bold, cells[5].reverse, cells[5].fg) == (True, True, "default")


def test_semicolon_colours_match_pyte_values() -> None:
    rig = Rig().feed("\x1b[31;44mA\x1b[38;5;21mB\x1b[48;2;1;2;3mC\x1b[92mD\x1b[mE")
    cells = rig.term.cells(0)
    assert (cells[0].fg, cells[0].bg) == ("red", "blue")
    assert cells[1].fg == "0000ff"
    assert cells[2].bg == "010203"
    assert cells[3].fg == "brightgreen"
    assert (cells[4].fg, cells[4].bg) == ("default", "default")


# -- 6. kitty keyboard ---------------------------------------------------------------


def test_kitty_keyboard_push_pop_set_leave_no_text() -> None:
    rig = Rig().feed("x\x1b[>1u\x1b[>31u\x1b[<u\x1b[<2u\x1b[=1;1u\x1b[=5uy")
    assert rig.screen[0] == "xy"
    assert rig.replies == []


# -- 7. zero-width characters ---------------------------------------------------------


def test_text_after_zero_width_characters_is_kept() -> None:
    rig = Rig().feed("●\ufe0e Working\r\n△\ufe0f Permission\r\nA\u200dB and more")
    assert rig.screen[:3] == ["● Working", "△ Permission", "AB and more"]
    assert rig.term.cursor == (2, 11)


def test_combining_marks_attach_to_the_previous_cell() -> None:
    rig = Rig().feed("cafe\u0301!\r\n中\u0301x")
    assert rig.screen[0] == "café!"
    assert rig.term.cells(0)[3].char == "é"
    assert rig.term.cursor == (1, 3)
    assert rig.term.cells(1)[0].char == "中\u0301"


def test_wide_characters_take_two_cells() -> None:
    rig = Rig(cols=5).feed("ab中文")
    assert rig.screen == ["ab中", "文", "", "", "", "", "", ""]
    assert rig.term.cursor == (1, 2)


# -- 8. modes accepted silently ---------------------------------------------------------


def test_focus_sync_and_mouse_modes_are_accepted_silently() -> None:
    modes = [1004, 2026, 1000, 1002, 1003, 1005, 1006, 1, 12]
    rig = Rig().feed("".join(f"\x1b[?{m}h" for m in modes) + "ok")
    assert rig.screen[0] == "ok"
    assert rig.replies == []
    assert rig.term.application_cursor_keys
    rig.feed("".join(f"\x1b[?{m}$p" for m in modes))
    assert rig.replies == [f"\x1b[?{m};1$y".encode() for m in modes]
    rig.feed("".join(f"\x1b[?{m}l" for m in modes) + "\x1b[?2026$p")
    assert rig.replies[-1] == b"\x1b[?2026;2$y"


# -- robustness ------------------------------------------------------------------------

TRICKY = (
    "start \x1b[1;31mred\x1b[0m é中✓\r\n"
    "\x1b]7501;state=working:app=claude\x07"
    "\x1b]7501;?\x1b\\"
    "\x1b[>4;?m\x1b[38:2::1:2:3mrgb\x1b[0m"
    "\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\"
    "\x1bP+q544e\x1b\\"
    "●\ufe0e x\x1b[6n\x1b[>1u\x1b[<u"
    "\x1b[?1049h\x1b[Halt\x1b[?1049l"
    "\x1b]7501;state=done:msg=SGk=\x1b\\end"
).encode()


def test_stream_split_at_every_offset_gives_the_same_result() -> None:
    whole = Rig().feed(TRICKY)
    assert whole.screen[:2] == ["start red é中✓", "rgb● xend"]
    assert whole.reports == [
        StatusReport(state="working", app="claude"),
        StatusReport(state="done", msg="Hi"),
    ]
    assert whole.replies == [b"\x1b]7501;?\x1b\\", b"\x1bP0+r\x1b\\", b"\x1b[2;7R"]
    for cut in range(1, len(TRICKY)):
        split = Rig().feed(TRICKY[:cut]).feed(TRICKY[cut:])
        assert (split.screen, split.reports, split.replies, split.term.cursor) == (
            whole.screen,
            whole.reports,
            whole.replies,
            whole.term.cursor,
        ), cut


def test_byte_at_a_time_matches_one_shot() -> None:
    whole = Rig().feed(TRICKY)
    rig = Rig()
    for index in range(len(TRICKY)):
        rig.feed(TRICKY[index : index + 1])
    assert (rig.screen, rig.reports, rig.replies) == (whole.screen, whole.reports, whole.replies)


@pytest.mark.skipif(EMULATOR != "pyte", reason="about an assertion inside pyte")
def test_an_emulator_error_is_contained_to_its_sequence(caplog: pytest.LogCaptureFixture) -> None:
    # DECOM without margins trips an assertion inside pyte's cursor_to_line.
    rig = Rig()
    with caplog.at_level(logging.WARNING, logger="paneworker.screen.terminal"):
        rig.feed("\x1b[?6h\x1b[3dstill here")
    assert "still here" in rig.text
    assert any("sequence skipped" in r.getMessage() for r in caplog.records)


def test_random_bytes_never_raise_and_later_text_survives() -> None:
    rng = random.Random(7501)
    alphabet = b"\x1b[]P_^X;:?<>=$!+0123456789mhlcnqtuJKH\x07\x18\\\xc3\xa9\xe4\xb8\xad a"
    for _ in range(200):
        rig = Rig(cols=30, rows=4)
        noise = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 200)))
        rig.feed(noise)
        # CAN cancels whatever the noise left open; RIS gives a clean screen.
        rig.feed(b"\x18\x1bcMARKER")
        assert rig.screen[0] == "MARKER", noise


def test_incomplete_utf8_and_escape_at_chunk_end_are_kept() -> None:
    rig = Rig()
    data = "é中\x1b[1mB".encode()
    for cut in range(1, len(data)):
        rig = Rig().feed(data[:cut]).feed(data[cut:])
        assert rig.screen[0] == "é中B"
        assert rig.term.cells(0)[3].bold


def test_overlong_csi_is_swallowed_not_printed() -> None:
    rig = Rig().feed("a\x1b[" + "1;" * 3000).feed("2" * 10 + "mb")
    assert rig.screen[0] == "ab"


def test_c0_controls_inside_csi_are_executed() -> None:
    rig = Rig().feed("abc\x1b[1\rC!")
    assert rig.screen[0] == "a!c"


# -- history, resize, generation ------------------------------------------------------


def test_history_is_oldest_first_and_bounded() -> None:
    rig = Rig(cols=10, rows=2, history=3).feed("\r\n".join(f"l{n}" for n in range(8)))
    assert rig.screen == ["l6", "l7"]
    assert rig.term.history_lines() == ["l3", "l4", "l5"]
    rig.feed("\x1b[3J")
    assert rig.term.history_lines() == []
    assert rig.screen == ["l6", "l7"]


def test_scroll_region_below_the_top_does_not_feed_history() -> None:
    rig = Rig(cols=10, rows=4).feed("title\x1b[2;4r\x1b[4;1H1\r\n2\r\n3")
    assert rig.term.history_lines() == []
    assert rig.screen == ["title", "1", "2", "3"]
    rig.feed("\x1b[r\x1b[4;1H\r\n")
    assert rig.term.history_lines() == ["title"]


def test_resize_keeps_the_cursor_row_and_moves_top_rows_to_history() -> None:
    rig = Rig(cols=10, rows=5).feed("r0\r\nr1\r\nr2\r\nr3 long!")
    rig.term.resize(6, 2)
    if EMULATOR == "ghostty":  # ghostty reflows the main screen
        assert rig.screen == ["r3 lon", "g!"]
        assert rig.term.history_lines() == ["r0", "r1", "r2"]
        rig.term.resize(12, 4)
        assert rig.screen == ["r0", "r1", "r2", "r3 long!"]
        assert rig.term.cursor == (3, 8)
        rig.feed("\x1b[18t")
        assert rig.replies[-1] == b"\x1b[8;4;12t"
        return
    assert (rig.term.cols, rig.term.rows) == (6, 2)
    assert rig.screen == ["r2", "r3 lon"]
    assert rig.term.history_lines() == ["r0", "r1"]
    assert rig.term.cursor == (1, 5)
    rig.term.resize(12, 4)
    assert rig.screen == ["r2", "r3 lon", "", ""]
    rig.feed("\x1b[18t")
    assert rig.replies[-1] == b"\x1b[8;4;12t"


def test_text_generation_moves_on_text_changes_only() -> None:
    rig = Rig()
    start = rig.term.text_generation
    rig.feed("\x1b[c\x1b[6n\x1b[?2004h\x1b]7501;state=idle\x07")
    assert rig.term.text_generation == start
    rig.feed("x")
    after_text = rig.term.text_generation
    assert after_text > start
    rig.feed("\x1b[2J")
    assert rig.term.text_generation > after_text


def test_the_window_title_is_kept_from_osc_0_and_2_never_shown() -> None:
    rig = Rig()
    assert rig.term.title == ""
    rig.feed("\x1b]0;◇  Ready (work)   \x07")
    assert rig.term.title == "◇  Ready (work)   "
    rig.feed("\x1b]2;\u25d0\ufe0e Qwen - work\x1b\\")
    assert rig.term.title == "\u25d0\ufe0e Qwen - work"
    rig.feed("\x1b]1;icon name\x07")  # the icon name is not the title
    assert rig.term.title == "\u25d0\ufe0e Qwen - work"
    # Split across reads; invisible and bidi controls are dropped.
    rig.feed("\x1b]0;✦  Work")
    rig.feed("ing\u202e…\x07")
    assert rig.term.title == "✦  Working…"
    assert rig.text == "" and rig.term.text_generation == 0
    rig.feed("\x1b]2;\x07")
    assert rig.term.title == ""


def test_rep_su_sd_and_tabs() -> None:
    rig = Rig(cols=20, rows=3).feed("ab\x1b[3bc\tT\x1b[Zz")
    assert rig.screen[0] == "abbbbc  z"
    rig.feed("\r\nrow1\r\nrow2\x1b[S")
    assert rig.screen == ["row1", "row2", ""]
    rig.feed("\x1b[T")
    assert rig.screen == ["", "row1", "row2"]


def test_dec_line_drawing_charset() -> None:
    rig = Rig().feed("\x1b(0lqk\x1b(B lqk")
    assert rig.screen[0] == "┌─┐ lqk"


# -- a real PTY ------------------------------------------------------------------------

CHILD = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"hello\x1b]7501;?\x07\x1b[c\x1b[6n")
got = b""
while not got.endswith(b"R"):
    got += os.read(0, 1)
os.write(1, b"\r\nGOT:" + got.replace(b"\x1b", b"^") + b"\r\n")
"""


def test_a_program_on_a_real_pty_reads_the_answers() -> None:
    proc = PtyProcess.spawn([sys.executable, "-c", CHILD], dimensions=(5, 40))
    rig = Rig(cols=40, rows=5)
    sent = 0
    deadline = time.monotonic() + 10
    try:
        while "GOT:" not in rig.text or not rig.text.rstrip().endswith("R"):
            remaining = deadline - time.monotonic()
            assert remaining > 0, rig.screen
            ready, _, _ = select.select([proc.fd], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(proc.fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            rig.feed(chunk)
            for answer in rig.replies[sent:]:
                os.write(proc.fd, answer)
            sent = len(rig.replies)
    finally:
        proc.terminate(force=True)
    assert rig.screen[0] == "hello"
    assert rig.screen[1] == "GOT:^]7501;?^\\^[?62;22c^[1;6R"


def test_huge_and_zero_padded_parameters_are_capped_not_trusted() -> None:
    rig = Rig(cols=10, rows=5).feed("\x1b[5;5H\x1b[00000000002A\x1b[6n")
    rig.feed("\x1b[" + "9" * 5000 + "B\x1b[" + "9" * 5000 + "b\x1b[6n")
    assert rig.replies == [b"\x1b[3;5R", b"\x1b[5;5R"]


def test_a_full_width_scrollback_keeps_every_line_it_promises() -> None:
    # ghostty bounds scrollback in bytes by default (10 kB: a few hundred lines); the
    # backend must size that bound for the promised number of lines.
    rig = Rig(cols=200, rows=10, history=1500)
    lines = [f"\x1b[3{n % 8}m{n:05d} " + "x" * 190 + "\x1b[0m" for n in range(1600)]
    rig.feed("\r\n".join(lines) + "\r\n")
    history = rig.term.history_lines()
    assert len(history) == 1500
    assert history[0].startswith("00091 ") and history[-1].startswith("01590 ")
    rig.term.compact()
    assert rig.term.history_lines() == history
