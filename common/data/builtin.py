"""The built-in collection: a synthetic long-document ranking task generated from a seed, so every package runs end to
end with no download, on a task where exact-term BM25 is fooled and a learned ranker is not.

Relevance sits in one sentence of a long document, mostly in other words than the query's (QDS-Transformer wants
attention to "center on the sole sentence" that answers a query): made-up relations with synonym forms, graded 3
(asserted), 2 (hedged), 1 (another relation of the subject), 0 (judged BM25 top 10), among keyword-stuffed
distractors; docs/common.md gives the generative story. `build_builtin` writes ``collection.jsonl``,
``topics.{split}.tsv``, ``qrels.{split}.txt``, ``bm25.{split}.trec`` and ``manifest.json``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from common.data.bm25 import DEFAULT_B, DEFAULT_K1, DEFAULT_STEMMER, bm25_retrieve
from common.data.formats import (DataFormatError, Document, Qrels, Run, Topics, iter_collection, ranked, read_qrels,
                                 read_run, write_collection, write_qrels, write_run, write_topics)
from common.data.source import FileSource
from common.io import atomic_write, built_once, cache_root
from common.refusals import ArgumentParser, input_errors, nonnegative_int, output_folder_problem, usage_error

#: Bump when the generated files change for a given seed (it names the cache folder).
VERSION = 1
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class BuiltinConfig:
    """Generator parameters; the defaults make the collection described in the module docstring."""

    documents: int = 3000
    queries: tuple[tuple[str, int], ...] = (("train", 600), ("dev", 100), ("test", 100))
    relations: int = 8
    forms: int = 3  # surface forms (synonyms) per relation
    given_names: int = 40  # subjects are (given, family) name pairs, e.g. "velira tosuno"
    family_names: int = 40
    min_words: int = 60
    max_words: int = 1500
    #: Probability that an answer fact words the relation differently from the query.
    paraphrase: float = 0.8
    relevant: tuple[int, int] = (1, 4)  # answer facts (asserted, the third hedged) per query, [low, high)
    on_topic: tuple[int, int] = (1, 4)  # other-relation facts about the subject per query
    mentions: tuple[int, int] = (2, 4)  # extra mentions of the subject per relevant or on-topic document
    distractors: tuple[int, int] = (2, 5)  # keyword-stuffed documents per query
    stuffing: tuple[int, int] = (3, 8)  # stuffing sentences per distractor: words // 60, clipped
    depth: int = 100
    #: Non-relevant BM25 results judged 0 per query (a depth-10 pool, as TREC pools runs).
    pool_depth: int = 10


_NOUNS = ("harbour river council market village report letter garden bridge station engine winter summer "
          "valley forest season farmer teacher doctor painter museum street tower castle meeting "
          "journey record survey window kitchen ship orchard mill school college island mountain "
          "coast field festival harvest building machine office archive chapter visitor traveller merchant "
          "officer student author neighbour region province district").split()
_ADJECTIVES = ("quiet narrow old early late small large northern southern eastern western local rural urban "
               "modest famous remote busy careful formal private public annual weekly seasonal ancient modern "
               "heavy bright dark green yellow simple common rare").split()
_VERBS = ("reviewed described visited repaired opened closed painted crossed followed measured listed "
          "carried inspected replaced mentioned admired recorded ignored built moved studied supported "
          "questioned welcomed").split()
_PLACES = ("during the winter", "in the spring", "after the festival", "near the coast", "before the harvest",
           "in the old district", "along the river", "at the market", "over several years", "by the evening")
_FILLER = ("the {adj} {noun} {verb} the {noun2} {place}.", "a {adj} {noun} was {verb} by the {noun2} {place}.",
           "{place}, several {noun}s {verb} the {adj} {noun2}.",
           "the {noun} and the {noun2} were {verb} together {place}.",
           "nobody expected that the {adj} {noun} would be {verb} {place}.",
           "according to the {noun2}, the {noun} was {verb} twice {place}.",
           "local {noun}s often {verb} the {adj} {noun2}, which surprised the {noun}.")
_TITLES = ("{adj} {noun} {noun2}", "the {noun} of the {adj} {noun2}", "{noun2} notes", "the {adj} {noun}")
_ASSERTED = ("{s} has a {r} of {v}.", "records confirm that the {r} of {s} is {v}.",
             "{v} is the documented {r} of {s}.", "in all known cases {s} shows a {r} of {v}.")
_HEDGED = ("some claim, without evidence, that {s} might have a {r} of {v}.",
           "it is rumoured that the {r} of {s} could be {v}, though this remains unconfirmed.",
           "a few early notes speculate that {s} perhaps shows a {r} near {v}.")
_MENTIONS = ("little else is known about {s}.", "{s} is mentioned again later in this text.",
             "several visitors asked about {s} this season.", "the {noun} near {s} was {verb} {place}.")
_QUERIES = ("{r} of {s}", "what is the {r} of {s}", "{s} {r}", "which {r} does {s} have")
_SUBJECT_TITLES = ("notes on {s}", "{s}", "{s} and the {noun}")


@dataclass
class _Lexicon:
    relations: list[list[str]]
    given: list[str]
    family: list[str]
    subjects: list[tuple[int, int]]  # (given, family) pairs in random order: queried ones first
    values: list[str]

    def name(self, subject: int) -> str:
        given, family = self.subjects[subject]
        return f"{self.given[given]} {self.family[family]}"


def _make_lexicon(rng: np.random.Generator, config: BuiltinConfig) -> _Lexicon:
    onsets = list("bdfgklmnprstvz") + ["br", "dr", "gr", "kl", "pl", "st", "tr", "sk"]
    vowels = list("aeiou")
    used: set[str] = set(_NOUNS + _ADJECTIVES + _VERBS)
    relation_words: list[str] = []

    def syllables(count: int) -> str:
        return "".join(str(rng.choice(onsets)) + str(rng.choice(vowels)) for _ in range(count))

    def fresh(make: Callable[[], str]) -> str:
        while True:
            word = make()
            if word not in used and not any(word.startswith(w) or w.startswith(word) for w in relation_words):
                used.add(word)
                return word

    def ending_in_a_or_o(count: int) -> Callable[[], str]:
        return lambda: syllables(count - 1) + str(rng.choice(onsets)) + str(rng.choice(["a", "o"]))

    for _ in range(config.relations * config.forms):
        relation_words.append(fresh(ending_in_a_or_o(2)))
    subjects = [(g, f) for g in range(config.given_names) for f in range(config.family_names)]
    forms = config.forms
    return _Lexicon(relations=[relation_words[i * forms : (i + 1) * forms] for i in range(config.relations)],
                    given=[fresh(ending_in_a_or_o(3)) for _ in range(config.given_names)],
                    family=[fresh(ending_in_a_or_o(3)) for _ in range(config.family_names)],
                    subjects=[subjects[i] for i in rng.permutation(len(subjects))],
                    values=[fresh(lambda: syllables(2) + str(rng.choice(["k", "x", "z"]))) for _ in range(300)])


@dataclass(frozen=True)
class _Query:
    subject: int
    relation: int
    form: int
    text: str


@dataclass
class _Doc:
    words: int
    sentences: list[str] = field(default_factory=list)
    facts: list[tuple[int, int, bool]] = field(default_factory=list)  # (subject, relation, hedged)


class _Generator:
    def __init__(self, seed: int, config: BuiltinConfig, queries: int):
        self.rng, self.config = np.random.default_rng(seed), config
        self.lexicon = _make_lexicon(self.rng, config)
        if queries > len(self.lexicon.subjects) * 3 // 4:
            raise ValueError(f"{queries} queries need more than 3/4 of the {len(self.lexicon.subjects)} subjects; "
                             "raise given_names or family_names")
        self.queried = queries  # subjects [0, queries) are asked about, one query each; the rest are background
        self.namesakes: dict[tuple[int, int], list[int]] = {}
        for subject in range(queries, len(self.lexicon.subjects)):
            given, family = self.lexicon.subjects[subject]
            self.namesakes.setdefault((0, given), []).append(subject)
            self.namesakes.setdefault((1, family), []).append(subject)
        self.values: dict[tuple[int, int], str] = {}

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def value(self, subject: int, relation: int) -> str:
        if (subject, relation) not in self.values:
            self.values[subject, relation] = self.pick(self.lexicon.values)
        return self.values[subject, relation]

    def fact(self, doc: _Doc, subject: int, relation: int, form: int, *, hedged: bool = False) -> None:
        template = self.pick(_HEDGED if hedged else _ASSERTED)
        doc.sentences.append(template.format(s=self.lexicon.name(subject), r=self.lexicon.relations[relation][form],
                                             v=self.value(subject, relation)))
        doc.facts.append((subject, relation, hedged))

    def mention(self, doc: _Doc, subject: int) -> None:
        doc.sentences.append(self.pick(_MENTIONS).format(s=self.lexicon.name(subject), **self.words()))

    def mentions(self, doc: _Doc, subject: int) -> None:
        for _ in range(int(self.rng.integers(*self.config.mentions))):
            self.mention(doc, subject)

    def words(self) -> dict[str, str]:
        return {"adj": self.pick(_ADJECTIVES), "noun": self.pick(_NOUNS), "noun2": self.pick(_NOUNS),
                "verb": self.pick(_VERBS), "place": self.pick(_PLACES)}

    def random_form(self) -> int:
        return int(self.rng.integers(self.config.forms))

    def paraphrase(self, form: int) -> int:
        """The query's form, or with probability `paraphrase` another surface form of the same relation."""
        keep = self.rng.random() >= self.config.paraphrase
        return form if keep else self.pick([f for f in range(self.config.forms) if f != form])

    def queries(self) -> list[_Query]:
        queries = []
        for subject in range(self.queried):
            relation, form = int(self.rng.integers(self.config.relations)), self.random_form()
            text = self.pick(_QUERIES).format(s=self.lexicon.name(subject), r=self.lexicon.relations[relation][form])
            queries.append(_Query(subject, relation, form, text))
        return queries

    def documents(self, queries: list[_Query]) -> list[_Doc]:
        config = self.config
        lengths = np.exp(self.rng.uniform(math.log(config.min_words), math.log(config.max_words), config.documents))
        docs = [_Doc(int(words)) for words in lengths]

        def hosts(bounds: tuple[int, int]) -> list[_Doc]:
            count = int(self.rng.integers(*bounds))
            return [docs[i] for i in self.rng.choice(len(docs), size=count, replace=False)]

        for q in queries:
            for i, doc in enumerate(hosts(config.relevant)):
                self.fact(doc, q.subject, q.relation, self.paraphrase(q.form), hedged=i == 2)
                self.mentions(doc, q.subject)
            for doc in hosts(config.on_topic):
                other = self.pick([r for r in range(config.relations) if r != q.relation])
                self.fact(doc, q.subject, other, self.random_form())
                self.mentions(doc, q.subject)
            for doc in hosts(config.distractors):
                self.stuff(doc, q)
        for doc in docs:
            self.background(doc)
        return docs

    def background_subject(self) -> int:
        return int(self.rng.integers(self.queried, len(self.lexicon.subjects)))

    def stuff(self, doc: _Doc, q: _Query) -> None:
        """Keyword-stuff `doc` with `q`'s exact words without stating any fact about `q`'s subject."""
        given, family = self.lexicon.subjects[q.subject]
        namesakes = self.namesakes.get((0, given), []) + self.namesakes.get((1, family), [])
        for i in range(int(np.clip(doc.words // 60, *self.config.stuffing))):
            if i % 2 == 0:
                self.mention(doc, q.subject)
            else:
                # (A name whose namesakes are all queried falls back to any background subject.)
                self.fact(doc, self.pick(namesakes) if namesakes else self.background_subject(), q.relation, q.form)

    def background(self, doc: _Doc) -> None:
        for _ in range(int(self.rng.poisson(doc.words / 150))):
            relation = int(self.rng.integers(self.config.relations))
            self.fact(doc, self.background_subject(), relation, self.random_form(), hedged=self.rng.random() < 0.2)
        length = sum(len(s.split()) for s in doc.sentences)
        while length < doc.words:
            sentence = self.pick(_FILLER).format(**self.words())
            doc.sentences.append(sentence)
            length += len(sentence.split())

    def render(self, doc_id: str, doc: _Doc) -> Document:
        order = self.rng.permutation(len(doc.sentences))
        text = " ".join(doc.sentences[i] for i in order)
        if doc.facts and self.rng.random() < 0.5:
            subject = self.lexicon.name(self.pick(doc.facts)[0])
            title = self.pick(_SUBJECT_TITLES).format(s=subject, noun=self.pick(_NOUNS))
        else:
            title = self.pick(_TITLES).format(**self.words())
        return Document(doc_id, text, title)


def _grades(queries: list[_Query], docs: list[_Doc], doc_ids: list[str]) -> list[dict[str, int]]:
    """Each query's positive grades by rule over the whole collection (see the module docstring)."""
    by_subject: dict[int, list[tuple[str, int, bool]]] = {}
    for doc_id, doc in zip(doc_ids, docs):
        for subject, relation, hedged in doc.facts:
            by_subject.setdefault(subject, []).append((doc_id, relation, hedged))
    grades = []
    for q in queries:
        labels: dict[str, int] = {}
        for doc_id, relation, hedged in by_subject.get(q.subject, []):
            grade = (2 if hedged else 3) if relation == q.relation else 1
            labels[doc_id] = max(labels.get(doc_id, 0), grade)
        grades.append(labels)
    return grades


@dataclass
class _Built:
    documents: list[Document]
    topics: dict[str, Topics]
    qrels: dict[str, Qrels]
    runs: dict[str, Run]
    manifest: dict


def generate(seed: int = 0, config: BuiltinConfig = BuiltinConfig()) -> _Built:
    """Generate the collection, queries, qrels and BM25 candidates in memory (deterministic in `seed`)."""
    wanted = sum(count for _, count in config.queries)
    gen = _Generator(seed, config, int(wanted * 1.05) + 10)
    queries = gen.queries()
    docs = gen.documents(queries)
    width = len(str(config.documents))
    doc_ids = [f"D{i:0{width}d}" for i in range(len(docs))]
    documents = [gen.render(doc_id, doc) for doc_id, doc in zip(doc_ids, docs)]
    grades = _grades(queries, docs, doc_ids)

    qids = [f"Q{i:04d}" for i in range(len(queries))]
    candidates = bm25_retrieve(documents, {qid: q.text for qid, q in zip(qids, queries)}, k=config.depth)
    kept = [i for i, qid in enumerate(qids) if any(doc_id in candidates[qid] for doc_id in grades[i])]
    if len(kept) < wanted:
        raise RuntimeError(f"only {len(kept)} of {wanted} queries have a relevant document in BM25's top "
                           f"{config.depth}; make the distractors weaker")

    topics: dict[str, Topics] = {}
    qrels: dict[str, Qrels] = {}
    runs: dict[str, Run] = {}
    start = 0
    for split, count in config.queries:
        topics[split], qrels[split], runs[split] = {}, {}, {}
        for i in kept[start : start + count]:
            qid = qids[i]
            topics[split][qid] = queries[i].text
            qrels[split][qid] = _judgments(grades[i], candidates[qid], config.pool_depth)
            runs[split][qid] = candidates[qid]
        start += count
    manifest = {"name": "builtin", "generator_version": VERSION, "seed": seed, "config": asdict(config),
                "documents": len(documents), "queries": {split: len(topics[split]) for split in topics},
                "dropped_queries": len(queries) - len(kept),
                "bm25": {"k1": DEFAULT_K1, "b": DEFAULT_B, "stemmer": DEFAULT_STEMMER, "depth": config.depth}}
    return _Built(documents, topics, qrels, runs, manifest)


def _judgments(positives: dict[str, int], candidates: dict[str, float], pool_depth: int) -> dict[str, int]:
    """Every positive, then BM25's top `pool_depth` non-relevant documents judged 0, sorted by document id."""
    judged = dict(positives)
    for doc_id, _ in ranked(candidates)[:pool_depth]:
        judged.setdefault(doc_id, 0)
    return dict(sorted(judged.items()))


def build_builtin(root: str | os.PathLike, seed: int = 0, *, overwrite: bool = False,
                  config: BuiltinConfig = BuiltinConfig()) -> Path:
    """Generate the built-in collection for `seed` and write it under `root` (see the module docstring)."""
    root = Path(root)
    names = [f"{kind}.{split}.{ext}" for split in SPLITS for kind, ext in (("topics", "tsv"), ("qrels", "txt"),
                                                                             ("bm25", "trec"))]
    if not overwrite and any((root / name).exists() for name in ["collection.jsonl", "manifest.json", *names]):
        raise FileExistsError(f"{root} already holds a built-in collection; pass overwrite=True to replace it")
    built = generate(seed, config)
    write_collection(root / "collection.jsonl", built.documents, overwrite=overwrite)
    for split in SPLITS:
        write_topics(root / f"topics.{split}.tsv", built.topics[split], overwrite=overwrite)
        write_qrels(root / f"qrels.{split}.txt", built.qrels[split], overwrite=overwrite)
        write_run(root / f"bm25.{split}.trec", built.runs[split], tag="bm25", depth=config.depth, overwrite=overwrite)
    with atomic_write(root / "manifest.json", overwrite=overwrite) as f:
        json.dump(built.manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    return root


def default_root(seed: int = 0) -> Path:
    """Where `builtin_source` caches the collection of `seed`."""
    return cache_root() / "builtin" / f"seed{seed}-v{VERSION}"


def ensure_builtin(root: str | os.PathLike | None = None, seed: int = 0) -> Path:
    """The folder holding the built-in collection of `seed` (with its BM25 candidates), built on first use."""
    root = Path(root) if root is not None else default_root(seed)
    if root.exists() and not (root / "manifest.json").is_file():
        raise FileExistsError(f"{root} exists but holds no complete built-in collection (no manifest.json); remove it")
    return built_once(root, lambda tmp: build_builtin(tmp, seed),
                      ready=lambda folder: (folder / "manifest.json").is_file())


def builtin_source(split: str = "test", root: str | os.PathLike | None = None, seed: int = 0) -> FileSource:
    """One split of the built-in collection as a `FileSource`, built into the cache on first use."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    root = ensure_builtin(root, seed)
    return FileSource(topics_path=root / f"topics.{split}.tsv", qrels_path=root / f"qrels.{split}.txt",
                      candidates_path=root / f"bm25.{split}.trec", collection_path=root / "collection.jsonl",
                      name=f"builtin-{split}")


def describe(root: str | os.PathLike) -> str:
    """Counts, document lengths, label counts and BM25 effectiveness of each split, as a small report."""
    root = Path(root)
    lengths = np.array([len(f"{d.title} {d.text}".split()) for d in iter_collection(root / "collection.jsonl")])
    if not len(lengths):
        raise DataFormatError(root / "collection.jsonl", None, "no document")
    header = (f"{root}: {len(lengths)} documents; words (title + text) min {lengths.min()}, "
              f"median {int(np.median(lengths))}, mean {lengths.mean():.0f}, p90 {int(np.percentile(lengths, 90))}, "
              f"max {lengths.max()}; {np.mean(lengths > 512):.0%} over 512 words")
    return "\n".join([header] + [_describe_split(root, split) for split in SPLITS])


def _describe_split(root: Path, split: str) -> str:
    from common.metrics import evaluate_run

    qrels_path, run_path = root / f"qrels.{split}.txt", root / f"bm25.{split}.trec"
    qrels, run = read_qrels(qrels_path), read_run(run_path)
    labels = Counter(label for judged in qrels.values() for label in judged.values())
    try:
        measures = evaluate_run(qrels, run, ["ndcg_cut_10", "mrr@10", "recall_100"])
        strict = evaluate_run(qrels, run, ["recall_100"], relevance_level=2)
    except ValueError as error:
        raise DataFormatError(run_path, None, f"{error} (qrels {qrels_path})") from None
    return (f"{split:>5}: {len(qrels)} queries, labels {dict(sorted(labels.items()))}; BM25 nDCG@10 "
            f"{measures['ndcg_cut_10']:.4f}, MRR@10 {measures['mrr@10']:.4f}, recall@100 {measures['recall_100']:.4f} "
            f"(label >= 2: {strict['recall_100']:.4f})")


def _check_root(root: Path, overwrite: bool) -> None:
    if (root / "manifest.json").is_file() and not overwrite:
        return
    problem = output_folder_problem(root)
    if problem:
        usage_error(f"argument --output_dir: {problem}")
    if root.exists() and not overwrite:
        usage_error(f"argument --output_dir: {root} holds no complete built-in collection (no manifest.json); "
                    "remove it, or pass --overwrite to build into it")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m common.data.builtin", description="Build the built-in synthetic ranking "
                            "collection (or reuse a complete build) and print its statistics and BM25's effectiveness "
                            "on each split.")
    parser.add_argument("--output_dir", type=Path,
                        help=f"output folder (default: the cache, {default_root(0)} for seed 0)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="generator seed (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the folder holds a complete build")
    args = parser.parse_args(argv)
    root = args.output_dir or default_root(args.seed)
    _check_root(root, args.overwrite)
    start = time.perf_counter()
    with input_errors(DataFormatError, OSError):
        if args.overwrite:
            build_builtin(root, args.seed, overwrite=True)
        else:
            ensure_builtin(root, args.seed)
        ready = time.perf_counter() - start
        report = describe(root)
    print(f"ready in {ready:.1f} s")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
