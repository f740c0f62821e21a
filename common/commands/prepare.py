"""One ``main`` for the four ``python -m <package>.prepare`` commands: every cache a training run needs, built ahead.

A training job first builds what it reads (document stores, ir_datasets' stores, the training table, a learnt
tokenizer, the Conformer-Kernel's vocabulary and word2vec embeddings, pretrained weights in Hugging Face's cache)
while its GPUs wait; word2vec alone runs on one thread (`conformer_kernel.vocab`: more threads are not
reproducible). ``python -m <package>.prepare`` takes the config and options of ``python -m <package>.train`` and
builds all of them in one process, on a CPU node, without a GPU and without training, so that the training job
finds every cache built:

1. the command line is checked as train checks it, before torch or Lightning is imported (train's committed schema
   and the command's own checks, `common.commands.help.check_command_line`): a bad option is one line on stderr and
   exit status 2;
2. train's parser reads it (`common.commands.prepare_cli.PrepareCLI`, a `common.commands.cli.RankerCLI`): the tasks
   and the files an ir_datasets task needs are checked, and the run ``--ckpt_path last`` resumes and a used
   ``--output_dir`` are refused, as train refuses them (so a command line that train would refuse fails here
   first); the data module opens and checks its tasks (a task of files' document store and training table are built
   here) and the model is made as train makes it, which loads its pretrained weights (``from_pretrained``) and its
   tokenizer (learnt first where it is ``train`` or ``builtin``), and the Conformer-Kernel's vocabulary and
   embeddings (whose size is the model's);
3. `common.commands.prepare_cli.prepare_caches`: every split's document store (ir_datasets' too), the data
   module's ``prepare_data`` (the training table) and its datasets for fitting and testing (the collection's ids a
   sampler draws from, the Conformer-Kernel's ORCAS field), and the data module's tokenizer;
4. each cache is printed, built (with the seconds it took) or found built (`common.io.recorded_caches`).

Left to the training job: no trainer is made and no process started, so the options of devices, nodes and strategy
are not checked here (a CPU node lacks the GPUs they name), nor ``--compare_with`` on several processes; no output
folder is made. Kernels compiled on first use are built by the machine that runs them: the TVM kernel for the CPU
it runs on (`common.kernels.tvm_kernel`, under ``EFFICIENT_RANKERS_CACHE``) and FlexAttention's Triton kernels on
GPUs (``TRITON_CACHE_DIR``).

``--help`` prints the package's ``prepare`` docstring and then train's options, from train's committed help
(`prepare_help`), as fast as train answers; with ``--config`` or ``--ckpt_path`` the real parser answers (it shows
their defaults), under prepare's name. Importing this module imports only the standard library and the front door.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import textwrap
from importlib import import_module

from common.commands.help import HELP_COLUMNS, check_command_line
from common.commands.train import TrainCommand

#: Where train's stored help leaves its own description: its default config, then its options.
_OPTIONS_START = re.compile(r"^(default config file locations:|options:)$", re.MULTILINE)


def run_prepare(command: TrainCommand, name: str, args: list[str] | None = None,
                pretrained: tuple[str, ...] = ()) -> list:
    """Build every cache that `command` (a package's train command) needs with command line `args` (None:
    ``sys.argv[1:]``), as ``python -m <name>`` (``qds.prepare``), and print each (see the module docstring), and the
    options of `pretrained` (``model.encoder``) that name a model loaded through ``from_pretrained``.
    Returns the caches asked for (`common.io.CacheUse`, in order, a cache asked twice listed twice)."""
    given = sys.argv[1:] if args is None else list(args)
    _check_command_line(command, name, given)

    from common.commands.prepare_cli import PrepareCLI, prepare_caches
    from common.commands.quiet import quiet_lightning
    from common.io import recorded_caches

    quiet_lightning()
    with recorded_caches() as uses:
        cli = command.cli(args, PrepareCLI, command=name)  # None: sys.argv, as train passes it
        loaded = prepare_caches(cli.datamodule, cli.config, pretrained)
    print(report(uses, loaded, command.name))
    return uses


def _check_command_line(command: TrainCommand, name: str, given: list[str]) -> None:
    """Train's front door on `given`; its ``--help`` (train's stored help) printed as prepare's (`prepare_help`)."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # the front door prints nothing but help
            check_command_line(command.name, given, command.default_config, command.check_settings)
    except SystemExit as done:
        if done.code in (0, None):
            print(prepare_help(name, printed.getvalue()), end="")
        raise


def prepare_help(name: str, train_help: str) -> str:
    """``python -m <name> --help``: its usage, the module's docstring as the parser would fill it, then the options
    of `train_help` (train's stored help)."""
    usage = f"usage: python -m {name} [-h] [-c CONFIG] [--print_config[=flags]] [--OPTION VALUE ...]"
    paragraphs = re.split(r"\n\s*\n", import_module(name).__doc__.strip().replace("`", ""))
    description = "\n\n".join(textwrap.fill(" ".join(p.split()), HELP_COLUMNS - 2) for p in paragraphs)
    options = _OPTIONS_START.search(train_help)
    return f"{usage}\n\n{description}\n\n{train_help[options.start() if options else 0:]}"


def report(uses: list, pretrained: dict[str, str], train: str) -> str:
    """What `run_prepare` prints: each cache of `uses` once, built (and the seconds its builds took) or found
    built, in the order first asked; the names of `pretrained` (option -> name) loaded through ``from_pretrained``."""
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
