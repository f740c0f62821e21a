"""The built-in BPE: RoBERTa's special-token layout, lossless, trained once and then loaded from the cache."""

from qds.tokenizer import builtin_tokenizer_path, load_tokenizer


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
