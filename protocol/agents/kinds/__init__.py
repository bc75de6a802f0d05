"""One module per agent kind, each defining ``SPEC``; listed in ``protocol.agents.table``."""
