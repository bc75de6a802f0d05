"""``excess``: what a reviewer's confinement grants beyond its starter's (network,
writable, hide), on the settings the profiles loader builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.lanes.width import excess
from supervisor.profiles.confinement import ConfineSettings, build_confinement


def settings(
    network: str | tuple[str, ...] = "none",
    writable: tuple[str, ...] = (),
    hide: tuple[str, ...] = (),
) -> ConfineSettings:
    return build_confinement("p", True, writable, hide, network)


@pytest.mark.parametrize(
    ("inner", "outer", "wider"),
    [
        ("none", "none", False),
        ("none", ("a.example:443",), False),
        ("none", "host", False),
        (("a.example:443",), "host", False),
        (("a.example:443",), ("a.example:443", "b.example:443"), False),
        ("host", "none", True),
        ("host", ("a.example:443",), True),
        (("a.example:443",), "none", True),
        (("a.example:443", "b.example:443"), ("a.example:443",), True),
        (("a.example:8443",), ("a.example:443",), True),
    ],
)
def test_network_none_within_a_list_within_host(
    inner: str | tuple[str, ...], outer: str | tuple[str, ...], wider: bool
) -> None:
    assert (excess(settings(inner), settings(outer), "/home/u") is not None) is wider


def test_writable_paths_must_be_the_starters_or_below(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    outer = settings(writable=(str(tmp_path / "a"),))
    home = str(tmp_path)
    assert excess(settings(writable=(str(tmp_path / "a" / "b"),)), outer, home) is None
    assert excess(settings(writable=("~/a",)), outer, home) is None
    # Another spelling of the same directory is the same directory.
    assert excess(settings(writable=(str(tmp_path / "link" / "b"),)), outer, home) is None
    reason = excess(settings(writable=(str(tmp_path),)), outer, home)
    assert reason is not None and "writable" in reason
    assert excess(settings(writable=("~/elsewhere",)), settings(), home) is not None


def test_hide_must_keep_the_starters_hidden_and_drop_nothing_more() -> None:
    outer = settings(hide=("~/secrets", "!~/.ssh"))
    home = "/home/u"
    assert excess(settings(hide=("~/secrets", "~/more")), outer, home) is None
    assert excess(settings(hide=("~/secrets", "!~/.ssh")), outer, home) is None
    shown = excess(settings(hide=("~/more",)), outer, home)
    assert shown is not None and "~/secrets" in shown
    dropped = excess(settings(hide=("~/secrets", "!~/.gnupg")), outer, home)
    assert dropped is not None and ".gnupg" in dropped
