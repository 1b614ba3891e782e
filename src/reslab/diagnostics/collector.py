"""Diagnostics of a training run, measured on one fixed diagnostic batch, written to
<run>/diagnostics.jsonl (one flat JSON object per measurement; see ROW FORMAT below).

How a measurement stays free of side effects on training:
  * forward hooks are registered on the model's blocks only inside measure() and removed before
    it returns: when diagnostics are off, or between measurements, no hook exists at all;
  * the model runs in eval mode (no dropout, so the global RNG is never drawn from) and is put back
    in its previous mode; gradients come from torch.autograd.grad, so no parameter's .grad is
    touched; the optimizer is never used; the diagnostic batch is drawn once from the validation
    split with its own seed (a numpy generator, not the global RNGs).

ROW FORMAT (pandas: pd.read_json(path, lines=True); every key is a flat dotted string; block
indices count from 0, "embed" is the embedding / the stream before block0 — see stats.py):
    step                         completed optimizer updates when measured (before that step's update)
    loss                         loss of the model on the diagnostic batch
    grad_norm.<group>            gradient of that loss, per parameter group: embed, embed_norm,
                                 block{i}, block{i}.attn, block{i}.mlp, block{i}.norms,
                                 block{i}.scalars, final_norm, head (untied only), total
    train_grad_norm.<group>      the same groups for the real training gradient of this step's update
                                 (after unscaling, BEFORE clipping); absent at the final step
    param_norm.<group>           parameter norms, same groups
    update_ratio.<group>         ||p_after - p_before|| / ||p_before|| over this step's update;
                                 absent at the final step (no update follows)
    hidden_norm.embed, hidden_norm.block{i}     mean token L2 norm of the stream entering block0 /
                                 leaving block i
    hidden_stream                "x" (single stream) or "xa" (ResiDual: every hidden_*, adjacent_*,
                                 cos_sim.* key measures xa; hidden_norm_xd.* gives ||xd|| as well)
                                 or "mean" (hyper-connections: the stream is (B, T, n, C), and every
                                 hidden_*, adjacent_*, cos_sim.* key measures (1/n) sum_i H_i: the
                                 head reads N_final(sum_i H_i) = N_final(that mean), N_final's eps
                                 being scaled by n^2; on pre-ln's scale, and equal to pre-ln's x at init)
    growth_ratio                 hidden_norm.block{L-1} / hidden_norm.embed
    adjacent_change.block{i}     mean_t ||N(out_i) - N(in_i)||, N = parameter-free LayerNorm
    cos_sim.embed, cos_sim.block{i}   mean pairwise cosine similarity of tokens (rank collapse)
    attn_entropy.block{i}.head{h}, attn_entropy.block{i}   softmax entropy per head, head mean
    prores_alpha.block{i}        ProRes alpha of the block at this step (1.0 without ProRes)
    branch_gain.block{i}.<residual module name>   the Residual point's (fixed) gain
    scalar.block{i}.<param name>  mean of each learned design scalar (ReZero g, Admin w1/w2,
                                 SAS g_attn/a_ff/b_ff, shaped attention attn.shape_alpha/beta/gamma)
                                 and DeepNorm's fixed skip scale `a`
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..fileio import JsonlLog
from ..model.gpt import STATE_TYPES
from ..model.residual import Residual
from . import stats

FILE_NAME = "diagnostics.jsonl"
_SHAPE_PARAMS = ("shape_alpha", "shape_beta", "shape_gamma")


def diagnostic_batch(tokens: np.ndarray, batch_size: int, block_size: int, seed: int):
    """The fixed diagnostic batch (x, y): drawn once from `tokens` (the validation split) with its
    own seed, the same for every design and every measurement."""
    from ..data.batches import EvalBatches

    return EvalBatches(tokens, 1, batch_size, block_size, seed=seed, mode="fixed").batches(0)[0]


class Diagnostics:
    def __init__(self, model: nn.Module, batch, interval: int, final_step: int | None = None,
                 autocast=None):
        self.model = model
        device = next(model.parameters()).device
        self.x, self.y = batch[0].to(device), batch[1].to(device)
        self.interval, self.final_step = interval, final_step
        self.autocast = autocast or contextlib.nullcontext
        self.groups = stats.parameter_groups(model)
        self._before: dict[str, torch.Tensor] | None = None

    def due(self, step: int) -> bool:
        return step % self.interval == 0 or step == self.final_step

    # ---- the measurement ---------------------------------------------------------------------------
    def measure(self, step: int, snapshot: bool = False) -> dict:
        """One forward and backward on the diagnostic batch; returns the row (see ROW FORMAT).
        snapshot=True also keeps a copy of the parameters for update_ratios() after the update."""
        model = self.model
        blocks = list(model.blocks)
        stream_in: list = []
        outs: list = []
        attn_in: dict[int, torch.Tensor] = {}
        def keep_input(module, args):   # hooks return None: they observe, never replace
            stream_in.append(_detach(args[0]))

        def keep_output(module, args, out):
            outs.append(_detach(out))

        handles = [blocks[0].register_forward_pre_hook(keep_input)]
        for i, block in enumerate(blocks):
            handles.append(block.register_forward_hook(keep_output))
            attn = getattr(block, "attn", None)
            if attn is not None:
                handles.append(attn.register_forward_pre_hook(_keeper(attn_in, i)))
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        was_training = model.training
        try:
            model.eval()
            with torch.enable_grad(), self.autocast():
                _, loss = model(self.x, self.y)
            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        finally:
            for h in handles:
                h.remove()
            model.train(was_training)

        row: dict = {"step": step, "loss": float(loss.detach())}
        grad_by_name = {n: g for (n, _), g in zip(named, grads)}
        params_by_name = dict(model.named_parameters())
        row.update(_prefixed("grad_norm", stats.grouped_norms(grad_by_name, self.groups)))
        row.update(_prefixed("param_norm", stats.grouped_norms(params_by_name, self.groups)))

        dual = isinstance(stream_in[0], tuple)
        hyper = getattr(getattr(model, "design", None), "stream", None) in ("hyper", "altup")  # (B, T, n, C)
        row["hidden_stream"] = "xa" if dual else "mean" if hyper else "x"
        states = [stream_in[0]] + outs                  # states[0] = embed, states[i+1] = block i out
        main = [s[0] if dual else s for s in states]
        if hyper:                                       # (B, T, n, C) -> the streams' mean, what the head reads
            main = [s.mean(dim=-2) for s in main]
        names = ["embed"] + [f"block{i}" for i in range(len(blocks))]
        norms = [stats.hidden_norm(s) for s in main]
        for name, n, s in zip(names, norms, main):
            row[f"hidden_norm.{name}"] = n
            row[f"cos_sim.{name}"] = stats.mean_pairwise_cosine(s)
        if dual:
            for name, s in zip(names, states):
                row[f"hidden_norm_xd.{name}"] = stats.hidden_norm(s[1])
        row["growth_ratio"] = stats.growth_ratio(norms)
        for i in range(len(blocks)):
            row[f"adjacent_change.block{i}"] = stats.adjacent_change(main[i], main[i + 1])

        for i, block in enumerate(blocks):
            if i in attn_in:
                x_in, prev_scores = attn_in[i]
                ent = stats.attention_entropy(stats.attention_probs(block.attn, x_in, prev_scores))
                for h, e in enumerate(ent):
                    row[f"attn_entropy.block{i}.head{h}"] = e
                row[f"attn_entropy.block{i}"] = sum(ent) / len(ent)
        alphas = model.prores_alphas() if hasattr(model, "prores_alphas") else []
        for i, a in enumerate(alphas):
            row[f"prores_alpha.block{i}"] = a
        row.update(self.gains())
        if snapshot:
            self._before = {n: p.detach().clone() for n, p in model.named_parameters()}
        return row

    def gains(self) -> dict:
        """branch_gain.block{i}.<residual> (fixed gains) and scalar.block{i}.<param> (learned scalars)."""
        row = {}
        for i, block in enumerate(self.model.blocks):
            for rname, m in block.named_modules():
                if isinstance(m, Residual):
                    row[f"branch_gain.block{i}.{rname}"] = float(m.gain)
            for pname, p in block.named_parameters():
                leaf = pname.split(".")[-1]
                in_scalars = f"block{i}.scalars" in self.groups and \
                    f"blocks.{i}.{pname}" in self.groups[f"block{i}.scalars"]
                if in_scalars or leaf in _SHAPE_PARAMS:
                    row[f"scalar.block{i}.{pname}"] = float(p.detach().float().mean())
            if isinstance(getattr(block, "a", None), float):
                row[f"scalar.block{i}.a"] = block.a
        return row

    def train_grad_norms(self) -> dict:
        """train_grad_norm.<group> from the parameters' current .grad (read only)."""
        grads = {n: p.grad for n, p in self.model.named_parameters()}
        return _prefixed("train_grad_norm", stats.grouped_norms(grads, self.groups))

    def update_ratios(self) -> dict:
        """update_ratio.<group> against the snapshot taken by measure(snapshot=True); clears it."""
        if self._before is None:
            return {}
        after = dict(self.model.named_parameters())
        out = _prefixed("update_ratio", stats.update_ratios(self._before, after, self.groups))
        self._before = None
        return out


