from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from osmosis_ai.config import AlgorithmConfig, SamplingConfig
from osmosis_ai.config._algorithm import ImportanceCorrection
from osmosis_ai.errors import TrainingError
from osmosis_trainer.loop import LoopSettings, NonFiniteLossError, resolve_settings
from osmosis_trainer.loop._batch import TrainSequence
from osmosis_trainer.loop._optim import build_optimizer
from osmosis_trainer.loop._policy import (
    adapter_disabled,
    attach_lora,
    lora_parameters,
    token_logprobs,
)
from osmosis_trainer.loop._update import policy_update
from osmosis_trainer.models import load_model
from tests.trainer.loop._same import assert_same_as_plain


def _settings(**algorithm: Any) -> LoopSettings:
    """The update's settings: ``[algorithm]`` fields given here, the rest defaults."""
    return resolve_settings(
        n_rows=1, pad_id=0, algorithm=AlgorithmConfig(**algorithm),
        sampling=SamplingConfig(max_tokens=512),
    )


def _policy(model_dir: Path, seed: int = 0) -> torch.nn.Module:
    lm = load_model(str(model_dir))
    return attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=seed)


def _sequences(model: torch.nn.Module, n: int = 6, seed: int = 0) -> list[TrainSequence]:
    """Random sequences whose sampler logprobs equal the model's own (an on-policy batch)."""
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for i in range(n):
        ids = torch.randint(3, 300, (12 + 3 * i,), generator=g).tolist()
        mask = [0] * 6 + [1] * (len(ids) - 6)
        seqs.append(TrainSequence(ids, mask, [0.0] * len(ids), advantage=(-1.0) ** i))
    with torch.no_grad():
        for s in seqs:
            m = torch.tensor([s.loss_mask[1:]], dtype=torch.bool)
            lp, _ = token_logprobs(model, torch.tensor([s.token_ids]), m)
            s.sampler_logprobs = [0.0, *lp[0].tolist()]
    return seqs


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_one_step_changes_only_lora_parameters(tiny_model_dir: Path) -> None:
    model = _policy(tiny_model_dir)
    before = _snapshot(model)
    opt = build_optimizer(model, lr=1e-2)
    stats = policy_update(model, opt, _sequences(model), _settings(micro_batch_tokens=40))
    assert stats.micro_batches > 1 and stats.tokens > 0 and stats.grad_norm > 0
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    lora_b = {n for n, _ in lora_parameters(model) if "lora_B" in n}
    assert lora_b, "the model has no LoRA B matrices"
    # B starts at zero, so on the first step only B gets gradient (A's gradient is B^T·... = 0).
    assert lora_b <= changed, f"LoRA B matrices that did not change: {sorted(lora_b - changed)}"
    not_lora = sorted(n for n in changed if "lora_" not in n)
    assert not not_lora, f"base parameters changed: {not_lora}"
    # The second step moves the A matrices too.
    policy_update(model, opt, _sequences(model, seed=1), _settings())
    lora_a = {n for n, _ in lora_parameters(model) if "lora_A" in n}
    assert all(not torch.equal(before[n], dict(model.named_parameters())[n]) for n in lora_a)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_micro_batching_gives_the_full_batch_gradient(tiny_model_dir: Path, loss_type: str) -> None:
    results = []
    for budget in (10_000, 30):
        model = _policy(tiny_model_dir)
        # One SGD step with lr=1 moves each parameter by exactly its gradient.
        opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=1.0)
        settings = _settings(loss_type=loss_type, micro_batch_tokens=budget)
        stats = policy_update(model, opt, _sequences(model), settings)
        results.append((stats.micro_batches, {n: p.detach().clone() for n, p in lora_parameters(model)}))
    (n_full, full), (n_micro, micro) = results
    assert n_full == 1 and n_micro > 2
    for name in full:
        torch.testing.assert_close(full[name], micro[name], rtol=1e-4, atol=1e-6)


def _grads_after(model: torch.nn.Module, seqs: list[TrainSequence], settings: LoopSettings) -> dict[str, torch.Tensor]:
    opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=1.0)
    before = {n: p.detach().clone() for n, p in lora_parameters(model)}
    policy_update(model, opt, seqs, settings)
    return {n: before[n] - p.detach() for n, p in lora_parameters(model)}


