"""What every block is built from: attention, MLP, norms and residual points, all from the config."""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from ..attention import CausalSelfAttention
from ..mlp import MLP
from ..norms import make_norm
from ..residual import Residual


class Block(nn.Module):
    """A decoder layer. `layer` counts from 1, as in the papers' formulas."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_layer = cfg.n_layer

    def reset_parameters(self) -> None:
        """Initialise the design's own scalars and gains (weights are set by the init scheme)."""

    def branch_outputs(self) -> list[nn.Module]:
        """The last affine map of each branch (weight, bias), which init-mode gains scale: W_P and W2.
        Blocks that normalise a branch's output override this with that norm."""
        return output_projections(self)

    def residuals(self) -> list[Residual]:
        return [m for m in self.modules() if isinstance(m, Residual)]


def output_projections(block: nn.Module) -> list[nn.Linear]:
    """W_P of the attention (absent with vp identity) and W2 of the MLP."""
    return [m.c_proj for m in block.modules() if isinstance(m, (CausalSelfAttention, MLP))
            and isinstance(m.c_proj, nn.Linear)]


def attention(cfg: ModelConfig, layer: int, head_scale: bool = False,
              qkv_norm: bool = False) -> CausalSelfAttention:
    """qkv_norm: RMSNorm on every head's queries, keys and values (HybridNorm's QKV-norm)."""
    if cfg.vp_identity:
        value = "identity+linear" if layer == 1 else "identity"
    else:
        value = "linear"
    # ResFormer: layer 1 keeps its values for the later layers, which mix them into their own
    value_residual = ("first" if layer == 1 else "mix") if cfg.value_residual else "off"
    return CausalSelfAttention(
        cfg.n_embd, cfg.n_head, bias=cfg.bias, dropout=cfg.dropout, shaped=bool(cfg.shaped_attention),
        value=value, rope_base=cfg.rope_base if cfg.pos == "rope" else None,
        value_residual=value_residual, value_residual_init=cfg.value_residual_init,
        residual_attention=cfg.residual_attention, qk_norm=cfg.qk_norm or qkv_norm, v_norm=qkv_norm,
        norm_eps=cfg.norm_eps, head_scale=head_scale, xsa=cfg.xsa, gate=cfg.attn_gate)


def mlp(cfg: ModelConfig, mid_norm: bool = False) -> MLP:
    """M(x) = W2 act(W1 x); mid_norm: W2 N(act(W1 x)), a norm of the model's kind over the hidden units."""
    mid = make_norm(cfg.norm, cfg.mlp_hidden, bias=cfg.bias, eps=cfg.norm_eps, alpha=cfg.dyt_alpha) if mid_norm else None
    return MLP(cfg.n_embd, cfg.mlp_hidden, cfg.mlp, bias=cfg.bias, dropout=cfg.dropout, mid_norm=mid)


def norm(cfg: ModelConfig, kind: str | None = None, alpha: float | None = None) -> nn.Module:
    """alpha: a DyT / Derf norm's own initial alpha (None: cfg.dyt_alpha)."""
    return make_norm(kind or cfg.norm, cfg.n_embd, bias=cfg.bias, eps=cfg.norm_eps, alpha=alpha or cfg.dyt_alpha)


def residual(cfg: ModelConfig, skip: bool = True, *, branch_scale: str | None = None,
             branch_scale_init: float | None = None) -> Residual:
    """out = s*x + a*(gain*alpha*branch): s, a learned per cfg.skip_scale / cfg.branch_scale (a block
    whose formula fixes the branch scale, LayerScale, passes branch_scale / branch_scale_init)."""
    gain = cfg.branch_gain if cfg.gain_mode == "runtime" else 1.0
    if branch_scale is None:  # the model's setting (resolved: never None)
        branch_scale, branch_scale_init = cfg.branch_scale, cfg.branch_scale_init
    return Residual(skip=skip, gain=gain, prores=cfg.prores != "none", skip_scale=cfg.skip_scale,
                    branch_scale=branch_scale, branch_scale_init=branch_scale_init, dim=cfg.n_embd,
                    orthogonal=cfg.residual_update == "orthogonal", stochastic_depth=cfg.stochastic_depth > 0)
