"""Text processing of the Conformer-Kernel (Mitra et al. 2021) and its official implementation.

The paper says only that queries keep their first 20 terms and documents their first 4,000
(Sec. 4, "Model training"). The official code (bmitra-msft/TREC-Deep-Learning-Quick-Start,
``model_utils.py``) fixes the rest, and this module follows it:

- `analyze`: lowercase; every character outside ``[a-z0-9]`` and whitespace becomes a space;
  split on whitespace; drop the SMART stop words (`stopwords.txt`); Krovetz-stem each term
  (``krovetzstemmer``, the official stemmer, a C++ extension from PyPI).
- `document_terms`: ``<S>`` + the ORCAS clicked queries (at most 2,000 terms, when given) + URL,
  title and body concatenated + ``</S>``. Untruncated: NDRM2 counts term frequencies and the
  length |d| on the whole document; the featuriser truncates the model's input to 4,000 terms
  (`conformer_kernel.features`).
"""

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


def _read_stopwords() -> frozenset[str]:
    lines = (Path(__file__).parent / "stopwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


STOPWORDS = _read_stopwords()


@lru_cache(maxsize=1 << 20)
def stem(word: str) -> str:
    """The Krovetz stem of a lowercase word (cached: a collection repeats its words)."""
    return _STEMMER(word)


def analyze(text: str) -> list[str]:
    """The terms of `text`: lowercase, ``[a-z0-9]`` only, no SMART stop word, Krovetz stems."""
    return [stem(w) for w in _DROP.sub(" ", text.lower()).split() if w not in STOPWORDS]


def document_terms(doc: Document, orcas: str = "", max_orcas_terms: int = 2000) -> list[str]:
    """``<S>`` + first `max_orcas_terms` ORCAS terms + URL, title and body terms + ``</S>`` (untruncated)."""
    fields = " ".join(part for part in (getattr(doc, "url", ""), doc.title, doc.text) if part)
    return [START, *analyze(orcas)[:max_orcas_terms], *analyze(fields), END]
