"""The feed tests run real HTTP services: the service tests' fixtures."""

from tests.service.conftest import module_services, services

__all__ = ["module_services", "services"]
