"""Input construction token by token (`qds.inputs`), against sequences written out by hand."""

import pytest

from qds.inputs import build_qds_input, pad, pair_input, passages

BOS, EOS = 0, 2
QUERY = [10, 11]
SENTENCES = [[20, 21, 22], [30], [40, 41]]  # title, then two body sentences


def test_sequence_layout_token_by_token():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS)
    #                     <s> q   q  </s> SOS t   t   t  SOS s  SOS s   s  </s>
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 22, 0, 30, 0, 40, 41, 2]
    assert x.query_end == 3
    assert x.sentence_starts == [4, 8, 10]


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("sparse", set()),  # Eq. 7 only
        ("longformer_qa", {0, 4}),  # <s> before the query, the [SOS] before the document
        ("qds_s", {0, 4, 8, 10}),  # Eq. 8 + [CLS]
        ("qds_q", {0, 1, 2, 3}),  # Eq. 9: the query with its <s> and </s>
        ("qds", {0, 1, 2, 3, 4, 8, 10}),  # Eq. 10
    ],
)
def test_global_positions_of_each_pattern(pattern, expected):
    mask = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS).global_mask(pattern)
    assert {i for i, is_global in enumerate(mask) if is_global} == expected
    assert len(mask) == 14


def test_unknown_pattern_is_rejected():
    with pytest.raises(ValueError, match="unknown attention pattern"):
        build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS).global_mask("firstp")


def test_truncation_keeps_the_final_eos_and_cuts_the_last_sentence():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=8)
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 2]
    assert x.sentence_starts == [4]


def test_a_sentence_cut_to_its_bare_sos_is_dropped():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=10)
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 22, 2]
    assert x.sentence_starts == [4]


def test_truncation_at_2048_tokens():
    sentences = [[100 + i] * 30 for i in range(100)]  # 3,100 document tokens
    x = build_qds_input(QUERY, sentences, bos=BOS, eos=EOS)
    assert len(x.input_ids) == 2048
    assert x.input_ids[-1] == EOS and x.input_ids[-2] != EOS
    # 4 query positions, 65 whole sentences of 31 positions, [SOS] + 27 tokens of the 66th, </s>
    assert len(x.sentence_starts) == 66
    assert x.sentence_starts[-1] == 4 + 65 * 31 == 2019
    assert x.input_ids[2020:2047] == [165] * 27


def test_at_most_256_sentences():
    sentences = [[100 + i % 50] * 2 for i in range(300)]
    x = build_qds_input(QUERY, sentences, bos=BOS, eos=EOS)
    assert len(x.sentence_starts) == 256
    assert len(x.input_ids) == 4 + 256 * 3 + 1
    assert sum(x.global_mask("qds_s")) == 257  # [CLS] + 256 [SOS]


def test_empty_sentences_are_skipped_and_long_queries_cut():
    x = build_qds_input(list(range(100, 200)), [[], [7]], bos=BOS, eos=EOS, max_query_tokens=3)
    assert x.input_ids == [0, 100, 101, 102, 2, 0, 7, 2]
    with pytest.raises(ValueError, match="no room"):
        build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=4)


def test_roberta_pair_format_for_firstp():
    assert pair_input([10, 11], [5, 6, 7, 8], bos=BOS, eos=EOS, max_length=9) == [0, 10, 11, 2, 2, 5, 6, 7, 2]


def test_maxp_passages_are_150_word_windows_with_stride_75():
    words = [f"w{i}" for i in range(400)]
    windows = passages(words)
    starts = [int(w.split()[0][1:]) for w in windows]
    assert starts == [0, 75, 150, 225, 250]  # the last one ends at the document's end
    assert all(len(w.split()) == 150 for w in windows)
    assert passages(words[:100]) == [" ".join(words[:100])]
    assert passages([]) == [""]
    assert len(passages([f"w{i}" for i in range(5000)])) == 16


def test_pad_right_pads_to_the_longest():
    assert pad([[1, 2, 3], [4]], 9).tolist() == [[1, 2, 3], [4, 9, 9]]
