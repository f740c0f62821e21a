"""One YAML per Table 2/4 row, each parsed by the real command line (``--print_config``) into the paper's setting."""

from pathlib import Path

import pytest
import yaml

from qds import train

CONFIGS = Path(train.__file__).parent / "configs"
ROWS = {
    "trec-dl-2019.yaml": "qds", "trec-dl-2019/qds-s.yaml": "qds_s", "trec-dl-2019/qds-q.yaml": "qds_q",
    "trec-dl-2019/sparse.yaml": "sparse", "trec-dl-2019/longformer-qa.yaml": "longformer_qa",
    "trec-dl-2019/firstp.yaml": "firstp", "trec-dl-2019/maxp.yaml": "maxp",
}


def resolved(capsys, *args) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        train.main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


#: The paper's values (Jiang et al. 2020, Sec. 5 "Implementation Details" and A.2).
PAPER = {
    "model.lr": 1e-5,  # "a learning rate 10^-5"
    "model.betas": [0.9, 0.999],  # "(beta1, beta2) = (0.9, 0.999)"
    "model.dropout": 0.1,  # "a dropout rate 0.1"
    "model.window": 128,  # "the local attention window size w is 128" (Eq. 7: |i - j| <= w/2)
    "data.depth": 100,  # "rerank top-100" (Sec. 5, TREC DL)
    "data.relevance_level": 1,  # TREC DL's official MRR@10 / MAP count labels >= 1 relevant
}
#: The official code's defaults where the paper is silent (hallogameboy/QDS-Transformer, src/utils.py handle_flags
#: and Data, src/experiment.py).
OFFICIAL = {
    "seed_everything": 252,  # utils.py line 57: random_seed 252
    "data.max_sentences": 256,  # line 39: max_sent_num 256
    "data.negatives": 1,  # line 59: num_neg_samples 1
    "data.batch_size": 1,  # line 53: batch_size 1
    "trainer.max_epochs": 10,  # line 55: num_epochs 10
    "trainer.val_check_interval": 1500,  # line 80: tb_per_iter 3000 documents = 1500 groups of two
    "data.dev_queries": None,  # line 83: num_sample_eval 0, "<=0 for not sampling": every dev query
    "data.layout": "official",  # utils.py lines 321-355: [0] + encode(...) for the query and each sentence
    "data.positives": "candidates",  # lines 272-279: positives are relevant top-100 lines
    "model.balanced_loss": True,  # experiment.py lines 46-49: pos_weight = num_neg_samples
    "model.weight_decay": 0.0,  # experiment.py line 50: Adam(lr=...) only (the l2_reg flag is never read)
}


def value(config: dict, dotted: str):
    for key in dotted.split("."):
        config = config[key]
    return config


@pytest.mark.parametrize("name, pattern", list(ROWS.items()))
def test_each_row_parses_into_the_paper_setting(capsys, name, pattern):
    config = resolved(capsys, "--config", str(CONFIGS / name))
    model, data = config["model"], config["data"]
    assert model["pattern"] == pattern and "pattern" not in data  # data.pattern is linked from model.pattern
    for source in (PAPER, OFFICIAL):
        for key, expected in source.items():
            assert value(config, key) == expected, key
    dense = pattern in ("firstp", "maxp")
    assert model["encoder"] == ("roberta-base" if dense else "allenai/longformer-base-4096")  # Sec. 5 and A.2
    # "maximum length of input sequences as 2,048" (Sec. 5); RoBERTa reads 512 (FirstP / MaxP, Sec. 5).
    assert data["max_length"] == (512 if dense else 2048)  # linked into model.max_length
    assert data["train"] == "irds:msmarco-document/train"
    assert data["test"] == "irds:msmarco-document/trec-dl-2019/judged"
    assert data["tokenizer"] == "roberta-base"  # official utils.py line 235; linked into model.tokenizer


def test_every_row_has_a_config():
    written = ["trec-dl-2019.yaml", *(f"trec-dl-2019/{p.name}" for p in CONFIGS.glob("trec-dl-2019/*.yaml"))]
    assert sorted(written) == sorted([*ROWS, MULTI_GPU])


#: The several-GPU variant of the QDS row: not a row of the paper.
MULTI_GPU = "trec-dl-2019/multi-gpu.yaml"


@pytest.mark.parametrize("name", list(ROWS))
def test_each_row_trains_on_one_gpu_as_the_paper(capsys, name):
    """"Each method is limited to access only one GPU" (Sec. 5), one group a step: a batch of 1 cannot be shared."""
    config = resolved(capsys, "--config", str(CONFIGS / name))
    assert config["trainer"]["devices"] == 1 and config["data"]["batch_size"] == 1


def test_the_multi_gpu_variant_differs_from_the_qds_row_in_its_batch_alone(capsys):
    """8 groups a step (1, 2, 4 or 8 processes share them), its dev evaluations and saves as many groups apart as the
    row's; every other setting the row's."""
    from common.training.global_batch import batch_problem

    row = resolved(capsys, "--config", str(CONFIGS / "trec-dl-2019.yaml"))
    variant = resolved(capsys, "--config", str(CONFIGS / MULTI_GPU))
    changed = {"trainer.devices": ("auto", 1), "data.batch_size": (8, 1), "trainer.val_check_interval": (188, 1500),
               "save_every_n_steps": (250, 2000)}
    for key, (theirs, rows) in changed.items():
        assert (value(variant, key), value(row, key)) == (theirs, rows), key
        *parents, last = key.split(".")
        for config in (variant, row):
            value(config, ".".join(parents)).pop(last) if parents else config.pop(last)
    assert variant == row
    assert [world for world in range(1, 17) if batch_problem(8, world) is None] == [1, 2, 4, 8]
    assert abs(188 * 8 - 1500) < 8 and 250 * 8 == 2000


def test_no_arguments_means_the_builtin_default(capsys):
    config = resolved(capsys)
    assert config["data"]["train"] == "builtin:train" and config["model"]["encoder"] is None
    assert config["model"]["pattern"] == "qds"
