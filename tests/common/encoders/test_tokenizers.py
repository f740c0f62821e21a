"""The built-in BPE: RoBERTa's special-token layout, lossless, trained once and then loaded from the cache; the
encoders' lazily loaded tokenizer (`LazyTokenizer`)."""

import pickle

from common.encoders.tokenizers import LazyTokenizer, builtin_tokenizer_path, load_tokenizer


def test_roberta_special_ids_and_pair_format():
    tok = load_tokenizer("builtin")
    assert [tok.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok("what is it", "the answer").input_ids
    assert ids[0] == 0 and ids[-1] == 2 and ids.count(2) == 3  # <s> a </s></s> b </s>


def test_byte_level_encoding_is_lossless():
    tok = load_tokenizer("builtin")
    text = "records confirm that the brigo of Zürich-42 is morvek. ¿Qué?"
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


def test_trained_once_then_cached():
    path = builtin_tokenizer_path()
    before = (path / "tokenizer.json").stat().st_mtime_ns
    assert builtin_tokenizer_path() == path
    assert (path / "tokenizer.json").stat().st_mtime_ns == before


def _task(folder, words: str) -> dict:
    """A task whose collection repeats `words` (a BPE merges what is frequent) and two queries."""
    from common.data.formats import Document, write_collection, write_topics

    folder.mkdir(exist_ok=True)
    write_topics(folder / "topics.tsv", {"1": "how long is life cycle of flea", "2": "flea treatment"})
    write_collection(folder / "docs.jsonl", [Document(f"d{i}", f"{words} number {i}") for i in range(200)])
    return {"topics_path": str(folder / "topics.tsv"), "collection_path": str(folder / "docs.jsonl")}


def test_train_learns_the_training_task_text(tmp_path, monkeypatch):
    from common.encoders.tokenizers import task_tokenizer_path

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    task = _task(tmp_path / "fleas", "the flea lives a year on its host; a flea lays eggs")
    tok = load_tokenizer("train", task=task)
    assert tok.tokenize(" flea") == ["Ġflea"]  # a word of the task is one token
    assert load_tokenizer("builtin").tokenize(" flea") != ["Ġflea"]  # the built-in BPE never saw it
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2)
    path = task_tokenizer_path(task)
    before = (path / "tokenizer.json").stat().st_mtime_ns
    assert task_tokenizer_path(task) == path and (path / "tokenizer.json").stat().st_mtime_ns == before  # cached
    other = task_tokenizer_path(_task(tmp_path / "cats", "the cat sleeps all day; a cat eats fish"))
    assert other != path and load_tokenizer(str(other)).tokenize(" cat") == ["Ġcat"]


def test_a_copy_of_the_tasks_files_elsewhere_finds_its_tokenizer(tmp_path, monkeypatch):
    """Keyed by the files' contents, not their paths and times: a task staged to another folder per job (a node's
    local disk) is not learnt again; a changed file is."""
    import os
    import shutil

    from common.encoders.tokenizers import task_tokenizer_path

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    task = _task(tmp_path / "fleas", "the flea lives a year on its host; a flea lays eggs")
    path = task_tokenizer_path(task)
    built = (path / "tokenizer.json").stat().st_mtime_ns
    shutil.copytree(tmp_path / "fleas", tmp_path / "staged")
    for name in os.listdir(tmp_path / "staged"):
        os.utime(tmp_path / "staged" / name, ns=(1, 1))  # another time too
    staged = {k: v.replace(str(tmp_path / "fleas"), str(tmp_path / "staged")) for k, v in task.items()}
    assert staged != task
    assert task_tokenizer_path(staged) == path and (path / "tokenizer.json").stat().st_mtime_ns == built
    changed = _task(tmp_path / "fleas2", "the flea lives a year on its host; a flea lays eggs!")
    assert task_tokenizer_path(changed) != path


def test_train_needs_a_task():
    import pytest

    with pytest.raises(ValueError, match="tokenizer 'train' learns a BPE on the training task: configure data.train"):
        load_tokenizer("train")


def test_an_encoder_loads_its_tokenizer_on_first_use_and_ships_without_it_or_its_cache():
    encoder = LazyTokenizer("builtin")
    assert encoder._tokenizer is None  # nothing loaded by construction
    assert encoder.tokenizer.get_vocab() == load_tokenizer("builtin").get_vocab()
    assert encoder.tokenizer is encoder.tokenizer  # loaded once
    encoder._cache["d1"] = [1, 2, 3]
    copy = pickle.loads(pickle.dumps(encoder))  # what a loader worker receives
    assert copy._tokenizer is None and copy._cache == {} and encoder._cache == {"d1": [1, 2, 3]}
    assert (copy.tokenizer_name, copy.tokenizer_task) == ("builtin", None)
