"""EARL's and MVA's fine-tuning clips the global gradient norm at 1.0 (MORES's Hugging Face Trainer, whose
``TrainingArguments.max_grad_norm`` is 1.0; BERT's fine-tuning, google-research/bert's ``tf.clip_by_global_norm(grads,
clip_norm=1.0)``): every config of the two packages, and each command's default, resolves through the command line
to ``trainer.gradient_clip_val`` 1.0 by the norm; and one Lightning step of a tiny ranker under those trainer settings,
with a loss scaled by 10^4, hands the optimizer the gradients that ``torch.nn.utils.clip_grad_norm_(..., 1.0)`` makes
of the step's own, computed here on copies, in fp32 and in ``bf16-mixed`` (where the ranker's AdamW is not fused, so
that Lightning may clip)."""

from functools import cache
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.printed_config import printed_config

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("earl", "mva")
#: Tiny from-scratch rankers over the built-in vocabulary (no download), and their data modules' small inputs.
TINY = {"earl": {"num_layers": 2, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "num_blocks": 2,
                 "query_layers": 1, "tokenizer": "builtin"},
        "mva": {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "projection": 8,
                "tokenizer": "builtin"}}
#: What the training loss is multiplied by: gradients far above norm 1.
LOUD = 1e4


def configs() -> list[str]:
    return sorted(str(path.relative_to(REPO)) for package in PACKAGES
                  for path in (REPO / package / "configs").rglob("*.yaml"))


@cache
def resolved(name: str) -> dict:
    """The config ``python -m <package>.train [--config NAME] --print_config`` resolves (``<package>:default``: none)."""
    package, _, default = name.partition(":")
    package = name.split("/")[0] if not default else package
    main = __import__(f"{package}.train", fromlist=["main"]).main
    return printed_config(main, f"{package}.train", *([] if default else ["--config", str(REPO / name)]))


@pytest.mark.parametrize("name", [*configs(), *(f"{package}:default" for package in PACKAGES)])
def test_every_config_clips_the_global_gradient_norm_at_one(name):
    trainer = resolved(name)["trainer"]
    assert (trainer["gradient_clip_val"], trainer["gradient_clip_algorithm"]) == (1.0, "norm")


class RawGradients(L.Callback):
    """The gradients of the step as the backward pass leaves them: at ``on_before_optimizer_step``, which Lightning
    calls before it clips."""

    def on_before_optimizer_step(self, trainer, module, optimizer):
        self.parameters = [p for p in module.parameters() if p.grad is not None]
        self.gradients = [p.grad.detach().clone() for p in self.parameters]


def stepped_with(optimizer: torch.optim.Optimizer, parameters: list) -> list[torch.Tensor]:
    """The gradients AdamW's first step took: its first moment (1 - beta1) g, from zero, over (1 - beta1)."""
    (group,) = {id(g): g for g in optimizer.param_groups for p in g["params"] if p is parameters[0]}.values()
    beta1 = group["betas"][0]
    return [optimizer.state[p]["exp_avg"] / (1 - beta1) for p in parameters]


def one_step(package: str, precision: str, clip: dict) -> tuple[list, list, torch.optim.Optimizer]:
    """One optimizer step of `package`'s tiny ranker, its loss times `LOUD`, on a built-in batch of 4 triples under a
    Trainer with the `clip` settings: the backward pass's gradients, those the step took, and the optimizer."""
    ranker_module = __import__(f"{package}.ranker", fromlist=["x"])
    data_module = __import__(f"{package}.data", fromlist=["x"])
    base = ranker_module.EARLRanker if package == "earl" else ranker_module.MVARanker
    data_class = data_module.EARLDataModule if package == "earl" else data_module.MVADataModule

    class Loud(base):
        def training_loss(self, scores, batch):
            return LOUD * super().training_loss(scores, batch)

    torch.manual_seed(0)
    ranker = Loud(**TINY[package])
    data = data_class(train="builtin:train", dev=None, test=None, negatives=1, batch_size=4, query_length=12,
                      passage_length=24)
    raw = RawGradients()
    trainer = L.Trainer(max_steps=1, accelerator="cpu", devices=1, precision=precision, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[raw], **clip)
    trainer.fit(ranker, datamodule=data)
    optimizer = trainer.optimizers[0]
    return raw.gradients, stepped_with(optimizer, raw.parameters), optimizer


def clipped_by_torch(gradients: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``torch.nn.utils.clip_grad_norm_`` over copies of `gradients`."""
    parameters = [torch.nn.Parameter(torch.zeros_like(g)) for g in gradients]
    for parameter, gradient in zip(parameters, gradients):
        parameter.grad = gradient.clone()
    torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    return [parameter.grad for parameter in parameters]


def norm(gradients: list[torch.Tensor]) -> float:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gradients])).item()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("package", PACKAGES)
def test_a_step_with_a_huge_loss_steps_with_the_gradients_clipped_to_norm_one(package, precision):
    trainer = resolved(f"{package}:default")["trainer"]
    clip = {key: trainer[key] for key in ("gradient_clip_val", "gradient_clip_algorithm")}
    raw, stepped, optimizer = one_step(package, precision, clip)
    assert norm(raw) > 100  # far outside the clip
    expected = clipped_by_torch(raw, 1.0)
    for got, want in zip(stepped, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-9)
    assert norm(stepped) == pytest.approx(1.0, rel=1e-5)
    assert optimizer.defaults["fused"] is (precision == "32-true")  # Lightning clips a fused AdamW in fp32 only


@pytest.mark.parametrize("package", PACKAGES)
def test_without_the_setting_the_step_takes_the_gradients_as_they_are(package):
    """The reading itself: without ``gradient_clip_val`` the optimizer steps with the backward pass's gradients."""
    raw, stepped, optimizer = one_step(package, "32-true", {"gradient_clip_val": None})
    assert norm(raw) > 100
    for got, want in zip(stepped, raw, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-9)
    assert optimizer.defaults["fused"] is True
