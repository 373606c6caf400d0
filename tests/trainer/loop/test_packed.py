from __future__ import annotations

from pathlib import Path

import pytest
import torch

from osmosis_trainer.loop._batch import PrefixUnit, TrainSequence, collate
from osmosis_trainer.loop._packed import chunk_tokens, pack_chunks
from osmosis_trainer.loop._policy import attach_lora, lora_parameters, token_logprobs
from osmosis_trainer.loop._prefix import micro_batches
from osmosis_trainer.models import load_model
from tests.trainer.loop._same import assert_same_as_plain


def _groups(spec: list[tuple[int, tuple[int, ...]]], seed: int = 5) -> list[TrainSequence]:
    """One group per ``(prompt length, completion lengths)``; random ids."""
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for group, (p_len, sizes) in enumerate(spec):
        prompt = torch.randint(3, 300, (p_len,), generator=g).tolist()
        for size in sizes:
            comp = torch.randint(3, 300, (size,), generator=g).tolist()
            n = p_len + size
            seqs.append(TrainSequence(prompt + comp, [0] * p_len + [1] * size, [0.0] * n, group_id=group))
    return seqs


def _policy(model_dir: Path) -> torch.nn.Module:
    model = attach_lora(
        load_model(str(model_dir)).model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0
    )
    for name, p in lora_parameters(model):
        if "lora_B" in name:  # a non-zero adapter, so the prompt's gradient matters
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(2))
    return model


def test_pack_chunks_fills_rows_up_to_the_cap_and_leaves_long_groups_out() -> None:
    seqs = _groups([(10, (6, 5, 4)), (12, (3, 3)), (30, (40,)), (8, (2,))])
    units = [PrefixUnit((0, 1, 2), 10), PrefixUnit((3, 4), 12), PrefixUnit((5,), 30), PrefixUnit((6,), 8)]
    rows, left = pack_chunks(seqs, units, row_cap=24)
    assert left == [PrefixUnit((5,), 30)]  # 30 + 40 > 24
    assert all(sum(chunk_tokens(seqs, c) for c in row) <= 24 for row in rows)
    members = sorted(i for row in rows for c in row for i in c.members)
    assert members == [0, 1, 2, 3, 4, 6]
    # the first group (10 + 15 tokens) does not fit one row: two chunks, each with the prompt
    assert sorted(c.members for row in rows for c in row if c.prefix_len == 10) == [(0, 1), (2,)]


