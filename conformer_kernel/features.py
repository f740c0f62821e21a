"""From text to the `Features` of a batch (official ``featurize``, ``model_utils.py``): queries' first 20 analysed terms
padded to 20 (BatchScale's and BatchNorm's statistics count the padded slots), documents' first 4,000 padded to the
batch's longest, tf and |d| of the untruncated document, and the ORCAS field by id or from an `OrcasDocument`.
Analysed documents are cached by a digest of their content (`content_key`), never by id alone."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from common.data.formats import Document
from conformer_kernel.model import Features
from conformer_kernel.text import analyze, document_terms
from conformer_kernel.vocab import UNK, Resources


@dataclass(frozen=True)
class OrcasDocument(Document):
    """A document with its ORCAS field, the text of its clicked queries (``""``: nobody clicked it)."""

    orcas: str = ""


def content_key(doc: Document) -> bytes:
    """A digest of `doc`'s kind and every field (id, title, text, url, ORCAS text): equal only for equal documents."""
    digest = hashlib.blake2b(type(doc).__name__.encode(), digest_size=16)
    for value in vars(doc).values():  # the dataclass's fields, in order
        data = value.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))  # length-prefixed: no two splits of the fields hash alike
        digest.update(data)
    return digest.digest()


class Featurizer:
    """Analyses queries and documents into padded `Features`; `orcas`: doc_id -> clicked queries, or None."""

    def __init__(self, resources: Resources, max_query_terms: int, max_doc_terms: int, max_orcas_terms: int,
                 orcas: Mapping[str, str] | None = None, cache_size: int = 50_000):
        self.resources, self.orcas, self.cache_size = resources, orcas, cache_size
        self.max_query_terms, self.max_doc_terms, self.max_orcas_terms = max_query_terms, max_doc_terms, max_orcas_terms
        self._cache: dict[bytes, list[str]] = {}

    def query_terms(self, text: str) -> list[str]:
        return analyze(text)[: self.max_query_terms]

    def document_terms(self, doc: Document) -> list[str]:
        key = content_key(doc)
        terms = self._cache.get(key)
        if terms is None:
            terms = document_terms(doc, self.orcas_text(doc), self.max_orcas_terms)
            if len(self._cache) < self.cache_size:
                self._cache[key] = terms
        return terms

    def orcas_text(self, doc: Document) -> str:
        """`doc`'s ORCAS field: an `OrcasDocument`'s own, else `orcas`'s for its id (``""`` without)."""
        if self.orcas is None:
            return ""
        return doc.orcas if isinstance(doc, OrcasDocument) else self.orcas.get(doc.doc_id, "")

    def batch(self, queries: Sequence[Sequence[str]], documents: Sequence[Sequence[Sequence[str]]]) -> Features:
        """Q term lists and, for each, D document term lists -> `Features` (Q, D, ...), tensors from flat lists."""
        Q, D = len(queries), len(documents[0])
        if any(len(docs) != D for docs in documents):
            raise ValueError("every query needs the same number of documents")
        Tq = max(self.max_query_terms, *(len(q) for q in queries))
        Td = max(min(len(d), self.max_doc_terms) for docs in documents for d in docs)
        vocabulary, idf = self.resources, self.resources.idf
        query_ids, query_idf, doc_ids, tf, doc_length, kept = [], [], [], [], [], []
        for terms, docs in zip(queries, documents):
            query_ids += vocabulary.id_list(terms) + [UNK] * (Tq - len(terms))
            query_idf += [idf.get(t, 0.0) for t in terms] + [0.0] * (Tq - len(terms))
            for doc in docs:
                read = doc[: self.max_doc_terms]
                doc_ids += vocabulary.id_list(read) + [UNK] * (Td - len(read))
                counts = Counter(doc)  # the untruncated document
                tf += [float(counts[t]) for t in terms] + [0.0] * (Tq - len(terms))
                doc_length.append(float(len(doc)))
                kept.append(len(read))
        query_terms = torch.tensor([len(terms) for terms in queries])
        return Features(torch.tensor(query_ids, dtype=torch.long).view(Q, Tq),
                        (torch.arange(Tq) < query_terms[:, None]).float(), torch.tensor(query_idf).view(Q, Tq),
                        torch.tensor(doc_ids, dtype=torch.long).view(Q, D, Td),
                        (torch.arange(Td) < torch.tensor(kept).view(Q, D, 1)).float(),
                        torch.tensor(tf).view(Q, D, Tq), torch.tensor(doc_length).view(Q, D))


def encode_pairs(featurizer: Featurizer, queries: list[str], documents: list[Document]) -> dict:
    """`common.data.rerank.RerankPairs`' encoder: one (query, document) pair per row, as {"features": `Features`}."""
    f = featurizer
    return {"features": f.batch([f.query_terms(q) for q in queries], [[f.document_terms(d)] for d in documents])}
