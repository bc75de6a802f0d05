"""Fixtures the fault tests borrow: the HTTP service factory of ``tests/service``."""

from tests.service.conftest import services  # noqa: F401  (a fixture, used by name)
