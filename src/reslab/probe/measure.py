"""One forward + backward pass of a freshly built model, measured layer by layer.

Per layer l = 1..L (x_l = the residual stream after block l, x_0 = the stream after the embedding):
    grad_norm    ||dloss/dtheta_l||, all parameters of block l together
    act_norm     RMS of x_l per token (||x_l|| / sqrt(C)), averaged over tokens
    adj_change   ||N(x_l) - N(x_{l-1})|| per token, averaged; N = LayerNorm without parameters
    cos_sim      mean pairwise cosine similarity between the T token vectors of one sequence
                 (off-diagonal mean), averaged over the batch; 1 = rank collapse
Per model:
    last_w2_grad_norm   ||dloss/dW2|| of the last block's MLP (blocks[-1].mlp.c_proj.weight)

ResiDual carries two streams (xa, xd). The columns above use xa, the post-ln stream that the next
sublayer reads; the *_dual columns measure xd, the plain pre-ln-like sum of branch outputs.
Hyper-connections carry n streams, (B, T, n, C): the columns measure their mean (1/n) sum_i H_i,
the (B, T, C) stream the head reads (N_final(sum_i H_i) with eps * n^2 is N_final of the mean);
it is on pre-ln's scale and equals pre-ln's x at initialisation.
"""

from __future__ import annotations

import torch
from torch import nn

from ..diagnostics.stats import (
    adjacent_change,
    group_norm,
    hidden_norm,
    mean_pairwise_cosine,
)
from ..model.gpt import STATE_TYPES


def random_batch(vocab: int, batch: int, seq: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx, targets): uniform random tokens from their own generator, so probes are reproducible."""
    g = torch.Generator().manual_seed(10_000 + seed)
    idx = torch.randint(0, vocab, (batch, seq), generator=g)
    targets = torch.randint(0, vocab, (batch, seq), generator=g)
    return idx, targets


def stream_stats(xs: list[torch.Tensor]) -> dict[str, list[float]]:
    """act_norm, adj_change (from layer 1), cos_sim of a list of (B, T, C) streams x_0..x_L,
    with the same formulas as the training diagnostics (reslab.diagnostics.stats)."""
    C = xs[0].shape[-1]
    return {"act_norm": [hidden_norm(x) / C ** 0.5 for x in xs[1:]],
            "adj_change": [adjacent_change(a, b) for a, b in zip(xs, xs[1:])],
            "cos_sim": [mean_pairwise_cosine(x) for x in xs[1:]]}


def _grad_norm(params) -> float:
    return group_norm(p.grad for p in params)


def probe_model(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> dict:
    """Per-layer lists (index 0 = layer 1) and per-model scalars for one batch; see module doc.

    The stream is captured by forward hooks on the blocks, registered only for this call."""
    model.eval()  # no dropout: the probe measures the function at initialisation
    model.zero_grad(set_to_none=True)
    captured: list = []
    handles = [b.register_forward_hook(lambda m, inp, out: captured.append(out)) for b in model.blocks]
    # x_0: the input of block 1 (stream.enter is a plain method, not a hookable forward).
    enter = model.blocks[0].register_forward_pre_hook(lambda m, inp: captured.insert(0, inp[0]))
    try:
        _, loss = model(idx, targets)
        loss.backward()
    finally:
        for h in handles + [enter]:
            h.remove()
    captured = [c.x if isinstance(c, STATE_TYPES) else c for c in captured]  # depth / speedrun: their x
    dual = isinstance(captured[0], tuple)
    with torch.no_grad():
        streams = [c[0] if dual else c for c in captured]
        if getattr(getattr(model, "design", None), "stream", None) in ("hyper", "altup"):
            streams = [s.mean(dim=-2) for s in streams]     # n streams -> their mean, what the head reads
        out = stream_stats([s.detach().float() for s in streams])
        if dual:
            out.update({f"{k}_dual": v for k, v in stream_stats([c[1].detach().float() for c in captured]).items()})
    out["grad_norm"] = [_grad_norm(b.parameters()) for b in model.blocks]
    w2 = getattr(model.blocks[-1].mlp, "c_proj", None)
    out["last_w2_grad_norm"] = _grad_norm([w2.weight]) if isinstance(w2, nn.Linear) else float("nan")
    out["loss"] = loss.item()
    model.zero_grad(set_to_none=True)
    return out
