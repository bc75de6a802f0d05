"""Screen status rules: an agent's state read off its screen, from versioned data files.

A pane whose program sends no OSC 7501 root record gets its agent state from the
screen (docs/design.md §4). The rules for each agent kind are data, not code:
``paneworker/status/rules/<agent>.json`` (bundled), optionally replaced by an operator's
file of the same name in an override directory when that file's ``version`` is
newer than or equal to the bundled one.

File format::

    {"agent": "opencode", "version": 3, "startup_quiet_s": 0, "rules": [
        {"id": "...", "state": "working|idle|blocked",
         "kind": "permission|question|auth",      # blocked only, and required there
         "on": "screen|title",                    # default "screen"
         "all": ["..."], "any": ["..."], "none": ["..."],
         "region_lines": 8, "regex": "...", "note": "where the rule comes from"}]}

Matching: for a screen rule the *region* is the bottom ``region_lines`` non-empty
lines of the visible screen, lower-cased and joined with ``\\n``; for a title rule it
is the window title (OSC 0/2), stripped and lower-cased. A rule matches when every
``all`` substring is in the region, at least one ``any`` substring is (if ``any`` is
given), no ``none`` substring is, and ``regex`` (if given; ``re.MULTILINE``, searched in
the same lower-cased region) finds a match. Substrings must be written lower-case.
Within each kind of rule the first match wins; no match is ``unknown``.

Screen and title are then combined (:func:`combine`), so that a stale title never
reads ``idle`` over a dialog (Gemini CLI keeps ``◇  Ready`` in its title while its
folder-trust and sign-in screens are up): a blocked screen wins; then a blocked or
working title; then a working screen; ``idle`` needs the screen to show the idle
prompt — a title alone never makes a pane idle. Nothing matched is ``unknown``: a
screen is never guessed idle.

A rule needs at least one positive condition (``all``, ``any`` or ``regex``): a rule
made only of ``none`` would match almost any screen.

``startup_quiet_s`` (default 0, at most ``MAX_STARTUP_QUIET_S``): before the first client
input, ``idle`` is applied only once the screen and title have not changed for that long.
Gemini CLI draws its input box for a moment before its folder-trust prompt or its real
first frame; that provisional idle must not reach a client.

``idle_quiet_s`` (default 0, the same bound): the same after the first input, so a turn
ends only once its idle screen stood still that long. Aider clears its "Waiting for"
spinner before it draws the reply, leaving its prompt (with the submitted text) under
its rule: its idle screen, for 20 ms here, longer on a loaded machine.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from protocol.agents.table import GENERIC, SPECS
from protocol.safe_files import FileReadError, read_regular_file

# An override is a small JSON file; anything larger is refused, not read.
RULES_FILE_LIMIT_BYTES = 1 << 20

log = logging.getLogger(__name__)

RuleState = Literal["working", "idle", "blocked"]
RuleKind = Literal["permission", "question", "auth"]
RuleTarget = Literal["screen", "title"]
DecidedState = Literal["working", "idle", "blocked", "unknown"]

DEFAULT_REGION_LINES = 8
MAX_REGION_LINES = 1000
MAX_RULES_BYTES = 256 * 1024
MAX_RULES = 256
MAX_STARTUP_QUIET_S = 10.0
# Agent kinds name files: keep them to a safe, path-free shape.
_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class RulesError(ValueError):
    """A rules file that cannot be used (bad JSON, bad field, bad regex, wrong agent)."""


class _RuleSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str
    state: RuleState
    kind: RuleKind | None = None
    on: RuleTarget = "screen"
    all: tuple[str, ...] = ()
    any: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    region_lines: int = DEFAULT_REGION_LINES
    regex: str | None = None
    note: str = ""


class _RulesFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    agent: str
    version: int
    rules: tuple[_RuleSpec, ...]
    startup_quiet_s: float = 0.0
    idle_quiet_s: float = 0.0


@dataclass(frozen=True)
class Rule:
    """One compiled rule; see the module docstring for the matching semantics."""

    id: str
    state: RuleState
    kind: RuleKind | None
    all: tuple[str, ...]
    any: tuple[str, ...]
    none: tuple[str, ...]
    region_lines: int
    regex: re.Pattern[str] | None
    on: RuleTarget = "screen"

    def matches(self, region: str) -> bool:
        """True when the (lower-cased) region satisfies every condition of the rule."""
        if not all(needle in region for needle in self.all):
            return False
        if self.any and not any(needle in region for needle in self.any):
            return False
        if any(needle in region for needle in self.none):
            return False
        return self.regex is None or self.regex.search(region) is not None


@dataclass(frozen=True)
class RuleSet:
    """An agent kind's ordered rules, with the version and where they were read from."""

    agent: str
    version: int
    rules: tuple[Rule, ...]
    source: str
    startup_quiet_s: float = 0.0
    idle_quiet_s: float = 0.0


