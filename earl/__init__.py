"""EARL: Speedup Transformer-based Rankers with Pre-computed Representation (Gao, Dai, Callan, 2020). Imports nothing:
the command lines read `STRATEGIES` before they import torch."""

#: The rankers of Table 2: EARL and its two baselines (what ``--model.architecture`` accepts).
ARCHITECTURES = ("earl", "bert_ranker", "bert_siamese")
#: What the hyper-parameters of an `earl.train` checkpoint (an `earl.ranker.EARLRanker`, any architecture) hold.
RANKER_KEYS = ("architecture", "num_blocks", "pool", "copy_cross")
#: EARL's defaults, the ranker's and the model builder's: [CLS] pooling, T_qry apart from T_doc, BERT's
#: self-attention copied into the cross-attention, the hinge loss and its margin (module docs of `earl.ranker`).
POOL, TIED, COPY_CROSS, LOSS, MARGIN = "cls", False, True, "hinge", 1.0
#: Reuse strategies (Sec. 3.3): S1 stores D = T_doc(doc), S2 stores D' (each judge block's keys and values, Eq. 25).
STRATEGIES = ("s1", "s2")
