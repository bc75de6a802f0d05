"""Durable state: the state directory, the one-supervisor lock, atomic record files."""
