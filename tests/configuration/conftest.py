"""The interception tests' emulator and SDK-generation fixtures, for the configuration tests."""

from tests.interception.conftest import (  # noqa: F401  (fixtures)
    emulator,
    emulator_server,
    generation,
    mode,
)
