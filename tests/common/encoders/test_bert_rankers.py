"""`common.encoders.bert_rankers.BertSiamese`'s pooling and similarity on hand-made encoder outputs."""

import math
from types import SimpleNamespace

import pytest
import torch

from common.encoders.bert_rankers import BertSiamese
from tests.gradients import assert_repeatable_gradients


class FixedEncoder(torch.nn.Module):
    """Stands in for BERT: returns the hidden states given for each input's first token id."""

    def __init__(self, hidden: dict[int, list[list[float]]]):
        super().__init__()
        self.hidden = {key: torch.tensor(value) for key, value in hidden.items()}

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(last_hidden_state=torch.stack([self.hidden[int(row[0])] for row in input_ids]))


# query: outputs (1, 0), (3, 4) and a padded (100, 100); document: (0, 2) and a padded (9, 9)
ENCODER = FixedEncoder({1: [[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]], 2: [[0.0, 2.0], [9.0, 9.0], [9.0, 9.0]]})
BATCH = {"query_tokens": torch.tensor([[1, 5, 0]]), "query_mask": torch.tensor([[1, 1, 0]]),
         "query_index": torch.tensor([0]), "doc_tokens": torch.tensor([[2, 0, 0]]),
         "doc_mask": torch.tensor([[1, 0, 0]])}


def test_cls_dot_product():
    """The paper's DE: (1, 0) . (0, 2) = 0."""
    assert BertSiamese(ENCODER)(BATCH).item() == 0.0


def test_mean_pooling_over_real_positions_with_a_dot_product():
    """Means (2, 2) (padding left out) and (0, 2): dot product 4."""
    assert BertSiamese(ENCODER, pooling="mean")(BATCH).item() == pytest.approx(4.0, abs=1e-6)


def test_scaled_cosine_of_the_means():
    """cos((2, 2), (0, 2)) = 1/sqrt(2), times s = 20; each embedding is its unit vector times sqrt(20)."""
    siamese = BertSiamese(ENCODER, pooling="mean", cosine_scale=20.0)
    assert siamese(BATCH).item() == pytest.approx(20 / math.sqrt(2), abs=1e-5)
    query = siamese.embed(BATCH["query_tokens"], BATCH["query_mask"])
    torch.testing.assert_close(query, torch.tensor([[math.sqrt(10), math.sqrt(10)]]))


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="pooling must be cls or mean, got 'max'"):
        BertSiamese(ENCODER, pooling="max")
    with pytest.raises(ValueError, match="cosine_scale must be positive"):
        BertSiamese(ENCODER, cosine_scale=0.0)


class EmbeddingEncoder(torch.nn.Module):
    """Stands in for BERT: each token's hidden state is its learned embedding."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embeddings = torch.nn.Embedding(vocab, hidden)

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(last_hidden_state=self.embeddings(input_ids))


def test_gradients_repeat_when_a_query_scores_many_documents():
    """The DE encodes each query once and spreads it over its documents: the query side's gradients are the same
    sums, in the same order, on every run (1,024 pairs of 4 queries, 65,536 floats spread)."""
    torch.manual_seed(9)
    encoder = EmbeddingEncoder(50, 64)
    batch = {"query_tokens": torch.randint(1, 50, (4, 5)), "query_mask": torch.ones(4, 5, dtype=torch.long),
             "query_index": torch.arange(1024) % 4, "doc_tokens": torch.randint(1, 50, (1024, 3)),
             "doc_mask": torch.ones(1024, 3, dtype=torch.long)}
    assert_repeatable_gradients(lambda: BertSiamese(encoder)(batch).sum(), list(encoder.parameters()))
