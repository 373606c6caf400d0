"""The engine sets' bundles (no cluster needed): one bundle per engine holding its workers."""

from __future__ import annotations

import pytest

from osmosis_trainer.distributed import ClusterPlacement


def test_each_engine_bundle_holds_its_share_of_the_workers() -> None:
    p = ClusterPlacement(engines=2, workers=5, engine_cpus=2, engine_gpus=1, worker_cpus=0.5)
    assert [p.engine_of(j) for j in range(5)] == [0, 1, 0, 1, 0]
    assert [s.workers for s in p.sets] == [(0, 2, 4), (1, 3)]
    assert p.bundles() == [{"CPU": 3.5, "GPU": 1}, {"CPU": 3.0, "GPU": 1}]


def test_cpu_engines_ask_for_no_gpu_and_remote_runs_have_no_workers() -> None:
    p = ClusterPlacement(engines=3, workers=0, engine_cpus=1, worker_cpus=1)
    assert p.bundles() == [{"CPU": 1.0}] * 3


def test_placing_before_the_group_is_ready_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one engine"):
        ClusterPlacement(engines=0, workers=2)
    with pytest.raises(RuntimeError, match=r"ready\(\) must be awaited"):
        ClusterPlacement(engines=1, workers=1).for_worker(0)
