"""Offline sentence splitting for QDS-Transformer's input ([SOS] before each sentence).

The official QDS code split the body with nltk's ``sent_tokenize`` (title as first sentence),
but its punkt data cannot be downloaded offline. We use Microsoft's blingfire
(``blingfire.text_to_sentences``; rules ship in the wheel): far faster than pysbd, which matters for
MS MARCO's 3.2M documents (results/qds/README.md, "Sentence splitting"), and it handles
abbreviations (``e.g.``, ``U.S.``, ``p.m.``), decimals, URLs, e-mails, quotes and ``?``/``!``.
Behaviours found: a newline is never a boundary (as in punkt); a sentence starting in lowercase
is not split off (``"a flea. fleas bite"`` stays one); nor one starting with a title
(``"It grew. Mr. Jones agreed."`` stays one). blingfire also drops some
invisible or control characters (NUL, ``\\u2060``, ``\\x1c``, leading/trailing ``\\u200b``); when the
non-space characters change, the boundaries are mapped back onto ``text`` so nothing is lost.
"""

import blingfire


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, stripped, none empty, in order; their concatenation keeps every non-space character of `text` (no text dropped)."""
    lines = blingfire.text_to_sentences(text).split("\n")
    if "".join(text.split()) == "".join("".join(lines).split()):
        return [s for s in (line.strip() for line in lines) if s]
    # blingfire dropped or replaced characters: cut `text` itself after each sentence's last
    # character, found greedily in order; what is left over joins the last sentence.
    bounds = [0]
    for line in lines:
        end = bounds[-1]
        for char in "".join(line.split()):
            end = text.find(char, end) + 1
            if not end:  # a replaced character: keep the rest of `text` whole
                end = len(text)
                break
        bounds.append(end)
    bounds[-1] = len(text)
    return [s for s in (text[a:b].strip() for a, b in zip(bounds, bounds[1:])) if s]