def test_importance_sampling_with_shifted_sampler_logprobs(tiny_model_dir: Path) -> None:
    """Sampler logprobs shifted by -log 10 give w = 10 per token: truncated to clip_max, or
    masked to zero; unshifted ones give w = 1."""

    def settings(mode: ImportanceCorrection, clip_max: float = 2.0) -> LoopSettings:
        return _settings(
            micro_batch_tokens=10_000, max_grad_norm=None, is_correction=mode, is_clip_max=clip_max
        )

    model = _policy(tiny_model_dir)
    seqs = _sequences(model)
    ref = _grads_after(model, seqs, settings("token_truncate"))

    shifted = _sequences(_policy(tiny_model_dir))
    for s in shifted:
        s.sampler_logprobs = [lp - math.log(10.0) if m else 0.0 for lp, m in zip(s.sampler_logprobs, s.loss_mask, strict=True)]
    model = _policy(tiny_model_dir)
    opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=0.0)
    stats = policy_update(model, opt, shifted, settings("token_truncate"))
    assert stats.is_ratio_mean == pytest.approx(10.0, rel=1e-4)
    assert stats.is_clipped_frac == 1.0
    assert stats.mismatch_kl == pytest.approx(0.1 + math.log(10.0) - 1.0, rel=1e-4)

    truncated = _grads_after(_policy(tiny_model_dir), shifted, settings("token_truncate"))
    for name, g in ref.items():
        torch.testing.assert_close(truncated[name], 2.0 * g, rtol=1e-4, atol=1e-7)

    masked = _grads_after(_policy(tiny_model_dir), shifted, settings("token_mask"))
    assert all(float(g.abs().max()) == 0.0 for g in masked.values())
    assert any(float(g.abs().max()) > 0.0 for g in ref.values())


def test_kl_is_zero_at_start_and_uses_the_base_model(tiny_model_dir: Path) -> None:
    model = _policy(tiny_model_dir)
    opt = build_optimizer(model, lr=5e-2)
    settings = _settings(beta=0.1)
    first = policy_update(model, opt, _sequences(model), settings)
    assert first.kl == pytest.approx(0.0, abs=1e-9)  # LoRA B = 0: policy == base model
    for _ in range(2):
        policy_update(model, opt, _sequences(model), settings)
    later = policy_update(model, opt, _sequences(model), settings)
    assert later.kl > 0.0
    ids = torch.tensor([_sequences(model)[0].token_ids])
    mask = torch.ones(1, ids.shape[1] - 1, dtype=torch.bool)
    with torch.no_grad():
        policy_lp, _ = token_logprobs(model, ids, mask)
        with adapter_disabled(model):
            base_lp, _ = token_logprobs(model, ids, mask)
        plain = load_model(str(tiny_model_dir)).model
        plain_lp, _ = token_logprobs(plain, ids, mask)
    torch.testing.assert_close(base_lp, plain_lp)
    assert not torch.allclose(policy_lp, base_lp)