def _keeper(store: dict, i: int):
    """A forward pre-hook that keeps the attention's input and, with residual attention, the
    previous layer's scores S_{l-1} from the AttentionCarry the blocks pass as second argument
    (None otherwise). It returns None: a pre-hook that returns a value would replace the input,
    cutting the gradient."""
    def hook(module, args):
        prev = getattr(args[1], "scores", None) if len(args) > 1 else None
        store.setdefault(i, (args[0].detach(), None if prev is None else prev.detach()))
    return hook


def _detach(h):
    if isinstance(h, STATE_TYPES):  # a depth / speedrun stream: its x is the stream (what it keeps is not)
        return h.x.detach()
    return tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()


def _prefixed(prefix: str, values: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in values.items()}


# ---- the file --------------------------------------------------------------------------------------
class DiagnosticsFile(JsonlLog):
    """<run>/diagnostics.jsonl, appended and flushed row by row (like metrics.jsonl)."""

    def __init__(self, run_dir: str | Path):
        super().__init__(Path(run_dir) / FILE_NAME)

    def truncate_before(self, step: int) -> None:
        """Keep only rows measured before `step` (a resume from the checkpoint at `step` measures
        `step` again: the checkpoint is taken before that step's update, the row after it)."""
        self.keep_only(lambda r: r.get("step", -1) < step)


def read_rows(path: str | Path) -> list[dict]:
    return JsonlLog(path).read()
