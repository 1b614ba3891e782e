"""Typed configuration of the training data: which corpus, which tokenizer, how to split.

`DataConfig.from_dict` refuses unknown keys and wrong types (reslab.typed); `check` refuses
meaningless combinations. Each error names its field path, e.g. "data.path: ...".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from ..typed import Typed

CorpusKind = Literal["tinyshakespeare", "text", "hf", "kjv"]
TokenizerKind = Literal["char", "gpt2", "bpe", "hf"]

# A byte-level BPE starts from the 256 byte tokens and adds <|endoftext|>; fewer cannot encode text.
MIN_BPE_VOCAB = 257


@dataclass(frozen=True)
class DataConfig(Typed):
    TABLE = "data"

    corpus: CorpusKind = "tinyshakespeare"  # tinyshakespeare, text (a local file: path), hf (a Hugging Face dataset) or kjv
    path: Optional[str] = None            # text file for corpus=text, or an explicit TinyShakespeare file
    hf_dataset: Optional[str] = None      # corpus=hf: name passed to datasets.load_dataset
    hf_config: Optional[str] = None    # the dataset's configuration name (corpus = "hf")
    hf_split: str = "train"            # which split to read (corpus = "hf")
    hf_text_field: str = "text"        # the column holding the text (corpus = "hf")
    hf_max_docs: Optional[int] = None     # corpus=hf: first N documents (None: the whole split)
    tokenizer: TokenizerKind = "char"  # char, gpt2 (tiktoken), bpe (trained on the corpus) or hf (tokenizer_path)
    tokenizer_path: Optional[str] = None  # tokenizer=hf: a local Hugging Face tokenizer.json
    bpe_vocab_size: int = 4096            # tokenizer=bpe: vocabulary size trained on the corpus
    val_fraction: float = 0.1             # the last fraction of the text is validation (nanoGPT: 0.1)
    download: bool = True                 # fetch TinyShakespeare when no local copy is found
    fallback: bool = True                 # use the KJV Bible when TinyShakespeare is unavailable
    cache_dir: Optional[str] = None       # default: $RESLAB_DATA_DIR, else ~/.cache/reslab


def cache_root(cfg: DataConfig) -> Path:
    """Where downloads and prepared datasets live: cfg.cache_dir, $RESLAB_DATA_DIR, ~/.cache/reslab."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    env = os.environ.get("RESLAB_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "reslab"


def check(cfg: DataConfig, prefix: str = "data") -> list[str]:
    """Semantic errors (missing companions, ranges, settings that would be silently ignored)."""
    errors = []
    p = prefix + "." if prefix else ""
    if cfg.corpus == "text" and not cfg.path:
        errors.append(f"{p}path: corpus='text' needs the path of a UTF-8 text file")
    if cfg.corpus in ("hf", "kjv") and cfg.path:
        errors.append(f"{p}path: not used with corpus={cfg.corpus!r}; remove it")
    if cfg.corpus == "hf" and not cfg.hf_dataset:
        errors.append(f"{p}hf_dataset: corpus='hf' needs a dataset name, e.g. 'roneneldan/TinyStories'")
    if cfg.corpus != "hf":
        for name in ("hf_dataset", "hf_config", "hf_max_docs"):
            if getattr(cfg, name) is not None:
                errors.append(f"{p}{name}: only used with corpus='hf', not {cfg.corpus!r}")
    if cfg.corpus == "hf" and cfg.hf_max_docs is not None and cfg.hf_max_docs < 1:  # else: refused above
        errors.append(f"{p}hf_max_docs: must be a positive integer, got {cfg.hf_max_docs}")
    if not cfg.hf_text_field:
        errors.append(f"{p}hf_text_field: must name a column, got an empty string")
    if cfg.tokenizer == "hf" and not cfg.tokenizer_path:
        errors.append(f"{p}tokenizer_path: tokenizer='hf' needs the path of a local tokenizer.json")
    if cfg.tokenizer != "hf" and cfg.tokenizer_path:
        errors.append(f"{p}tokenizer_path: only used with tokenizer='hf', not {cfg.tokenizer!r}")
    if cfg.bpe_vocab_size < MIN_BPE_VOCAB or cfg.bpe_vocab_size >= 2**32:
        errors.append(f"{p}bpe_vocab_size: must be in {MIN_BPE_VOCAB}..{2**32 - 1} (256 byte tokens "
                      f"+ <|endoftext|> at least), got {cfg.bpe_vocab_size}")
    if not 0.0 < cfg.val_fraction < 1.0:
        errors.append(f"{p}val_fraction: must be in (0, 1), got {cfg.val_fraction}")
    needed = {"path": cfg.corpus == "text", "tokenizer_path": cfg.tokenizer == "hf"}  # reported above
    for name in ("path", "tokenizer_path", "cache_dir"):  # "" would silently mean the current folder
        value = getattr(cfg, name)
        if value == "" and not needed.get(name):
            errors.append(f"{p}{name}: an empty path; give a path or leave {name} out")
        elif value is not None and "\0" in value:
            errors.append(f"{p}{name}: {value!r} contains a NUL character, which no path can hold")
    return errors
