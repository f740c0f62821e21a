"""One ``main`` for the four ``python -m <package>.prepare``: every cache a training run reads, built ahead on a CPU
node (document stores, ir_datasets' stores, the training table, a learnt tokenizer, the Conformer-Kernel's vocabulary
and word2vec embeddings, pretrained weights in Hugging Face's cache), so that the training job finds them.

It parses train's command line with train's parser (`PrepareCLI`), opens and checks the data module and makes the
model as train does, then builds and prints the data module's caches. No trainer is made: devices, nodes and strategy
are left to the training job; kernels compiled on first use are built by the machine that runs them.
"""

from __future__ import annotations

from common.commands.cli import INPUT_ERRORS, RankerCLI
from common.commands.train import TrainCommand
from common.encoders.tokenizers import BUILTIN, TRAIN, LazyTokenizer
from common.refusals import input_errors
from common.training.tasks import SPLITS, RerankingDataModule


class PrepareCLI(RankerCLI):
    """`RankerCLI` without a trainer or an output folder: the data module opened and checked, the model made."""

    def instantiate_classes(self) -> None:
        with input_errors(*INPUT_ERRORS):
            data = self.datamodule_class(**self.config.data.as_dict())
            data.check_tasks()
        self.config_init = self.parser.instantiate_classes(self.config)
        self.model, self.datamodule = self._get(self.config_init, "model"), data


def run_prepare(command: TrainCommand, name: str, args: list[str] | None = None,
                pretrained: tuple[str, ...] = ()) -> list:
    """Build and print every cache train `command` reads with `args` (None: ``sys.argv[1:]``), as ``python -m <name>``,
    and the options of `pretrained` (``model.encoder``) naming a ``from_pretrained`` model; returns the caches asked."""
    from common.commands.quiet import quiet_lightning
    from common.io import recorded_caches

    quiet_lightning()
    with recorded_caches() as uses:
        cli = command.cli(args, PrepareCLI, command=name)
        loaded = prepare_caches(cli.datamodule, cli.config, pretrained)
    print(report(uses, loaded, command.name))
    return uses


def prepare_caches(data: RerankingDataModule, config, pretrained: tuple[str, ...] = ()) -> dict[str, str]:
    """Build (or find built) what `data` reads in training and testing: document stores, ``prepare_data``, both
    ``setup`` and its tokenizer. Returns the options of `pretrained` naming a ``from_pretrained`` model, by value."""
    with input_errors(*INPUT_ERRORS):
        for split in SPLITS:
            if data.has_split(split):
                data.source(split).documents().prepare()
        data.prepare_data()
        data.setup("fit")
        if data.has_split("test"):
            data.setup("test")
        encoder = getattr(data, "encoder", None)
        if isinstance(encoder, LazyTokenizer):
            encoder.tokenizer
    named = {option: config.get(option) for option in pretrained}
    return {option: value for option, value in named.items()
            if isinstance(value, str) and value not in (BUILTIN, TRAIN)}


def report(uses: list, pretrained: dict[str, str], train: str) -> str:
    """Each cache of `uses` once, built (the seconds its builds took) or found built, in the order first asked; the
    names of `pretrained` (option -> name) loaded through ``from_pretrained``."""
    caches: dict = {}
    for use in uses:
        built, seconds = caches.get(use.path, (False, 0.0))
        caches[use.path] = (built or use.built, seconds + (use.seconds if use.built else 0.0))
    lines = [f"caches of python -m {train} with these options:"]
    for path, (built, seconds) in caches.items():
        lines.append(f"  {'built' if built else 'found built':<11} {f'{seconds:.1f} s' if built else '':>9}  {path}")
    if pretrained:
        named = ", ".join(f"--{option} {value}" for option, value in pretrained.items())
        lines.append(f"  loaded through from_pretrained (Hugging Face's cache, HF_HOME): {named}")
    count = sum(built for built, _ in caches.values())
    lines.append(f"{count} built, {len(caches) - count} found built")
    return "\n".join(lines)
