"""Conformer-Kernel with Query Term Independence: NDRM1, NDRM2, NDRM3 (Mitra et al.: "Improving Transformer-Kernel
Ranking Model Using Conformer and Query Term Independence", TREC 2020 Deep Learning track). Imports nothing.
"""


def hidden_size(embedding_dim: int) -> int:
    """The model's hidden size for word2vec vectors of `embedding_dim`: IN ‖ OUT (Sec. 4: 256 = 2 x 128)."""
    return 2 * embedding_dim
