"""Tokenizers: RoBERTa's by name or path (QDS's), or a byte-level BPE with RoBERTa's special tokens (``<s>`` 0,
``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, ``<mask>`` 4) trained on the built-in collection or, with ``train``, on a task's
collection and queries (cached by the task's form and files' contents), saved as a Hugging Face folder.
`LazyTokenizer` is a tokenizer by name, loaded in the process that uses it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

#: Name that selects the BPE trained on the built-in collection (any other value goes to from_pretrained).
BUILTIN = "builtin"
#: Name that selects a BPE trained on a task's collection and queries (`task_tokenizer_path`).
TRAIN = "train"
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
#: Bump when the trained tokenizer changes (it names the cache folder).
VERSION = 1


def load_tokenizer(name_or_path: str, *, task=None, vocab_size: int = 8192, seed: int = 0) -> PreTrainedTokenizerBase:
    if name_or_path == BUILTIN:
        return AutoTokenizer.from_pretrained(builtin_tokenizer_path(vocab_size=vocab_size, seed=seed))
    if name_or_path == TRAIN:
        if task is None:
            raise ValueError("tokenizer 'train' learns a BPE on the training task: configure data.train")
        return AutoTokenizer.from_pretrained(task_tokenizer_path(task, vocab_size=vocab_size))
    from common.encoders.pretrained import bert_special_tokens, resolve

    return bert_special_tokens(AutoTokenizer.from_pretrained(resolve(name_or_path)))


def resolved_tokenizer_task(tokenizer: str, tokenizer_task, train):
    """The task a ``train`` tokenizer learns on: `tokenizer_task`, else the training task (None: not ``train``)."""
    if tokenizer == TRAIN:
        return tokenizer_task if tokenizer_task is not None else train


class LazyTokenizer:
    """Base of a batch encoder that loader workers copy."""

    def __init__(self, tokenizer: str, tokenizer_task=None):
        self.tokenizer_name, self.tokenizer_task = tokenizer, tokenizer_task
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._cache: dict = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None, "_cache": {}}

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_name, task=self.tokenizer_task)
        return self._tokenizer


def vocabulary(tokenizer: str, task) -> tuple[int, int]:
    vocab = load_tokenizer(tokenizer, task=task)
    return len(vocab), vocab.pad_token_id


def builtin_tokenizer_path(vocab_size: int = 8192, seed: int = 0) -> Path:
    """The folder of the BPE trained on the built-in collection of `seed`, trained on first use."""
    from common.data.builtin import ensure_builtin
    from common.data.formats import iter_collection, read_topics
    from common.io import cache_root

    def texts():
        built = ensure_builtin(seed=seed)
        return _texts(iter_collection(built / "collection.jsonl"), read_topics(built / "topics.train.tsv"))

    root = cache_root() / "tokenizers" / f"builtin-seed{seed}-bpe{vocab_size}-v{VERSION}"
    return _cached_bpe(root, texts, vocab_size)


def task_tokenizer_path(task, vocab_size: int = 8192) -> Path:
    """The folder of the BPE trained on `task`'s documents (title, text) and queries, trained on first use."""
    from common.io import cache_root
    from common.data.specs import source_fingerprint, source_from_spec

    source = source_from_spec(task)
    key = json.dumps([source_fingerprint(task, source), vocab_size, VERSION], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = cache_root() / "tokenizers" / f"{_slug(source.name)}-bpe{vocab_size}-{digest}"
    return _cached_bpe(root, lambda: _texts(source.documents().documents(), source.topics()), vocab_size)


def _cached_bpe(root: Path, texts, vocab_size: int) -> Path:
    from common.io import built_once

    return built_once(root, lambda tmp: train_bpe(texts(), vocab_size).save_pretrained(tmp),
                      ready=lambda folder: (folder / "tokenizer.json").is_file())


def train_bpe(texts, vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE with RoBERTa's special tokens and post-processing, trained on `texts`."""
    from tokenizers import ByteLevelBPETokenizer, processors

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                            show_progress=False)
    bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")


def _texts(documents, topics: dict):
    """Each document's title and text, then each query: what a BPE learns on."""
    for document in documents:
        yield f"{document.title}\n{document.text}"
    yield from topics.values()


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]
