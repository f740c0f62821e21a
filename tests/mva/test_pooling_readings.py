"""Two readings of Sec. 2.2's pooling that `mva.model` offers beside its defaults, against constructions of their own:

- First-K of the input (``first_k_truncates="input"``): each document row equals what the ``BertModel`` itself
  gives for an input of [CLS], the first K - 1 words and [SEP] alone, and a store keeps as many rows as First-K of
  the outputs does;
- one [CLS] vector a side (``cls_init="shared"``): exactly one learned (h,) vector for the queries and one for the
  documents (parameters counted), its K positions entering the encoder as that vector plus their own position
  embeddings (the embedding layer's output built by hand), and its gradient the sum of the K positions' gradients,
  each of them non-zero;
- ``mva.pretrain``'s MLM loss under First-K of the input reads the words the truncated input keeps (by hand);
- fine-tuning an ``mva.pretrain`` checkpoint under another reading than its own is refused;
- a checkpoint of either reading is rebuilt with it by `common.api.load` and by an export (the ranker's own scores);
  in the slow tier, ``mva.index`` stores it and ``mva.evaluate --store`` scores as the end-to-end path does.
"""

import pytest
import torch
from torch.nn.functional import layer_norm

from common.api import load
from common.data.docstore import DocumentStore
from common.data.formats import Document, write_collection
from common.encoders.bert_inputs import BertInputs
from common.encoders.pretrained import bert_config
from mva import evaluate, index
from mva.data import MVADataModule
from mva.model import MVA, SidePooling, truncated_input
from mva.ranker import MVARanker
from mva.store import document_row_counts
from tests.bert_portable_checks import assert_close, pair_texts, run_scores, save_as_trainer, spread_weights
from tests.token_rows import CLS, PAD, SEP, VOCAB_SIZE, tokens

pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN = 8


def small_bert(seed: int = 0):
    from transformers import BertModel

    torch.manual_seed(seed)
    config = bert_config(num_layers=2, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, vocab_size=VOCAB_SIZE,
                         pad_token_id=PAD, num_heads=2, dropout=0.1, max_length=64)
    return BertModel(config, add_pooling_layer=False).double().eval()


def mva(bert, **settings) -> MVA:
    defaults = {"projection": 4, "heads": 1, "query_pooling": "all", "query_timesteps": None, "query_factor": None,
                "doc_pooling": "all", "doc_timesteps": None, "doc_factor": None, "tied_init": False,
                "cls_init": "distinct", "first_k_truncates": "outputs"}
    return MVA(bert, cls_token_id=CLS, **(defaults | settings)).double()


# --- First-K of the input ---------------------------------------------------------------------------------------


def test_truncated_input_on_a_hand_example():
    """K = 2: [CLS] w1 [SEP] of every row; K = 3: [CLS] w1 w2 [SEP] of the long row, the short one as it is."""
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP], [CLS, 5, SEP, PAD, PAD, PAD]])
    mask = (ids != PAD).long()
    cut, cut_mask = truncated_input(ids, mask, 2)
    assert cut.tolist() == [[CLS, 5, SEP], [CLS, 5, SEP]] and cut_mask.tolist() == [[1, 1, 1], [1, 1, 1]]
    cut, cut_mask = truncated_input(ids, mask, 3)
    assert cut.tolist() == [[CLS, 5, 6, SEP], [CLS, 5, SEP, PAD]] and cut_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert ids[0, 3] == 7  # the input itself is left as it was


def test_first_k_of_the_input_is_the_encoder_over_the_first_k_timesteps_alone():
    """K = 4 over rows of 12, 6, 5 and 3 positions ([CLS] and [SEP] included): each row's timesteps are the
    BertModel's outputs at [CLS] and the words of the unpadded input [CLS] w1 w2 w3 [SEP] (the row's own words up
    to three), and the short row keeps its two; First-K of the outputs reads the long rows' later words too."""
    bert = small_bert()
    k = 4
    ids, mask = tokens([12, 6, 5, 3], width=12, seed=3)
    pooled, real = SidePooling("first_k", k, truncate_input=True)(bert, ids, mask)
    outputs, _ = SidePooling("first_k", k)(bert, ids, mask)
    assert pooled.shape == (4, k, HIDDEN)
    assert real.tolist() == [[True] * 4, [True] * 4, [True] * 4, [True, True, False, False]]
    for row, n in enumerate([12, 6, 5, 3]):
        words = ids[row, 1 : min(n - 1, k)].tolist()  # at most K - 1 words
        alone = torch.tensor([[CLS, *words, SEP]])
        with torch.no_grad():
            expected = bert(input_ids=alone).last_hidden_state[0, : 1 + len(words)]  # [CLS] and the words
        torch.testing.assert_close(pooled[row, : len(expected)], expected, rtol=0, atol=1e-12)
    assert (pooled[:2] - outputs[:2]).abs().amax().item() > 1e-3  # rows of more than K + 1 read differently
    torch.testing.assert_close(pooled[2:], outputs[2:], rtol=0, atol=1e-12)  # the others read the same input


