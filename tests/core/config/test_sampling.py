"""``[sampling]`` is the one description of sampling: the chat parameters derive from it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from osmosis_ai.config import SamplingConfig


def test_chat_params_round_trip() -> None:
    s = SamplingConfig(rollout_temperature=0.6, rollout_top_p=0.9, max_tokens=32)
    assert s.as_params() == {"temperature": 0.6, "top_p": 0.9, "max_tokens": 32}
    assert SamplingConfig.from_params(s.as_params()) == s


def test_absent_params_take_the_section_defaults() -> None:
    assert SamplingConfig.from_params({}) == SamplingConfig()
    assert SamplingConfig.from_params({"temperature": 0, "max_tokens": None}) == SamplingConfig(
        rollout_temperature=0.0
    )


def test_bad_params_are_refused() -> None:
    with pytest.raises(ValidationError, match="rollout_top_p"):
        SamplingConfig.from_params({"top_p": 1.5})
    with pytest.raises(ValidationError, match="extra"):
        SamplingConfig.from_params({"seed": 3})
