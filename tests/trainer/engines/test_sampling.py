from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from osmosis_trainer.engines import processed_logprobs  # noqa: E402
from osmosis_trainer.engines._sampling import sample_tokens  # noqa: E402


def test_temperature_and_top_p_by_hand() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    # T = 0.5 -> logits 4, 2, 0, -2; softmax masses ~ [0.867, 0.117, 0.016, 0.002].
    # top_p = 0.9: keep 4 (mass before 0) and 2 (mass before 0.867 < 0.9); drop the rest.
    lp = processed_logprobs(logits, torch.tensor([0.5]), torch.tensor([0.9]))
    z = math.log(math.exp(4.0) + math.exp(2.0))
    assert lp[0, 0].item() == pytest.approx(4.0 - z, abs=1e-6)
    assert lp[0, 1].item() == pytest.approx(2.0 - z, abs=1e-6)
    assert lp[0, 2].item() == float("-inf") and lp[0, 3].item() == float("-inf")


def test_identity_at_t1_p1_and_greedy_scored_at_t1() -> None:
    logits = torch.randn(3, 11)
    raw = logits.log_softmax(-1)
    ones = torch.ones(3)
    assert torch.allclose(processed_logprobs(logits, ones, ones), raw)
    assert torch.allclose(processed_logprobs(logits, torch.zeros(3), ones), raw)


def test_seeded_rows_do_not_depend_on_the_batch() -> None:
    lp = torch.randn(4, 50).log_softmax(-1)

    def gen(seed: int) -> torch.Generator:
        g = torch.Generator()
        g.manual_seed(seed)
        return g

    alone = sample_tokens(lp[1:2], [False], [gen(7)], None)
    batched = sample_tokens(lp, [False] * 4, [None, gen(7), None, gen(8)], torch.Generator())
    assert alone[0].item() == batched[1].item()
    greedy = sample_tokens(lp, [True] * 4, [None] * 4, None)
    assert torch.equal(greedy, lp.argmax(-1))


def test_samples_follow_the_distribution_and_never_leave_the_nucleus() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    lp = probs.log().expand(20000, 4).contiguous()
    g = torch.Generator()
    g.manual_seed(0)
    drawn = sample_tokens(lp, [False] * 20000, [None] * 20000, g)
    freq = torch.bincount(drawn, minlength=4).float() / 20000
    assert torch.allclose(freq, probs, atol=0.015)
    assert freq[3].item() == 0.0  # probability zero (outside top_p): never drawn
    nucleus = processed_logprobs(torch.tensor([[3.0, 2.0, -5.0]] * 5000), torch.ones(5000),
                                 torch.full((5000,), 0.7))
    assert set(sample_tokens(nucleus, [False] * 5000, [None] * 5000, g).tolist()) <= {0, 1}
