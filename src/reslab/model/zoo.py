"""The zoo: every built-in block design, registered through the same API a plugin uses.

Each entry is the design's formula and paper, its block ("module:Class", imported when a model is
built), and its capability flags; a design's own rules (e.g. nGPT's SwiGLU) are its `check`.
"""

from __future__ import annotations

import math

from .config import ModelConfig
from .design import ALL_NORMS
from .options import (AttnResOptions, DenseFormerOptions, FracOptions, GatedOptions, HybridNormOptions, HyperOptions,
                      KeelOptions, LaurelOptions, MixLNOptions, NGPTOptions, NormFormerOptions, ParallelOptions,
                      ResiDualOptions, SASOptions, SpeedrunOptions)
from .options import CANON_POINTS, MAX_ALTUP_BLOCKS, MAX_CANON_KERNEL, AltUpOptions, CanonOptions
from .options import MAX_DEPTH_STRIDE, DepthAttentionOptions
from .registry import design_options, register_design

_BLOCKS = "reslab.model.blocks."


def cait_layerscale_init(n_layer: int) -> float:
    """LayerScale's initial lambda by depth (Touvron et al. 2021, CaiT): 0.1 up to 18 layers,
    1e-5 up to 24, 1e-6 beyond."""
    return 0.1 if n_layer <= 18 else 1e-5 if n_layer <= 24 else 1e-6


def mix_ln_block(cfg: ModelConfig, layer: int):
    """Mix-LN: the first options.post_layers layers post-ln, the rest pre-ln."""
    from .blocks.post_norm import PostLNBlock
    from .blocks.pre_norm import PreLNBlock

    return PostLNBlock(cfg, layer) if layer <= design_options(cfg).post_layers else PreLNBlock(cfg, layer)


def _mix_ln_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    n = design_options(cfg).post_layers
    if n > cfg.n_layer:
        return [f"model.options.post_layers: must be in 0..n_layer={cfg.n_layer}, got {n}"]
    return []


def _resi_dual_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    if cfg.norm == "dyt" and design_options(cfg).scale != 1.0:
        return ["model.options.scale: s relies on N(s*z) = N(z), which DyT (not scale-invariant) "
                "breaks; use norm = 'layernorm' or 'rmsnorm', or s = 1"]
    return []


def _layerscale_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    if cfg.branch_scale != "channel":
        return [f"model.branch_scale: layerscale is a per-channel branch scale diag(lambda); it needs "
                f"'channel', got {cfg.branch_scale!r} (for a scalar one use pre-ln with branch_scale = 'scalar')"]
    return []


def _ngpt_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    errors = []
    if cfg.mlp != "swiglu":
        errors.append(f"model.mlp: ngpt's MLP is always SwiGLU with its scalers s_u, s_v; "
                      f"leave mlp unset or set 'swiglu', got {cfg.mlp!r}")
    if cfg.bias:
        errors.append("model.bias: ngpt has no biases (every weight row lives on the unit sphere); "
                      "leave bias unset or set false")
    if given.init not in (None, "gpt2"):
        errors.append(f"model.init: ngpt puts every weight row on the unit sphere, so an init "
                      f"scheme's scale has no meaning; leave init unset, got {given.init!r}")
    if cfg.branch_gain != 1.0:
        errors.append("model.branch_gain: ngpt normalises every branch output (Norm(F(h))), which "
                      "cancels a gain; its eigen learning rates alpha_A, alpha_M set the step")
    return errors


# Single-norm designs that compose with everything a standard pre/post block offers.
_STANDARD = dict(prores=True, per_layer=True, learned_scales=True, attention_carry=True)

register_design("pre-ln", _BLOCKS + "pre_norm:PreLNBlock", formula="x = x + F(N(x)); final N before the head",
                reference="Radford et al. 2019 (GPT-2); Xiong et al. 2020",
                norms=ALL_NORMS, attention_options=True, **_STANDARD)
register_design("post-ln", _BLOCKS + "post_norm:PostLNBlock", formula="x = N(x + F(x))",
                reference="Vaswani et al. 2017", final_norm=False, **_STANDARD)
