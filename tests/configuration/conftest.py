"""The interception tests' SDK-generation fixture, for the configuration tests (the emulator
fixtures and ``mode`` are in tests/conftest.py)."""

from tests.interception.conftest import generation  # noqa: F401  (a fixture)
