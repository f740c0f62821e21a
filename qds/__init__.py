"""QDS-Transformer: Long Document Ranking with Query-Directed Sparse Transformer (Jiang, Xiong, Lee, Wang; EMNLP 2020).

Inputs and patterns `qds.inputs`; modules `qds.model`; LightningModule `qds.ranker`; data `qds.data`; commands
``python -m qds.train``, ``qds.evaluate``, ``qds.benchmark`` (Table 5). Design notes: docs/qds.md.
"""

#: Every QDS command's defaults (the model's and the data module's alike): the pattern, the local attention window w
#: (Eq. 7: |i - j| <= w / 2; the paper's 128), the longest input in tokens (the paper's 2048), the input layout (the
#: official code's, token for token), the negatives per positive in a training group and the tokenizer (the built-in).
PATTERN, WINDOW, MAX_LENGTH, LAYOUT, NEGATIVES, TOKENIZER = "qds", 128, 2048, "official", 1, "builtin"
