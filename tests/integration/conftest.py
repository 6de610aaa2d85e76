"""Fixtures of the integration tests beyond tests/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_devtools import Seeded, _seed


@pytest.fixture
async def seeded(runtime_factory: Any, llm: Any) -> Seeded:
    """Four turns for the devtools: three of Alice's (the second calls a tool), one of Bob's."""
    return await _seed(runtime_factory, llm)
