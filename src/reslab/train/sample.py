"""Generate text from a run folder (its best or last checkpoint) or from a model folder."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..errors import ConfigError, ReslabError
from ..fileio import read_json
from ..model.io import load_model
from .checkpoint import model_folder_of


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def sampling_errors(tokens, temperature, top_k, seed) -> list[str]:
    """The settings' problems, named by their `reslab sample` flags (the CLI checks the same ranges
    while parsing; this guards the Python API). nan passes every comparison, hence isfinite."""
    errors = []
    if not _is_int(tokens) or tokens < 1:
        errors.append(f"--tokens: must be an integer >= 1, got {tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not (math.isfinite(temperature) and temperature > 0):
        errors.append(f"--temperature: must be a positive finite number, got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        errors.append(f"--top-k: must be an integer >= 1 (or None for no cut), got {top_k!r}")
    if not _is_int(seed) or not 0 <= seed < 2**63:
        errors.append(f"--seed: must be an integer in 0..2^63-1, got {seed!r}")
    return errors


def sample(path: str | Path, prompt: str = "\n", tokens: int = 300, temperature: float = 0.8,
           top_k: int | None = 200, seed: int = 0, which: str = "best") -> str:
    from ..data.tokenizers import from_json

    errors = sampling_errors(tokens, temperature, top_k, seed)
    if errors:
        raise ConfigError(errors)
    model_dir, tok_dir = model_folder_of(Path(path), which)
    tok_path = tok_dir / "tokenizer.json"
    tokenizer = from_json(read_json(tok_path, "the run's tokenizer, needed for sampling"), where=str(tok_path))
    model = load_model(model_dir).eval()
    try:
        ids = tokenizer.encode(prompt)
    except (KeyError, ValueError) as e:
        raise ReslabError(f"--prompt: cannot be encoded by this run's tokenizer ({e})") from None
    if not ids:
        raise ReslabError("--prompt: encodes to no tokens")
    if max(ids) >= model.config.vocab_size:  # a tokenizer.json that is not this model's
        raise ReslabError(f"{tok_path}: gives token id {max(ids)}, but the model in {model_dir} has "
                          f"{model.config.vocab_size} tokens; the tokenizer belongs to another model")
    idx = torch.tensor([ids], dtype=torch.long)
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k,
                         generator=torch.Generator().manual_seed(seed), vocab_limit=tokenizer.vocab_size)
    try:
        return tokenizer.decode(out[0].tolist())
    except (TypeError, ValueError, IndexError, KeyError) as e:  # e.g. a char tokenizer whose chars are not strings
        raise ReslabError(f"{tok_path}: cannot decode the sampled tokens ({type(e).__name__}: {e}); "
                          "the tokenizer file is damaged") from None
