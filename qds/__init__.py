"""QDS-Transformer: Long Document Ranking with Query-Directed Sparse Transformer.

Jiang, Xiong, Lee, Wang; Findings of EMNLP 2020 (../shared/papers/qds-transformer.txt).

- `qds.inputs`: the input sequence and each attention pattern's global tokens (Sec. 4.1, Table 4);
- `qds.sentences`: offline sentence splitting for the [SOS] markers;
- `qds.model`: the nn.Modules (Longformer on `common.kernels`, the official head) and the RoBERTa FirstP/MaxP
  baselines (Table 2);
- `qds.ranker`: the LightningModule `QDSRanker` (BCE, Adam, re-ranking evaluation);
- `qds.batches`: (query, document) pairs -> model batches; `qds.data`: the LightningDataModule (pointwise training
  groups, top-100 re-ranking);
- `qds.portable`: what a checkpoint carries to score without Lightning (`common.api.load`);
- `qds.checkpoint`: loading the official release; `qds.pretrained`: a BERT encoder as a Longformer;
  `common.encoders.tokenizers`: RoBERTa's or a built-in BPE;
- ``python -m qds.train``, ``python -m qds.evaluate``, ``python -m qds.benchmark`` (Table 5).
"""

#: The local attention window w (Eq. 7: |i - j| <= w / 2; the paper's 128), every QDS command's default.
WINDOW = 128
