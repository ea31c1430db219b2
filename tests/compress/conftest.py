"""Fixtures of the compressor tests (helpers live in compress_inputs.py)."""
from __future__ import annotations

import pytest
import torch

from compress_inputs import lora_like


@pytest.fixture
def grads() -> dict[str, torch.Tensor]:
    return lora_like()
