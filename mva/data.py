"""MVA's LightningDataModule: each positive with `negatives` of its query's candidates in a softmax group (Sec. 2.3);
queries of 32 and passages of 112 tokens (Sec. 3), read apart by MVA and DE, concatenated by CA."""

from __future__ import annotations

from typing import Literal

from common.encoders.bert_data import BertTriplesDataModule, with_defaults
from mva import ARCHITECTURES, PASSAGE_LENGTH, QUERY_LENGTH

Architecture = Literal[ARCHITECTURES]


class MVADataModule(BertTriplesDataModule):
    """Training, dev and test data of MVA and its baselines (see the module docstring).

    Args:
        query_length: query tokens read, [CLS] and [SEP] included (paper: 32).
        passage_length: passage tokens read, [CLS] and [SEP] included (paper: 112).
        negatives: non-relevant candidates per positive in its softmax group (paper: 1, triples).
        batch_size: training triples per batch (paper: 256).
    """

    cross_encoder = "ca"
    __init__ = with_defaults(BertTriplesDataModule.__init__, {"architecture": Architecture}, architecture="mva",
                             query_length=QUERY_LENGTH, passage_length=PASSAGE_LENGTH, batch_size=256)
