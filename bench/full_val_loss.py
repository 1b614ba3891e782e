"""Loss of a model on the whole validation split (non-overlapping windows), not a 20-batch sample.

Usage: python bench/full_val_loss.py MODEL_OR_RUN_FOLDER_OR_CKPT [...]
    a reslab run folder: its last checkpoint; a reslab model folder: that model;
    a nanoGPT ckpt.pt (written by its train.py): its weights, put into reslab's pre-ln GPT
    (the same architecture: nanoGPT's Block is x + attn(ln_1(x)), x + mlp(ln_2(x)), tied head).
"""

import sys
from pathlib import Path

import torch

from reslab import load_model
from reslab.config import ModelConfig
from reslab.data import DataConfig, prepare_dataset
from reslab.model.gpt import GPT
from reslab.train.checkpoint import complete_checkpoints


@torch.no_grad()
def full_val_loss(model, tokens) -> float:
    T = model.config.block_size
    val = torch.from_numpy(tokens.astype("int64"))
    n = (len(val) - 1) // T
    x, y = val[: n * T].view(n, T), val[1: n * T + 1].view(n, T)
    total = 0.0
    for i in range(0, n, 256):
        _, loss = model(x[i: i + 256], y[i: i + 256])
        total += loss.item() * x[i: i + 256].shape[0]
    return total / n


# nanoGPT's parameter names -> reslab's pre-ln GPT (model.py of karpathy/nanoGPT).
_NANOGPT_NAMES = (("transformer.h.", "blocks."), (".ln_1.", ".norm1."), (".ln_2.", ".norm2."),
                  ("transformer.ln_f.", "stream.final_norm."), ("transformer.wte.", "wte."),
                  ("transformer.wpe.", "wpe."))


def nanogpt_state_to_reslab(state: dict, bias: bool) -> dict:
    """A nanoGPT GPT state dict under reslab's names (the causal-mask buffer of its slow attention
    path, `attn.bias` of shape (1, 1, T, T), is dropped: reslab's attention is causal by construction)."""
    out = {}
    for name, t in state.items():
        name = name.removeprefix("_orig_mod.")
        if name.endswith(".attn.bias") and (not bias or t.dim() == 4):
            continue
        for old, new in _NANOGPT_NAMES:
            name = name.replace(old, new)
        out[name] = t
    return out


def load_nanogpt_checkpoint(path) -> GPT:
    """reslab's pre-ln GPT holding the weights of a nanoGPT ckpt.pt (a file nanoGPT's train.py
    wrote: a dict of tensors and plain values, so torch.load's weights_only=True reads it)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    a = ckpt["model_args"]
    cfg = ModelConfig(design="pre-ln", vocab_size=a["vocab_size"], n_layer=a["n_layer"], n_head=a["n_head"],
                      n_embd=a["n_embd"], block_size=a["block_size"], bias=a["bias"], dropout=0.0,
                      tie_weights=True, mlp="gelu", norm="layernorm", norm_eps=1e-5)
    model = GPT(cfg)
    model.load_state_dict(nanogpt_state_to_reslab(ckpt["model"], a["bias"]), strict=True)
    return model.eval()


def load_any(arg) -> GPT:
    path = Path(arg)
    if path.is_file() and path.suffix == ".pt":
        return load_nanogpt_checkpoint(path)
    if (path / "checkpoints").is_dir():
        path = complete_checkpoints(path / "checkpoints")[-1]
    return load_model(path).eval()


def main() -> None:
    data = prepare_dataset(DataConfig(download=False, fallback=False), progress=False, log=lambda *_: None)
    for arg in sys.argv[1:]:
        model = load_any(arg)
        print(f"{arg}: full validation loss {full_val_loss(model, data.val):.4f} over {len(data.val):,} tokens")


if __name__ == "__main__":
    main()
