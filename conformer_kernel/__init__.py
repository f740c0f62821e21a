"""Conformer-Kernel with Query Term Independence: NDRM1, NDRM2, NDRM3.

Mitra et al.: "Improving Transformer-Kernel Ranking Model Using Conformer and Query Term
Independence", TREC 2020 Deep Learning track (../shared/papers/conformer-kernel.txt).

- `conformer_kernel.model`: the nn.Modules (separable attention, Conformer layer, windowed kernel pooling,
  BatchScale, NDRM1/2/3);
- `conformer_kernel.ranker`: the LightningModule `ConformerKernelRanker` and its RankNet loss;
- `conformer_kernel.data`: the LightningDataModule; `conformer_kernel.text`, `vocab`, `features`, `orcas`: the
  official featurisation, vocabulary, IDFs, word2vec embeddings and the ORCAS field;
- `conformer_kernel.impact_index`: s_td precomputed per (term, document), and full retrieval from it;
- `conformer_kernel.portable`: a trained NDRM re-ranking through `common.api.load`, without Lightning;
- ``python -m conformer_kernel.train``, ``python -m conformer_kernel.evaluate``, ``python -m conformer_kernel.index``,
  ``python -m conformer_kernel.benchmark`` (Figure 2).

This module imports nothing: the train command's parser links `hidden_size` without importing the model.
"""


def hidden_size(embedding_dim: int) -> int:
    """The model's hidden size for word2vec vectors of `embedding_dim` dimensions: the embedding layer starts from
    the concatenation of the IN and OUT vectors (Sec. 4, "Model training": 256 = 2 x 128)."""
    return 2 * embedding_dim
