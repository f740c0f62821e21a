"""Multi-Vector Attention Models for Deep Re-ranking.

Zhou and Devlin, 2021 (../shared/papers/mva.txt): MVA re-ranking with learned pooling tokens and down-projected
document vectors.

- `mva.model`: pooling (Sec. 2.2), the MVA scoring head (Sec. 2.1, single- and multi-head), the softmax loss
  (Sec. 2.3); the dual-encoder (DE) and cross-attention (CA) baselines are `common.bert_rankers`;
- `mva.costs` (``python -m mva.costs``): joint compute and storage of Tables 5 and 6.
"""