def test_token_logprobs_match_a_full_forward(tiny_model_dir: Path) -> None:
    model = _policy(tiny_model_dir)
    ids = torch.tensor([[5, 9, 30, 41, 7, 8], [3, 4, 5, 6, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        lp, ent = token_logprobs(model, ids, mask, temperature=0.7, with_entropy=True)
        full = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float() / 0.7, -1)
        want = full.gather(-1, ids[:, 1:, None]).squeeze(-1) * mask
    torch.testing.assert_close(lp, want, rtol=1e-5, atol=1e-5)
    assert ent is not None and bool((ent[mask] > 0).all()) and bool((ent[~mask] == 0).all())


def test_nan_loss_is_refused_and_parameters_are_kept(tiny_model_dir: Path) -> None:
    model = _policy(tiny_model_dir)
    opt = build_optimizer(model, lr=1e-2)
    seqs = _sequences(model)
    seqs[0].advantage = float("nan")
    before = _snapshot(model)
    with pytest.raises(NonFiniteLossError, match="not applied"):
        policy_update(model, opt, seqs, _settings(micro_batch_tokens=30))
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert all(p.grad is None for _, p in lora_parameters(model))


def test_all_zero_mask_is_an_error(tiny_model_dir: Path) -> None:
    model = _policy(tiny_model_dir)
    seqs = [TrainSequence([1, 2, 3, 4], [0, 0, 0, 0], [0.0] * 4, advantage=1.0)]
    with pytest.raises(TrainingError, match="selects no token"):
        policy_update(model, build_optimizer(model, lr=1e-3), seqs, _settings())


def _group_sequences(model: torch.nn.Module) -> list[TrainSequence]:
    """Two GRPO groups of 3 samples; each group shares a 24-token prompt."""
    g = torch.Generator().manual_seed(3)
    seqs = []
    for group in range(2):
        prompt = torch.randint(3, 300, (24,), generator=g).tolist()
        for k in range(3):
            completion = torch.randint(3, 300, (4 + 3 * k,), generator=g).tolist()
            ids = prompt + completion
            mask = [0] * len(prompt) + [1] * len(completion)
            seqs.append(TrainSequence(ids, mask, [0.0] * len(ids), advantage=k - 1.0, group_id=group))
    return seqs


def test_shared_prompt_prefix_gives_the_same_update(tiny_model_dir: Path) -> None:
    results = []
    for share in (False, True):
        model = _policy(tiny_model_dir)
        for name, p in lora_parameters(model):
            if "lora_B" in name:  # a non-zero adapter, so the prompt's gradient matters
                torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=1.0)
        settings = _settings(share_prompt_prefix=share, is_correction="none", max_grad_norm=None)
        stats = policy_update(model, opt, _group_sequences(model), settings)
        results.append((stats, {n: p.detach().clone() for n, p in lora_parameters(model)}))
    (plain_stats, plain), (shared_stats, shared) = results
    assert plain_stats.micro_batches == shared_stats.micro_batches == 1
    assert shared_stats.loss == pytest.approx(plain_stats.loss, abs=1e-6)
    for name in plain:
        torch.testing.assert_close(shared[name], plain[name], rtol=1e-3, atol=1e-6)


def test_shared_prefix_logprobs_match_the_plain_forward(tiny_model_dir: Path) -> None:
    """Prompts of different lengths (left padding, position ids) and ragged continuations."""
    from osmosis_trainer.loop._batch import collate
    from osmosis_trainer.loop._prefix import PrefixUnit, collate_prefixed

    model = _policy(tiny_model_dir)
    for name, p in lora_parameters(model):
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(5)
    seqs = []
    for group, (p_len, sizes) in enumerate([(14, (3, 6)), (9, (5, 2, 4))]):
        prompt = torch.randint(3, 300, (p_len,), generator=g).tolist()
        for size in sizes:
            comp = torch.randint(3, 300, (size,), generator=g).tolist()
            seqs.append(TrainSequence(prompt + comp, [0] * p_len + [1] * size, [0.0] * (p_len + size), group_id=group))
    units = [PrefixUnit((0, 1), 14), PrefixUnit((2, 3, 4), 9)]
    shared, order = collate_prefixed(seqs, units, pad_id=0)
    plain = collate([seqs[i] for i in order], pad_id=0)
    lp_shared, _ = token_logprobs(model, shared.input_ids, shared.mask, prefix=shared.prefix)
    lp_plain, _ = token_logprobs(model, plain.input_ids, plain.mask)
    assert_same_as_plain(model, (lp_shared, shared.mask), (lp_plain, plain.mask))


def test_tool_and_prompt_tokens_do_not_train(tiny_model_dir: Path) -> None:
    """A multi-turn sequence: prompt (0), completion (1), tool result (0), completion (1)."""
    model = _policy(tiny_model_dir)
    ids = list(range(10, 40))
    mask = [0] * 8 + [1] * 6 + [0] * 10 + [1] * 6
    junk = [0.0] * 8 + [-1.0] * 6 + [-99.0] * 10 + [-1.0] * 6  # off-mask values must not matter
    seq = TrainSequence(ids, mask, junk, advantage=1.0)
    opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=0.0)
    stats = policy_update(model, opt, [seq], _settings(is_correction="token_mask", is_clip_max=1e9))
    assert stats.tokens == 12 and stats.is_clipped_frac == 0.0


