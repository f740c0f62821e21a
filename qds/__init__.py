"""QDS-Transformer: Long Document Ranking with Query-Directed Sparse Transformer.

Findings of EMNLP 2020 (../shared/papers/qds-transformer.txt). The model, data
module and entry points arrive with the QDS issue; until then this package only
names its paper.
"""
