"""Offline sentence splitting for QDS-Transformer's input ([SOS] before each sentence).

Difference: blingfire (``text_to_sentences``) where the official code used nltk's ``sent_tokenize`` (punkt cannot be
downloaded offline); where blingfire drops characters, the boundaries are mapped back onto the text (docs/qds.md).
"""

import blingfire


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, stripped, none empty, in order, together holding every non-space character of `text`."""
    lines = blingfire.text_to_sentences(text).split("\n")
    if "".join(text.split()) == "".join("".join(lines).split()):
        return [s for s in (line.strip() for line in lines) if s]
    bounds = [0]
    for line in lines:
        end = bounds[-1]
        for char in "".join(line.split()):
            end = text.find(char, end) + 1
            if not end:
                end = len(text)
                break
        bounds.append(end)
    bounds[-1] = len(text)
    return [s for s in (text[a:b].strip() for a, b in zip(bounds, bounds[1:])) if s]
