"""The card's cost section (reslab.assess.cost): exact parameter counts and memory ratios, speed
figures that are consistent with each other (never compared against a clock), and one clear line
for bad input. Tiny models (width 32, context 16), 2 timed steps, 1 round."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from reslab.assess.cost import (Trainee, measure_cost, round_order, same_round_ratios, saved_bytes, time_rounds,
                                train_step)
from reslab.assess.render import speed_ratio
from reslab.config import ModelConfig
from reslab.errors import ReslabError
from reslab.model.gpt import GPT
from reslab.model.prores import prores_alpha

BATCH = 4
TINY = dict(design="pre-ln", vocab_size=65, n_layer=2, n_head=2, n_embd=32, block_size=16, dropout=0.0)


def tiny(**kw) -> dict:
    return dataclasses.asdict(ModelConfig(**{**TINY, **kw}))


def measure(models, baseline="pre-ln", **kw) -> dict:
    return measure_cost(models, baseline, batch_size=BATCH, **{"steps": 2, "rounds": 1, "warmup": 0, **kw})


@pytest.fixture(scope="module")
def card() -> dict:
    # sandwich-ln first: a ratio taken to the first model instead of the named baseline shows
    return measure({"sandwich-ln": tiny(design="sandwich-ln"), "pre-ln": tiny(), "again": tiny(),
                    "L1": tiny(n_layer=1), "L4": tiny(n_layer=4)})


def test_parameters_are_the_models_exact_counts(card):
    rows = card["rows"]
    # pre-ln by hand (V 65, C 32, T 16, L 2, biases, tied head): embeddings V*C + T*C; each layer two
    # LayerNorms (2C each), qkv 3C*C + 3C, attention out C*C + C, MLP up 4C*C + 4C, down 4C*C + C;
    # the final LayerNorm 2C
    C, layer = 32, 2 * 64 + (3 * 32 * 32 + 96) + (32 * 32 + 32) + (4 * 32 * 32 + 128) + (4 * 32 * 32 + 32)
    assert rows["pre-ln"]["params"] == 65 * C + 16 * C + 2 * layer + 2 * C == 28064
    assert rows["pre-ln"]["params_non_emb"] == 2 * layer + 2 * C
    # sandwich-ln norms each branch's output as well: more parameters, the count the model gives
    sandwich = GPT(ModelConfig(**{**TINY, "design": "sandwich-ln"})).param_counts()
    assert rows["sandwich-ln"]["params"] == sandwich["total"] > rows["pre-ln"]["params"]
    assert rows["sandwich-ln"]["params_non_emb"] == sandwich["non_embedding"]
    assert rows["sandwich-ln"]["ratios"]["params"] == sandwich["total"] / 28064


def test_a_design_against_itself_is_exactly_one(card):
    for label in ("pre-ln", "again"):
        ratios = card["rows"][label]["ratios"]
        assert ratios["params"] == 1.0 and ratios["saved_bytes"] == 1.0, label
    assert card["rows"]["pre-ln"]["ratios"]["tokens_per_s"] == 1.0  # the baseline's own time over itself
    assert card["rows"]["again"]["saved_bytes"] == card["rows"]["pre-ln"]["saved_bytes"]


def test_saved_bytes_grow_by_one_equal_part_per_layer(card):
    s = {label: card["rows"][label]["saved_bytes"] for label in ("L1", "pre-ln", "L4")}
    assert s["L1"] < s["pre-ln"] < s["L4"]
    # every layer of a pre-ln stack saves the same tensors: the per-layer part of 4 layers is twice 2's
    assert s["L4"] - s["pre-ln"] == 2 * (s["pre-ln"] - s["L1"])
    assert card["rows"]["L4"]["ratios"]["saved_bytes"] == s["L4"] / s["pre-ln"]


def test_speed_figures_are_positive_and_agree_with_each_other(card):
    base = card["rows"]["pre-ln"]
    for label, row in card["rows"].items():
        assert math.isfinite(row["tokens_per_s"]) and row["tokens_per_s"] > 0, label
        assert row["step_ms"] > 0
        assert row["tokens_per_s"] == pytest.approx(BATCH * 16 / (row["step_ms"] / 1e3), rel=1e-12)
        assert row["ratios"]["tokens_per_s"] == pytest.approx(row["tokens_per_s"] / base["tokens_per_s"], rel=1e-12)
        assert "peak_bytes" not in row  # CUDA only
    assert (card["baseline"], card["device"], card["batch_size"], card["block_size"]) == ("pre-ln", "cpu", BATCH, 16)
    assert card["threads"] >= 1 and "pre-ln" in card["method"]
    assert json.loads(json.dumps(card)) == card  # plain JSON: the card stores it as it is


def test_saved_bytes_count_each_storage_once():
    class Square(torch.nn.Module):  # embedding, then h * h: saves the ids once and h (twice, one storage)
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 8)

        def forward(self, idx, targets):
            h = self.emb(idx)
            return None, (h * h).mean()

    idx = torch.zeros(3, 5, dtype=torch.long)
    assert saved_bytes(Square(), idx, idx) == 3 * 5 * 8 + 3 * 5 * 8 * 4  # int64 ids + float32 h


def test_configs_as_objects_threads_restored():
    threads = torch.get_num_threads()
    objects = measure({"pre-ln": ModelConfig(**TINY), "post-ln": ModelConfig(**{**TINY, "design": "post-ln"})},
                      threads=1)
    dicts = measure({"pre-ln": tiny(), "post-ln": tiny(design="post-ln")})
    assert torch.get_num_threads() == threads and objects["threads"] == 1
    for label in ("pre-ln", "post-ln"):
        for key in ("params", "params_non_emb", "saved_bytes"):
            assert objects["rows"][label][key] == dicts["rows"][label][key], (label, key)


def test_train_step_advances_the_step_as_the_loop_does():
    model = GPT(ModelConfig(**{**TINY, "prores": "linear", "prores_warmup": 10}))
    t = Trainee.of(model)
    x = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        fb, full, cpu = train_step(t, x, x)
        assert 0 < fb <= full and cpu >= 0
    assert t.step == 2 and model.prores_step == 2
    assert model.prores_alphas() == [prores_alpha("linear", layer, 2, 2, 10) for layer in (1, 2)]
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none)


def test_time_rounds_warms_once_and_rotates():
    assert round_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert round_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert [round_order(["a", "b", "c"], r)[0] for r in range(3)] == ["a", "b", "c"]  # each goes first once
    assert round_order([], 3) == []
    t = Trainee.of(GPT(ModelConfig(**TINY)))
    x = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(0))
    done = []
    time_rounds([t], x, x, steps=2, rounds=2, warmup=1, after_round=done.append)
    assert done == [0, 1] and t.step == 1 + 2 * 2  # one warm-up step in all, then 2 timed per round
    assert len(t.full) == len(t.fwd_bwd) == len(t.cpu) == 4 and len(t.round_medians) == 2


@pytest.mark.parametrize("models, baseline, kw, says", [
    ({}, "pre-ln", {}, "no models to measure"),
    ({"pre-ln": tiny()}, "pre-LN", {}, "baseline 'pre-LN' is not one of the models ('pre-ln')"),
    ({"pre-ln": tiny()}, "pre-ln", {"steps": 0}, "steps must be a whole number >= 1, got 0"),
    ({"pre-ln": tiny()}, "pre-ln", {"rounds": 0}, "rounds must be a whole number >= 1, got 0"),
    ({"pre-ln": tiny()}, "pre-ln", {"warmup": -1}, "warmup must be a whole number >= 0, got -1"),
    ({"pre-ln": tiny()}, "pre-ln", {"batch_size": 0}, "batch_size must be a whole number >= 1, got 0"),
    ({"pre-ln": tiny()}, "pre-ln", {"seed": -1}, "seed must be a whole number >= 0, got -1"),
    ({"pre-ln": tiny()}, "pre-ln", {"threads": 0}, "threads must be a whole number >= 1 or None, got 0"),
    ({"pre-ln": tiny()}, "pre-ln", {"device": "tpu"}, "device must be 'cpu' or 'cuda[:n]', got 'tpu'"),
    ({"pre-ln": tiny(), "long": tiny(block_size=32)}, "pre-ln", {}, "must share block_size and vocab_size"),
    ({"pre-ln": tiny(), "bad": {**tiny(), "n_layers": 3}}, "pre-ln", {}, "models['bad'].n_layers"),
    ({"pre-ln": tiny(), "bad": tiny(n_head=3)}, "pre-ln", {}, "models['bad'].n_head: 3 heads do not divide"),
    ({"pre-ln": tiny(), "bad": "pre-ln"}, "pre-ln", {}, "models['bad'] must be a model config"),
])
def test_bad_input_is_one_clear_line(models, baseline, kw, says):
    with pytest.raises(ReslabError) as err:
        measure_cost(models, baseline, **{"batch_size": BATCH, "steps": 1, "rounds": 1, "warmup": 0, **kw})
    message = str(err.value)
    assert says in message and "\n" not in message, message


def test_the_speed_ratio_is_taken_round_by_round():
    # the machine slows 3x in round 2 for both models alike: round by round the design is twice as fast
    # in every round, where the ratio of the overall medians would compare a slow round with a fast one
    assert same_round_ratios([10.0, 30.0, 10.0], [5.0, 15.0, 5.0]) == [2.0, 2.0, 2.0]
    assert same_round_ratios([10.0, 20.0], [20.0, 10.0]) == [0.5, 2.0]
    with pytest.raises(ReslabError, match="3 baseline rounds against 2 of the design"):
        same_round_ratios([1.0, 2.0, 3.0], [1.0, 2.0])


def test_measure_cost_gives_one_speed_ratio_per_round_and_their_median():
    card = measure({"pre-ln": tiny(), "L4": tiny(n_layer=4)}, rounds=3)
    base, deep = card["rows"]["pre-ln"], card["rows"]["L4"]
    assert base["tokens_per_s_by_round"] == [1.0, 1.0, 1.0]  # the baseline over itself, each round exactly
    assert base["ratios"]["tokens_per_s_same_round"] == 1.0
    assert len(deep["tokens_per_s_by_round"]) == 3 and all(r > 0 and math.isfinite(r) for r in deep["tokens_per_s_by_round"])
    assert deep["ratios"]["tokens_per_s_same_round"] == sorted(deep["tokens_per_s_by_round"])[1]
    assert "round by round" in card["method"]


def test_the_card_shows_the_round_by_round_ratio_with_its_interval():
    row = {"ratios": {"tokens_per_s": 0.7, "tokens_per_s_same_round": 0.8}, "tokens_per_s_by_round": [0.78, 0.8, 0.912],
           "tokens_per_s_interval": [0.781, 0.876]}
    assert speed_ratio(row) == "0.800 [0.78, 0.88]"
    assert speed_ratio({**row, "tokens_per_s_interval": None}) == "0.800"  # too few rounds for an interval
    # a card written before rounds were paired keeps its ratio of overall medians
    assert speed_ratio({"ratios": {"tokens_per_s": 0.7}}) == "0.700"


def test_the_speed_ratios_interval_comes_from_the_rounds():
    card = measure({"pre-ln": tiny(), "L4": tiny(n_layer=4)}, rounds=6)
    assert card["rows"]["pre-ln"]["tokens_per_s_interval"] == [1.0, 1.0]
    deep = card["rows"]["L4"]
    assert deep["tokens_per_s_interval"] == [min(deep["tokens_per_s_by_round"]), max(deep["tokens_per_s_by_round"])]
    assert measure({"pre-ln": tiny()}, rounds=5)["rows"]["pre-ln"]["tokens_per_s_interval"] is None
