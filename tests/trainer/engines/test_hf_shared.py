"""An HF engine whose module copy shares the trainer's frozen base weights, adapters served
through peft's layers (merged serving over shared weights: ``test_hf_merge.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from tests.trainer.engines._adapters import peft_logits, save_adapter  # noqa: E402


async def test_shared_weights_serve_adapters_without_being_written(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    owner = dict(tiny_loaded.model.named_parameters())
    before = {name: p.detach().clone() for name, p in owner.items()}
    engine = HFEngine(tiny_loaded, device="cpu", seed=0, share_weights=True, merge_adapters=False)
    req = GenerationRequest(
        messages=[{"role": "user", "content": "What is 2 + 3?"}], temperature=0.0, max_tokens=6
    )
    try:
        # The copy costs no weight memory: its parameters are the owner's tensors.
        assert all(p is owner[n] for n, p in engine.model.named_parameters())
        # The second adapter is copied into the peft layers in place, the third rebuilds them.
        for version, (seed, lora) in enumerate(((1, {}), (2, {}), (3, {"r": 2})), start=1):
            folder = save_adapter(tiny_model_dir, tmp_path / f"a{seed}", seed, **lora)
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(req)
            prompt, completion = res.prompt_token_ids or [], res.completion_token_ids or []
            ids = torch.tensor([prompt + completion])
            logits = peft_logits(tiny_model_dir, folder, ids)[0].float()
            steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)].log_softmax(-1)
            fresh = steps.gather(1, torch.tensor(completion)[:, None])[:, 0]
            assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4), version
        served = dict(engine.model.get_base_model().named_parameters())
        adapted = "model.layers.0.self_attn.q_proj.base_layer.weight"
        assert served[adapted] is owner[adapted.replace(".base_layer", "")]  # still shared
        assert all(torch.equal(p, before[n]) for n, p in owner.items())
    finally:
        await engine.close()
