"""One YAML per model x ORCAS x subtask, each parsed by the real command line (``--print_config``) into the paper's
setting.

The expected values are the paper's (Mitra et al. 2021, Sec. 4, "Model training") and, where it is silent, the
official code's argument defaults (bmitra-msft/TREC-Deep-Learning-Quick-Start: ``model_utils.py``,
``learner_utils.py``, ``data_utils.py``, ``model.py``, ``learner.py``), each named beside its value. None is
read from the YAML under test.
"""

from pathlib import Path

import pytest
import yaml

from conformer_kernel import train

CONFIGS = Path(train.__file__).parent / "configs"
ROWS = [(model, orcas, mode) for model in ("ndrm1", "ndrm2", "ndrm3") for orcas in (False, True)
        for mode in ("rerank", "fullrank")]

#: (section, option) -> (expected value, its source).
PAPER = {
    ("model", "encoder"): ("conformer", "paper Sec. 3-4: Conformer layers (official model.py:17, no --no_conformer)"),
    ("model", "num_layers"): (2, "paper Sec. 4: 2 Conformer layers; official model_utils.py:51 num_encoder_layers"),
    ("model", "num_heads"): (32, "paper Sec. 4: 32 attention heads; official model_utils.py:53 num_attn_heads"),
    ("model", "conv_window"): (31, "paper Sec. 4: window 31 (32 groups = heads); official model_utils.py:52"),
    ("model", "kernels"): (10, "paper Sec. 4: k = 10 kernels; official model_utils.py:54 rbf_kernel_dim"),
    ("model", "sigma"): (0.1, "official model.py:127 (the paper gives no sigma)"),
    ("model", "pool_window"): (300, "paper Sec. 4: window 300; official model_utils.py:55 rbf_kernel_pool_size"),
    ("model", "pool_stride"): (100, "paper Sec. 4: stride 100; official model_utils.py:56 rbf_kernel_pool_stride"),
    ("model", "dropout"): (0.2, "paper Sec. 4: dropout 0.2; official model_utils.py:57 drop"),
    ("model", "lr"): (1e-4, "official learner_utils.py:10 lr (Adam, learner.py:28; the paper gives none)"),
    ("model", "identity_init"): (False, "official: PyTorch's initialisation, embeddings from word2vec (model.py:14)"),
    ("model", "doc_padding"): ("official", ("official model_utils.py:97, 186-192: documents padded to 4,000 with "
                                            "id 0 and read by the encoder (conformer.py:391-399)")),
    ("data", "max_query_terms"): (20, "paper Sec. 4: first 20 query terms; official model_utils.py:47"),
    ("data", "max_doc_terms"): (4000, "paper Sec. 4: first 4000 document terms; official model_utils.py:48"),
    ("data", "max_orcas_terms"): (2000, "official model_utils.py:49 max_terms_orcas (the paper gives none)"),
    ("data", "embedding_dim"): (128, ("paper Sec. 4: hidden 256 = IN || OUT of word2vec; official "
                                      "model_utils.py:141 dim = num_hidden_nodes // 2 = 256 // 2")),
    ("data", "embedding_window"): (10, "official model_utils.py:141 fasttext ws=10"),
    ("data", "min_count"): (100, "official model_utils.py:141 fasttext minCount=100"),
    ("data", "embedding_epochs"): (5, "official model_utils.py:141 fasttext epoch=5"),
    ("data", "group_size"): (4, ("paper Sec. 4: a positive, a top-100 negative and two random ones; official "
                                 "data.py:52-59 (2 labels + num_rand_negs = 2, learner_utils.py:14)")),
    ("data", "batch_size"): (32, "official learner_utils.py:11 mb_size_train"),
    ("data", "depth"): (100, "paper Sec. 4: the provided top 100 candidates (official msmarco-*-top100 files)"),
    ("data", "train"): ("irds:msmarco-document/train", ("paper Sec. 4: MS MARCO training data; official "
                                                         "data_utils.py:27, 32, 37 (msmarco-doctrain-*)")),
    ("data", "dev"): ("irds:msmarco-document/trec-dl-2019/judged",
                      ("official data_utils.py:29, 34, 39: the 'val' set is TREC DL 2019, whose NDCG@10 picks the "
                       "tested model (learner.py:74-77, 87-89)")),
    ("data", "test"): ("irds:msmarco-document/trec-dl-2020/judged",
                       "paper Sec. 4: TREC DL 2020 documents; official data_utils.py:30, 35"),
    ("trainer", "max_steps"): (32 * 4096, "official learner_utils.py:15-16: 32 epochs of 4,096 minibatches"),
    ("trainer", "val_check_interval"): (4096, "official learner.py:59-68: evaluated after every epoch of 4,096"),
}


def resolved(capsys, *args) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        train.main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def config_name(model: str, orcas: bool, mode: str) -> str:
    return f"trec-dl-2020/{model}{'-orcas' if orcas else ''}-{mode}.yaml"


@pytest.mark.parametrize("model, orcas, mode", ROWS)
def test_each_setting_parses_into_the_paper_setting(capsys, model, orcas, mode):
    config = resolved(capsys, "--config", str(CONFIGS / config_name(model, orcas, mode)))
    for (section, option), (value, source) in PAPER.items():
        assert config[section][option] == value, f"--{section}.{option}: {source}"
    assert config["model"]["model"] == model
    # Linked, so absent from the model's section: hidden_size = conformer_kernel.hidden_size(data.embedding_dim)
    # = 256 (paper Sec. 4: "all hidden layer sizes to 256"), max_doc_terms = data's, vocab_size from the vocabulary.
    assert {"hidden_size", "max_doc_terms", "vocab_size"}.isdisjoint(config["model"])
    # paper Sec. 4: ORCAS clicked queries as an extra field; official model_utils.py:88-90 (--orcas_field)
    assert config["data"]["orcas"] == ("irds:msmarco-document/orcas" if orcas else None)
    assert config["test_modes"] == [mode]  # paper Sec. 4: each variant under the rerank and the fullrank setting


def test_every_setting_has_a_config():
    assert sorted(f"trec-dl-2020/{p.name}" for p in CONFIGS.glob("trec-dl-2020/*.yaml")) == sorted(config_name(*row) for row in ROWS)


def test_no_arguments_means_the_builtin_default(capsys):
    config = resolved(capsys)
    assert config["data"]["train"] == "builtin:train" and config["model"]["model"] == "ndrm3"
    assert config["test_modes"] == ["rerank", "fullrank"]


def test_unknown_test_mode_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--test_modes", "[rerank, everything]", "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: --test_modes: expected a Literal['rerank', 'fullrank']. Got value: everything\n"
    assert not (tmp_path / "out").exists()


def test_unknown_doc_padding_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--model.doc_padding", "masked", "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: --model.doc_padding: expected a Literal['official', 'zeroed']. Got value: masked\n"
    assert not (tmp_path / "out").exists()
