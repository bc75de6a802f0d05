"""Over real HTTP: each client lists only the tools its scopes and tool groups allow, and a
tool outside its groups is refused, not just hidden."""

from __future__ import annotations

from typing import Any

from tests.service.conftest import ServiceFactory, call, connect, digest, new_token, run

ALL_SCOPES = ["read", "input", "dialog", "lifecycle", "control", "admin"]


async def _tool_names(url: str, token: str) -> set[str]:
    async with connect(url, token) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


async def _call(url: str, token: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    async with connect(url, token) as client:
        return await call(client, tool, args)


def test_tool_list_follows_scopes_and_groups(services: ServiceFactory) -> None:
    tokens = {name: new_token() for name in ("everything", "panes", "reader")}
    clients = [
        {"name": "everything", "token_sha256": digest(tokens["everything"]), "scopes": ALL_SCOPES},
        {
            "name": "panes",
            "token_sha256": digest(tokens["panes"]),
            "scopes": ALL_SCOPES,
            "tool_groups": ["panes"],
        },
        {"name": "reader", "token_sha256": digest(tokens["reader"]), "scopes": ["read"]},
    ]
    service = services.start(token=None, clients=clients, audit=True)
    everything = run(_tool_names(service.url, tokens["everything"]))
    panes = run(_tool_names(service.url, tokens["panes"]))
    reader = run(_tool_names(service.url, tokens["reader"]))
    assert {"start_pane", "controller_acquire", "reviewer_start", "service_status"} <= everything
    assert "start_pane" in panes and "send_input" in panes
    assert not panes & {"controller_acquire", "relay", "reviewer_start", "service_status"}
    assert {"get_status", "list_panes", "controller_list", "service_status"} <= reader
    assert not reader & {"start_pane", "send_input", "controller_acquire", "reviewer_start"}
    # Hidden is also refused: the pane-only client cannot call a coordination tool.
    refused = run(_call(service.url, tokens["panes"], "service_status", {}))
    assert refused["error"]["code"] == "forbidden", refused
    assert "error" not in run(_call(service.url, tokens["everything"], "service_status", {}))
