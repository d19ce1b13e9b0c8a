"""The interception tests' SDK-generation fixtures, for the configuration tests (the emulator
fixtures are in tests/conftest.py)."""

from tests.interception.conftest import generation, mode  # noqa: F401  (fixtures)
