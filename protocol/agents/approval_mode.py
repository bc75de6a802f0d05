"""The approval-mode rule of Gemini CLI and Qwen Code: approvals stay on, by the command line.

Both CLIs (and Qwen's yargs parser in particular) read the approval mode from the
command line first, then from settings files panewarden does not control (user,
project and system ``settings.json``). Qwen Code 0.24.4's own default is ``auto``, where
a model approves the calls it deems safe and no dialog shows; Gemini CLI's settings may
set ``auto_edit``. So a pane of either kind must say ``--approval-mode default`` (or the
read-only ``plan``) on its command line, and every flag that approves tools without a
dialog is refused:

- ``--yolo``, or anything containing ``yolo`` (``--yolo=true``, ``--no-yolo`` too: a
  false positive accepted rather than a spelling missed);
- a short-option cluster containing ``y`` (``-y``, ``-dy``);
- ``--approval-mode`` (also ``--approvalMode``, ``--approval_mode``) with any value but
  ``default`` or ``plan``, or with no value;
- ``--allowed-tools`` (any spelling): the listed tools bypass confirmation.

Pure functions over argument lists, used by both kinds' launch rules; the supervisor
turns findings into its own errors (``config_invalid`` at load time, ``forbidden`` for a
caller's argv).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SAFE_APPROVAL_MODES = ("default", "plan")
_SHORT_CLUSTER = re.compile(r"-[a-z]+")
# Both kinds' rules apply when an argv names either program (they share this rule).
CLI_NAMES = ("gemini", "qwen")
REFUSAL = "auto-approval refused for gemini and qwen"


def _option(arg: str) -> tuple[str, str | None] | None:
    """A long option's name with ``-``/``_`` removed and its ``=value``, or None."""
    folded = arg.casefold()
    if not folded.startswith("--"):
        return None
    name, eq, value = folded[2:].partition("=")
    return name.replace("-", "").replace("_", ""), value if eq else None


def refused_flag(args: Sequence[str]) -> tuple[int, str] | None:
    """The first element of ``args`` that approves tools without a dialog, and why.

    A separate value (``--approval-mode yolo``) is read from the next element of the same
    list; ``args`` should be one list as written (argv, or extra_args).
    """
    for index, arg in enumerate(args):
        folded = arg.casefold()
        if "yolo" in folded:
            return index, "YOLO mode approves every tool call without a dialog"
        if _SHORT_CLUSTER.fullmatch(folded) and "y" in folded:
            return index, "-y is YOLO mode: it approves every tool call without a dialog"
        option = _option(arg)
        if option is None:
            continue
        name, value = option
        if name == "allowedtools":
            return index, "--allowed-tools lets the listed tools run without a dialog"
        if name == "approvalmode":
            if value is None:
                value = args[index + 1].casefold() if index + 1 < len(args) else ""
            if value not in SAFE_APPROVAL_MODES:
                return index, (
                    f"--approval-mode {value or '(missing)'} is refused: only "
                    + " or ".join(SAFE_APPROVAL_MODES)
                    + " keep every dialog"
                )
    return None


def pins_approval_mode(argv: Sequence[str]) -> bool:
    """True when ``argv`` sets ``--approval-mode`` to a value that keeps every dialog."""
    for index, arg in enumerate(argv):
        option = _option(arg)
        if option is None or option[0] != "approvalmode":
            continue
        value = option[1]
        if value is None:
            value = argv[index + 1].casefold() if index + 1 < len(argv) else ""
        if value in SAFE_APPROVAL_MODES:
            return True
    return False


PIN_MISSING = (
    "must pin the approval mode: add '--approval-mode', 'default' to argv "
    "(Qwen Code defaults to 'auto', where a model approves tool calls without a dialog, "
    "and settings files may change either CLI's default)"
)


def missing_pin(argv: Sequence[str]) -> str | None:
    """:data:`PIN_MISSING` unless ``argv`` pins a mode that keeps every dialog."""
    return None if pins_approval_mode(argv) else PIN_MISSING
