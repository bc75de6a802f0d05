"""Wiring the notifier to the service: its file, its event sources, its commands.

The notifier (``supervisor.notify``) knows no room; here it is given the three event
sources as listeners (the registry's status changes, the watchdog's give-ups, the
handoffs' ambiguous receipts), and its commands run as the pane service's managed
helpers, so the subreaper's leftover sweep leaves them alone and every one is reaped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from protocol.errors import PanewardenError
from protocol.messages import PaneStatusFields
from supervisor.config import ServiceConfig
from supervisor.control.records import Receipt
from supervisor.control.service import ControlService
from supervisor.notify.config import NotifyConfig, load_notify
from supervisor.notify.events import PaneRef
from supervisor.notify.notifier import (
    COMMAND_OUTPUT_LIMIT,
    COMMAND_TIMEOUT_S,
    Notifier,
    command_env,
)
from supervisor.panes.pane import Pane

log = logging.getLogger(__name__)


def _ref(pane: Pane) -> PaneRef:
    return PaneRef(pane.name, pane.profile, pane.agent)


def build_notifier(
    config: ServiceConfig, settings: NotifyConfig, control: ControlService
) -> Notifier:
    """The notifier for ``settings`` (``load_notify``), listening to ``control``'s panes."""
    panes = control.panes
    env = command_env(config.environ)

    async def run_command(argv: Sequence[str], body: bytes) -> tuple[int, bool]:
        result = await panes.children.run(
            argv,
            cwd="/",
            env=env,
            timeout_s=COMMAND_TIMEOUT_S,
            output_limit=COMMAND_OUTPUT_LIMIT,
            stdin_data=body,
        )
        return result.returncode, result.timed_out

    notifier = Notifier(settings, config.service_name, run_command)

    def status_changed(pane: Pane, old: PaneStatusFields, new: PaneStatusFields) -> None:
        notifier.status_changed(_ref(pane), old, new)

    def gave_up(pane: Pane) -> None:
        notifier.emit("watchdog_gave_up", _ref(pane), pane.status)

    def ambiguous(pane: Pane, _receipt: Receipt) -> None:
        notifier.emit("receipt_ambiguous", _ref(pane), pane.status)

    panes.registry.on_status_change(status_changed)
    panes.watchdog.on_give_up(gave_up)
    control.handoffs.on_ambiguous(ambiguous)
    return notifier


async def reload_notify(notifier: Notifier, config: ServiceConfig) -> bool:
    """Swap in a freshly loaded notifications file; keep the old one if it is bad."""
    try:
        settings = load_notify(config.notify_path)
    except PanewardenError as exc:
        log.error(
            "notifications reload refused, keeping the old ones: %s",
            exc.message,
            extra={"code": exc.code.value},
        )
        return False
    await notifier.replace(settings)
    log.info("notifications reloaded: %d targets", len(settings.targets))
    return True
