"""How the shared-tier tests build a tier when their subject is not its timeout."""

from __future__ import annotations

from typing import Any, Final

from wm_middleware import RedisTier

__all__ = ["PATIENT", "patient_tier"]

PATIENT: Final = 2.0
"""``op_timeout`` of a tier on a live server in a test not about timeouts: on a loaded machine a
first connect can take longer than the default 0.1 s, and the tier error that follows would
change what the test asserts (an outcome, an error count, a lease held)."""


def patient_tier(target: object, **kwargs: Any) -> RedisTier:
    """``RedisTier(target, **kwargs)`` with ``op_timeout=PATIENT`` unless one is given."""
    kwargs.setdefault("op_timeout", PATIENT)
    return RedisTier(target, **kwargs)
