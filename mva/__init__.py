"""Multi-Vector Attention Models for Deep Re-ranking.

Zhou and Devlin, 2021 (../shared/papers/mva.txt): MVA re-ranking with learned pooling tokens and down-projected
document vectors.

- `mva.model`: pooling (Sec. 2.2), the MVA scoring head (Sec. 2.1, single- and multi-head); the dual-encoder (DE)
  and cross-attention (CA) baselines are `common.encoders.bert_rankers`;
- `mva.data`, `mva.ranker`, `mva.train` (``python -m mva.train``): the data module (groups of a positive and
  negatives, re-ranking), the LightningModule (the softmax loss of Sec. 2.3, Adam, warm-up), the command with DE
  and CA trained beside MVA (``--compare_with``); `mva/configs/builtin.yaml` is its embedded default;
- `mva.pretrain` (``python -m mva.pretrain``): MLM and NSP pre-training on a collection's passages (Sec. 3): CA,
  the DE with the two segments encoded apart, and MVA (its head and [CLS] embeddings) from the DE;
- `mva.store`, `mva.query_scorer`, `mva.index` (``python -m mva.index``), `mva.evaluate` (``python -m
  mva.evaluate``): documents' [D_K | D_V] (or DE's vector) stored ahead of time (the `STORED` architectures),
  scoring from the store, multi-pass re-ranking (Table 6);
- `mva.portable`: a trained ranker rebuilt without Lightning (`common.api.load`);
- `mva.costs` (``python -m mva.costs``): joint compute and storage of Tables 5 and 6;
  `mva.benchmark` (``python -m mva.benchmark``): the same joint compute, timed.

Nothing here imports torch: the command lines read `STORED` before they import it.
"""

#: MVA and its baselines of Tables 5 and 6: the dual encoder (DE) and cross-attention (CA).
ARCHITECTURES = ("mva", "de", "ca")
#: What the hyper-parameters of an `mva.train` checkpoint (an `mva.ranker.MVARanker`, any architecture) hold.
RANKER_KEYS = ("architecture", "projection", "heads", "query_pooling", "doc_pooling")
#: The architectures whose document side is computed without the query, so can be stored (CA reads both together).
STORED = ("mva", "de")
