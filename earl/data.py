"""EARL's LightningDataModule: (query, positive, negative) triples for the hinge loss, queries of 16 and passages of
128 tokens (MORES's limits), read apart by EARL and BERT-Siamese, concatenated by the BERT ranker."""

from __future__ import annotations

from typing import Literal

from common.encoders.bert_data import BertTriplesDataModule, with_defaults
from earl import ARCHITECTURES

Architecture = Literal[ARCHITECTURES]


class EARLDataModule(BertTriplesDataModule):
    """Training, dev and test data of EARL and its baselines (see the module docstring).

    Args:
        query_length: query tokens read, [CLS] and [SEP] included (MORES: 16).
        passage_length: passage tokens read, [CLS] and [SEP] included (MORES: 128).
        negatives: non-relevant candidates per positive, each a hinge pair with it (paper: 1, triples).
        batch_size: training triples per batch (paper: 128).
    """

    cross_encoder = "bert_ranker"
    __init__ = with_defaults(BertTriplesDataModule.__init__, {"architecture": Architecture}, architecture="earl",
                             query_length=16, passage_length=128, batch_size=128)