@dataclass(frozen=True)
class Decision:
    """What the rules made of a screen: the state, the blocked kind, the rule that won
    and which of the screen and the window title decided it."""

    state: DecidedState
    kind: RuleKind | None = None
    rule_id: str | None = None
    source: RuleTarget = "screen"


UNKNOWN = Decision("unknown")


def region_text(lines: Sequence[str], region_lines: int) -> str:
    """The bottom ``region_lines`` non-empty lines, lower-cased, joined with newlines."""
    picked: list[str] = []
    for line in reversed(lines):
        if line.strip():
            picked.append(line)
            if len(picked) == region_lines:
                break
    picked.reverse()
    return "\n".join(picked).lower()


def classify(ruleset: RuleSet, lines: Sequence[str], title: str = "") -> Decision:
    """Apply ``ruleset`` to the visible screen ``lines`` and the window ``title``.

    Each side's first matching rule decides that side (else unknown); :func:`combine`
    makes one decision of the two.
    """
    regions: dict[int, str] = {}
    screen = UNKNOWN
    for rule in ruleset.rules:
        if rule.on != "screen":
            continue
        region = regions.get(rule.region_lines)
        if region is None:
            region = regions[rule.region_lines] = region_text(lines, rule.region_lines)
        if rule.matches(region):
            screen = Decision(rule.state, rule.kind, rule.id)
            break
    heading = UNKNOWN
    shown = title.strip().lower()
    if shown:
        for rule in ruleset.rules:
            if rule.on == "title" and rule.matches(shown):
                heading = Decision(rule.state, rule.kind, rule.id, "title")
                break
    return combine(screen, heading)


def combine(screen: Decision, title: Decision) -> Decision:
    """One decision from the screen's and the title's (see the module docstring).

    The order: a blocked screen (it shows the dialog and its kind); a blocked title (a
    dialog the screen rules do not know is still a dialog); a working title, then a
    working screen (an idle prompt stays visible while some agents work); idle only
    when the screen shows it, reported as decided by the title when the title agrees.
    """
    if screen.state == "blocked":
        return screen
    if title.state in ("blocked", "working"):
        return title
    if screen.state == "working":
        return screen
    if screen.state == "idle":
        return title if title.state == "idle" else screen
    return UNKNOWN


# ---------------------------------------------------------------- loading


def parse_rules(data: bytes, *, agent: str, source: str) -> RuleSet:
    """Decode and check one rules file for ``agent``.

    Raises:
        RulesError: the file is not a valid rules file for ``agent``.
    """
    if len(data) > MAX_RULES_BYTES:
        raise RulesError(f"{source}: larger than {MAX_RULES_BYTES} bytes")
    try:
        spec = msgspec.json.decode(data, type=_RulesFile)
    except msgspec.MsgspecError as exc:
        raise RulesError(f"{source}: {exc}") from exc
    if spec.agent != agent:
        raise RulesError(f"{source}: rules are for agent {spec.agent!r}, not {agent!r}")
    if spec.version < 1:
        raise RulesError(f"{source}: version must be at least 1")
    if len(spec.rules) > MAX_RULES:
        raise RulesError(f"{source}: more than {MAX_RULES} rules")
    if not 0 <= spec.startup_quiet_s <= MAX_STARTUP_QUIET_S:
        raise RulesError(f"{source}: startup_quiet_s must be 0..{MAX_STARTUP_QUIET_S:g}")
    if not 0 <= spec.idle_quiet_s <= MAX_STARTUP_QUIET_S:
        raise RulesError(f"{source}: idle_quiet_s must be 0..{MAX_STARTUP_QUIET_S:g}")
    seen: set[str] = set()
    rules: list[Rule] = []
    for rule in spec.rules:
        if rule.id in seen:
            raise RulesError(f"{source}: duplicate rule id {rule.id!r}")
        seen.add(rule.id)
        rules.append(_compile(rule, source))
    return RuleSet(
        agent=agent,
        version=spec.version,
        rules=tuple(rules),
        source=source,
        startup_quiet_s=spec.startup_quiet_s,
        idle_quiet_s=spec.idle_quiet_s,
    )


