"""The options every benchmark command takes (`benchmark_parser`, `parse`) and argument types beside `common.refusals`'.
A run writes into a new ``outputs/<name>-benchmark-<time>`` by default, never into the committed ``results/<name>/``
(``--output_dir results/<name> --overwrite`` replaces it)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from common.refusals import ArgumentParser, number_in, output_folder, positive_float, positive_int, usage_error

#: A dropout rate: from 0 to 1.
probability = number_in(0, 1)
#: A share of a budget: above 0, at most 1.
fraction = number_in(0, 1, above_low=True)
_START_TIME = "<time>"  # in the default --output_dir, replaced by `parse`


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, but for None (those options' help says their default)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def benchmark_parser(prog: str, description: str, *, results: str, writes: str, repeats: int | None,
                     repeats_help: str, threads: int | None = None, devices: bool = True, device: str | None = None,
                     seed: str | None = None, timeout: float | None = None, child: bool = False) -> ArgumentParser:
    """A parser with the options every benchmark takes, grouped after its own: `results` names ``results/<results>``,
    `writes` what goes there; `child` adds `common.benchmarks.fresh_process.measure_in_child`'s hidden ``--_one``."""
    parser = ArgumentParser(prog=prog, description=description, formatter_class=_Help)
    shared = parser.add_argument_group("options every benchmark takes")
    shared.add_argument("--repeats", type=positive_int, default=repeats, help=repeats_help)
    if devices:
        shared.add_argument("--device", choices=("cpu", "cuda"), default=device,
                            help="cpu or cuda" + ("" if device else " (default: cuda where available)"))
    shared.add_argument("--threads", type=positive_int, default=threads, help="torch.set_num_threads for the run, "
                        "restored after it" + ("" if threads else " (default: torch's)"))
    if seed:
        shared.add_argument("--seed", type=int, default=0, help=seed)
    if timeout:
        shared.add_argument("--timeout", type=positive_float, default=timeout,
                            help="seconds per measurement in a fresh process; one past it is a skipped row")
    shared.add_argument("--output_dir", type=output_folder, default=f"outputs/{results}-benchmark-{_START_TIME}",
                        help=f"where {writes} go (<time>: the run's start); --output_dir results/{results} "
                             "--overwrite replaces the committed results")
    shared.add_argument("--overwrite", action="store_true", help="replace existing result files")
    shared.add_argument("--json", action="store_true",
                        help="print one JSON object per measurement per line on stdout (the rest on stderr)")
    if child:
        shared.add_argument("--_one", help=argparse.SUPPRESS)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments, a value given twice to a list option refused, the default ``--output_dir`` timed."""
    args = parser.parse_args(argv)
    default = parser.get_default("output_dir")
    if default is not None and args.output_dir == Path(default):
        args.output_dir = Path(default.replace(_START_TIME, time.strftime("%Y%m%d-%H%M%S")))
    for action in parser._actions:
        values = getattr(args, action.dest) if action.nargs == "+" else []
        twice = next((value for i, value in enumerate(values) if value in values[:i]), None)
        if twice is not None:
            usage_error(f"argument {action.option_strings[0]}: {twice} is given twice")
    return args


def _positive_int_that(accepted: Callable[[int], bool], what: str) -> Callable[[str], int]:
    """An argparse type: a positive integer that is `accepted`, else refused: ``must be <what>, got <value>``."""

    def checked(text: str) -> int:
        value = positive_int(text)
        if not accepted(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    return checked


def even_int(reason: str) -> Callable[[str], int]:
    """A positive even integer; an odd one is refused with `reason`."""
    return _positive_int_that(lambda value: value % 2 == 0, f"even ({reason})")


def int_above(low: int, reason: str) -> Callable[[str], int]:
    """A positive integer above `low`; one at most `low` is refused with `reason`."""
    return _positive_int_that(lambda value: value > low, f"above {low} ({reason})")


def resolve_device(requested: str | None) -> str:
    """`requested`, or cuda where available when None; cuda requested without CUDA ends the command."""
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        usage_error("argument --device: cuda is not available here")
    return requested or ("cuda" if available else "cpu")
