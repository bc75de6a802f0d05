"""A profile's ``network`` as the profiles file is loaded: the default ``["public"]``,
``"host"`` and ``"none"``, lists of ``host:port`` entries and ``"public"``, and a typed
``config_invalid`` naming the field for anything else."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.egress import PROXY_INSIDE, Destination
from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.pane import network_exposes
from supervisor.profiles.confinement import ConfineSettings
from supervisor.profiles.model import parse_document


def _settings(**fields: Any) -> ConfineSettings:
    doc = parse_document({"profiles": [{"name": "p", "argv": ["sh"], **fields}]})
    return doc.profiles[0].confinement


def test_unset_is_public_with_its_own_network_namespace() -> None:
    settings = _settings()
    assert (settings.network, settings.public, settings.destinations) == ("list", True, ())
    assert settings.entries == ("public",)
    assert settings == ConfineSettings()  # a caller's argv gets the same default
    assert "public unicast addresses" in network_exposes(settings)


def test_host_and_none_and_lists() -> None:
    host = _settings(network="host")
    assert (host.network, host.public) == ("host", False)
    assert "abstract Unix sockets" in network_exposes(host)
    assert _settings(network="none").network == "none"
    mixed = _settings(network=["public", "127.0.0.1:8080", "api.anthropic.com:443"])
    assert mixed.public and mixed.network == "list"
    assert mixed.destinations == (
        Destination("127.0.0.1", 8080, "127.0.0.1"),
        Destination("api.anthropic.com", 443, "127.100.0.1"),
    )
    assert mixed.entries == ("public", "127.0.0.1:8080", "api.anthropic.com:443")
    only = _settings(network=["127.0.0.1:8080"])
    assert not only.public


@pytest.mark.parametrize(
    ("network", "problem"),
    [
        ("public", 'a list: write ["public"]'),
        ("everything", 'must be "host", "none" or a list'),
        ([], "an empty list"),
        (["public", "public"], "listed twice"),
        (["publik"], "must be host:port"),
        (["api.test"], "must be host:port"),
        (["api.test:0"], "the port must be"),
        (["api.test:70000"], "the port must be"),
        (["10.0.0.1:443"], "only an IPv4 loopback address"),
        ([f"{PROXY_INSIDE}:3128"], "HTTP proxy"),
        (["a b:1"], "is not a host name"),
        ([1], "expected `str`"),
    ],
)
def test_a_bad_network_is_config_invalid_naming_the_field(network: Any, problem: str) -> None:
    with pytest.raises(PanewardenError) as raised:
        _settings(network=network)
    assert raised.value.code == ErrorCode.CONFIG_INVALID
    assert "profiles[0].network" in raised.value.message and problem in raised.value.message
