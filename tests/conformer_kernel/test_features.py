"""Featurizer.batch on a tiny hand-made vocabulary; document terms cached by content, with their ORCAS field."""

import pytest
import torch

from common.data.formats import Document
from conformer_kernel.features import OrcasDocument
from conformer_kernel.vocab import Resources
from tests.conformer_kernel import featurizer_of


def _resources() -> Resources:
    return Resources(terms=["UNK", "<S>", "</S>", "cat", "dog"], idf={"cat": 1.5, "dog": 0.5, "bird": 2.0})


def test_batch_hand_example():
    featurizer = featurizer_of(_resources(), max_doc_terms=4)
    query = ["cat", "bird", "dog"]
    doc0 = ["<S>", "cat", "dog", "cat", "bird", "cat", "</S>"]  # 7 terms, the model reads the first 4
    doc1 = ["<S>", "dog", "</S>"]
    f = featurizer.batch([query], [[doc0, doc1]])

    ids = torch.zeros(1, 20, dtype=torch.long)
    ids[0, :3] = torch.tensor([3, 0, 4])  # bird is not in the vocabulary: UNK = 0
    assert torch.equal(f.query_ids, ids)
    mask = torch.zeros(1, 20)
    mask[0, :3] = 1.0
    assert torch.equal(f.query_mask, mask)
    idf = torch.zeros(1, 20)
    idf[0, :3] = torch.tensor([1.5, 2.0, 0.5])  # ... but keeps its IDF
    assert torch.equal(f.query_idf, idf)

    assert torch.equal(f.doc_ids, torch.tensor([[[1, 3, 4, 3], [1, 4, 2, 0]]]))
    assert torch.equal(f.doc_mask, torch.tensor([[[1.0, 1, 1, 1], [1, 1, 1, 0]]]))
    tf = torch.zeros(1, 2, 20)
    tf[0, 0, :3] = torch.tensor([3.0, 1.0, 1.0])  # counted on all 7 terms: the 3rd cat and bird are past 4
    tf[0, 1, :3] = torch.tensor([0.0, 0.0, 1.0])
    assert torch.equal(f.tf, tf)
    assert torch.equal(f.doc_length, torch.tensor([[7.0, 3.0]]))  # untruncated, markers included
    assert f.query_ids.dtype == f.doc_ids.dtype == torch.long


def test_batch_two_queries_pad_to_longest_document():
    featurizer = featurizer_of(_resources(), max_doc_terms=4000)
    f = featurizer.batch([["dog"], ["cat", "cat"]], [[["<S>", "dog", "</S>"]], [["<S>", "cat", "dog", "cat", "</S>"]]])
    assert f.doc_ids.shape == (2, 1, 5)
    assert torch.equal(f.doc_ids, torch.tensor([[[1, 4, 2, 0, 0]], [[1, 3, 4, 3, 2]]]))
    assert torch.equal(f.doc_mask.sum(-1), torch.tensor([[3.0], [5.0]]))
    assert torch.equal(f.tf[:, 0, :2], torch.tensor([[1.0, 0.0], [2.0, 2.0]]))  # a repeated term counts each time
    assert torch.equal(f.query_idf[:, :2], torch.tensor([[0.5, 0.0], [1.5, 1.5]]))
    assert torch.equal(f.doc_length, torch.tensor([[3.0], [5.0]]))
    with pytest.raises(ValueError, match="same number of documents"):
        featurizer.batch([["dog"], ["cat"]], [[["dog"]], [["cat"], ["dog"]]])


def test_long_pseudo_query_is_not_truncated():
    featurizer = featurizer_of(_resources())
    terms = ["cat", "dog"] * 13  # 26 terms
    f = featurizer.batch([terms], [[["<S>", "cat", "</S>"]]])
    assert f.query_ids.shape == (1, 26) and f.query_mask.sum().item() == 26
    assert torch.equal(f.tf[0, 0], torch.tensor([1.0, 0.0] * 13))


def test_query_and_document_terms():
    featurizer = featurizer_of(_resources(), max_query_terms=20,
                            orcas={"D1": "cat videos"}, max_orcas_terms=1)
    text = " ".join(f"t{i}" for i in range(30))
    assert featurizer.query_terms(text) == [f"t{i}" for i in range(20)]
    assert featurizer.query_terms("The cats and the dogs") == ["cat", "dogs"]  # Krovetz keeps 'dogs'
    doc = Document("D1", text="Dog food", title="Cats")
    assert featurizer.document_terms(doc) == ["<S>", "cat", "cat", "dog", "food", "</S>"]
    assert featurizer.document_terms(Document("D2", "bird")) == ["<S>", "bird", "</S>"]


def test_documents_of_one_id_are_cached_by_their_content():
    featurizer = featurizer_of(_resources())
    assert featurizer.document_terms(Document("d1", "cats and dog")) == ["<S>", "cat", "dog", "</S>"]
    assert featurizer.document_terms(Document("d1", "birds")) == ["<S>", "bird", "</S>"]
    assert featurizer.document_terms(Document("d1", "birds", url="http://cat")) == ["<S>", "http", "cat", "bird",
                                                                                    "</S>"]
    assert featurizer.document_terms(Document("", "dog")) == ["<S>", "dog", "</S>"]
    assert featurizer.document_terms(Document("", "cats")) == ["<S>", "cat", "</S>"]


def test_the_orcas_field_comes_from_the_data_or_the_document():
    data = featurizer_of(_resources(), orcas={"d1": "dog bird"})
    assert data.document_terms(Document("d1", "cat")) == ["<S>", "dog", "bird", "cat", "</S>"]
    assert data.document_terms(Document("d2", "cat")) == ["<S>", "cat", "</S>"]  # nobody clicked it
    assert data.document_terms(OrcasDocument("d1", "cat", orcas="bird")) == ["<S>", "bird", "cat", "</S>"]
    given = featurizer_of(_resources(), orcas={})
    assert given.document_terms(OrcasDocument("d1", "cat", orcas="dog")) == ["<S>", "dog", "cat", "</S>"]
    assert given.document_terms(OrcasDocument("d1", "cat", orcas="")) == ["<S>", "cat", "</S>"]
    assert given.document_terms(Document("d1", "cat")) == ["<S>", "cat", "</S>"]
    without = featurizer_of(_resources())
    assert without.document_terms(OrcasDocument("d1", "cat", orcas="dog")) == ["<S>", "cat", "</S>"]
