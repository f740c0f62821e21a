"""QDS-Transformer: Long Document Ranking with Query-Directed Sparse Transformer (Jiang, Xiong, Lee, Wang; EMNLP 2020).

Inputs and patterns `qds.inputs`; modules `qds.model`; LightningModule `qds.ranker`; data `qds.data`; commands
``python -m qds.train``, ``qds.evaluate``, ``qds.benchmark`` (Table 5). Design notes: docs/qds.md.
"""

#: Every QDS command's defaults: the local attention window w (Eq. 7: |i - j| <= w / 2; the paper's 128), the longest
#: input in tokens (the paper's 2048) and the input layout (the official code's, token for token).
WINDOW, MAX_LENGTH, LAYOUT = 128, 2048, "official"