register_design("sandwich-ln", _BLOCKS + "pre_norm:SandwichBlock", formula="x = x + N2(F(N1(x)))",
                reference="Ding et al. 2021 (CogView)", defaults={"embed_norm": False}, **_STANDARD)
register_design("peri-ln", _BLOCKS + "pre_norm:SandwichBlock",
                formula="x = x + N_out(F(N_in(x))); N on the embedding (embed_norm)",
                reference="Kim et al. 2025 (Peri-LN)", defaults={"embed_norm": True}, **_STANDARD)
register_design("mix-ln", "reslab.model.zoo:mix_ln_block",
                formula="first ceil(L/4) layers post-ln (x = N(x + F(x))), the rest pre-ln",
                reference="Li et al. 2024 (Mix-LN)", prores=True, learned_scales=True, attention_carry=True,
                layer_base=False, options=MixLNOptions, check=_mix_ln_check)
register_design("deepnorm", _BLOCKS + "post_norm:DeepNormBlock",
                formula="x = N(a*x + F(x)), a = (2L)^(1/4); v, out-proj, fc1, fc2 init x (8L)^(-1/4)",
                reference="Wang et al. 2022 (DeepNet)", final_norm=False, prores=True,
                defaults={"init": "deepnorm"}, per_layer=True)
register_design("lns", _BLOCKS + "pre_norm:LNSBlock", formula="x = x + F(N(x) / sqrt(l)); final N unscaled",
                reference="Sun et al. 2025 (LayerNorm Scaling)", prores=True, per_layer=True, learned_scales=True)
register_design("admin", _BLOCKS + "post_norm:AdminBlock",
                formula="x = N(w*x + F(x)), w per channel, init sqrt((S+1)/ln(S+1) - 1), S = 2L",
                reference="Liu et al. 2020 (Admin)", final_norm=False, per_layer=True)
register_design("b2t", _BLOCKS + "post_norm:B2TBlock", formula="y = N1(x + A(x)); out = N2(y + M(y) + x)",
                reference="Takase et al. 2023 (B2T connection)", final_norm=False, partial_residual=False,
                per_layer=True)
register_design("rezero", _BLOCKS + "rezero:ReZeroBlock", formula="x = x + g*F(x), no norm, g per layer, g = 0 at init",
                reference="Bachlechner et al. 2020 (ReZero)", final_norm=False, norms=("none",),
                defaults={"norm": "none"}, per_layer=True)
register_design("resi-dual", _BLOCKS + "resi_dual:ResiDualBlock",
                formula="f = F(xa); xd = xd + s*f; xa = N(xa + f); head reads xa + N(xd)",
                reference="Xie et al. 2023 (ResiDual)", stream="dual", final_norm=False, partial_residual=False,
                options=ResiDualOptions, check=_resi_dual_check)
_SIMPLIFIED = dict(attention_options=True, layer_base=False, options=SASOptions)
register_design("sas", _BLOCKS + "simplified:SASBlock",
                formula="h = g*SA(N1(x)); out = a*h + b*M(N2(h)); SA shaped, value/proj = I",
                reference="He & Hofmann 2024 (Simplifying Transformer Blocks)",
                defaults={"init": "identity", "attn_res": False, "ffn_res": True,
                          "shaped_attention": True, "vp_identity": True}, **_SIMPLIFIED)
register_design("sas-p", _BLOCKS + "simplified:SASPBlock",
                formula="out = g*SA(N(x)) + b*M(N(x)), parallel, no skip; SA shaped, value/proj = I",
                reference="He & Hofmann 2024 (Simplifying Transformer Blocks)", partial_residual=False,
                defaults={"init": "identity", "attn_res": False, "ffn_res": False,
                          "shaped_attention": True, "vp_identity": True}, **_SIMPLIFIED)

# ---- learned scales, reordered norm, gated residual (blocks/scaled.py, gated.py) ----
register_design("reordered-ln", _BLOCKS + "scaled:ReorderedLNBlock",
                formula="x = x + N1(A(x)); x = x + N2(M(x)); norm on the branch output only; final N",
                reference="Team OLMo 2024 (2 OLMo 2 Furious)", prores=True, per_layer=True, learned_scales=True)
