"""Training data: corpora (TinyShakespeare, local text, Hugging Face, KJV fallback), tokenizers,
token shards, and prepared train/val splits. See prepare.py for the folder layout.

The names below are imported on first use (PEP 562): reading a DataConfig needs no numpy."""

from .._lazy import lazy_getattr

_WHERE = {"DataConfig": "config", "cache_root": "config", "check": "config", "Corpus": "corpus",
          "load_corpus": "corpus", "PreparedData": "prepare", "load_prepared": "prepare",
          "prepare_dataset": "prepare", "read_header": "shards", "read_shard": "shards",
          "write_shard": "shards", "build_tokenizer": "tokenizers"}


__getattr__ = lazy_getattr(__name__, _WHERE)


__all__ = list(_WHERE)
