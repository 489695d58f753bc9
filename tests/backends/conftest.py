"""Fixtures of the backend tests."""

from __future__ import annotations

import pytest

from tests.support.backends import install_fake_cupy


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy replaced by :mod:`tests.support.fake_cupy` (see :func:`install_fake_cupy`)."""
    install_fake_cupy(monkeypatch)