# ALL_NORMS as pre-ln: with norm = "none" it is a norm-free pre-ln whose per-channel branch scales
# start small (SkipInit / ReZero with a vector), a meaningful ablation of LayerScale.
register_design("layerscale", _BLOCKS + "scaled:LayerScaleBlock",
                formula="x = x + diag(l1) A(N1(x)); x = x + diag(l2) M(N2(x)), l per channel, "
                        "init eps (0.1 to 18 layers, 1e-5 to 24, 1e-6 beyond)",
                reference="Touvron et al. 2021 (CaiT, Going deeper with Image Transformers)",
                norms=ALL_NORMS, prores=True, per_layer=True, learned_scales=True, check=_layerscale_check,
                defaults={"branch_scale": "channel",
                          "branch_scale_init": lambda cfg: cait_layerscale_init(cfg.n_layer)})
register_design("gated", _BLOCKS + "gated:GatedBlock",
                formula="y = ReLU(F(N(x))); r = sig(W_r y + U_r x); z = sig(W_z y + U_z x - b_g); "
                        "h = tanh(W_g y + U_g(r*x)); x = (1-z)*x + z*h; final N",
                reference="Parisotto et al. 2020 (GTrXL)", partial_residual=False, per_layer=True,
                options=GatedOptions)

# ---- hyper-connections (blocks/hyper.py) ----
register_design("hyper-connections", _BLOCKS + "hyper:HyperBlock",
                formula="n streams H_i = emb; per sublayer k: h = sum_i A_m[i] H_i; y = F(N(h)); "
                        "H'_j = sum_i A_r[i,j] H_i + B[j] y; head reads N(sum_i H_i); init A_m = e_(k mod n), "
                        "A_r = I, B = 1 (pre-ln); options.dynamic: + s*tanh(N(H) W); options.mixing = sinkhorn: A_r = "
                        "SinkhornKnopp(R), read sigmoid, write 2*sigmoid (mHC)",
                reference="Zhu et al. 2024 (Hyper-Connections, ICLR 2025); Xie et al. 2025 (mHC: "
                          "Manifold-Constrained Hyper-Connections)",
                stream="hyper", partial_residual=False, options=HyperOptions)

# ---- nGPT (blocks/ngpt.py) ----
register_design("ngpt", _BLOCKS + "ngpt:NGPTBlock",
                formula="h = Norm(h + alpha_A*(Norm(A(h)) - h)); h = Norm(h + alpha_M*(Norm(M(h)) - h)); "
                        "Norm(x) = x/||x||, h_0 = Norm(emb), weight rows on the unit sphere, logits s_z * (E h)",
                reference="Loshchilov et al. 2024 (nGPT)", stream="ngpt", final_norm=False, norms=("none",),
                defaults={"norm": "none", "mlp": "swiglu", "bias": False}, partial_residual=False,
                fsdp=False, qk_norm=False, options=NGPTOptions, check=_ngpt_check)

# ---- the parallel block (blocks/parallel.py) ----
register_design("parallel", _BLOCKS + "parallel:ParallelBlock",
                formula="x = x + A(N1(x)) + M(N2(x)); options.shared_norm: x = x + A(N(x)) + M(N(x))",
                reference="Black et al. 2022 (GPT-NeoX-20B); options.shared_norm: Wang & Komatsuzaki 2021 "
                          "(GPT-J), Chowdhery et al. 2022 (PaLM)",
                options=ParallelOptions,
                partial_residual=False, prores=True, per_layer=True, learned_scales=True, attention_carry=True)


# ---- mixing across depth (blocks/depth.py and one file per design) ----
def _denseformer_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    opts, errors = design_options(cfg), []
    for name in ("dilation", "period"):
        if getattr(opts, name) > cfg.n_layer:
            errors.append(f"model.options.{name}: must be at most n_layer={cfg.n_layer}, got {getattr(opts, name)}")
    return errors


register_design("denseformer", _BLOCKS + "denseformer:DenseFormerBlock",
                formula="X_l = PreLN_l(Y_(l-1)); Y_l = sum_(j in J(l)) alpha_(l,j) X_j, J(l) = {j <= l: "
                        "(l - j) % dilation = 0}, every period-th layer (else Y_l = X_l); X_0 = emb; "
                        "alpha_(l,l) = 1, others 0 at init (= pre-ln); head reads N(Y_L)",
                reference="Pagliardini et al. 2024 (DenseFormer)", stream="depth", options=DenseFormerOptions,
                check=_denseformer_check, prores=True, learned_scales=True)


