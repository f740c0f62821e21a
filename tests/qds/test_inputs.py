"""Input construction token by token (`qds.inputs`), against sequences written out by hand.

The ``official`` layout is checked against what the official code (hallogameboy/QDS-Transformer,
``src/utils.py``, ``Data.get_inputs``) computes, traced by hand from its lines:

    input_ids = [0]; input_ids.extend(tokenizer.encode(query))      # 321-322: encode adds <s> ... </s>
    QL = len(input_ids)                                             # 323
    while sid < max_sent_num and len(input_ids) < max_seq_len:      # 330
        sent_locs.append(len(input_ids)); input_ids.append(0)       # 331-334
        input_ids.extend(tokenizer.encode(sents[sid])); ...         # 335
    input_ids.append(2)                                             # 339
    if L > max_seq_len: input_ids = input_ids[:max_seq_len]         # 353-354
    bos_idx = [i for i, x in enumerate(input_ids) if x == 0]        # 363
    pattern 1: tok_mask[0] = 2; tok_mask[sent_locs[0]] = 2          # 370-372 (Longformer-QA)
    pattern 2: tok_mask[range(QL)] = 2; tok_mask[bos_idx] = 2       # 377-379 (QDS)
    pattern 3: tok_mask[range(QL)] = 2; tok_mask[sent_locs[0]] = 2  # 384-386 (QDS (Q))
    pattern 4: tok_mask[0] = 2; tok_mask[bos_idx] = 2               # 390-392 (QDS (S))

with RoBERTa's ids <s> = 0, </s> = 2.
"""

import pytest
import torch

from qds import inputs
from qds.inputs import build_qds_input, exact_batch, exact_density, exact_input, pad, pair_input, passages

BOS, EOS = 0, 2
QUERY = [10, 11]
SENTENCES = [[20, 21, 22], [30], [40, 41]]  # title, then two body sentences


def test_official_layout_token_by_token():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, layout="official")
    # [0] + encode(q) = 0 <s> q q </s>; each sentence [0] + encode(s) = 0 <s> s.. </s>; then the final </s>.
    assert x.input_ids == [0, 0, 10, 11, 2, 0, 0, 20, 21, 22, 2, 0, 0, 30, 2, 0, 0, 40, 41, 2, 2]
    assert x.query_length == 5  # QL = len([0] + encode(q))
    assert x.sentence_starts == [5, 11, 15]  # sent_locs
    assert x.bos_positions == [0, 1, 5, 6, 11, 12, 15, 16]  # bos_idx


def test_official_layout_is_the_default():
    assert build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS).input_ids[:2] == [0, 0]


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("sparse", set()),  # attn_pattern 0: no global token
        ("longformer_qa", {0, 5}),  # 1: tok_mask[0], tok_mask[sent_locs[0]]
        ("qds_s", {0, 1, 5, 6, 11, 12, 15, 16}),  # 4: tok_mask[0], tok_mask[bos_idx]
        ("qds_q", {0, 1, 2, 3, 4, 5}),  # 3: tok_mask[range(QL)], tok_mask[sent_locs[0]]
        ("qds", {0, 1, 2, 3, 4, 5, 6, 11, 12, 15, 16}),  # 2: tok_mask[range(QL)], tok_mask[bos_idx]
    ],
)
def test_official_global_positions_of_each_pattern(pattern, expected):
    mask = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, layout="official").global_mask(pattern)
    assert {i for i, is_global in enumerate(mask) if is_global} == expected
    assert len(mask) == 21


def test_official_truncation_cuts_anywhere_and_can_drop_the_final_eos():
    # Lines 330-354: a sentence is appended while the sequence is shorter than max_seq_len, then all is cut.
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=8, layout="official")
    assert x.input_ids == [0, 0, 10, 11, 2, 0, 0, 20]
    assert x.sentence_starts == [5]
    bare = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=6, layout="official")
    assert bare.input_ids == [0, 0, 10, 11, 2, 0]  # the marker survives alone, and is global in qds
    assert bare.global_mask("qds") == [True] * 6


