"""Text processing of the Conformer-Kernel as the official ``model_utils.py`` does it (the paper says only: queries'
first 20 terms, documents' first 4,000): lowercase, ``[a-z0-9]``, no SMART stop word, Krovetz stems; a document is
untruncated here (NDRM2 counts tf and |d| on the whole document)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import krovetzstemmer

from common.data.formats import Document

#: Marker terms around every document; with UNK they are vocabulary ids 0-2 (`conformer_kernel.vocab`).
START, END = "<S>", "</S>"

_DROP = re.compile(r"[^a-z0-9\s]+")
_STEMMER = krovetzstemmer.Stemmer()
_STOPWORD_LINES = (Path(__file__).parent / "stopwords.txt").read_text(encoding="utf-8").splitlines()
STOPWORDS = frozenset(w for line in _STOPWORD_LINES if not line.startswith("#") for w in line.split())


@lru_cache(maxsize=1 << 20)
def stem(word: str) -> str:
    """The Krovetz stem of a lowercase word (cached: a collection repeats its words)."""
    return _STEMMER(word)


def analyze(text: str) -> list[str]:
    return [stem(w) for w in _DROP.sub(" ", text.lower()).split() if w not in STOPWORDS]


def document_terms(doc: Document, orcas: str, max_orcas_terms: int) -> list[str]:
    """``<S>`` + first `max_orcas_terms` ORCAS terms + URL, title and body terms + ``</S>`` (untruncated)."""
    fields = " ".join(part for part in (getattr(doc, "url", ""), doc.title, doc.text) if part)
    return [START, *analyze(orcas)[:max_orcas_terms], *analyze(fields), END]
