"""EARL: Speedup Transformer-based Rankers with Pre-computed Representation.

Gao, Dai, Callan, 2020 (../shared/papers/earl.txt): Embed Ahead Rank Later.

- `earl.model`: T_doc, T_qry and the judge blocks (Eqs. 9-22), the S2 keys and values (Eq. 25), the
  initialisation from BERT (Sec. 3.4); the BERT ranker and BERT-Siamese baselines (Table 2) are
  `common.encoders.bert_rankers`;
- `earl.ranker`: the LightningModule (hinge loss, AdamW with warm-up and linear decay, re-ranking measures);
- `earl.data`: the LightningDataModule (training triples, re-ranking of candidate runs);
- `earl.store`: what a store of `STRATEGIES` holds; `earl.query_scorer`: how it is scored (`common.stores`);
- `earl.portable`: a trained ranker rebuilt without Lightning (`common.api.load`);
- ``python -m earl.train``, ``python -m earl.index`` (S1/S2 stores, `common.stores.representations`),
  ``python -m earl.evaluate --store``, ``python -m earl.benchmark`` (Table 3).

Nothing here imports torch: the command lines read `STRATEGIES` before they import it.
"""

#: The rankers of Table 2: EARL and its two baselines (what ``--model.architecture`` accepts).
ARCHITECTURES = ("earl", "bert_ranker", "bert_siamese")
#: What the hyper-parameters of an `earl.train` checkpoint (an `earl.ranker.EARLRanker`, any architecture) hold.
RANKER_KEYS = ("architecture", "num_blocks", "pool", "copy_cross")
#: Reuse strategies (Sec. 3.3): S1 stores D = T_doc(doc), S2 stores D' (each judge block's keys and values, Eq. 25).
STRATEGIES = ("s1", "s2")
