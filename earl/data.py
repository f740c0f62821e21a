"""EARL's LightningDataModule: (query, positive, negative) training triples and re-ranking of candidate runs
(`common.encoders.bert_data.BertTriplesDataModule` with EARL's architectures and defaults).

- Training (Sec. 3.4, pairwise hinge loss): each positive with `negatives` of its query's candidates, each a hinge
  pair with it.
- Inputs: queries of 16 and passages of 128 tokens, special tokens included (MORES's limits). EARL and BERT-Siamese
  read them apart, each distinct query once per batch (so T_qry runs once per query); the BERT ranker reads them
  concatenated.
"""

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