def test_official_truncation_at_2048_tokens():
    sentences = [[100 + i] * 30 for i in range(100)]  # 33 positions each with [0] + <s> ... </s>
    x = build_qds_input(QUERY, sentences, bos=BOS, eos=EOS, layout="official")
    assert len(x.input_ids) == 2048
    # 5 + 33 * 61 = 2018 < 2048, so a 62nd sentence starts at 2018 and is cut after 28 of its 30 tokens.
    assert len(x.sentence_starts) == 62 and x.sentence_starts[-1] == 2018
    assert x.input_ids[2018:2020] == [0, 0] and x.input_ids[2020:] == [161] * 28


def test_official_empty_title_and_at_most_256_sentences():
    # encode("") is <s></s>: an empty title keeps its three positions after the marker.
    x = build_qds_input(QUERY, [[], [7]], bos=BOS, eos=EOS, layout="official")
    assert x.input_ids == [0, 0, 10, 11, 2, 0, 0, 2, 0, 0, 7, 2, 2]
    many = build_qds_input(QUERY, [[7]] * 300, bos=BOS, eos=EOS, layout="official")
    assert len(many.sentence_starts) == 256 and len(many.input_ids) == 5 + 256 * 4 + 1


def test_sos_layout_token_by_token():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, layout="sos")
    #                     <s> q   q  </s> SOS t   t   t  SOS s  SOS s   s  </s>
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 22, 0, 30, 0, 40, 41, 2]
    assert x.query_length == 4
    assert x.sentence_starts == [4, 8, 10]
    assert x.bos_positions == [0, 4, 8, 10]


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("sparse", set()),  # Eq. 7 only
        ("longformer_qa", {0, 4}),  # <s> before the query, the [SOS] before the document
        ("qds_s", {0, 4, 8, 10}),  # Eq. 8 + [CLS]
        ("qds_q", {0, 1, 2, 3, 4}),  # Eq. 9: the query with its <s> and </s>, and (official) the first [SOS]
        ("qds", {0, 1, 2, 3, 4, 8, 10}),  # Eq. 10
    ],
)
def test_sos_global_positions_of_each_pattern(pattern, expected):
    mask = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, layout="sos").global_mask(pattern)
    assert {i for i, is_global in enumerate(mask) if is_global} == expected
    assert len(mask) == 14


def test_unknown_pattern_or_layout_is_rejected():
    with pytest.raises(ValueError, match="unknown attention pattern"):
        build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS).global_mask("firstp")
    with pytest.raises(ValueError, match="unknown input layout"):
        build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, layout="bert")


def test_sos_truncation_keeps_the_final_eos_and_cuts_the_last_sentence():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=8, layout="sos")
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 2]
    assert x.sentence_starts == [4]


def test_sos_a_sentence_cut_to_its_bare_sos_is_dropped():
    x = build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=10, layout="sos")
    assert x.input_ids == [0, 10, 11, 2, 0, 20, 21, 22, 2]
    assert x.sentence_starts == [4]


def test_sos_truncation_at_2048_tokens():
    sentences = [[100 + i] * 30 for i in range(100)]  # 3,100 document tokens
    x = build_qds_input(QUERY, sentences, bos=BOS, eos=EOS, layout="sos")
    assert len(x.input_ids) == 2048
    assert x.input_ids[-1] == EOS and x.input_ids[-2] != EOS
    # 4 query positions, 65 whole sentences of 31 positions, [SOS] + 27 tokens of the 66th, </s>
    assert len(x.sentence_starts) == 66
    assert x.sentence_starts[-1] == 4 + 65 * 31 == 2019
    assert x.input_ids[2020:2047] == [165] * 27


def test_sos_at_most_256_sentences():
    sentences = [[100 + i % 50] * 2 for i in range(300)]
    x = build_qds_input(QUERY, sentences, bos=BOS, eos=EOS, layout="sos")
    assert len(x.sentence_starts) == 256
    assert len(x.input_ids) == 4 + 256 * 3 + 1
    assert sum(x.global_mask("qds_s")) == 257  # [CLS] + 256 [SOS]


def test_empty_sentences_are_skipped_and_long_queries_cut():
    x = build_qds_input(list(range(100, 200)), [[], [7]], bos=BOS, eos=EOS, max_query_tokens=3, layout="sos")
    assert x.input_ids == [0, 100, 101, 102, 2, 0, 7, 2]
    with pytest.raises(ValueError, match="no room"):
        build_qds_input(QUERY, SENTENCES, bos=BOS, eos=EOS, max_length=5)


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


