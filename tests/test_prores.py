"""ProRes: the schedule table, identity at t = 0, the base design after warmup, no NaN at T = 0."""

import math

import pytest
import torch

from reslab.model.gpt import GPT
from reslab.model.prores import SCHEDULES, prores_alpha, warmup_finished
from tests.conftest import small, tokens

T = 1000

# (schedule, layer l, step t, L) -> alpha, each worked out by hand from variants.md section 4.
TABLE = [
    ("linear", 2, 500, 4, 500 / 2000),
    ("linear", 1, 2500, 4, 1.0),
    ("sqrt", 2, 500, 4, 0.5),
    ("square", 2, 500, 4, 0.0625),
    ("equal", 2, 500, 4, 500 / 4000),
    ("equal", 4, 500, 4, 500 / 4000),
    ("reverse", 2, 500, 4, 500 / 3000),
    ("reverse", 4, 500, 4, 0.5),
    ("stagewise-0", 2, 500, 4, 0.0),
    ("stagewise-0", 2, 1500, 4, 0.5),
    ("stagewise-L", 2, 0, 4, 0.25),
    ("stagewise-L", 2, 1500, 4, 0.25 + 0.75 * 0.5),
    ("stagewise-sqrtL", 2, 1500, 4, 0.75),
    ("stagewise-sqrtl", 4, 3500, 4, 0.75),
    ("stagewise-sqrtl", 4, 0, 4, 0.5),
    ("fix-L", 3, 0, 4, 0.25),
    ("fix-L", 3, 10**7, 4, 0.25),
    ("fix-sqrtL", 1, 10**7, 4, 0.5),
    ("fix-sqrtl", 4, 10**7, 4, 0.5),
    ("fix-sqrtl", 1, 10**7, 4, 1.0),
]


@pytest.mark.parametrize("schedule,l,t,L,expected", TABLE)
def test_alpha_table(schedule, l, t, L, expected):
    assert prores_alpha(schedule, l, t, L, T) == pytest.approx(expected, abs=1e-12)


def test_every_schedule_is_in_the_table():
    assert {row[0] for row in TABLE} == set(SCHEDULES)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_zero_warmup_gives_no_nan(schedule):
    for l in range(1, 5):
        a = prores_alpha(schedule, l, 0, 4, 0)
        assert math.isfinite(a) and 0 < a <= 1


def test_fix_schedules_never_finish_and_others_do():
    assert not warmup_finished("fix-L", 10**9, 4, T)
    assert warmup_finished("linear", 4 * T, 4, T) and not warmup_finished("linear", 4 * T - 1, 4, T)
    assert warmup_finished("stagewise-0", 4 * T, 4, T)


def test_bad_layer_and_schedule():
    with pytest.raises(ValueError):
        prores_alpha("linear", 0, 0, 4, T)
    with pytest.raises(ValueError):
        prores_alpha("cubic", 1, 0, 4, T)


@pytest.mark.parametrize("design", ["pre-ln", "sandwich-ln", "lns"])
@pytest.mark.parametrize("schedule", ["linear", "stagewise-0", "equal", "reverse"])
def test_zero_start_schedule_makes_every_block_the_identity(design, schedule):
    model = GPT(small(design, prores=schedule, prores_warmup=10)).eval()
    x = torch.randn(2, 16, 32)
    for block in model.blocks:
        assert torch.equal(block(x), x)


@pytest.mark.parametrize("design", ["pre-ln", "post-ln", "sandwich-ln", "deepnorm", "lns"])
def test_after_warmup_the_model_is_its_base_design(design):
    with_prores = GPT(small(design, prores="linear", prores_warmup=10), seed=3).eval()
    base = GPT(small(design), seed=3).eval()
    idx = tokens()
    with_prores.set_step(5)
    assert not torch.allclose(with_prores(idx), base(idx))
    with_prores.set_step(4 * 10)
    assert torch.equal(with_prores(idx), base(idx))


def test_alpha_survives_save_and_load(tmp_path):
    from reslab import load_model, save_model

    model = GPT(small(prores="linear", prores_warmup=10)).eval()
    model.set_step(7)
    loaded = load_model(save_model(model, tmp_path / "m")).eval()
    assert loaded.prores_alphas() == model.prores_alphas()
    idx = tokens()
    assert torch.equal(loaded(idx), model(idx))


def test_fix_schedule_keeps_scaling_after_warmup():
    model = GPT(small("pre-ln", prores="fix-L", prores_warmup=10), seed=1).eval()
    base = GPT(small("pre-ln"), seed=1).eval()
    model.set_step(10**6)
    assert model.prores_alphas() == [0.25] * 4
    assert not torch.allclose(model(tokens()), base(tokens()))
