"""`common.commands.help`: the training commands' front door, its stored help and schema, and the real parser's errors.

The front door must refuse exactly what the real parser refuses, option by option: the cases below run
through both. (Each command refusing bad input in one line: ``tests/bad_input/test_train_commands.py``.)
"""

import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
import yaml
from jsonargparse.typing import ClosedUnitInterval, PositiveInt

from common.commands import help as cli_help
from common.commands.help import check_command_line

QDS = Path(__file__).parents[3] / "qds"
QDS_DEFAULT = QDS / "configs" / "builtin.yaml"


def front_door(args, capsys, check=None, command="qds.train", default=QDS_DEFAULT) -> tuple[int | None, str]:
    """`check_command_line`'s exit status (None: it passed the command line on) and its one line or printout."""
    try:
        check_command_line(command, args, default, check)
        code = None
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    return code, (err or out).strip()


def test_the_committed_help_and_schemas_are_the_live_parsers():
    done = subprocess.run([sys.executable, "-m", "common.commands.help", "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_commands_answer_help_without_importing_torch_or_lightning():
    code = ("import sys\nfrom qds import train\ntry:\n    train.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "import conformer_kernel.train\nprint(sorted({'torch', 'lightning', 'jsonargparse'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "[]", done.stderr


def test_help_prints_the_stored_text(capsys):
    code, out = front_door(["--data.depth", "10", "--help"], capsys)
    assert code == 0 and out == (QDS / "train.help.txt").read_text().strip()
    assert out.startswith("usage: python -m qds.train")


@pytest.mark.parametrize("args", [["--config", "x.yaml", "-h"], ["--ckpt_path=last", "--help"]])
def test_help_with_other_defaults_is_the_real_parsers(capsys, args):
    assert front_door(args, capsys) == (None, "")


@pytest.mark.parametrize("args, line", [
    (["--model.patern", "qds"], "error: unknown option --model.patern (did you mean --model.pattern?)"),
    (["--model.window", "0"], "error: --model.window: must be a positive integer, got 0"),
    (["--model.window=abc"], "error: --model.window: must be a positive integer, got abc"),
    (["--data.dev_queries", "none"], "error: --data.dev_queries: must be a positive integer or null, got none"),
    (["--model.pattern", "dense"], "error: --model.pattern: must be one of sparse, longformer_qa, qds_s, qds_q, qds, "
                                   "firstp, maxp, got dense"),
    (["--model.dropout", "2"], "error: --model.dropout: must be a number >= 0 and <= 1, got 2"),
    (["--trainer.detect_anomaly", "1"], "error: --trainer.detect_anomaly: must be true or false, got 1"),
    (["--model.lr", "-1e-3"],
     "error: --model.lr: expected a value (write --model.lr=VALUE for one that starts with -)"),
    (["--model.window"], "error: --model.window: expected a value"),
    (["12"], "error: unrecognized argument 12 (options are given as --name value)"),
    (["--model.window.size", "3"], "error: unknown option --model.window.size (did you mean --model.window?)"),
])  # fmt: skip
def test_a_bad_option_is_one_line(capsys, args, line):
    assert front_door(args, capsys) == (2, line)


@pytest.mark.parametrize("args", [
    ["--data.train.topics_path", "t.tsv", "--data.train.qrels_path=q.txt"],  # keys of a complex option
    ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor", "dev/mrr@10"],
    ["--optimizer", "Adam", "--optimizer.lr", "0.1"],
    ["--print_config", "--model.window", "16"],
    ["--trainer.accelerator.help", "CUDAAccelerator", "--nonsense"],  # the real parser prints that class's help
    ["--model.lr", "1e-3", "--data.seed", "-5", "--data.dev_queries", "null", "--model.encoder", "None"],
])  # fmt: skip
def test_what_the_front_door_does_not_understand_passes_on(capsys, args):
    assert front_door(args, capsys) == (None, "")


@pytest.mark.parametrize("args, refused", [
    (["--model.num_heads", "3"], True),  # the default config's hidden size 64
    (["--model.hidden_size", "96", "--model.num_heads", "3"], False),
    (["--model.num_heads", "3", "--model.hidden_size", "96"], False),
    (["--model.num_heads", "3", "--model.encoder", "roberta-base"], False),  # a pretrained encoder has its sizes
    (["--model.num_heads", "3", "--print_config"], False),  # the real parser prints, building nothing
])  # fmt: skip
def test_checks_across_options_run_on_the_settings_as_resolved(capsys, args, refused):
    from qds.train import check_settings

    code, line = front_door(args, capsys, check=check_settings)
    assert (code == 2) == refused, line
    assert not refused or line == "error: --model.num_heads: must divide --model.hidden_size (64), got 3"


def test_a_resumed_runs_settings_are_its_config_yamls_not_checked_here(capsys, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("model:\n  num_heads: 3\n")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    from qds.train import check_settings

    args = ["--model.num_heads", "3", "--ckpt_path", "last", "--output_dir", str(run)]
    assert front_door(args, capsys, check=check_settings) == (None, "")


@pytest.mark.parametrize("args, line", [
    (["--ckpt_path", "none.ckpt"], "error: --ckpt_path: no such checkpoint file: none.ckpt"),
    (["--ckpt_path", "last"], "error: --ckpt_path last resumes a run: give its --output_dir"),
    (["--ckpt_path", "last", "--output_dir", "nowhere"],
     "error: nothing to resume in nowhere: nowhere/config.yaml does not exist"),
])  # fmt: skip
def test_the_run_ckpt_path_names_is_checked_at_the_front_door(capsys, args, line):
    assert front_door(args, capsys) == (2, line)


def test_config_files_and_flags_apply_in_command_line_order(capsys, tmp_path):
    from qds.train import check_settings

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": {"hidden_size": 96, "num_heads": 4}}))
    assert front_door(["--model.num_heads", "5", "--config", str(config)], capsys, check_settings)[0] is None
    code, line = front_door(["--config", str(config), "--model.num_heads", "5"], capsys, check_settings)
    assert (code, line) == (2, "error: --model.num_heads: must divide --model.hidden_size (96), got 5")
    # --config replaces the default config: the class defaults (768 wide) apply, which 5 does not divide.
    empty = tmp_path / "empty.yaml"
    empty.write_text("model: {}\n")
    assert front_door(["--config", str(empty), "--model.num_heads", "5"], capsys, check_settings)[0] == 2


@pytest.mark.parametrize("typehint, spec", [
    (PositiveInt, {"type": "int", "restrictions": [[">", 0]]}),
    (PositiveInt | None, {"type": "int", "restrictions": [[">", 0]], "null": True}),
    (ClosedUnitInterval, {"type": "float", "restrictions": [[">=", 0], ["<=", 1]]}),
    (Literal["a", "b"], {"type": "choice", "choices": ["a", "b"]}),
    (list[Literal["a", "b"]], {"type": "list", "items": {"type": "choice", "choices": ["a", "b"]}}),
    (str | dict, {"type": "any"}),
    (tuple[float, float], {"type": "any"}),
])  # fmt: skip
def test_the_schema_of_each_type(typehint, spec):
    assert cli_help._type_spec(typehint) == spec


# --- the front door against the real parser -----------------------------------------------------------------

SAME = {
    "qds.train": [
        ["--data.seed", "1.0"], ["--data.seed", "0x10"], ["--data.seed", "1_000"], ["--data.seed", "true"],
        ["--data.seed", "-5"], ["--data.seed=-5"], ["--data.seed", "+5"], ["--data.seed", "null"],
        ["--model.lr", "1e-3"], ["--model.lr", ".5"], ["--model.lr", "5"], ["--model.lr", "inf"],
        ["--model.lr", ".inf"], ["--model.lr", "nan"], ["--model.lr", "abc"], ["--model.lr", "-1e-3"],
        ["--model.weight_decay=-0.1"], ["--trainer.detect_anomaly", "1"], ["--trainer.detect_anomaly", "yes"],
        ["--trainer.detect_anomaly", "True"], ["--trainer.detect_anomaly", "null"],
        ["--trainer.enable_progress_bar", "null"], ["--trainer.enable_progress_bar", "None"],
        ["--model.encoder", "null"], ["--model.encoder", "123"], ["--data.dev_queries", "null"],
        ["--data.dev_queries", "none"], ["--data.dev_queries", "5.0"], ["--data.dev_queries", "0"],
        ["--data.dev_queries", ""], ["--model.window", "32.0"], ["--model.window", "0"], ["--model.window", "2.5"],
        ["--model.window", "-2"], ["--model.window="], ["--model.window"], ["--model.pattern", "sparse"],
        ["--model.pattern", "nonsense"], ["--model.pattern", "null"], ["--model.impl", "tvm"],
        ["--data.missing_documents", "warn"], ["--model.dropout", "1"], ["--model.dropout", "1.5"],
        ["--model.patt", "qds"], ["--output_dir", "-x"], ["--print_config=skip_unset"], ["--print_config", "x"],
        ["--data.train.topics_path", "t"], ["--optimizer", "Adam", "--optimizer.lr", "0.1"],
        ["--model.betas", "[0.9,0.99]"], ["--model.window.foo", "3"], ["stray"], ["--trainer.devices+", "1"],
        ["-c=model: {window: 16}"], ["-cx.yaml"], ["--save_every_n_steps", "1.5"], ["--data.tokenizer", "null"],
        ["--data.max_length", " 7"], ["--data.max_length", "0x10"], ["--data.max_length", "1_000"],
        ["--model.lr", "1e400"], ["--trainer.enable_progress_bar", ""], ["--data.dev_queries", "~"],
    ],
    "conformer_kernel.train": [
        ["--test_modes", "[rerank]"], ["--test_modes", "rerank"], ["--test_modes", "[rerank, bogus]"],
        ["--test_modes+", "fullrank"], ["--test_modes+", "bogus"], ["--data.group_size", "1"],
        ["--data.group_size", "2"], ["--model.sigma", "0"], ["--model.model", "ndrm1"], ["--model.model", "ndrm9"],
        ["--data.min_count", "0"], ["--model.num_layers", "0"], ["--model.head", "4"],
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def parsers():
    return {command: cli_help.live_parser(command) for command in SAME}


def real_parser_refuses(parser, args, capsys) -> bool:
    try:
        parser.parse_args(args)
    except SystemExit as exit:
        capsys.readouterr()
        return exit.code != 0
    return False


@pytest.mark.parametrize("command, args", [(c, a) for c, cases in SAME.items() for a in cases])
def test_the_front_door_refuses_what_the_real_parser_refuses(parsers, capsys, command, args):
    default = Path(cli_help.find_spec(command).origin).parent / "configs" / "builtin.yaml"
    code, line = front_door(args, capsys, command=command, default=default)
    assert (code == 2) == real_parser_refuses(parsers[command], args, capsys), line


# --- the real parser's own errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("message, line", [
    ('Parser key "data.dev_queries":\n  Does not validate against any of the Union subtypes\n  Subtypes: '
     "[<class 'int'>, <class 'NoneType'>]\n  Errors:\n    - Expected a <class 'int'>\n    - Expected a <class "
     "'NoneType'>\n  Given value type: <class 'str'>\n  Given value: none",
     "--data.dev_queries: does not validate against any of the Union subtypes; Subtypes: [int, NoneType]; "
     "Given value: none"),
    ('Parser key "model.window":\n  Not of type PositiveInt: 0 does not conform to restriction v>0',
     "--model.window: not of type PositiveInt: 0 does not conform to restriction v>0"),
    ("Group 'model' does not accept option 'wndow'", "group 'model' does not accept option 'wndow'"),
])  # fmt: skip
def test_the_real_parsers_errors_are_one_line(message, line):
    from common.commands.cli import one_line

    assert one_line(message) == line
