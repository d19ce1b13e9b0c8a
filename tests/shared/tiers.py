"""How the shared-tier tests build a tier when their subject is not its timeout: by hand
(:func:`patient_tier`), or from a URL, by the settings, under :func:`patient_url_tiers`."""

from __future__ import annotations

from typing import Any, Final

from wm_middleware import RedisTier

__all__ = ["PATIENT", "patient_tier", "patient_url_tiers"]

PATIENT: Final = 2.0
"""``op_timeout`` of a tier on a live server in a test not about timeouts: on a loaded machine a
first connect can take longer than the default 0.1 s, and the tier error that follows would
change what the test asserts (an outcome, an error count, a lease held)."""


def patient_tier(target: object, **kwargs: Any) -> RedisTier:
    """``RedisTier(target, **kwargs)`` with ``op_timeout=PATIENT`` unless one is given."""
    kwargs.setdefault("op_timeout", PATIENT)
    return RedisTier(target, **kwargs)


def patient_url_tiers() -> None:
    """Make every ``RedisTier`` built without an ``op_timeout`` (the settings' tier of a shared
    URL: ``instrument(shared=url)``, ``wrap(..., shared=url)``, ``WM_MIDDLEWARE_SHARED_URL``)
    take ``PATIENT`` in this process, as :func:`patient_tier` does for a tier built by hand.

    For a spawned process of a test; in the test's own process, the ``patient_url_tiers``
    fixture does the same for one test and restores the default after it.
    """
    defaults = RedisTier.__init__.__kwdefaults__
    assert defaults is not None
    assert "op_timeout" in defaults
    defaults["op_timeout"] = PATIENT
