"""`QDSRanker`'s training step: the official weighted BCE, by hand; a pretrained encoder trains with its dropout."""

import math

import pytest
import torch
from torch import nn

from qds.ranker import QDSRanker


class FixedScores(nn.Module):
    """Stands in for the ranker: the scores of a training group, whatever the batch."""

    def __init__(self, scores):
        super().__init__()
        self.scores = torch.tensor(scores)

    def forward(self, batch):
        return self.scores


@pytest.mark.parametrize("negatives, balanced, positive_weight", [(3, True, 3.0), (3, False, 1.0), (1, True, 1.0)])
def test_training_step_is_the_official_weighted_bce(negatives, balanced, positive_weight):
    """Official experiment.py lines 46-49: BCEWithLogitsLoss(reduction='mean', pos_weight=[num_neg_samples]), so
    loss = mean over the documents of -w_y [y log sigmoid(s) + (1 - y) log(1 - sigmoid(s))] with w = negatives on
    the positive: -log sigmoid(s) = log(1 + e^-s) and -log(1 - sigmoid(s)) = log(1 + e^s)."""
    model = QDSRanker(tokenizer="builtin", window=4, num_layers=1, hidden_size=8, num_heads=1,
                      intermediate_size=16, max_length=64, negatives=negatives, balanced_loss=balanced)
    scores = [2.0, -1.0, 0.5, -3.0][: negatives + 1]  # the positive first, then its negatives
    model.model = FixedScores(scores)
    labels = torch.tensor([1.0] + [0.0] * negatives)
    by_hand = (positive_weight * math.log(1 + math.exp(-2.0))
               + sum(math.log(1 + math.exp(s)) for s in scores[1:])) / len(scores)
    loss = model.training_step({"labels": labels}, 0)
    assert loss.item() == pytest.approx(by_hand, abs=1e-6)


def test_a_pretrained_encoder_trains_with_its_dropout(tmp_path):
    """`from_pretrained` returns a model in eval mode and Lightning keeps the modes it finds, so the ranker puts its
    model in training mode: two training forwards of one batch then differ (dropout 0.1), as in the official loop."""
    from transformers import LongformerConfig, LongformerModel

    config = LongformerConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                              intermediate_size=16, max_position_embeddings=70, attention_window=4, pad_token_id=1,
                              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    LongformerModel(config).save_pretrained(tmp_path)
    assert not LongformerModel.from_pretrained(tmp_path).training  # what the ranker is given
    model = QDSRanker(encoder=str(tmp_path), tokenizer="builtin", window=4, max_length=64)
    assert all(module.training for module in model.modules())
    ids = torch.randint(5, 50, (2, 16))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "global_attention_mask": torch.zeros_like(ids)}
    torch.manual_seed(0)
    first = model(batch)
    assert not torch.equal(first, model(batch))
    model.eval()
    assert torch.equal(model(batch), model(batch))