def test_first_k_of_the_input_stores_as_many_rows_as_first_k_of_the_outputs():
    """A document keeps min(K, its timesteps) rows under either reading, as the store's count, from the mask alone,
    says: K = 4 over rows of 12, 6, 5 and 3 positions keeps 4, 4, 4 and 2."""
    ids, mask = tokens([12, 6, 5, 3], width=12, seed=3)
    for reading in ("input", "outputs"):
        model = mva(small_bert(), doc_pooling="first_k", doc_timesteps=4, first_k_truncates=reading)
        rows, keep = model.document_keys_values(ids, mask)
        assert keep.sum(1).tolist() == [4, 4, 4, 2] == document_row_counts(model, mask).tolist()
        assert rows.shape == (4, 4, 2 * 4)


# --- one [CLS] vector a side ------------------------------------------------------------------------------------


def test_shared_cls_is_one_learned_vector_a_side():
    """3 query and 5 document [CLS] timesteps: 2 h parameters beside the encoder and the head (shared), against
    (3 + 5) h for K vectors each (distinct, copies); each side's vector starts as [CLS]'s word embedding."""
    counts, models = {}, {}
    for start in ("shared", "distinct", "copies"):
        models[start] = mva(small_bert(), query_pooling="cls", query_timesteps=3, doc_pooling="cls", doc_timesteps=5,
                            cls_init=start)
        model = models[start]
        counts[start] = sum(p.numel() for p in model.parameters()) - sum(
            p.numel() for p in (*model.bert.parameters(), *model.head.parameters()))
    assert counts == {"shared": 2 * HIDDEN, "distinct": 8 * HIDDEN, "copies": 8 * HIDDEN}
    shared = models["shared"]
    cls = shared.bert.embeddings.word_embeddings.weight[CLS]
    assert shared.query_pooling.cls.shape == shared.doc_pooling.cls.shape == (HIDDEN,)
    assert torch.equal(shared.query_pooling.cls, cls) and torch.equal(shared.doc_pooling.cls, cls)
    assert shared.query_pooling.cls is not shared.doc_pooling.cls  # Q_CLS and D_CLS learn apart


def embedding_outputs(bert, pooling: SidePooling, ids, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, K + n - 1, h) ``inputs_embeds`` the encoder receives and its embedding layer's output."""
    seen = {}
    pre = bert.register_forward_pre_hook(lambda module, args, kwargs: seen.update(kwargs), with_kwargs=True)
    post = bert.embeddings.register_forward_hook(lambda module, args, output: seen.update(embedded=output))
    try:
        with torch.no_grad():
            pooling(bert, ids, mask)
    finally:
        pre.remove()
        post.remove()
    return seen["inputs_embeds"], seen["embedded"]


