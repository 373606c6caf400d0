"""``lazy_attributes``: a package's names imported on first use, kept after, unknown ones refused."""

from __future__ import annotations

import sys
import types

import pytest

from osmosis_ai._lazy import lazy_attributes


def test_a_name_is_imported_on_first_use_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("pkg_under_test")
    monkeypatch.setitem(sys.modules, "pkg_under_test", package)
    hook = lazy_attributes("pkg_under_test", {"dumps": "json"})

    import json

    assert hook("dumps") is json.dumps
    assert package.__dict__["dumps"] is json.dumps  # later lookups never reach the hook
    with pytest.raises(AttributeError, match="'pkg_under_test' has no attribute 'loads'"):
        hook("loads")


def test_the_packages_that_use_it_load_their_names() -> None:
    import osmosis_ai
    import osmosis_ai.rollout.backend as backend

    assert osmosis_ai.osmosis_reward.__name__ == "osmosis_reward"
    assert backend.LocalBackend.__name__ == "LocalBackend"
    with pytest.raises(AttributeError):
        _ = osmosis_ai.not_a_name
