"""`common.encoders.bert_inputs.BertInputs`' cache of tokenised passages: keyed by content, never by id alone.

A passage's tokens are compared with the tokenizer's own ids of its text ([CLS] and [SEP] around them), so that a
document whose id another text had before, and bare texts (the empty id `common.api` gives them) each get theirs.
"""

from common.data.formats import Document
from common.encoders.bert_inputs import BertInputs


def tokens_of(encoder: BertInputs, text: str) -> list[int]:
    tok = encoder.tokenizer
    return [tok.cls_token_id, *tok(text, add_special_tokens=False)["input_ids"], tok.sep_token_id]


def rows(batch: dict) -> list[list[int]]:
    return [t[m.bool()].tolist() for t, m in zip(batch["doc_tokens"], batch["doc_mask"])]


def test_a_document_id_with_another_text_is_tokenised_again():
    encoder = BertInputs(False, "builtin", 12, 48)
    first, second = "fleas feed on the blood of mammals", "a flea market sells old things"
    assert rows(encoder.documents([Document("d1", first)])) == [tokens_of(encoder, first)]
    assert rows(encoder.documents([Document("d1", second)])) == [tokens_of(encoder, second)]
    assert rows(encoder.documents([Document("d1", second, "a title")])) == [tokens_of(encoder, f"a title {second}")]


def test_bare_texts_in_one_batch_keep_their_own_tokens():
    encoder = BertInputs(False, "builtin", 12, 48)
    texts = ["fleas feed on the blood of mammals", "a flea market sells old things"]
    assert rows(encoder.documents([Document("", t) for t in texts])) == [tokens_of(encoder, t) for t in texts]
    concatenated = BertInputs(True, "builtin", 12, 48)
    batch = concatenated(["fleas"] * 2, [Document("", t) for t in texts])
    query = tokens_of(concatenated, "fleas")
    got = [t[m.bool()].tolist() for t, m in zip(batch["pair_tokens"], batch["pair_mask"])]
    assert got == [query + tokens_of(concatenated, t)[1:] for t in texts]  # [CLS] q [SEP] passage [SEP]