def _attn_res_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    n = design_options(cfg).block_layers
    if n > cfg.n_layer:
        return [f"model.options.block_layers: must be at most n_layer={cfg.n_layer} (0 = full AttnRes), got {n}"]
    return []


register_design("attn-res", _BLOCKS + "attn_res:AttnResBlock",
                formula="sublayer k reads h_k = sum_(i<k) softmax_i(w_k . RMSNorm(v_i)) v_i over v_0 = emb and "
                        "every earlier sublayer output v_i = F_i(N(h_i)); w_k learned, 0 at init; head reads "
                        "N(h_out); options.block_layers = n: Block AttnRes over sums of n layers",
                reference="Kimi team 2026 (Attention Residuals, arXiv 2603.15031)", stream="depth",
                options=AttnResOptions, check=_attn_res_check, partial_residual=False)


# ---- the speedruns' skips (blocks/speedrun.py) ----
def _speedrun_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    opts = design_options(cfg)
    if opts.backout and not -1 <= opts.backout_layer < cfg.n_layer:
        return [f"model.options.backout_layer: the head subtracts an earlier layer's output, so it must be "
                f"in 0..n_layer-1={cfg.n_layer - 1} (or -1 for n_layer // 2), got {opts.backout_layer}"]
    if not opts.backout and opts.backout_layer != -1:
        return ["model.options.backout_layer: needs backout = true"]
    return []


register_design("speedrun", _BLOCKS + "speedrun:SpeedrunBlock",
                formula="x_0 = N(emb); before block l: x = a_l x + b_l x_0 (x0), x = x + w_l x_(L+1-l) "
                        "(U-net, decoder half); pre-ln block with v + g E_l[token] (value embeddings, every "
                        "other layer); head reads N(x_L - lambda x_(L//2)) (backout); a = 1, b = 0, w = 1, "
                        "lambda = 0.2 at init",
                reference="modded-nanogpt records #9, #11, #14-15, #40 (Jordan et al. 2024-2025); nanochat "
                          "(Karpathy 2025)", stream="speedrun", options=SpeedrunOptions, check=_speedrun_check,
                defaults={"embed_norm": True}, prores=True, learned_scales=True)

register_design("mudd", _BLOCKS + "mudd:MUDDBlock",
                formula="block l: h = x_r + A(N(x_q), N(x_k), N(x_v)); X_l = h + M(N(h)); then per position "
                        "w = W2 GELU(W1 RMS(X_l)) + b and x_s = sum_(j<=l) w[s,j] X_j for s = q, k, v, r (the "
                        "last block: one mix, the head's); W2 = 0, b = e_l at init (= pre-ln)",
                reference="Xiao et al. 2025 (MUDDFormer)", stream="depth", partial_residual=False,
                learned_scales=True)
register_design("lime", _BLOCKS + "lime:LIMeBlock",
                formula="sublayer k on x = s_(k-1): u = sum_(j<k) softmax_j(W_k RMSNorm(x) + c_k) s_j over the "
                        "stream states s_j (s_0 = emb); x = x + F(N(u)); attention: separate mixes for q, k, v "
                        "(x-transformers' DynamicLIMe)",
                reference="Gerasimov et al. 2025 (LIMe); x-transformers integrate_layers", stream="depth",
                partial_residual=False, learned_scales=True)

# ---- NormFormer (blocks/normformer.py) ----
register_design("normformer", _BLOCKS + "normformer:NormFormerBlock",
                formula="x = x + N_a(A_gamma(N1(x))); x = x + W2 N_f(act(W1 N2(x))); A_gamma: head h's output "
                        "times a learned gamma_h (1 at init); each extra op an option",
                reference="Shleifer, Weston, Ott 2021 (NormFormer)", options=NormFormerOptions,
                prores=True, per_layer=True, learned_scales=True, attention_carry=True)


