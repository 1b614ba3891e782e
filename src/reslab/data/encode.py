"""Text to token-id arrays, in pieces small enough to bound the memory of one encode call.

`chunks` cuts a long text where GPT-2-style pre-tokenizers split anyway, so encoding the pieces
gives the ids of the whole text. `DocumentEncoder` encodes a list of documents to numpy arrays:
  char  vectorised (a table indexed by code point): the same ids as CharTokenizer.encode, tens
        of times faster than its per-character dict lookups;
  gpt2  tiktoken's encode_ordinary, as nanoGPT's openwebtext/prepare.py does: a literal
        "<|endoftext|>" inside a document is text, not a document boundary;
  other the tokenizer's own encode_batch.
"""

from __future__ import annotations

import numpy as np

from ..errors import ReslabError
from .tokenizers import Tokenizer

CHUNK_CHARS = 1 << 16  # text per encode call: progress granularity, bounded memory per call


def chunks(text: str, safe: bool) -> list[str]:
    """Pieces of ~CHUNK_CHARS cut after a newline between two non-space characters ("word\\nWord"),
    where GPT-2-style pre-tokenizers split anyway, so the ids equal those of the whole text."""
    if not safe:
        return [text] if text else []
    out, start, n = [], 0, len(text)
    while n - start > CHUNK_CHARS:
        cut = text.find("\n", start + CHUNK_CHARS)
        while cut != -1 and cut + 1 < n and (text[cut - 1].isspace() or text[cut + 1].isspace()):
            cut = text.find("\n", cut + 1)
        if cut == -1 or cut + 1 >= n:
            break
        out.append(text[start:cut + 1])
        start = cut + 1
    if start < n:
        out.append(text[start:])
    return out


class DocumentEncoder:
    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.dtype = np.uint32
        if tok.kind == "char":
            # A table from code point to id, -1 for characters outside the vocabulary; its last
            # entry stands for every code point above the largest one, so lookups never go past it.
            codes = np.array([ord(c) for c in tok.chars], dtype=np.int64)
            self.table = np.full(int(codes.max(initial=0)) + 2, -1, dtype=np.int32)
            self.table[codes] = np.arange(len(codes), dtype=np.int32)
        # Appended after every document (nanoGPT appends enc.eot_token); "\n\n" for char.
        self.separator = np.asarray(tok.encode(tok.separator), dtype=np.uint32)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        kind = self.tok.kind
        if kind == "char":
            return [self._char(t) for t in texts]
        if kind == "gpt2":
            lists = self.tok.enc.encode_ordinary_batch(texts)
        else:
            lists = self.tok.encode_batch(texts)
        return [np.array(ids, dtype=np.uint32) for ids in lists]

    def _char(self, text: str) -> np.ndarray:
        # surrogatepass: a lone surrogate (legal in a Python str, e.g. from JSON) is one character.
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        ids = self.table[np.minimum(points, len(self.table) - 1)]
        if len(ids) and ids.min() < 0:
            c = chr(int(points[np.argmax(ids < 0)]))
            raise ReslabError(f"character {c!r} is not in this char tokenizer's {len(self.tok.chars)} characters")
        return ids.view(np.uint32)  # all >= 0: the same values