def test_dropout_trains_in_train_mode_and_is_left_in_eval_mode(tiny_model_dir: Path) -> None:
    lm = load_model(str(tiny_model_dir))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.5, target_modules="all-linear", seed=0)
    model.eval()
    seqs = _sequences(model)
    seen: list[bool] = []
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts
    dropouts[0].register_forward_hook(lambda mod, *_: seen.append(mod.training))
    policy_update(model, build_optimizer(model, lr=1e-3), seqs, _settings())
    assert seen and all(seen) and not model.training
    # Without dropout the mode is not switched at all (a walk over every module per update).
    plain = _policy(tiny_model_dir)
    plain.eval()
    flips: list[bool] = []
    plain.train = lambda mode=True: flips.append(mode) or plain  # type: ignore[method-assign]
    policy_update(plain, build_optimizer(plain, lr=1e-3), _sequences(plain), _settings())
    assert flips == []


def test_lora_layers_compute_in_the_base_precision_with_fp32_weights(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = load_model(str(tiny_model_dir), dtype="bfloat16")
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    lora = dict(lora_parameters(model))
    assert {p.dtype for p in lora.values()} == {torch.float32}  # peft's master weights
    with torch.no_grad():
        for name, p in lora.items():
            if "lora_B" in name:  # B starts at 0: make the adapter change the outputs
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    seen: list[torch.dtype] = []
    layer = next(m for n, m in model.named_modules() if n.endswith("lora_A.default"))
    hook = layer.register_forward_hook(lambda _m, args, _out: seen.append(args[0].dtype))
    ids = torch.tensor([[5, 9, 30, 41, 7, 8], [3, 4, 5, 6, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    fast, _ = token_logprobs(model, ids, mask)
    hook.remove()
    assert seen == [torch.bfloat16]  # the layer's input was not cast up to fp32
    # peft's own path (fp32 LoRA layers) gives the same logprobs up to bf16 rounding.
    from osmosis_trainer.loop import _policy

    with monkeypatch.context() as patch, torch.no_grad():
        patch.setattr(_policy, "lora_compute", lambda _m: contextlib.nullcontext())
        exact, _ = token_logprobs(model, ids, mask)
    torch.testing.assert_close(fast.detach(), exact, rtol=0.0, atol=0.1)
    fast.sum().backward()
    grads = [p.grad for p in lora.values()]
    assert all(g is not None and g.dtype == torch.float32 for g in grads)
    assert any(bool(g.abs().sum() > 0) for g in grads if g is not None)


def test_an_fp32_base_keeps_its_numerics(tiny_model_dir: Path) -> None:
    from osmosis_trainer.loop._policy import lora_compute

    model = _policy(tiny_model_dir)
    ids = torch.tensor([[5, 9, 30, 41, 7, 8]])
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with lora_compute(model):
            assert not torch.is_autocast_enabled("cpu")
            inside = model(input_ids=ids).logits
    assert torch.equal(plain, inside)



@pytest.mark.parametrize("share", [False, True])
def test_kept_logprobs_are_each_sequences_own_before_the_update(
    tiny_model_dir: Path, share: bool
) -> None:
    model = _policy(tiny_model_dir)
    for name, p in lora_parameters(model):
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(1))
    seqs = _group_sequences(model)
    seqs.append(TrainSequence([7, 8, 9, 10, 11], [0, 0, 1, 1, 1], [0.0] * 5, advantage=1.0,
                              group_id=5))  # a group of one: packed the plain way
    want = {}
    with torch.no_grad():
        for i in (0, 4, 6):
            s = seqs[i]
            m = torch.tensor([s.loss_mask[1:]], dtype=torch.bool)
            lp, _ = token_logprobs(model, torch.tensor([s.token_ids]), m)
            want[i] = [None, *[v if t else None for v, t in zip(lp[0].tolist(), s.loss_mask[1:],
                                                                 strict=True)]]
    opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=1.0)
    stats = policy_update(model, opt, seqs, _settings(share_prompt_prefix=share), keep={0, 4, 6})
    assert set(stats.logprobs) == {0, 4, 6}
    for i, row in stats.logprobs.items():
        assert [v is None for v in row] == [v is None for v in want[i]]
        got = torch.tensor([v for v in row if v is not None])
        torch.testing.assert_close(got, torch.tensor([v for v in want[i] if v is not None]),
                                   rtol=1e-4, atol=1e-4)