# ---- LAuReL (blocks/laurel.py) ----
def _laurel_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    rank = design_options(cfg).rank
    if rank > cfg.n_embd:
        return [f"model.options.rank: a low-rank map needs rank <= n_embd={cfg.n_embd}, got {rank}"]
    return []


register_design("laurel", _BLOCKS + "laurel:LaurelBlock",
                formula="each residual point: x = alpha F + beta (x + B A x) + B' A' sum_(j<i) gamma_j x_j, "
                        "F = A(N1 x) or M(N2 x); (alpha, beta) = 2 softmax(w) (RW, w = 0: (1, 1)), B A of rank r (LR, "
                        "B = 0), PA over the earlier points' inputs (gamma = 1, B' = 0); options rw, rank, pa",
                reference="Menghani et al. 2025 (LAuReL, ICML)", stream="depth", options=LaurelOptions,
                check=_laurel_check, partial_residual=False)


# ---- frac-connections (blocks/frac.py) ----
def _frac_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    m = design_options(cfg).fracs
    if cfg.n_embd % m:
        return [f"model.options.fracs: {m} fractions must divide n_embd={cfg.n_embd}; choose a divisor"]
    return []


register_design("frac-connections", _BLOCKS + "frac:FracBlock",
                formula="stream cut into m fractions H_f of width C/m; each sublayer: y = F(N(concat_f sum_g "
                        "Gamma[g,f] H_g)), H'_f = sum_g A[g,f] H_g + beta[f] y_f; Gamma = A = I, beta = 1 at "
                        "init (= pre-ln); options.dynamic: + s tanh(N(H_g) W), W = 0",
                reference="Zhu et al. 2025 (Frac-Connections)", options=FracOptions, check=_frac_check,
                partial_residual=False)


# ---- Post-LN kept trainable (blocks/post_ln_trainable.py) ----
def _hybridnorm_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    if cfg.qk_norm:
        return ["model.qk_norm: hybridnorm always normalises every head's queries, keys and values "
                "(QKV-norm); leave qk_norm unset"]
    return []


def _keel_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    alpha = design_options(cfg).alpha
    if alpha is not None and not (math.isfinite(alpha) and alpha > 0):
        return [f"model.options.alpha: KEEL's skip weight must be a positive number (the paper's rule, "
                f"2 n_layer, when unset), got {alpha!r}"]
    return []


# ProRes (variants.md section 4) is specified for the pre-/post-norm bases listed there only, so
# prores stays off for these three; their residual points still take the learned scales.
register_design("hybridnorm", _BLOCKS + "post_ln_trainable:HybridNormBlock",
                formula="Y = MHA_QKV(X) + X; X' = FFN(Norm(Y)) + Norm(Y); MHA_QKV: softmax(N(Q) N(K)^T / sqrt(d)) "
                        "N(V) per head; final N; options.first_block_pre_norm (HybridNorm*): block 1 "
                        "Y = MHA_QKV(N(X)) + X, X' = FFN(N(Y)) + Y",
                reference="Zhuo, Zeng, Wang, Zhang, Yang, Li, Zhou, Ma 2025 (HybridNorm, arXiv 2503.04598)",
                defaults={"norm": "rmsnorm"}, options=HybridNormOptions, check=_hybridnorm_check,
                learned_scales=True)
register_design("keel", _BLOCKS + "post_ln_trainable:KeelBlock",
                formula="x = LN(alpha x + F(LN(x))) per sublayer, alpha = L sublayers (2 n_layer); block 1: "
                        "x + A(LN(x)), then LN(x + M(LN(x))); no final N",
                reference="Chen, Wei 2026 (Post-LayerNorm Is Back: KEEL, arXiv 2601.19895)",
                final_norm=False, defaults={"norm": "rmsnorm"}, options=KeelOptions, check=_keel_check,
                learned_scales=True)
register_design("sdd", _BLOCKS + "post_ln_trainable:SDDBlock",
                formula="x = N(x + F(x)) with every Linear in F y = alpha * norm(V x), norm(z) = z / rms(z); "
                        "alpha per output, 1/sqrt(L) at init on W_P and W2, 1 elsewhere; no final N",
                reference="Wang, Zhuo, Zeng, Zhou, Yang, Li 2025 (Scale-Distribution Decoupling, arXiv 2502.15499)",
                final_norm=False, defaults={"bias": False}, learned_scales=True)