def test_the_encoder_keeps_an_empty_title_only_in_the_official_layout():
    """Official split_collection_into_sentences.py line 33: ``[title] + sent_tokenize(body)``, an empty title
    included; `encode("")` is ``<s></s>``, so the document opens with the marker, ``<s>`` and ``</s>``."""
    from common.data.formats import Document
    from qds.batches import Encoder

    document = Document("d1", "Fleas bite. Dogs scratch.", "")
    official = Encoder("qds", "builtin")(["flea"], [document])["input_ids"][0].tolist()
    sos = Encoder("qds", "builtin", layout="sos")(["flea"], [document])["input_ids"][0].tolist()
    start = official.index(EOS) + 1  # after the query's </s>
    assert official[start : start + 3] == [BOS, BOS, EOS]  # the empty title
    assert official[:2] == [BOS, BOS] and sos[0] == BOS and sos[1] != BOS
    # the query's second <s>, the empty title's three positions, and a second <s> and a </s> per body sentence
    assert len(official) - len(sos) == 1 + 3 + 2 * 2


def test_exact_inputs_are_n_tokens_with_the_requested_layout():
    built = exact_input(2048, 8, 25, 50265, torch.Generator().manual_seed(0), "sos")
    assert len(built.input_ids) == 2048 and built.query_length == 10  # <s> + 8 query tokens + </s>
    assert built.sentence_starts[:3] == [10, 36, 62]  # an [SOS] before every 25-token sentence
    official = exact_input(2048, 8, 25, 50265, torch.Generator().manual_seed(0))
    assert len(official.input_ids) == 2048 and official.query_length == 11  # <s> <s> + 8 query tokens + </s>
    assert official.sentence_starts[:3] == [11, 39, 67]  # <s> <s> + 25 tokens + </s> per sentence
    assert min(built.input_ids[1:9]) >= inputs.FIRST_ORDINARY_ID  # the query: ordinary ids, never <s> or </s>


def test_every_length_from_the_shortest_is_built_exactly():
    """From query + 5 tokens on, every length gives an input of exactly n tokens, including those where whole
    sentences would leave room for an [SOS] alone (n = 12 + 26 k with a query of 8 and sentences of 25)."""
    query, sentence = 8, 25
    for n in range(query + 5, 200):
        built = exact_input(n, query, sentence, 100, torch.Generator(), "sos")
        assert len(built.input_ids) == n
        assert len(built.sentence_starts) == -(-(n - query - 4) // (sentence + 1))
        official = exact_input(n, query, sentence, 100, torch.Generator())  # cut at n, as officially
        assert len(official.input_ids) == n
        assert len(official.sentence_starts) == -(-(n - query - 3) // (sentence + 3))


def test_an_exact_batch_holds_its_inputs_labels_and_global_mask():
    options = dict(query_tokens=3, sentence_tokens=4, vocab_size=50, layout="official", seed=1)
    batch = exact_batch(30, 3, pattern="qds", **options)
    generator = torch.Generator().manual_seed(1)
    expected = [exact_input(30, 3, 4, 50, generator) for _ in range(3)]  # drawn one after the other
    assert batch["input_ids"].tolist() == [x.input_ids for x in expected]
    assert batch["attention_mask"].tolist() == [[1] * 30] * 3
    assert batch["labels"].tolist() == [1.0, 0.0, 1.0]
    assert batch["global_attention_mask"].tolist() == [[int(g) for g in x.global_mask("qds")] for x in expected]
    assert "global_attention_mask" not in exact_batch(30, 3, pattern=None, **options)  # dense attention


@pytest.mark.parametrize("pattern", ["sparse", "longformer_qa", "qds_s", "qds_q", "qds"])
def test_exact_density_counts_the_attention_matrix(pattern):
    """Against the adjacency built entry by entry: (i, j) is attended when i or j is global or |i - j| <= w / 2."""
    n, window = 20, 4
    is_global = exact_input(n, 2, 3, 100, torch.Generator()).global_mask(pattern)
    attended = sum(is_global[i] or is_global[j] or abs(i - j) <= window // 2 for i in range(n) for j in range(n))
    assert exact_density(pattern, n, 2, 3, window) == pytest.approx(attended / n**2)
    if pattern == "sparse":  # no global token: the band alone, 5 keys a row but 3 and 4 at either end
        assert attended == 16 * 5 + 2 * (3 + 4)
