"""Two tenants of one emulator, and an embedder that puts every query at one point."""

from __future__ import annotations

from collections.abc import Sequence

from wm_middleware.emulator import EmulatorServer

TAG = "user-1"
KEYS = ("sk-a", "sk-b")
MEMORIES = ("User drinks green tea every morning", "User lives in Lyon")


def same_vector(texts: Sequence[str]) -> list[list[float]]:
    """Every text is one point: any two queries are as near as can be."""
    return [[1.0, 0.0] for _ in texts]


def seed_tenants(emulator: EmulatorServer) -> EmulatorServer:
    """:data:`MEMORIES` for each of :data:`KEYS`, under :data:`TAG`."""
    for key in KEYS:
        emulator.seed(key, MEMORIES, container_tag=TAG)
    return emulator
