"""``python -m <package>.prepare`` refuses each bad command line of train's corpus (tests/bad_input/test_train_commands.py)
with train's own line, before anything is written: it reads train's command line with train's parser
(`common.commands.prepare`)."""

import pytest

from tests.bad_input.refusal import refused
from tests.bad_input.test_train_commands import CK, EARL, MVA, QDS, conformer_kernel_caches  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

CASES = [(package, args, expect) for package, corpus in (("qds", QDS), ("conformer_kernel", CK), ("earl", EARL),
                                                         ("mva", MVA)) for args, expect in corpus
         if not args[0].startswith("--trainer.val_check")]  # fmt: skip  (prepare makes no trainer)


@pytest.mark.parametrize("package, args, expect", CASES)
def test_prepare_refuses_what_train_refuses(tmp_path, package, args, expect, request):
    if package == "conformer_kernel":  # the model's checks come after the data module's build (its fixture's docstring)
        request.getfixturevalue("conformer_kernel_caches")
    refused(f"{package}.prepare", args, tmp_path, expect)


def test_a_fresh_process_exits_with_status_2(tmp_path):
    refused("qds.prepare", ["--model.window", "0"], tmp_path, "--model.window: not of type PositiveInt",
            fresh_process=True)


def test_a_bad_value_in_a_config_file_is_the_real_parsers_one_line(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "bad.yaml").write_text("data:\n  group_size: 1\n")
    refused("conformer_kernel.prepare", ["--config", str(inputs / "bad.yaml")], tmp_path,
            "--data.group_size: not of type GroupSize", inputs=inputs)
