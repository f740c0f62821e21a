"""`ConformerKernelRanker`: the LightningModule that trains and evaluates NDRM1, NDRM2 or NDRM3
(`conformer_kernel.model`; Mitra et al., TREC 2020 Deep Learning track) with RankNet over each query's documents
(Sec. 4; official ``loss.py``) and Adam at lr 1e-4 (the official default; the paper gives none). The embeddings start
from the word2vec IN ‖ OUT vectors; the vocabulary and IDFs travel in every checkpoint (`conformer_kernel.portable`).
Dev and test re-ranking are measured with Table 1's measures; dev NDCG@10 selects the checkpoint.

Difference from the official loss: ``logsigmoid`` instead of log(σ + 1e-6), the same value, stable where σ underflows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lightning import pytorch as L
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from common.refusals import SettingError
from common.training.reranking import RerankingEvaluation
from conformer_kernel import MAX_DOC_TERMS
from conformer_kernel.model import DocPadding, EncoderName, Features, ModelName, ranker_from_settings
from conformer_kernel.vocab import Resources

#: Table 1's measures; runs are 100 deep, so AP and RR are at rank 100.
MEASURES = ("ndcg_cut_10", "ncg@100", "map", "recip_rank")


def ranknet_loss(scores: Tensor, labels: Tensor) -> Tensor:
    """RankNet: the mean over queries of each one's mean -log σ(s_i - s_j) over pairs with label_i > label_j."""
    diff = scores[:, :, None] - scores[:, None, :]  # (Q, D, D): s_i - s_j
    pairs = (labels[:, :, None] > labels[:, None, :]).to(scores.dtype)  # (Q, D, D): label_i > label_j
    per_query = (-F.logsigmoid(diff) * pairs).sum((1, 2)) / pairs.sum((1, 2)).clamp_min(1.0)  # (Q,)
    return per_query.mean()


class ConformerKernelRanker(RerankingEvaluation, L.LightningModule):
    """NDRM1 / NDRM2 / NDRM3 with a Conformer (CK) or Transformer (TK) document encoder.

    Args:
        model: ``ndrm1`` (latent, Conformer-Kernel with QTI), ``ndrm2`` (explicit, Eq. 4) or ``ndrm3`` (both, Eq. 3).
        encoder: ``conformer`` (the paper's CK) or ``transformer`` (TK: standard attention, no convolution).
        vocab_size: embedding rows (linked from the data module's vocabulary in the CLI).
        hidden_size: embedding and encoder width (paper: 256); linked from the data module's word2vec dimension
            (`conformer_kernel.hidden_size`), and a multiple of `num_heads`.
        num_heads: attention heads, also the convolution's groups (paper: 32).
        num_layers: Conformer (or Transformer) layers of the document encoder (paper: 2).
        conv_window: the convolution's window, odd so that its output keeps the document's length (paper: 31).
        dropout: dropout probability throughout (paper: 0.2).
        kernels: RBF kernels of the kernel pooling, mu_i = 1 - 2i / kernels (paper: 10).
        sigma: the kernels' width (paper: 0.1).
        pool_window: document terms per pooling window (paper: 300).
        pool_stride: terms between the starts of two pooling windows (paper: 100).
        max_doc_terms: the document terms read (paper: 4,000; also fixes the number of pooling windows).
        identity_init: start NDRM1's query projection at the identity, its document mix at the embedding (not the
            paper's: PyTorch's default initialisation).
        doc_padding: ``official`` (the official code's: the encoder reads UNK embeddings after a document's last term,
            up to `max_doc_terms`) or ``zeroed`` (its convolutions read zeros there; docs/conformer_kernel.md).
        lr: Adam's learning rate (official: 1e-4).
    """

    measures = MEASURES

    def __init__(
        self,
        model: ModelName = "ndrm3",
        encoder: EncoderName = "conformer",
        vocab_size: PositiveInt = 3,
        hidden_size: PositiveInt = 256,
        num_heads: PositiveInt = 32,
        num_layers: NonNegativeInt = 2,
        conv_window: PositiveInt = 31,
        dropout: ClosedUnitInterval = 0.2,
        kernels: PositiveInt = 10,
        sigma: PositiveFloat = 0.1,
        pool_window: PositiveInt = 300,
        pool_stride: PositiveInt = 100,
        max_doc_terms: PositiveInt = MAX_DOC_TERMS,
        identity_init: bool = False,
        doc_padding: DocPadding = "official",
        lr: NonNegativeFloat = 1e-4,
    ):
        if model != "ndrm2" and hidden_size % num_heads:  # NDRM2 matches terms explicitly: no encoder
            raise SettingError("model.num_heads",
                               f"must divide the hidden size {hidden_size} (2 x --data.embedding_dim), got {num_heads}")
        if model != "ndrm2" and encoder == "conformer" and conv_window % 2 == 0:
            raise SettingError("model.conv_window", f"must be odd (the convolution keeps the document's length), got "
                                                    f"{conv_window}")
        super().__init__()
        self.save_hyperparameters()
        self.model = ranker_from_settings(self.hparams)
        rank_zero_info(f"{model} ({encoder}): {sum(p.numel() for p in self.model.parameters()) / 1e6:.2f}M parameters")
        self.resources: Resources | None = None
        self.metrics = nn.ModuleDict()  # per evaluation split, made in setup (they need the qrels)

    def forward(self, features: Features) -> Tensor:
        return self.model(features)  # (Q, D)

    def evaluation_scores(self, batch: dict) -> Tensor:
        return self.model(batch["features"])[:, 0]  # (B,): evaluation batches hold one document per query row

    def use_resources(self, resources: Resources) -> None:
        """Take the vocabulary and IDFs, and the pretrained embeddings when there are some (a fresh model)."""
        if len(resources) != self.hparams.vocab_size:
            raise ValueError(f"the vocabulary has {len(resources)} terms, the model {self.hparams.vocab_size} rows")
        self.resources = resources
        embed = getattr(self.model, "embed", None) or getattr(getattr(self.model, "ndrm1", None), "embed", None)
        if embed is not None and resources.embeddings is not None:
            if resources.embeddings.shape[1] != embed.embedding_dim:
                raise ValueError(f"pretrained embeddings have {resources.embeddings.shape[1]} dimensions, the model "
                                 f"{embed.embedding_dim} (conformer_kernel.hidden_size: IN ‖ OUT)")
            with torch.no_grad():
                embed.weight.copy_(torch.from_numpy(resources.embeddings))

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = ranknet_loss(self(batch["features"]), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def setup(self, stage: str) -> None:
        if self.resources is None:
            self.use_resources(self.trainer.datamodule.resources)  # checkpoint weights, if any, are loaded after this
        super().setup(stage)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Also the vocabulary and IDFs (`common.api.load` reads them; stored once)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["resources"] = self.resources.state()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.resources = Resources.from_state(checkpoint["resources"])