# ---- normalisation replaced by initialisation (blocks/init_based.py) ----
# Normalisation replaced by initialisation (skipinit, fixup, t-fixup) and an init-based fix of the
# norms' placement (sub-ln). Their inits are init.py's "fixup", "t-fixup", "sub-ln"; DS-Init is an init
# alone ("ds-init"): its paper's model is post-ln, so post-ln with init = "ds-init" is that model.
from .options import SkipInitOptions  # noqa: E402  - the section's own options


def _skipinit_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    a = design_options(cfg).alpha_init
    if not abs(a) < float("inf"):
        return [f"model.options.alpha_init: must be a finite number (SkipInit: 0 or a small constant), got {a!r}"]
    return []


def _fixup_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    if cfg.init == "fixup" and cfg.gain_mode == "init" and cfg.branch_gain != 1.0:
        return ["model.gain_mode: Fixup starts W_P and W2 at 0, which an init-mode gain (a multiple of "
                "them) cannot change; use gain_mode = 'runtime' (or the multipliers m1, m2)"]
    return []


_NORM_FREE = dict(final_norm=False, norms=("none",))
register_design("skipinit", _BLOCKS + "init_based:SkipInitBlock",
                formula="x = x + a1*A(x); x = x + a2*M(x), no norm; a learned scalar per residual branch "
                        "(rezero: one per layer), options.alpha_init (0) at init",
                reference="De & Smith 2020 (SkipInit; Batch Normalization Biases Residual Blocks Towards the "
                          "Identity Function in Deep Networks, arXiv 2002.10444)",
                defaults={"norm": "none"}, options=SkipInitOptions, check=_skipinit_check, **_NORM_FREE)
register_design("fixup", _BLOCKS + "init_based:FixupBlock",
                formula="x = x + m1*A(x + b1); x = x + m2*W2(act(W1(x + b2) + b3) + b4); head reads x_L + b_head; "
                        "no norm; scalars b = 0, m = 1 at init; init: W_P = W2 = 0 (untied head 0), "
                        "[W_Q;W_K;W_V] x K^(-1/6), W1 x K^(-1/2), K = 2L branches",
                reference="Zhang, Dauphin, Ma 2019 (Fixup Initialization: Residual Learning Without "
                          "Normalization, arXiv 1901.09321; Transformer rules from hongyi-zhang/Fixup)",
                defaults={"norm": "none", "init": "fixup", "bias": False}, layer_base=False,
                check=_fixup_check, **_NORM_FREE)
register_design("t-fixup", _BLOCKS + "init_based:TFixupBlock",
                formula="x = x + A(x); x = x + M(x), no norm; init: Xavier, W_V, W_P, W1, W2 x (9L)^(-1/4), "
                        "token embedding N(0, d^(-1/2)) x (9L)^(-1/4)",
                reference="Huang, Perez, Ba, Volkovs 2020 (T-Fixup; Improving Transformer Optimization "
                          "Through Better Initialization, ICML 2020)",
                # layer_base: a norm-free post-ln or pre-ln layer in it would be the same block
                defaults={"norm": "none", "init": "t-fixup"}, layer_base=False, **_NORM_FREE)
register_design("sub-ln", _BLOCKS + "init_based:SubLNBlock",
                formula="x = x + W_P N_a(Attn(N1(x))); x = x + W2 N_f(act(W1 N2(x))); final N; "
                        "init: Xavier, W_V, W_P, W1, W2 x sqrt(log(2L))",
                reference="Wang et al. 2022 (Foundation Transformers / Magneto, arXiv 2210.06423)",
                defaults={"init": "sub-ln"})