def _compile(spec: _RuleSpec, source: str) -> Rule:
    where = f"{source}: rule {spec.id!r}"
    if not spec.id:
        raise RulesError(f"{source}: a rule has an empty id")
    if (spec.state == "blocked") != (spec.kind is not None):
        raise RulesError(f"{where}: 'kind' is required with state blocked and only there")
    for needle in (*spec.all, *spec.any, *spec.none):
        if not needle:
            raise RulesError(f"{where}: empty substring")
        if needle != needle.lower():
            # The region is lower-cased: an upper-case needle could never match.
            raise RulesError(f"{where}: substring {needle!r} is not lower-case")
    if not (spec.all or spec.any or spec.regex):
        raise RulesError(f"{where}: needs 'all', 'any' or 'regex'")
    if not 1 <= spec.region_lines <= MAX_REGION_LINES:
        raise RulesError(f"{where}: region_lines must be 1..{MAX_REGION_LINES}")
    pattern: re.Pattern[str] | None = None
    if spec.regex is not None:
        try:
            pattern = re.compile(spec.regex, re.MULTILINE)
        except re.error as exc:
            raise RulesError(f"{where}: bad regex: {exc}") from exc
    return Rule(
        id=spec.id,
        state=spec.state,
        kind=spec.kind,
        on=spec.on,
        all=spec.all,
        any=spec.any,
        none=spec.none,
        region_lines=spec.region_lines,
        regex=pattern,
    )


def bundled_rules(agent: str) -> RuleSet:
    """The rules shipped for ``agent``: the file its spec names. A name that is no agent
    kind (never one a pane boots with) gets ``generic``'s.

    Raises:
        RulesError: the kind's bundled file is missing or broken (a packaging bug, caught
            by the tests over the kind table).
    """
    spec = SPECS.get(agent)
    return _bundled(spec.rules if spec is not None else GENERIC)


@functools.lru_cache(maxsize=64)
def _bundled(name: str) -> RuleSet:
    # Parsed once per process: package data never changes under a running process, a
    # RuleSet is immutable, and the worker template parses every file before it forks,
    # so a forked worker shares them instead of parsing (and copying pages) again.
    resource = resources.files("paneworker.status").joinpath("rules", f"{name}.json")
    if not _AGENT_NAME.match(name) or not resource.is_file():
        raise RulesError(f"no bundled screen rules {name}.json")
    return parse_rules(resource.read_bytes(), agent=name, source=f"bundled {name}.json")


def load_rules(agent: str, override_dir: Path | None = None) -> RuleSet:
    """The rules for ``agent``: the bundled file, or ``override_dir/<agent>.json``.

    The override replaces the bundled rules when it is valid and its ``version`` is
    newer than or equal to the bundled one; otherwise it is logged and ignored, so a
    bad operator file never leaves a pane without rules.

    Raises:
        RulesError: a bundled file is broken.
    """
    bundled = bundled_rules(agent)
    if override_dir is None or not _AGENT_NAME.match(agent):
        return bundled
    path = override_dir / f"{agent}.json"
    try:
        data = read_regular_file(path, limit_bytes=RULES_FILE_LIMIT_BYTES)
    except FileReadError as exc:
        if not exc.missing:
            log.warning(
                "screen rules override %s unreadable (%s); using the bundled rules",
                path,
                exc.reason,
            )
        return bundled
    try:
        override = parse_rules(data, agent=agent, source=str(path))
    except RulesError as exc:
        log.warning("screen rules override refused: %s; using the bundled rules", exc)
        return bundled
    return prefer(bundled, override)


def prefer(bundled: RuleSet, override: RuleSet) -> RuleSet:
    """The override unless it is older than bundled rules for the same kind (then logged)."""
    if bundled.agent != override.agent:
        # A name that is no agent kind (it got generic's): the override is all there is.
        return override
    if override.version < bundled.version:
        log.warning(
            "screen rules override %s is version %d, older than the bundled %d; ignored",
            override.source,
            override.version,
            bundled.version,
        )
        return bundled
    return override
