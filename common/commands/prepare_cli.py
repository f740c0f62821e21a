"""What ``python -m <package>.prepare`` builds once its command line has passed the front door: train's CLI up to
its model and data module (`PrepareCLI`), then every cache the data module reads (`prepare_caches`).

Apart from `common.commands.prepare`, whose import must not pay for Lightning (``--help``, bad options).
"""

from __future__ import annotations

from common.commands.cli import INPUT_ERRORS, RankerCLI
from common.encoders.tokenizers import BUILTIN, TRAIN, LazyTokenizer
from common.refusals import input_errors
from common.training.tasks import SPLITS, RerankingDataModule


class PrepareCLI(RankerCLI):
    """`RankerCLI` without a trainer and without an output folder: the command line parsed and checked as train's
    (its tasks, the files an ir_datasets task needs, ``--ckpt_path``, ``--output_dir``), the data module opened and
    checked as train checks it, and the model made as train makes it."""

    def instantiate_classes(self) -> None:
        with input_errors(*INPUT_ERRORS):
            data = self.datamodule_class(**self.config.data.as_dict())
            data.check_tasks()
        self.config_init = self.parser.instantiate_classes(self.config)  # the model: its weights, its vocabulary
        self.model, self.datamodule = self._get(self.config_init, "model"), data


def prepare_caches(data: RerankingDataModule, config, pretrained: tuple[str, ...] = ()) -> dict[str, str]:
    """Build (or find built) what `data` reads in training and testing: each configured split's document store,
    ``prepare_data`` (stores and the training table), the datasets of ``setup("fit")`` and ``setup("test")``, and
    its tokenizer. Returns the options of `pretrained` (dotted, ``model.encoder``) that name a model loaded through
    ``from_pretrained`` in `config` (train's parsed config), and their values."""
    with input_errors(*INPUT_ERRORS):
        for split in SPLITS:
            if data.has_split(split):
                data.source(split).documents().prepare()  # ir_datasets' stores of dev and test too
        data.prepare_data()
        data.setup("fit")
        if data.has_split("test"):
            data.setup("test")
        encoder = getattr(data, "encoder", None)
        if isinstance(encoder, LazyTokenizer):
            encoder.tokenizer  # loaded (learnt first where it is builtin or train), as loader workers will load it
    named = {option: _option(config, option) for option in pretrained}
    return {option: value for option, value in named.items()
            if isinstance(value, str) and value not in (BUILTIN, TRAIN)}  # fmt: skip


def _option(config, option: str):
    """The value of the dotted `option` in `config` (None where absent)."""
    value = config.as_dict()
    for key in option.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value