def test_packed_logprobs_and_gradients_match_the_plain_forward(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several rows with pads at their ends, chunks of one group in two rows, and a sequence
    that shares its prompt with no other (packed with a one-token head)."""
    import osmosis_trainer.loop._prefix as prefix_module

    monkeypatch.setattr(prefix_module, "PACK_ROW_TOKENS", 24)
    model = _policy(tiny_model_dir)
    seqs = _groups([(14, (3, 6, 8)), (9, (5, 2, 4)), (11, (7, 1))])
    seqs.append(TrainSequence(list(range(20, 33)), [0] * 5 + [1] * 8, [0.0] * 13, group_id=9))
    batches = micro_batches(seqs, token_budget=96, pad_id=0, share_prefix=True)
    assert all(mb.prefix is not None and mb.prefix.packed is not None for mb in batches)
    assert any(mb.prefix is not None and mb.prefix.packed is not None and mb.prefix.packed.ids.shape[0] > 1 for mb in batches)
    assert sorted(i for mb in batches for i in mb.rows) == list(range(len(seqs)))
    for mb in batches:
        plain = collate([seqs[i] for i in mb.rows], pad_id=0)
        lp_packed, _ = token_logprobs(model, mb.input_ids, mb.mask, prefix=mb.prefix)
        lp_plain, _ = token_logprobs(model, plain.input_ids, plain.mask)
        assert_same_as_plain(model, (lp_packed, mb.mask), (lp_plain, plain.mask))
        # position j of a row scores token starts[j] + j of its sequence
        for r, (i, start) in enumerate(zip(mb.rows, mb.starts, strict=True)):
            n = len(seqs[i].token_ids) - start
            assert mb.input_ids[r, :n].tolist() == seqs[i].token_ids[start:]


def test_groups_longer_than_a_packed_row_keep_the_cached_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    import osmosis_trainer.loop._prefix as prefix_module

    monkeypatch.setattr(prefix_module, "PACK_ROW_TOKENS", 24)
    seqs = _groups([(20, (4, 6)), (10, (3, 2))])  # 20 + 6 > 24: the first group is not packed
    batches = micro_batches(seqs, token_budget=256, pad_id=0, share_prefix=True)
    kinds = sorted(
        ("packed" if mb.prefix.packed is not None else "cached") if mb.prefix is not None else "plain"
        for mb in batches
    )
    assert kinds == ["cached", "packed"]
    assert sorted(i for mb in batches for i in mb.rows) == list(range(len(seqs)))


def test_a_member_with_nothing_after_the_prompt_packs(tiny_model_dir: Path) -> None:
    """A sample that trained nothing: its whole sequence is the group's prompt."""
    model = _policy(tiny_model_dir)
    prompt = list(range(40, 52))
    seqs = [
        TrainSequence(prompt, [0] * 12, [0.0] * 12, group_id=0),
        TrainSequence([*prompt, 7, 8, 9], [0] * 12 + [1] * 3, [0.0] * 15, group_id=0),
    ]
    (mb,) = micro_batches(seqs, token_budget=64, pad_id=0, share_prefix=True)
    assert mb.prefix is not None and mb.prefix.packed is not None
    lp, _ = token_logprobs(model, mb.input_ids, mb.mask, prefix=mb.prefix)
    plain = collate(seqs, pad_id=0)
    lp_plain, _ = token_logprobs(model, plain.input_ids, plain.mask)
    order = [mb.rows.index(i) for i in range(2)]
    torch.testing.assert_close(lp[order][mb.mask[order]], lp_plain[plain.mask], rtol=1e-4, atol=1e-5)


def test_packed_gradients_repeat_bit_for_bit(tmp_path: Path) -> None:
    """A chunk's last prompt state feeds every member: its gradient sums duplicates, which
    advanced indexing's backward did in a thread-dependent order (runs drifted apart)."""
    from osmosis_trainer.models import build_tiny_model

    torch.set_num_threads(2)  # the drift needs intra-op threads (the folder's fixture resets it)
    build_tiny_model(tmp_path, hidden_size=128, num_layers=2, num_heads=4)
    model = _policy(tmp_path)
    seqs = _groups([(38, (64, 30, 12, 50)), (38, (64, 8, 40, 64)), (38, (20, 64, 33, 17))])
    grads = []
    for _ in range(6):
        model.zero_grad()
        for mb in micro_batches(seqs, token_budget=256, pad_id=0, share_prefix=True):
            lp, _ = token_logprobs(model, mb.input_ids, mb.mask, prefix=mb.prefix)
            lp.sum().backward()
        grads.append(torch.cat([p.grad.flatten() for _, p in lora_parameters(model) if p.grad is not None]))
    assert all(torch.equal(grads[0], g) for g in grads[1:])


def test_packed_rows_under_eager_attention_match_sdpa(tiny_model_dir: Path) -> None:
    """A model a user loads with eager attention computes packed rows as SDPA does: the
    block mask goes in as an additive bias, which both take as it is (``packed_hidden``)."""
    model = _policy(tiny_model_dir)
    seqs = _groups([(14, (3, 6, 8)), (9, (5, 2, 4))])
    (mb,) = micro_batches(seqs, token_budget=96, pad_id=0, share_prefix=True)
    assert mb.prefix is not None and mb.prefix.packed is not None
    assert model.get_base_model().config._attn_implementation == "sdpa"
    lp_sdpa, _ = token_logprobs(model, mb.input_ids, mb.mask, prefix=mb.prefix)
    model.get_base_model().set_attn_implementation("eager")
    assert model.get_base_model().config._attn_implementation == "eager"
    lp_eager, _ = token_logprobs(model, mb.input_ids, mb.mask, prefix=mb.prefix)
    assert_same_as_plain(model, (lp_eager, mb.mask), (lp_sdpa, mb.mask))
