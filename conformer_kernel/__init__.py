"""Conformer-Kernel with Query Term Independence: NDRM1, NDRM2, NDRM3 (Mitra et al.: "Improving Transformer-Kernel
Ranking Model Using Conformer and Query Term Independence", TREC 2020 Deep Learning track). Imports nothing.
"""

#: The featuriser's limits (the data module's defaults, the model's document length, and what a checkpoint without
#: data settings is read with): query terms (paper: 20), document terms (paper: 4,000), ORCAS terms (official: 2,000).
MAX_QUERY_TERMS, MAX_DOC_TERMS, MAX_ORCAS_TERMS = 20, 4000, 2000
#: Loader worker processes of the data module and of full ranking's index, by default: none (the main process reads).
NUM_WORKERS = 0


def hidden_size(embedding_dim: int) -> int:
    """The model's hidden size for word2vec vectors of `embedding_dim`: IN ‖ OUT (Sec. 4: 256 = 2 x 128)."""
    return 2 * embedding_dim
