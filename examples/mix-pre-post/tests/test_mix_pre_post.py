"""The example plugin passes reslab's conformance kit, and its formula holds."""

import math

import torch

import reslab
import reslab_mix_pre_post  # noqa: F401 - registers mix-pre-post (an installed package does it by entry point)
from reslab.testing import check_design


def test_the_design_passes_the_conformance_kit(tmp_path):
    assert check_design("mix-pre-post", tmp_path) == list(reslab.testing.ALL_CHECKS)


def test_a_fixed_mix_also_passes(tmp_path):
    check_design("mix-pre-post", tmp_path, checks=("build", "meta", "save-load", "options"),
                 options={"mix_init": 0.2, "learn_mix": False})


def test_m_zero_limit_is_pre_ln():
    """With m -> 0 the block is pre-ln: same weights, same logits."""
    cfg = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65)
    mix = reslab.build_model("mix-pre-post", seed=3, options={"mix_init": 1e-12, "learn_mix": False}, **cfg).eval()
    pre = reslab.build_model("pre-ln", seed=3, **cfg).eval()
    state = {k: v for k, v in mix.state_dict().items() if "post_norm" not in k and "mix_logit" not in k}
    pre.load_state_dict(state, strict=False)
    idx = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(mix(idx), pre(idx), atol=1e-5)
    assert math.isclose(mix.blocks[0].mix()[0].item(), 1e-12, rel_tol=1e-3)
