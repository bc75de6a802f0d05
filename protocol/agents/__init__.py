"""The agent kinds: one :class:`~protocol.agents.spec.AgentSpec` per kind.

``table`` lists every kind once; each kind's facts live in its own module under
``kinds`` (launch rules, dialog recogniser, Enter policy, screen-rules file, reviewer
model flags); ``dialog_kit`` and ``approval_mode`` hold what several kinds share.
"""
