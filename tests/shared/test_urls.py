"""Redis URL facts in one home: the schemes the tier accepts, named the same everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import wm_middleware
from wm_middleware import RedisTier
from wm_middleware._redis.urls import SCHEMES, SCHEMES_NAMED, masked
from wm_middleware._settings import Settings

PACKAGE = Path(wm_middleware.__file__).parent


def test_the_schemes_are_spelled_only_in_their_home() -> None:
    spelled = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if '"rediss://"' in path.read_text()
    )
    assert spelled == ["_redis/urls.py"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_settings_and_the_tier_accept_every_scheme(scheme: str) -> None:
    url = f"{scheme}127.0.0.1:6379/0" if scheme != "unix://" else "unix:///tmp/redis.sock"
    assert Settings.resolve({"shared": url}, {}).shared == url
    RedisTier(url).close()


def test_the_settings_and_the_tier_name_the_schemes_alike() -> None:
    with pytest.raises(ValueError, match=f"shared must be a {SCHEMES_NAMED} URL"):
        Settings.resolve({"shared": "http://cache:6379"}, {})
    with pytest.raises(ValueError, match=f"target must be a {SCHEMES_NAMED} URL"):
        RedisTier("http://cache:6379")


def test_the_url_facts_import_neither_redis_nor_re() -> None:
    code = (
        "import sys; import wm_middleware._settings, wm_middleware._redis.urls; "
        "print(sorted(m for m in ('redis', 're', 'typing') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert masked("redis://app:s3cret@cache:6379/0?password=x") == (
        "redis://app:***@cache:6379/0?password=***"
    )


def test_the_settings_show_a_url_as_the_tier_does() -> None:
    """One masking: the settings' errors hide a ``?password=`` too, as the tier's reprs do."""
    url = "http://app:s3cret@cache:6379/0?password=s3cret"
    with pytest.raises(ValueError, match="shared must be") as raised:
        Settings.resolve({"shared": url}, {})
    assert repr(masked(url)) in str(raised.value)
    assert "s3cret" not in str(raised.value)
