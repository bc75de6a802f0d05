"""The one rule for pane names, shared by every place that accepts or stores one.

Names are 1–32 characters of lowercase letters, digits, ``_`` and ``-``, starting with
a letter or digit. The whole string must match (``fullmatch``): ``$`` in a pattern
would also accept a trailing newline.
"""

from __future__ import annotations

import re

NAME_SCHEMA_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
NAME_RULE = "names match ^[a-z0-9][a-z0-9_-]{0,31}$"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def is_valid_name(name: str) -> bool:
    """True when ``name`` is a valid pane (or profile) name."""
    return _NAME.fullmatch(name) is not None
