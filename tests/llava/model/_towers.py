"""Fixtures for the vision-tower tests (import them into a test module)."""

from __future__ import annotations

import pytest


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make hub lookups fail at once (as with no network, minus the retries), like ``HF_HUB_OFFLINE=1``."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
