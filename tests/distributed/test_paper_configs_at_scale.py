"""The papers' configs on 1, 2, 8 and 24 processes, simulated in one: every one resolves through its real command line
and its global batch either divides among them or is refused naming what to change
(`common.training.global_batch.batch_problem`); one of each package (each NDRM) takes a training step with the
paper's global batch, this process loading its share (one of 2, 8 or 24), or is refused in one line.

The world is simulated by `Trainer.world_size` and `Trainer.global_rank` (what the batch split, the training loader's
sampler and the resume check read); the step runs on this process's share of the global batch. The models are the
configs' own but tiny and from scratch, on the built-in collection (MS MARCO and the pretrained encoders are not
here): sizes, data and workers change, never the global batch.
"""

import sys
from pathlib import Path

import lightning as L
import pytest
import yaml

from common.training.global_batch import batch_problem

pytestmark = pytest.mark.slow

#: Every run: the built-in training task alone, one step, no dev or test, no loader workers.
STEP = ["--data.train", "builtin:train", "--data.dev", "null", "--data.test", "null", "--data.num_workers", "0",
        "--trainer.max_steps", "1", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--save_every_n_steps", "1"]
BERT = ["--model.encoder", "null", "--data.tokenizer", "builtin", "--model.num_layers", "1", "--model.hidden_size",
        "32", "--model.num_heads", "2", "--model.intermediate_size", "64", "--data.passage_length", "24"]
#: EARL's and MVA's groups drawn from the built-in training task, not MS MARCO's triples.
NO_TRIPLES = ["--data.train_triples", "null"]
#: Config -> (its package's train command, the tiny model's flags, the paper's global batch).
CONFIGS = {
    "qds/configs/trec-dl-2019.yaml": ("qds.train", [
        "--model.encoder", "null", "--data.tokenizer", "builtin", "--model.num_layers", "1", "--model.hidden_size",
        "32", "--model.num_heads", "1", "--model.intermediate_size", "64", "--model.window", "8", "--model.impl",
        "portable", "--data.max_length", "128", "--data.layout", "sos", "--data.positives", "qrels"], 1),
    "qds/configs/trec-dl-2019/multi-gpu.yaml": ("qds.train", [
        "--model.encoder", "null", "--data.tokenizer", "builtin", "--model.num_layers", "1", "--model.hidden_size",
        "32", "--model.num_heads", "1", "--model.intermediate_size", "64", "--model.window", "8", "--model.impl",
        "portable", "--data.max_length", "128", "--data.layout", "sos", "--data.positives", "qrels"], 8),
    **{f"conformer_kernel/configs/trec-dl-2020/{model}-rerank.yaml": ("conformer_kernel.train", [
        "--data.embedding_dim", "16", "--model.num_heads", "4", "--model.num_layers", "1", "--data.min_count", "2",
        "--data.max_doc_terms", "200", "--model.pool_window", "30", "--model.pool_stride", "10"], 32)
       for model in ("ndrm1", "ndrm2", "ndrm3")},
    "earl/configs/msmarco/earl-cls.yaml": ("earl.train", [*BERT, *NO_TRIPLES, "--model.num_blocks", "1"], 128),
    "mva/configs/msmarco/mva-all-p128.yaml": ("mva.train", [*BERT, *NO_TRIPLES, "--model.projection", "8"], 256),
}
WORLDS = (1, 2, 8, 24)
REPO = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def bare_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train"])


def simulate(monkeypatch, world: int) -> None:
    """This process as global rank 0 of `world` processes."""
    monkeypatch.setattr(L.Trainer, "world_size", property(lambda trainer: world))
    monkeypatch.setattr(L.Trainer, "global_rank", property(lambda trainer: 0))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_paper_config_takes_a_step_with_its_global_batch_or_says_what_to_change(config, world, monkeypatch,
                                                                                 tmp_path, capsys):
    from importlib import import_module

    command, tiny, batch = CONFIGS[config]
    simulate(monkeypatch, world)
    args = ["--config", str(REPO / config), *tiny, *STEP, "--output_dir", str(tmp_path / "run")]
    problem = batch_problem(batch, world)
    if problem:
        with pytest.raises(SystemExit) as exit:
            import_module(command).COMMAND.cli(args)
        assert exit.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: {problem}"]
        assert f"--data.batch_size {batch} is the global batch" in err[0] and "give --data.batch_size" in err[0]
        assert not (tmp_path / "run").exists()
        return
    cli = import_module(command).COMMAND.cli(args)
    share = batch // world
    assert f"global batch {batch} = {world} process{'es' if world > 1 else ''} x {share}" in capsys.readouterr().out
    assert cli.datamodule.loaders.batch_size == batch and cli.datamodule.loaders.process_batch_size == share
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 1
    loader = cli.trainer.train_dataloader
    assert loader.batch_size == share and loader.sampler.num_replicas == world



#: Every paper config: the four packages' but the built-in defaults and the TREC DL passage runs on ../shared/data.
PAPER_CONFIGS = sorted(str(p.relative_to(REPO)) for p in REPO.glob("*/configs/**/*.yaml")
                       if not p.name.startswith(("builtin", "trec-dl-passages")))


@pytest.mark.parametrize("config", PAPER_CONFIGS)
def test_every_paper_config_resolves_and_divides_its_batch_or_says_what_to_change(config, capsys):
    """The QDS-Transformer rows (one group a step, one GPU) share their batch with no second process; every other
    paper config (batches of 8 to 256) divides among 1, 2 and 8 and is refused at 24."""
    from importlib import import_module

    with pytest.raises(SystemExit) as exit:
        import_module(f"{config.split('/')[0]}.train").main(["--config", str(REPO / config), "--print_config"])
    assert exit.value.code in (0, None)
    resolved = yaml.safe_load(capsys.readouterr().out)
    batch, accumulate = resolved["data"]["batch_size"], resolved["trainer"]["accumulate_grad_batches"] or 1
    shared = [world for world in WORLDS if batch_problem(batch, world, accumulate) is None]
    one_gpu = config.startswith("qds/configs/trec-dl-2019") and "multi-gpu" not in config
    assert shared == ([1] if one_gpu else [1, 2, 8])
    assert resolved["trainer"]["devices"] == (1 if one_gpu else "auto")
    assert all("give --data.batch_size" in batch_problem(batch, world, accumulate)
               for world in WORLDS if world not in shared)