# ---- normalisation replaced: GPAS and the speedrun record's lambdas (blocks/norm_free.py) ----
# The norm replacements of this family (norm = "derf", "seednorm", "rmsnorm-nogain") are norm kinds
# (model/norms.py), taken by every design whose `norms` lists them (ALL_NORMS: pre-ln, layerscale, gpas).
register_design("gpas", _BLOCKS + "norm_free:GPASBlock",
                formula="x' = x + A(N1(x)); x = x' - SiLU(alpha_l) sg(x'); x' = x + M(N2(x)); "
                        "x = x' - SiLU(alpha_l) sg(x'); sg = stop-gradient, alpha_l one per layer, 0 at init "
                        "(= pre-ln); final N",
                reference="Chen, Xu et al. 2025 (GPAS: Gradient-Preserving Activation Scaling, arXiv 2506.22049; "
                          "github.com/dandingsky/GPAS)",
                norms=ALL_NORMS, per_layer=True, learned_scales=True, attention_carry=True)
register_design("speedrun-lambdas", _BLOCKS + "norm_free:SpeedrunLambdasBlock",
                formula="speedrun with x = r_(l,k) x + p_(l,k) F_k(N(x)) at each sublayer k (attention, MLP), "
                        "r = sqrt(1.1), p = 1 at init (modded-nanogpt's resid_lambdas, post_lambdas); "
                        "speedrun's x0, U-net, value embeddings, backout as its options",
                reference="modded-nanogpt train_gpt.py at f411b3d3 (Jordan et al., 2026-08-01 record)",
                stream="speedrun", options=SpeedrunOptions, check=_speedrun_check,
                norms=tuple(n for n in ALL_NORMS if n != "none"),  # the record's norm is rmsnorm-nogain
                defaults={"embed_norm": True})


# ---- attending across depth (blocks/cross_depth.py, blocks/mv_split.py) ----
from .options import MVSplitOptions  # noqa: E402  - kept with its section


def _mv_split_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    """(beta_init: a non-finite value is refused by the options reader already.)"""
    alpha = design_options(cfg).alpha_init
    if not 0.0 <= alpha <= 1.0:
        return [f"model.options.alpha_init: the trunk mean becomes (1 - alpha) m(x) + alpha m(F), a leaky "
                f"replacement, so alpha starts in 0..1, got {alpha!r}"]
    return []


_MV_SPLIT = ("split(x, F) = x + beta*(F - m(F)) + alpha*(m(F) - m(x)), m the causal running mean over "
             "positions 1..t, alpha, beta per channel, init 0 and 0.03")
_MV_SPLIT_REF = "Lu 2026 (Mean Mode Screaming: Mean-Variance Split Residuals, arXiv 2605.06169)"
register_design("mv-split", _BLOCKS + "mv_split:MVSplitBlock",
                formula="h = N1(split(x, A(x))); out = N2(split(h, M(h))) (the paper's code); " + _MV_SPLIT,
                reference=_MV_SPLIT_REF, final_norm=False, partial_residual=False, layer_base=False,
                options=MVSplitOptions, check=_mv_split_check)
register_design("mv-split-pre", _BLOCKS + "mv_split:MVSplitPreBlock",
                formula="h = split(x, A(N1(x))); out = split(h, M(N2(h))); final N (x-transformers' "
                        "mv_split_residual); " + _MV_SPLIT,
                reference=_MV_SPLIT_REF + "; x-transformers mv_split_residual", partial_residual=False,
                layer_base=False, options=MVSplitOptions, check=_mv_split_check)

register_design("dca", _BLOCKS + "cross_depth:DCABlock",
                formula="layer l: x_s = sum_(i<l) (b[s,i] + ReLU(u_s . RMS(X_i))) X_i for s = q, k, v over the layer "
                        "outputs X_0 = emb, X_1, ...; a = A(N_q(x_q), N_k(x_k), N_v(x_v)); h = x_q + a; X_l = a + "
                        "M(N2(h)); head reads N(GRN_out(X_0..X_L)); b = 1 at init (the sums: pre-ln while u = 0)",
                reference="Heddes, Javanmard, Axiotis, Fu, Bateni, Mirrokni 2025 (DeepCrossAttention, arXiv "
                          "2502.06785); structure as in lucidrains/deep-cross-attention",
                stream="depth", partial_residual=False)
register_design("moda", _BLOCKS + "cross_depth:MoDABlock",
                formula="pre-ln; token t of layer l attends, in one softmax, to its own layer's keys s <= t and "
                        "to the keys k^(i)_t of the same token in every earlier layer i < l: o_t = sum_s p_s v_s + "
                        "sum_i p_i v^(i)_t",
                reference="Zhu, Fang, Liao, Wang et al. 2026 (Mixture-of-Depths Attention, arXiv 2603.15619)",
                stream="depth", learned_scales=True)
