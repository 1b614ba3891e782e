"""Reference levels of a prepared dataset: the validation loss of two count models fitted on its
training split. A network whose validation loss is not below the bigram level has learned nothing a
table of one-token-context counts would not know; one at the unigram level learned only token
frequencies.

    unigram   p(b)   = (c(b) + 1) / (n + V)                         add-one smoothed frequencies
    bigram    p(b|a) = (c(a,b) + T(a) p(b)) / (c(a) + T(a))          Witten-Bell interpolation
              c(a,b) = times b follows a in the training split, c(a) = sum_b c(a,b),
              T(a)   = number of distinct tokens that follow a; a context never followed by
                       anything in training (c(a) = 0) falls back to p(b)

n is the number of training tokens used, V the vocabulary size. Witten-Bell has no parameter to
tune, so the same rule serves a 65-token character vocabulary and GPT-2's 50,257 BPE tokens.
Both levels are cross-entropies in nats over the same targets a language model is scored on: every
validation token after the first, each with its predecessor as context (m - 1 predictions for m
validation tokens). The models are fitted on at most TRAIN_LIMIT training tokens and scored on at
most VAL_LIMIT validation tokens, so a large corpus costs seconds; the dict says how many were used.
Pairs are counted sparsely, as int64 ids a * V + b sorted by np.unique: never a dense V x V table.

reference_levels(data) caches the levels as reference.json inside the prepared folder, keyed by the
dataset's key, its token counts and the limits; a cache that does not match or cannot be read is
recomputed (and rewritten), never trusted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..errors import ReslabError
from ..fileio import write_json

TRAIN_LIMIT = 20_000_000   # training tokens the count models are fitted on (at most)
VAL_LIMIT = 5_000_000      # validation tokens they are scored on (at most)
CACHE_FILE = "reference.json"
FORMAT = "reslab-reference"
VERSION = 1                # bump when the method changes: older caches are then recomputed
KEYS = ("unigram", "bigram", "method", "train_tokens", "val_tokens")


def _method(n: int, n_total: int, m: int, m_total: int) -> str:
    used_train = f"the first {n:,} of {n_total:,}" if n < n_total else f"all {n:,}"
    used_val = f"the first {m:,} of {m_total:,}" if m < m_total else f"all {m:,}"
    return (f"validation cross-entropy (nats/token) of count models fitted on {used_train} training tokens, "
            f"scored on {used_val} validation tokens ({max(m - 1, 0):,} predictions, each token after "
            "the first given its predecessor); unigram: add-one smoothed token frequencies; bigram: "
            "Witten-Bell interpolation with that unigram, p(b|a) = (c(a,b) + T(a) p(b)) / (c(a) + T(a)), "
            "T(a) = distinct followers of a")


def count_levels(train, val, vocab_size: int, train_limit: int = TRAIN_LIMIT,
                 val_limit: int = VAL_LIMIT) -> dict:
    """The unigram and bigram levels of token arrays `train` and `val` (no cache)."""
    V = int(vocab_size)
    if V < 1:
        raise ReslabError(f"reference levels: vocabulary size {vocab_size!r} is not positive")
    n_total, m_total = len(train), len(val)
    tr = np.asarray(train[:train_limit], dtype=np.int64)
    va = np.asarray(val[:val_limit], dtype=np.int64)
    n, m = len(tr), len(va)
    if n < 2 or m < 2:
        raise ReslabError(f"reference levels: need at least 2 training and 2 validation tokens "
                          f"(have {n:,} and {m:,})")
    for split, a in (("training", tr), ("validation", va)):
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= V:  # a damaged shard: indexing with it would be wrong or crash
            raise ReslabError(f"reference levels: the {split} split holds token id "
                              f"{lo if lo < 0 else hi} outside the vocabulary of {V:,}")

    p_uni = (np.bincount(tr, minlength=V) + 1.0) / (n + V)
    ctx, tgt = va[:-1], va[1:]
    pu = p_uni[tgt]
    unigram = -float(np.mean(np.log(pu)))

    ids, counts = np.unique(tr[:-1] * V + tr[1:], return_counts=True)  # sorted distinct pairs
    c_ctx = np.bincount(tr[:-1], minlength=V)
    followers = np.bincount(ids // V, minlength=V)
    query = ctx * V + tgt
    pos = np.minimum(np.searchsorted(ids, query), len(ids) - 1)
    c_pair = np.where(ids[pos] == query, counts[pos], 0)
    ca, ta = c_ctx[ctx], followers[ctx]
    # np.maximum only keeps the unused branch of an unseen context (0 / 0) from warning
    p = np.where(ca > 0, (c_pair + ta * pu) / np.maximum(ca + ta, 1), pu)
    bigram = -float(np.mean(np.log(p)))
    return {"unigram": unigram, "bigram": bigram, "method": _method(n, n_total, m, m_total),
            "train_tokens": n, "val_tokens": m}


def _identity(data) -> dict:
    """What the cached levels depend on: a cache with another identity is stale."""
    return {"key": (data.meta or {}).get("key"), "vocab_size": int(data.vocab_size),
            "train_tokens_total": int(len(data.train)), "val_tokens_total": int(len(data.val)),
            "train_limit": TRAIN_LIMIT, "val_limit": VAL_LIMIT}


def _valid_levels(levels, ident: dict) -> bool:
    if not isinstance(levels, dict) or set(levels) != set(KEYS) or not isinstance(levels["method"], str):
        return False
    for k in ("unigram", "bigram"):
        v = levels[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return False
    counts = (levels["train_tokens"], levels["val_tokens"])
    return (all(isinstance(c, int) and not isinstance(c, bool) for c in counts)
            and counts == (min(ident["train_tokens_total"], TRAIN_LIMIT), min(ident["val_tokens_total"], VAL_LIMIT)))


def _read_cache(path: Path, ident: dict) -> tuple[dict | None, str | None]:
    """(levels, None) from a valid cache; (None, why) when it is missing, damaged or stale."""
    if not path.is_file():
        return None, None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # ValueError covers bad JSON and bad UTF-8
        return None, f"unreadable ({type(e).__name__})"
    if not isinstance(obj, dict) or obj.get("format") != FORMAT or obj.get("version") != VERSION:
        return None, "not a current reference file"
    if any(obj.get(k) != v for k, v in ident.items()):
        return None, "made for other data or limits"
    if not _valid_levels(obj.get("levels"), ident):
        return None, "its levels are damaged"
    return {k: obj["levels"][k] for k in KEYS}, None


def reference_levels(data, log=None) -> dict:
    """The unigram and bigram levels (nats) of a prepared dataset (reslab.data.PreparedData):
    {"unigram", "bigram", "method", "train_tokens", "val_tokens"}. Read from reference.json in the
    dataset's folder when it is valid for this data, else counted and written there atomically
    (a folder that cannot be written only loses the cache). Raises ReslabError when the data
    cannot give levels (too short, token ids outside the vocabulary)."""
    folder = getattr(data, "folder", None)
    ident = _identity(data)
    path = Path(folder) / CACHE_FILE if folder is not None else None
    if path is not None:
        cached, why = _read_cache(path, ident)
        if cached is not None:
            return cached
        if why and log:
            log(f"data: recounting reference levels: {path} is {why}")
    levels = count_levels(data.train, data.val, data.vocab_size)
    if path is not None:
        try:
            write_json(path, {"format": FORMAT, "version": VERSION, **ident, "levels": levels})
        except OSError as e:
            if log:
                log(f"data: reference levels not cached ({path}: {e.strerror or e})")
    return levels


def levels_line(levels: dict) -> str:
    """One line for a terminal: both levels and what they are."""
    return (f"data: reference levels (validation cross-entropy, nats/token): unigram {levels['unigram']:.4f}, "
            f"bigram {levels['bigram']:.4f} (count models fitted on {levels['train_tokens']:,} training tokens, "
            f"scored on {levels['val_tokens']:,} validation tokens)")
