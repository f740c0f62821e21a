"""One YAML per model x ORCAS x subtask, each parsed by the real command line (``--print_config``) into the paper's setting."""

from pathlib import Path

import pytest
import yaml

from conformer_kernel import train

CONFIGS = Path(train.__file__).parent / "configs"
ROWS = [(model, orcas, mode) for model in ("ndrm1", "ndrm2", "ndrm3") for orcas in (False, True)
        for mode in ("rerank", "fullrank")]


def resolved(capsys, *args) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        train.main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def config_name(model: str, orcas: bool, mode: str) -> str:
    return f"trec-dl-2020-{model}{'-orcas' if orcas else ''}-{mode}.yaml"


@pytest.mark.parametrize("model, orcas, mode", ROWS)
def test_each_setting_parses_into_the_paper_setting(capsys, model, orcas, mode):
    config = resolved(capsys, "--config", str(CONFIGS / config_name(model, orcas, mode)))
    m, data = config["model"], config["data"]
    assert (m["model"], m["encoder"], m["lr"], m["dropout"]) == (model, "conformer", 1e-4, 0.2)
    assert (m["heads"], m["layers"], m["conv_window"], m["kernels"], m["sigma"]) == (32, 2, 31, 10, 0.1)
    assert (m["pool_window"], m["pool_stride"]) == (300, 100)
    # Linked, so absent from the model's section: hidden = 2 x data.embedding_dim, max_doc_terms = data's.
    assert "hidden" not in m and "max_doc_terms" not in m and "vocab_size" not in m
    assert (data["max_query_terms"], data["max_doc_terms"], data["max_orcas_terms"]) == (20, 4000, 2000)
    assert (data["embedding_dim"], data["min_count"], data["group_size"], data["batch_size"]) == (128, 100, 4, 32)
    assert data["train"] == "irds:msmarco-document/train"
    assert data["test"] == "irds:msmarco-document/trec-dl-2020/judged"
    assert data["orcas"] == ("irds:msmarco-document/orcas" if orcas else None)
    assert config["test_modes"] == [mode]
    assert config["trainer"]["max_steps"] == 32 * 4096  # official: 32 epochs of 4,096 minibatches


def test_every_setting_has_a_config():
    assert sorted(p.name for p in CONFIGS.glob("trec-dl-2020*.yaml")) == sorted(config_name(*row) for row in ROWS)


def test_no_arguments_means_the_builtin_default(capsys):
    config = resolved(capsys)
    assert config["data"]["train"] == "builtin:train" and config["model"]["model"] == "ndrm3"
    assert config["test_modes"] == ["rerank", "fullrank"]


def test_unknown_test_mode_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--test_modes", "[rerank, everything]", "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --test_modes: must be a list ([a, b]), each item one of rerank")
    assert not (tmp_path / "out").exists()
