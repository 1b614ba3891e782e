"""Generate text from a run folder (its best or last checkpoint) or from a model folder."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ReslabError
from ..fileio import read_json
from ..model.io import load_model
from .checkpoint import model_folder_of


def sample(path: str | Path, prompt: str = "\n", tokens: int = 300, temperature: float = 0.8,
           top_k: int | None = 200, seed: int = 0, which: str = "best") -> str:
    from ..data.tokenizers import from_json

    model_dir, tok_dir = model_folder_of(Path(path), which)
    tok_path = tok_dir / "tokenizer.json"
    tokenizer = from_json(read_json(tok_path, "the run's tokenizer, needed for sampling"), where=str(tok_path))
    if tokens < 1 or temperature <= 0:
        raise ReslabError("--tokens must be >= 1 and --temperature > 0")
    model = load_model(model_dir).eval()
    try:
        ids = tokenizer.encode(prompt)
    except (KeyError, ValueError) as e:
        raise ReslabError(f"--prompt: cannot be encoded by this run's tokenizer ({e})") from None
    if not ids:
        raise ReslabError("--prompt: encodes to no tokens")
    idx = torch.tensor([ids], dtype=torch.long)
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k,
                         generator=torch.Generator().manual_seed(seed), vocab_limit=tokenizer.vocab_size)
    return tokenizer.decode(out[0].tolist())
