"""One YAML per Table 2/4 row, each parsed by the real command line (``--print_config``) into the paper's setting."""

from pathlib import Path

import pytest
import yaml

from qds import train

CONFIGS = Path(train.__file__).parent / "configs"
ROWS = {
    "trec-dl-2019.yaml": "qds", "trec-dl-2019-qds-s.yaml": "qds_s", "trec-dl-2019-qds-q.yaml": "qds_q",
    "trec-dl-2019-sparse.yaml": "sparse", "trec-dl-2019-longformer-qa.yaml": "longformer_qa",
    "trec-dl-2019-firstp.yaml": "firstp", "trec-dl-2019-maxp.yaml": "maxp",
}  # fmt: skip


def resolved(capsys, *args) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        train.main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("name, pattern", list(ROWS.items()))
def test_each_row_parses_into_the_paper_setting(capsys, name, pattern):
    config = resolved(capsys, "--config", str(CONFIGS / name))
    model, data = config["model"], config["data"]
    assert model["pattern"] == pattern and "pattern" not in data  # data.pattern is linked from model.pattern
    assert (model["lr"], model["betas"], model["dropout"], model["window"]) == (1e-5, [0.9, 0.999], 0.1, 128)
    dense = pattern in ("firstp", "maxp")
    assert model["encoder"] == ("roberta-base" if dense else "allenai/longformer-base-4096")
    assert data["max_length"] == (512 if dense else 2048)  # linked into model.max_length
    assert (data["max_sentences"], data["negatives"], data["depth"]) == (256, 1, 100)
    assert data["train"] == "irds:msmarco-document/train"
    assert data["test"] == "irds:msmarco-document/trec-dl-2019/judged"
    assert data["tokenizer"] == "roberta-base"  # linked into model.tokenizer


def test_every_row_has_a_config():
    assert sorted(p.name for p in CONFIGS.glob("trec-dl-2019*.yaml")) == sorted(ROWS)


def test_no_arguments_means_the_builtin_default(capsys):
    config = resolved(capsys)
    assert config["data"]["train"] == "builtin:train" and config["model"]["encoder"] is None
    assert config["model"]["pattern"] == "qds"