def test_shared_cls_positions_are_the_vector_plus_their_position_embeddings():
    """K = 3 with the shared vector set to a random v: positions 0, 1, 2 enter the encoder as v each, and its
    embedding layer gives LayerNorm(v + P_i + T_0) there (P, T: the position and token type tables, written out
    here with layer_norm over the layer's weights): three different vectors told apart by P_i alone."""
    bert = small_bert()
    k = 3
    pooling = SidePooling("cls", k, cls_embedding=bert.embeddings.word_embeddings.weight[CLS],
                          shared_cls=True).double()
    torch.manual_seed(5)
    vector = torch.randn(HIDDEN, dtype=torch.float64)
    with torch.no_grad():
        pooling.cls.copy_(vector)
    ids, mask = tokens([7, 4], width=7, seed=2)
    given, embedded = embedding_outputs(bert, pooling, ids, mask)
    assert torch.equal(given[:, :k], vector.expand(2, k, HIDDEN))
    norm = bert.embeddings.LayerNorm
    tables = bert.embeddings.position_embeddings.weight[:k] + bert.embeddings.token_type_embeddings.weight[0]
    expected = layer_norm(vector + tables, (HIDDEN,), norm.weight, norm.bias, norm.eps)  # (K, h)
    for row in range(2):
        torch.testing.assert_close(embedded[row, :k], expected, rtol=0, atol=1e-12)
    assert min((expected[i] - expected[j]).norm().item() for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-2


def test_the_shared_vector_learns_from_all_k_positions():
    """The gradient of a weighted sum of the K = 3 pooled outputs with respect to the shared vector is the sum of
    the gradients of K separate leaf copies of it fed to the BertModel directly, each of them non-zero."""
    bert = small_bert()
    k = 3
    pooling = SidePooling("cls", k, cls_embedding=bert.embeddings.word_embeddings.weight[CLS],
                          shared_cls=True).double()
    ids, mask = tokens([6, 4], width=6, seed=4)
    torch.manual_seed(6)
    upstream = torch.randn(2, k, HIDDEN, dtype=torch.float64)
    pooled, _ = pooling(bert, ids, mask)
    (shared,) = torch.autograd.grad((pooled * upstream).sum(), [pooling.cls])
    copies = [pooling.cls.detach().clone().requires_grad_() for _ in range(k)]
    words = bert.embeddings.word_embeddings(ids[:, 1:])  # (B, n - 1, h)
    embeds = torch.cat([torch.stack(copies).expand(2, -1, -1), words], 1)
    attention = torch.cat([mask.new_ones(2, k), mask[:, 1:]], 1)
    hidden = bert(inputs_embeds=embeds, attention_mask=attention).last_hidden_state[:, :k]
    each = torch.autograd.grad((hidden * upstream).sum(), copies)
    torch.testing.assert_close(shared, sum(each), rtol=1e-10, atol=1e-12)
    assert min(g.norm().item() for g in each) > 1e-6


def test_pretraining_reads_mlm_at_the_words_first_k_of_the_input_keeps(documents):
    """``mva.pretrain``'s MLM loss with First-K of the input on both sides (K = 5, inputs of up to 24): the MLM head
    over the encoder of each input cut by hand to [CLS], its first 4 words and [SEP], at the masked words among
    those 4 (the later ones never reach the encoder); one mean over both sides' masked words."""
    import random

    from torch.nn.functional import cross_entropy
    from transformers import DataCollatorForLanguageModeling

    from common.encoders.tokenizers import load_tokenizer
    from mva import portable, pretrain

    tokenizer = load_tokenizer("builtin")
    torch.manual_seed(0)
    masked_lm = pretrain.scratch_model(tokenizer, nsp=False, dropout=0.1, num_layers=1, hidden_size=32, num_heads=2,
                                       intermediate_size=64)
    torch.nn.init.normal_(masked_lm.cls.predictions.bias, std=3.0)  # an untrained head's losses differ by word
    settings = {"projection": 8, "heads": 1, "query_pooling": "first_k", "query_timesteps": 5, "query_factor": None,
                "doc_pooling": "first_k", "doc_timesteps": 5, "doc_factor": None, "tied_init": False,
                "cls_init": "distinct", "first_k_truncates": "input"}
    assert set(settings) == set(portable.MVA_KEYS)
    model = pretrain.scored_model(masked_lm, tokenizer, "mva", settings).eval()
    examples = pretrain.PretrainingExamples(documents, tokenizer, 24, nsp=True, apart=True)
    masking = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.3, seed=0)
    batch = pretrain.mask_apart(masking, examples.examples(list(documents)[:16], random.Random(0)))
    losses = pretrain.apart_losses(model, batch)
    total, count, later = 0.0, 0, 0
    with torch.no_grad():
        for side in ("query", "doc"):
            for ids, mask, labels in zip(*(batch[f"{side}_{part}"] for part in ("tokens", "mask", "labels"))):
                n = int(mask.sum())
                cut = torch.cat([ids[: min(n - 1, 5)], ids[n - 1 : n]])  # [CLS], up to 4 words, [SEP]
                hidden = masked_lm.bert(input_ids=cut[None]).last_hidden_state[0]
                read = labels[: len(cut) - 1]  # [CLS] and the words read
                masked = read != -100
                total += cross_entropy(masked_lm.cls(hidden[: len(cut) - 1])[masked], read[masked],
                                       reduction="sum").item()
                count += int(masked.sum())
                later += int((labels[len(cut) - 1 :] != -100).sum())
    assert count > 10 and later > 10  # masked words both within the first 4 and beyond
    assert losses["mlm"].item() == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize("pretrained, fine_tuned", [
    ({"doc_pooling": "first_k", "doc_timesteps": 8, "first_k_truncates": "input"}, {"first_k_truncates": "outputs"}),
    ({"doc_pooling": "cls", "doc_timesteps": 8, "cls_init": "shared"}, {"cls_init": "distinct"}),
])
def test_fine_tuning_under_another_reading_than_the_pretrained_one_is_refused(tmp_path, pretrained, fine_tuned):
    """The same weights (First-K) or another shape (one [CLS] vector or K) read otherwise: refused by the option's
    name; the pre-trained reading itself is taken."""
    import json

    from common.refusals import SettingError
    from mva import pretrain
    from mva.ranker import refuse_pretraining_mismatch

    record = {"projection": 8, "heads": 1, "query_pooling": "all", **pretrained}
    (tmp_path / pretrain.RECORD).write_text(json.dumps({"architecture": "mva", "model": record}))
    model = {"architecture": "mva", "init_checkpoint": str(tmp_path / pretrain.CHECKPOINT), **record}
    refuse_pretraining_mismatch(model)
    with pytest.raises(SettingError) as refused:
        refuse_pretraining_mismatch(model | fine_tuned)
    (key,) = fine_tuned
    assert refused.value.option == f"model.{key}" and f"pre-trained with {key} {pretrained[key]}" in str(refused.value)


