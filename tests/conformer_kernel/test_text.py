"""Text processing of the Conformer-Kernel (official model_utils.clean_text) and document terms."""

from common.data.formats import Document
from conformer_kernel import MAX_ORCAS_TERMS
from conformer_kernel.text import END, START, STOPWORDS, analyze, document_terms, stem

SENTENCE = "The PONIES' documents, ranked in 2020: Neural-models aren't retrieving 3rd-party queries (U.S.A.)!"


def test_analyze_sentence():
    # lowercase; punctuation -> spaces; stop words (the, in, aren, t, u, s, a) dropped; Krovetz stems
    assert analyze(SENTENCE) == ["pony", "document", "rank", "2020", "neural", "model", "retrieve", "3rd",
                                 "party", "query"]


def test_krovetz_stems():
    assert [stem(w) for w in ["documents", "ponies", "queries", "ranked", "retrieving", "studies", "flights"]] == [
        "document", "pony", "query", "rank", "retrieve", "study", "flight"]
    assert analyze("Cats, cats; CATS!") == ["cat", "cat", "cat"]


def test_analyze_edge_cases():
    assert analyze("") == []
    assert analyze("the of and ... !!!") == []
    assert analyze("e-mail\tx\ny42  café") == ["mail", "y42", "caf"]  # 'e' and 'x' are stop words; é dropped
    assert analyze("don't") == []  # don + t


def test_document_terms_order_and_markers():
    doc = Document("D1", text="Body of the documents", title="Ponies Running", url="https://example.com/ponies")
    # url: https -> http, example and com are stop words; title; body
    assert document_terms(doc, "", MAX_ORCAS_TERMS) == [START, "http", "pony", "pony", "running", "body", "document", END]
    assert (START, END) == ("<S>", "</S>")
    # ORCAS terms first, after <S>, truncated to max_orcas_terms (after analysis)
    assert document_terms(doc, "cheap flights cheap tickets", max_orcas_terms=3) == [
        START, "cheap", "flight", "cheap", "http", "pony", "pony", "running", "body", "document", END]
    assert document_terms(doc, "cheap flights cheap tickets", MAX_ORCAS_TERMS) == [
        START, "cheap", "flight", "cheap", "ticket", "http", "pony", "pony", "running", "body", "document", END]
    # stop words do not count toward the ORCAS limit
    assert document_terms(doc, "the cheap the flights", max_orcas_terms=1)[:3] == [START, "cheap", "http"]


def test_document_terms_missing_fields_and_no_truncation():
    assert document_terms(Document("D2", "text only"), "", MAX_ORCAS_TERMS) == [START, "text", END]
    assert document_terms(Document("D3", "", title=""), "", MAX_ORCAS_TERMS) == [START, END]
    long = Document("D4", " ".join(f"word{i}" for i in range(5000)))
    terms = document_terms(long, "", MAX_ORCAS_TERMS)
    assert len(terms) == 5002 and terms[-2] == "word4999"  # untruncated (the featuriser truncates)


def test_stopwords():
    assert {"the", "uucp", "viz", "youve", "thats", "aren"} <= STOPWORDS
    assert not any("'" in w for w in STOPWORDS)
    assert all(w.isalnum() and w == w.lower() for w in STOPWORDS)
    assert len(STOPWORDS) == 542  # the official list's distinct words
    assert "document" not in STOPWORDS and "pony" not in STOPWORDS
