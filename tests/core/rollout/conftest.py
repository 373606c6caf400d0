from __future__ import annotations

import pytest

from osmosis_ai.testing import RecordingEndpoint


@pytest.fixture()
def endpoint() -> RecordingEndpoint:
    return RecordingEndpoint()
