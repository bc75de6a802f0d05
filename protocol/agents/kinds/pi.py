"""Pi (npm ``@mariozechner/pi-coding-agent``): status and turns only; always confined.

Measured on 0.73.1 against the fake model on loopback (tests/realcli): a ``bash`` tool
call runs at once, with no confirmation step of any kind (its README: "No permission
popups. Run in a container"). So there is no dialog to recognise, no flag that turns
one off, and the only guard panewarden can give is the sandbox: a pi profile may not
say ``confine: false``, and a pi pane that cannot be confined does not start.
"""

from __future__ import annotations

from protocol.agents.spec import AgentSpec, LaunchRules

SPEC = AgentSpec(
    name="pi",
    evidence="measured",
    rules="pi",
    dialogs=None,
    enter_after_echo=False,
    submit_sign="turn",
    launch=LaunchRules(
        # Only the package name: a bare "pi" is a substring of too many paths.
        cli_names=("pi-coding-agent",),
        refusal="pi runs every tool without asking",
        confined_only=True,
    ),
    model_flags=None,
    summary="Pi: screen status and turns only (it asks before nothing); always confined",
    home_writable=(".pi/",),
    home_programs=(
        ".pi/agent/settings.json",
        # Its providers' apiKey may be a "!command"; "{}" fails its schema.
        (".pi/agent/models.json", '{"providers": {}}\n'),
        ".pi/agent/AGENTS.md",
        ".pi/agent/extensions/",
        ".pi/agent/skills/",
        ".pi/agent/prompts/",
        # Packages it installed, and the helper binaries it runs.
        ".pi/agent/git/",
        ".pi/agent/bin/",
        # Not hooks/ nor tools/: measured, 0.x warns at start, waiting for a key, when
        # either exists (renamed to extensions/), and runs neither.
    ),
    credentials=(".pi/agent/auth.json",),
    choice_interrupt=b"\x03",  # no cancel key of its choices was measured
)
