"""`ConformerKernel`: the LightningModule that trains and evaluates NDRM1, NDRM2 or NDRM3 (Mitra et al. 2021).

Training: RankNet over each query's group of documents (`conformer_kernel.loss`), Adam with
lr 1e-4 (official default). The embedding layer starts from the data module's word2vec IN ‖ OUT
vectors (`conformer_kernel.vocab`); the vocabulary and IDFs travel inside every checkpoint, so a
checkpoint alone re-ranks and indexes. Evaluation: dev and test re-ranking measured with Table 1's
measures (NDCG@10, NCG@100, AP and RR on runs 100 deep) through the DDP-synced
`common.metrics.RankingMetrics`; the checkpoint is chosen on dev NDCG@10.
"""

from __future__ import annotations

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lightning import pytorch as L
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from common.metrics import RankingMetrics
from common.data.rerank import gather_scores
from common.training.rng import rng_states, set_rng_states
from conformer_kernel.loss import ranknet_loss
from conformer_kernel.model import DocPadding, EncoderName, Features, ModelName, build_ranker
from conformer_kernel.vocab import Resources

#: Table 1's measures; runs are 100 deep, so AP and RR are at rank 100.
MEASURES = ("ndcg_cut_10", "ncg@100", "map", "recip_rank")


class ConformerKernel(L.LightningModule):
    """NDRM1 / NDRM2 / NDRM3 with a Conformer (CK) or Transformer (TK) document encoder.

    Args:
        model: ``ndrm1`` (latent, Conformer-Kernel with QTI), ``ndrm2`` (explicit, Eq. 4) or ``ndrm3`` (both, Eq. 3).
        encoder: ``conformer`` (the paper's CK) or ``transformer`` (TK: standard attention, no convolution).
        vocab_size: embedding rows (linked from the data module's vocabulary in the CLI).
        hidden: embedding and encoder width (paper: 256); linked to 2 x the data module's word2vec dimension, and a
            multiple of `heads`.
        heads: attention heads, also the convolution's groups (paper: 32).
        layers: Conformer (or Transformer) layers of the document encoder (paper: 2).
        conv_window: the convolution's window, odd so that its output keeps the document's length (paper: 31).
        dropout: dropout probability throughout (paper: 0.2).
        kernels: RBF kernels of the kernel pooling, mu_i = 1 - 2i / kernels (paper: 10).
        sigma: the kernels' width (paper: 0.1).
        pool_window: document terms per pooling window (paper: 300).
        pool_stride: terms between the starts of two pooling windows (paper: 100).
        max_doc_terms: the document terms read (paper: 4,000; also fixes the number of pooling windows).
        identity_init: start NDRM1's query projection at the identity and its document mix at the embedding
            (not the paper's: PyTorch's default initialisation; see `conformer_kernel.model.NDRM1`).
        doc_padding: ``official`` (the official code's: the encoder reads the padding after a document's last
            term, UNK embeddings up to `max_doc_terms`) or ``zeroed`` (its convolutions read zeros there); see
            `conformer_kernel.model`, "Document padding".
        lr: Adam's learning rate (official: 1e-4).
    """

    def __init__(
        self,
        model: ModelName = "ndrm3",
        encoder: EncoderName = "conformer",
        vocab_size: PositiveInt = 3,
        hidden: PositiveInt = 256,
        heads: PositiveInt = 32,
        layers: NonNegativeInt = 2,
        conv_window: PositiveInt = 31,
        dropout: ClosedUnitInterval = 0.2,
        kernels: PositiveInt = 10,
        sigma: PositiveFloat = 0.1,
        pool_window: PositiveInt = 300,
        pool_stride: PositiveInt = 100,
        max_doc_terms: PositiveInt = 4000,
        identity_init: bool = False,
        doc_padding: DocPadding = "official",
        lr: NonNegativeFloat = 1e-4,
    ):
        super().__init__()
        self.save_hyperparameters()
        options = {} if model == "ndrm2" else dict(
            hidden=hidden, heads=heads, layers=layers, dropout=dropout, kernels=kernels, sigma=sigma,
            pool_window=pool_window, pool_stride=pool_stride, max_doc_terms=max_doc_terms, identity_init=identity_init,
            doc_padding=doc_padding,
        )  # fmt: skip
        self.ranker = build_ranker(model, vocab_size, encoder, conv_window, **options)
        rank_zero_info(f"{model} ({encoder}): {sum(p.numel() for p in self.ranker.parameters()) / 1e6:.2f}M parameters")
        self.resources: Resources | None = None
        self.metrics = nn.ModuleDict()  # per evaluation split, made in setup (they need the qrels)

    def forward(self, features: Features) -> Tensor:
        return self.ranker(features)  # (Q, D)

    # --- vocabulary and embeddings ---------------------------------------------------------

    def use_resources(self, resources: Resources) -> None:
        """Take the vocabulary and IDFs, and the pretrained embeddings when there are some (a fresh model)."""
        if len(resources) != self.hparams.vocab_size:
            raise ValueError(f"the vocabulary has {len(resources)} terms, the model {self.hparams.vocab_size} rows")
        self.resources = resources
        embed = getattr(self.ranker, "embed", None) or getattr(getattr(self.ranker, "ndrm1", None), "embed", None)
        if embed is not None and resources.embeddings is not None:
            if resources.embeddings.shape[1] != embed.embedding_dim:
                raise ValueError(f"pretrained embeddings have {resources.embeddings.shape[1]} dimensions, the model "
                                 f"{embed.embedding_dim} (hidden = 2 x word2vec dim: IN ‖ OUT)")
            with torch.no_grad():
                embed.weight.copy_(torch.from_numpy(resources.embeddings))

    # --- training -------------------------------------------------------------------------

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = ranknet_loss(self(batch["features"]), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def on_train_epoch_start(self) -> None:
        self.trainer.train_dataloader.dataset.set_epoch(self.current_epoch)  # new samples each epoch

    # --- evaluation -----------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        if self.resources is None:
            self.use_resources(data.resources)  # checkpoint weights, if any, are loaded after this
        for split in ("dev", "test"):
            if split not in self.metrics and data.has_split(split):
                # Measured on the full run (unscored candidates below), as run.trec and metrics.json are.
                self.metrics[split] = RankingMetrics(data.qrels(split), MEASURES, relevance_level=data.relevance_level,
                                                     candidates=data.candidates(split))

    def _pair_scores(self, batch: dict) -> Tensor:
        return self(batch["features"])[:, 0]  # one document per row

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.metrics["dev"].update(batch["qids"], batch["doc_ids"], self._pair_scores(batch))

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("dev")

    def on_test_epoch_start(self) -> None:
        self._scores: list[Tensor] = []

    def test_step(self, batch: dict, batch_idx: int) -> None:
        scores = self._pair_scores(batch)
        self.metrics["test"].update(batch["qids"], batch["doc_ids"], scores)
        self._scores.append(torch.stack([batch["index"].double(), scores.detach().double()], 1))  # (B, 2)

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")
        self.test_scores = gather_scores(self, self._scores)

    def _log_metrics(self, split: str) -> None:
        values = self.metrics[split].compute()
        self.log_dict({f"{split}/{name}": value.float() for name, value in values.items()}, prog_bar=split == "dev")
        self.metrics[split].reset()

    # --- checkpoints ----------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["resources"] = self.resources.state()
        checkpoint["rng_states"] = rng_states()  # a resumed run repeats an uninterrupted one

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.resources = Resources.from_state(checkpoint["resources"])
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])
        encoder = getattr(getattr(self.ranker, "ndrm1", self.ranker), "encoder", None)  # NDRM2 has none
        if encoder is not None and "doc_padding" not in checkpoint.get("hyper_parameters", {}):
            # Written before --model.doc_padding existed, when padding was always zeroed: scored as trained.
            self.hparams.doc_padding = encoder.doc_padding = "zeroed"
