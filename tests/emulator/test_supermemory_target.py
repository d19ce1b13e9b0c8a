"""``supermemory_target``: the real API when ``SUPERMEMORY_API_KEY`` is set, else a seeded
emulator that lives as long as the block."""

from __future__ import annotations

import httpx
import pytest

from wm_middleware.emulator import supermemory_target


def test_without_a_key_it_serves_a_seeded_emulator_for_the_block(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SUPERMEMORY_API_KEY", raising=False)
    memories = ["Alex has a severe peanut allergy.", "Alex prefers Japanese food."]

    with supermemory_target(memories, container_tag="user-alex", latency=0) as (key, url):
        assert key == "sk-example"
        assert url is not None
        found = httpx.post(
            f"{url}/v4/search",
            json={"q": "peanut allergy", "containerTag": "user-alex"},
            headers={"Authorization": f"Bearer {key}"},
        ).json()["results"]
        assert any("peanut allergy" in result["memory"] for result in found)

    assert capsys.readouterr().out == (f"(no SUPERMEMORY_API_KEY: using the emulator at {url})\n")
    with pytest.raises(httpx.ConnectError):  # stopped with the block
        httpx.get(url)


@pytest.mark.parametrize("base_url", [None, "https://api.example.test"])
def test_with_a_key_it_yields_the_real_api_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], base_url: str | None
) -> None:
    monkeypatch.setenv("SUPERMEMORY_API_KEY", "sm-real")
    if base_url is None:
        monkeypatch.delenv("SUPERMEMORY_BASE_URL", raising=False)
    else:
        monkeypatch.setenv("SUPERMEMORY_BASE_URL", base_url)

    with supermemory_target(["never written"], container_tag="user-alex") as target:
        assert target == ("sm-real", base_url)

    assert capsys.readouterr().out == ""
