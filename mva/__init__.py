"""Multi-Vector Attention Models for Deep Re-ranking (Zhou and Devlin 2021, ../shared/papers/mva.txt). Nothing here
imports torch.
"""

#: MVA and its baselines of Tables 5 and 6: the dual encoder (DE) and cross-attention (CA).
ARCHITECTURES = ("mva", "de", "ca")
#: Query and passage tokens read, [CLS] and [SEP] included (Sec. 3): the data module's defaults, and what
#: ``mva.evaluate`` reads where a checkpoint's data settings give none.
QUERY_LENGTH, PASSAGE_LENGTH = 32, 112
#: What the hyper-parameters of an `mva.train` checkpoint (an `mva.ranker.MVARanker`, any architecture) hold.
RANKER_KEYS = ("architecture", "projection", "heads", "query_pooling", "doc_pooling")
#: The architectures whose document side is computed without the query, so can be stored (CA reads both together).
STORED = ("mva", "de")