# --- checkpoints ------------------------------------------------------------------------------------------------

TINY = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "projection": 8}
#: Queries cut to their first 3 timesteps, documents as 4 timesteps of one shared [CLS] vector.
READINGS = {"query_pooling": "first_k", "query_timesteps": 3, "first_k_truncates": "input", "doc_pooling": "cls",
            "doc_timesteps": 4, "cls_init": "shared"}
DATA = {"train": "builtin:train", "dev": None, "test": "builtin:test", "tokenizer": "builtin", "tokenizer_task": None,
        "query_length": 12, "passage_length": 40, "depth": 5, "test_queries": 2, "relevance_level": 1, "seed": 0,
        "architecture": "mva"}
QUERIES = ["what do fleas eat", "the price of an old market stall in the town square"] * 2
PASSAGES = [Document(f"d{i}", text) for i, text in enumerate(
    ["fleas feed on the blood of mammals", "a market of old things", "the cat sleeps", "prices at the market"])]


def ranker_with(**settings) -> MVARanker:
    torch.manual_seed(0)
    return spread_weights(MVARanker(**TINY, **settings), 0).eval()


def test_a_checkpoint_and_its_export_score_with_its_readings(tmp_path):
    """`load` of the checkpoint, and of its export, score as the ranker's own model over the same inputs; the same
    weights read as First-K of the outputs score otherwise (the reading travels, not only the weights)."""
    ranker = ranker_with(**READINGS)
    path = save_as_trainer(ranker, DATA, tmp_path / "readings.ckpt")
    with torch.no_grad():
        own = ranker.model(BertInputs(False, "builtin", 12, 40)(QUERIES, PASSAGES)).numpy()
        other = ranker_with(**(READINGS | {"first_k_truncates": "outputs"}))
        other.load_state_dict(ranker.state_dict())
        outputs = other.model(BertInputs(False, "builtin", 12, 40)(QUERIES, PASSAGES)).numpy()
    assert abs(own - outputs).max() > 1e-3
    loaded = load(path)
    assert_close(loaded.score_pairs(QUERIES, PASSAGES), own)
    assert_close(load(loaded.export(tmp_path / "exported")).score_pairs(QUERIES, PASSAGES), own)


@pytest.mark.slow
def test_a_store_of_the_readings_scores_as_end_to_end(tmp_path):
    """``mva.index`` over the documents of 2 test queries' top 5, then ``mva.evaluate --store``, against
    ``mva.evaluate`` end to end on those pairs, within 1e-6."""
    path = save_as_trainer(ranker_with(**READINGS), DATA, tmp_path / "readings.ckpt")
    pairs = sorted(MVADataModule(train=None, dev=None, test="builtin:test", depth=5, test_queries=2).eval_pairs("test"))
    subset = tmp_path / "subset.jsonl"
    write_collection(subset, pair_texts("builtin:test", pairs)[1])
    common = ["--checkpoint", str(path), "--task", "builtin:test", "--depth", "5", "--test_queries", "2",
              "--accelerator", "cpu"]
    try:
        evaluate.main([*common, "--output_dir", str(tmp_path / "end_to_end")])
        index.main(["--checkpoint", str(path), "--collection", str(subset), "--output_dir", str(tmp_path / "store"),
                    "--shard_size", "4", "--batch_size", "3", "--accelerator", "cpu", "--devices", "1"])
        evaluate.main([*common, "--store", str(tmp_path / "store"), "--output_dir", str(tmp_path / "stored")])
    finally:
        DocumentStore.for_collection(subset).path.unlink(missing_ok=True)
    expected, got = run_scores(tmp_path / "end_to_end"), run_scores(tmp_path / "stored")
    assert_close([got[pair] for pair in pairs], [expected[pair] for pair in pairs])
