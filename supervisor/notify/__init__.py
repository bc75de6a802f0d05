"""Notifications: webhooks and commands told about pane events (PANEWARDEN_NOTIFY)."""
