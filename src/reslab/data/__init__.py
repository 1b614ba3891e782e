"""Training data: corpora (TinyShakespeare, local text, Hugging Face, KJV fallback), tokenizers,
token shards, and prepared train/val splits. See prepare.py for the folder layout."""

from .config import DataConfig, cache_root, check
from .corpus import Corpus, load_corpus
from .prepare import PreparedData, load_prepared, prepare_dataset
from .shards import read_header, read_shard, write_shard
from .tokenizers import build_tokenizer

__all__ = ["DataConfig", "cache_root", "check", "Corpus", "load_corpus", "PreparedData", "load_prepared",
           "prepare_dataset", "read_header", "read_shard", "write_shard", "build_tokenizer"]
