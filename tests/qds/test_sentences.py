"""qds.sentences.split_sentences: exact splits on hand-made cases, and no text lost."""

import random

import pytest

from qds.sentences import split_sentences


def non_space(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize(
    "text, expected",
    [
        # abbreviations
        (
            "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday.",
            ["Dr. Smith went to Washington.", "He arrived at 5 p.m. on Monday."],
        ),
        ("Use tools, e.g. hammers. They help.", ["Use tools, e.g. hammers.", "They help."]),
        (
            "The U.S. economy grew. He met Mr. Jones yesterday. He left.",
            ["The U.S. economy grew.", "He met Mr. Jones yesterday.", "He left."],
        ),
        ("He lives in the U.S. He works there.", ["He lives in the U.S.", "He works there."]),
        # decimals and numbers
        ("The price rose 3.5 percent. Then it fell.", ["The price rose 3.5 percent.", "Then it fell."]),
        ("It costs $3.50. Version 2.0.1 works.", ["It costs $3.50.", "Version 2.0.1 works."]),
        # URLs and e-mail addresses
        (
            "Visit www.example.com/a.html for more. Or http://x.org/b.c?d=1. Write to a.b@c.org now.",
            ["Visit www.example.com/a.html for more.", "Or http://x.org/b.c?d=1.", "Write to a.b@c.org now."],
        ),
        # ? and !
        ("Is it true? Yes! It is.", ["Is it true?", "Yes!", "It is."]),
        ("Wow!!! Really?? Yes...", ["Wow!!!", "Really??", "Yes..."]),
        # quotes and brackets
        ("He said, 'Go home.' She went.", ["He said, 'Go home.'", "She went."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("(This is a remark.) Another one.", ["(This is a remark.)", "Another one."]),
        # whitespace: runs of spaces are kept inside a sentence, a newline becomes a space
        (
            "  First   sentence.\n\nSecond\nsentence.   Third.  ",
            ["First   sentence.", "Second sentence.", "Third."],
        ),
        # no final punctuation
        ("no final punctuation here", ["no final punctuation here"]),
        ("One sentence. And a trailing fragment", ["One sentence.", "And a trailing fragment"]),
        # non-ASCII
        (
            "Café crème coûte 3 €. Très bien — merci. 日本語の文です。次の文です。",
            ["Café crème coûte 3 €.", "Très bien — merci.", "日本語の文です。", "次の文です。"],
        ),
        ("Ünïcödé “smart quotes.” Next one… and more. Done", ["Ünïcödé “smart quotes.”", "Next one… and more.", "Done"]),
    ],
)
def test_exact_splits(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text", ["", " ", "   \n\t ", "\n\n\n", "\u3000\xa0"])
def test_empty_or_whitespace_only_text_has_no_sentences(text):
    assert split_sentences(text) == []


@pytest.mark.parametrize(
    "text, expected",
    [
        # a sentence starting in lowercase (common in web text) is not split off
        ("what is a flea. fleas are insects. they bite", ["what is a flea. fleas are insects. they bite"]),
        # nor one starting with a title abbreviation
        ("It grew. Mr. Jones agreed.", ["It grew. Mr. Jones agreed."]),
        # a newline alone is never a boundary (as with nltk's punkt)
        ("Heading\n\nBody text here. More", ["Heading  Body text here.", "More"]),
    ],
)
def test_documented_limitations(text, expected):
    assert split_sentences(text) == expected


def test_sentences_are_stripped_and_non_empty():
    sentences = split_sentences(" A b.  \n C d!\t\tE f?   \n")
    assert sentences == ["A b.", "C d!", "E f?"]
    assert all(s and s == s.strip() for s in sentences)


NO_LOSS_TEXTS = [
    "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday.",
    "Visit www.example.com/a.html for more. Or http://x.org/b.c?d=1. Write to a.b@c.org now.",
    "5. Cancel. A flea can live up to a year.Part of the Video Series: Flea Control.ancel. A flea!",
    "tab\there.\tNext\r\nline. emoji 😀 here. Next 👍🏽! rtl עברית. عربي. ok",
    # characters blingfire drops or replaces: the boundaries are mapped back onto the text
    "a\x00b. Next one.",
    "\u2060word joiner. Ok. \x07bell. \x1c sep.",
    "x.\u200b\u200bY z. Next. \u200b",
    "\u200bStart. Zero\u200bwidth. End.\u200b",
]


@pytest.mark.parametrize("text", NO_LOSS_TEXTS)
def test_no_text_lost(text):
    sentences = split_sentences(text)
    assert sentences
    assert non_space("".join(sentences)) == non_space(text)
    assert all(s and s == s.strip() for s in sentences)


def test_dropped_characters_are_kept_in_place():
    assert split_sentences("\u2060word joiner. Ok.") == ["\u2060word joiner.", "Ok."]
    assert split_sentences("x.\u200b\u200bYes. \u200b") == ["x.", "\u200b\u200bYes. \u200b"]


def test_no_text_lost_on_random_text():
    rng = random.Random(0)
    alphabet = "abc XYZ..?!\n\"'()-:;,0123456789éü中😀\xa0\u200b\u2060\x00\x1c\t@/"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        sentences = split_sentences(text)
        assert non_space("".join(sentences)) == non_space(text), repr(text)
        assert all(s and s == s.strip() for s in sentences)


def test_very_long_text():
    text = "This is sentence number one. " * 50_000 + "X" * 100_000
    sentences = split_sentences(text)
    assert len(sentences) == 50_001
    assert sentences[0] == "This is sentence number one."
    assert sentences[-1] == "X" * 100_000
    assert non_space("".join(sentences)) == non_space(text)