def _depth_attention_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    opts, errors = design_options(cfg), []
    if not _whole_number(opts.stride, 1, MAX_DEPTH_STRIDE):
        errors.append(f"model.options.stride: a whole number in 1..{MAX_DEPTH_STRIDE} (1: every earlier layer), "
                      f"got {opts.stride!r}")
    return errors


register_design("depth-attention", _BLOCKS + "cross_depth:DepthAttentionBlock",
                formula="pre-ln whose values are mixed across depth first: at token t of layer l, p = softmax_j(q_t . "
                        "k^(j)_t / sqrt(d)) over j in J(l) and l, v~^(l)_t = sum_(j in J(l)) p_j v~^(j)_t + p_l "
                        "v^(l)_t; causal attention reads v~ in v's place; layer l stores (k^(l), v~^(l)); J(l): the "
                        "layers j < l with (j - 1) mod options.stride = 0 (stride 1: all); no parameters added",
                reference="Zeng, Hao, Wang et al. 2026 (Depth-Attention: Cross-Layer Value Mixing for Language "
                          "Models, arXiv 2606.05014); the depth_softmax mode of a co-author's code "
                          "(hyq718/Depth-Attention)",
                stream="depth", learned_scales=True, options=DepthAttentionOptions, check=_depth_attention_check)


# ---- inside the block (blocks/canon.py, blocks/altup.py) ----
def _whole_number(value, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _canon_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    opts, errors = design_options(cfg), []
    points = opts.points
    if not points or set(points) - set(CANON_POINTS) or len(set(points)) != len(points):
        errors.append(f"model.options.points: name each of A, B, C, D at most once (e.g. 'AC', 'ABCD'), got {points!r}")
    if not _whole_number(opts.kernel, 1, MAX_CANON_KERNEL):
        errors.append(f"model.options.kernel: a whole number in 1..{MAX_CANON_KERNEL}, got {opts.kernel!r}")
    return errors


register_design("canon", _BLOCKS + "canon:CanonBlock",
                formula="pre-ln with canon(h) = h + sum_(j<K) w[:, j] h_(t-K+1+j) (causal depthwise, K = 4) at "
                        "options.points: A on N1(x), B on [Q; K; V] before RoPE, C on N2(x), D on W1 h before the "
                        "activation; w ~ U(-1/sqrt(K), 1/sqrt(K))",
                reference="Allen-Zhu 2025 (Physics of Language Models: Part 4.1, Architecture Design and the Magic "
                          "of Canon Layers, arXiv 2512.17351)",
                options=CanonOptions, check=_canon_check,
                prores=True, per_layer=True, learned_scales=True, attention_carry=True)


def _altup_check(cfg: ModelConfig, given: ModelConfig) -> list[str]:
    opts = design_options(cfg)
    if not _whole_number(opts.K, 1, MAX_ALTUP_BLOCKS):
        return [f"model.options.K: a whole number of sub-blocks in 1..{MAX_ALTUP_BLOCKS}, got {opts.K!r}"]
    if opts.recycled and opts.K == 1:
        return ["model.options.recycled: copies the embedding into sub-blocks 2..K; needs K >= 2"]
    return []


register_design("altup", _BLOCKS + "altup:AltUpBlock",
                formula="K sub-blocks x_i of width C (x_1 = emb, x_2..K from a wider token table); layer l: "
                        "x^_i = sum_j p_ij x_j; x~ = PreLN(x^_a), a = (l-1) mod K; x'_i = x^_i + g_i (x~ - x^_a); "
                        "p = I, g = 1 at init; head reads N(sum_i x_i); options.recycled: x_2..K copy emb",
                reference="Baykal, Cutler, Dikkala, Ghosh, Panigrahy, Wang 2023 (Alternating Updates for Efficient "
                          "Transformers, NeurIPS 2023, arXiv 2301.13310)",
                stream="altup", options=AltUpOptions, check=_altup_check,
                prores=True, learned_scales=True, attention_carry=True)
