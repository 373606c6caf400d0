"""The trainer benchmark's ablation switches run the library alternative they claim to: peft's
``merge_adapter`` in the engine (never writing the trainer's weights); models keep
transformers' default attention."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from osmosis_trainer.engines._hf import HFEngine  # noqa: E402
from osmosis_trainer.engines._hf_adapter import read_adapter  # noqa: E402
from osmosis_trainer.engines._hf_merge import lora_deltas  # noqa: E402
from osmosis_trainer.models import build_tiny_model, load_model  # noqa: E402
from tests.benchmarks import bench_trainer  # noqa: E402
from tests.trainer.engines._adapters import save_adapter  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.5)


async def test_peft_merge_switch_merges_with_peft_into_the_engines_own_weights(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from peft import PeftModel

    # monkeypatch puts the class back after the test (the switch patches it for a whole process).
    monkeypatch.setattr(HFEngine, "__init__", HFEngine.__init__)
    monkeypatch.setattr(HFEngine, "_serve", HFEngine._serve)
    bench_trainer._switch_off("peft_merge")
    loaded = load_model(str(tiny_dir))
    owner = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    engine = HFEngine(loaded, device="cpu", seed=0, share_weights=True)
    layer = "model.layers.0.self_attn.q_proj"
    try:
        for version, seed in enumerate((1, 2), start=1):
            folder = save_adapter(tiny_dir, tmp_path / f"a{seed}", seed)
            await engine.load_adapter(str(folder), version)
            model = engine.model
            assert isinstance(model, PeftModel)
            q = model.get_submodule(f"base_model.model.{layer}")
            assert q.merged  # peft's merge, not its unmerged layers
            delta = lora_deltas(loaded.model, read_adapter(str(folder)))[f"{layer}.weight"]
            expected = owner[f"{layer}.weight"] + delta  # the second adapter: no trace of the first
            assert torch.allclose(q.base_layer.weight, expected, atol=1e-5), version
        # The trainer's weights were never written: the engine merged into weights of its own.
        assert all(torch.equal(p, owner[n]) for n, p in loaded.model.named_parameters())
    finally:
        await engine.close()


def test_models_keep_transformers_default_attention(tiny_dir: Path) -> None:
    """No attention of our own: the trained model and the engine's copy keep transformers'
    default (SDPA). Our plain-matmul attention, and later eager attention for calls with
    small score matrices, did not beat it by 10 % on the real model (BENCHMARKS.md)."""
    loaded = load_model(str(tiny_dir))
    assert loaded.model.config._attn_implementation == "sdpa"
    engine = HFEngine(loaded, device="cpu", seed=0)
    assert engine.model.config._attn_implementation == "sdpa"


def test_unknown_switch_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown speed path"):
        bench_trainer._switch_off("nope")


@pytest.mark.parametrize(("without", "spins"), [("", True), ("openmp", False)])
def test_openmp_switch_leaves_libgomps_defaults(
    without: str, spins: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_waits: list[bool] = []
    monkeypatch.setattr(bench_trainer, "trainer_openmp", lambda: set_waits.append(True))
    monkeypatch.setattr(bench_trainer, "_model_path", lambda *_: "model")
    monkeypatch.setattr(bench_trainer, "run_ours", lambda *_: bench_trainer.Result(1.0, 1.0, 1.0))
    case = bench_trainer.Case("c", embedded=False)
    spec = {
        "case": bench_trainer.asdict(case),
        "setup": bench_trainer.asdict(bench_trainer.Setup("row", without=without)),
        "root": "/nonexistent",
    }
    bench_trainer._worker(bench_trainer.json.dumps(spec))
    assert set_waits == ([True] if spins else [])
    assert capsys.readouterr().out.startswith("RESULT ")
