"""The generated tables of ``results/mva/README.md``: the speed benchmark (``speed.csv``), the runs of ``runs/`` and
the store reads (``store_reads.csv``)."""

from __future__ import annotations

import textwrap

from common.report_tables.cells import (MAP, MRR, MRR10, NDCG, Files, Table, by_size, fixed, markdown, metric,
                                        metrics_table, number, selection_table, store_dtypes_table, value)

MEASURES = [NDCG, MAP, MRR, MRR10]


def _speed_label(row: dict) -> str:
    impl = row["impl"]
    if impl == "de":
        return f"DE (h = {int(float(row['hidden_size']))})"
    if impl == "ca":
        backbone = ("BERT-base" if row["size"] == "base"
                    else f"{int(float(row['num_layers']))} layers, h = {int(float(row['hidden_size']))}")
        return f"CA ({backbone}, {int(float(row['pair_tokens']))} tokens)"
    marks = {"mva1": "¹", "mva2": "²", "mva3": "³"}
    return (f"MVA{marks[impl]} (q {row['query_timesteps']}, d {int(float(row['doc_timesteps']))}, "
            f"p {int(float(row['projection']))})")


def _speed(size: str):
    def render(files: Files) -> str:
        cells = []
        for r in (r for r in files.csv("speed.csv") if r["size"] == size):
            ms = number(r["ms"])
            times = fixed(2 if ms < 10 else 1 if ms < 1000 else 0)  # the places of the row's total
            timed = ("ms", "read_ms", "compute_ms", "warm_read_ms")
            whole = ("ca_time_ratio", "ca_compute_ratio", "ca_macs_ratio", "bytes_per_document")
            cells.append([_speed_label(r), *(times(number(r[k])) for k in timed),
                          by_size(number(r["mflops"]), ((1000, 1),)), fixed(1)(number(r["compute_gflops_per_s"])),
                          fixed(1)(number(r["matmul_gflops_per_s"])), fixed(2)(number(r["compute_matmul_ratio"])),
                          *(fixed(0)(number(r[k])) for k in whole)])
        header = ["method", "ms / query", "read (cold)", "compute", "warm read", "M MACs (calculator)",
                  "compute GFLOP/s", "its matmul's GFLOP/s", "compute / matmul", "CA's time / its",
                  "CA's time / its compute", "CA's MACs / its", "bytes / document"]
        return markdown(header, "l" + "r" * 12, cells)
    return render


def _costs_cells(files: Files, run: str | None, key: str) -> list[str]:
    """Joint compute (M MACs a query) and bytes per document of run `key` in ``runs/<run>/costs.json``."""
    costs = files.measures(run, key, "costs.json") if run else None
    if costs is None:
        return ["", ""]
    return [by_size(value(costs, "joint_mmacs")), fixed(0)(value(costs, "bytes_per_document"))]


_default = metrics_table("run", MEASURES, [
    ("MVA (small, from scratch)", "default", "mva"), ("CA (same size, same training)", "default", "ca"),
    ("DE (same size, same training)", "default", "de"), ("BM25 (the candidates)", "default", "bm25")])
_depth_100 = metrics_table("trained and re-ranking BM25's top 100", [NDCG, MRR10], [
    ("MVA, 400 steps (the default's)", "default-depth100", "mva"),
    ("MVA, 800 steps", "default-depth100-800-steps", "mva"), ("BM25 (the candidates)", "default-depth100", "bm25")])


def _default_multipass(files: Files) -> str:
    run = "default-multipass"
    rows = [("MVA", "mva"), ("MVA + CA@1", "mva+ca@1"), ("MVA + CA@5", "mva+ca@5"), ("MVA + CA@10", "mva+ca@10"),
            ("CA alone (K = depth)", "mva+ca@30")]
    cells = []
    for label, key in rows:
        measures = files.measures(run, key)
        costs = files.measures(run, key, "costs.json")
        first = "" if costs is None else {"mva": "MVA"}.get(costs["first_pass"], costs["first_pass"])
        k = "" if costs is None else str(costs["rescored"])
        cells.append([label, first, k, metric(value(measures, "ndcg_cut_10")), metric(value(measures, "mrr@10")),
                      *_costs_cells(files, run, key)])
    header = ["run", "first pass", "K (CA)", "NDCG@10", "MRR@10", "joint compute (M MACs / query)",
              "bytes / document"]
    return markdown(header, "llrrrrr", cells)


#: TREC DL rows: label, run folder, run name, the folder whose costs.json has the run's costs (None: no costs).
TREC_DL = [
    ("BM25 (Pyserini k1 0.9, b 0.4)", "mva2", "bm25", None),
    ("DE (mean pooling, 20·cosine)", "de", "de", "de-multipass"),
    ("CA (cross-attention, [CLS] -> linear)", "ca", "ca", "ca"),
    ("MVA¹: all tokens, p = 128", "mva1", "mva", "mva1-multipass"),
    ("MVA²: 24 document [CLS], every query token, p = 64", "mva2", "mva", "mva2"),
    ("MVA³: 16 document [CLS], every query token, p = 32", "mva3", "mva", "mva3"),
    ("MVA² with 8 query [CLS] (the query length Table 5's cost fits)", "mva2-query-cls8", "mva", "mva2-query-cls8"),
    ("MVA³ with 8 query [CLS] (the same)", "mva3-query-cls8", "mva", "mva3-query-cls8"),
    ("MVA¹ + CA@10", "mva1-multipass", "mva+ca@10", "mva1-multipass"),
    ("MVA¹ + CA@50", "mva1-multipass", "mva+ca@50", "mva1-multipass"),
    ("DE + CA@10", "de-multipass", "de+ca@10", "de-multipass"),
    ("DE + CA@50", "de-multipass", "de+ca@50", "de-multipass")]


_trec_dl = metrics_table("run", MEASURES, [(label, run, key) for label, run, key, _ in TREC_DL], bold_best=True,
                         more=("joint compute (M MACs / query)", "bytes / document"),
                         more_cells=lambda files, i: _costs_cells(files, TREC_DL[i][3], TREC_DL[i][2]))


#: The [CLS]-start ablation: model, query side, start, run folder.
CLS_STARTS = [
    ("MVA²", "every token", "copies", "mva2-copies-query-tokens"),
    ("MVA²", "every token", "distinct", "mva2"), ("MVA²", "8 [CLS]", "distinct", "mva2-query-cls8"),
    ("MVA³", "every token", "copies", "mva3-copies-query-tokens"),
    ("MVA³", "every token", "distinct", "mva3"), ("MVA³", "8 [CLS]", "distinct", "mva3-query-cls8")]


def _labelled_runs(columns: tuple[str, str, str], rows: list[tuple[str, str, str, str]]):
    """A table of MVA runs: three label columns, the run's measures, its folder (`rows`: three labels, the folder)."""
    def render(files: Files) -> str:
        cells = [[*labels, *(metric(value(files.measures(run, "mva"), m)) for _, m in MEASURES), f"`runs/{run}`"]
                 for *labels, run in rows]
        return markdown([*columns, *(h for h, _ in MEASURES), "file"], "lllrrrrl", cells)
    return render


#: The readings of Sec. 2.2's pooling, every query token read: model, document timesteps, reading, run folder.
POOLING_READINGS = [
    ("MVA², p = 64", "24 [CLS]", "K vectors, started as copies of [CLS]", "mva2-copies-query-tokens"),
    ("MVA², p = 64", "24 [CLS]", "K vectors, started distinct", "mva2"),
    ("MVA², p = 64", "24 [CLS]", "one vector, shared", "mva2-shared-cls"),
    ("MVA³, p = 32", "16 [CLS]", "K vectors, started as copies of [CLS]", "mva3-copies-query-tokens"),
    ("MVA³, p = 32", "16 [CLS]", "K vectors, started distinct", "mva3"),
    ("MVA³, p = 32", "16 [CLS]", "one vector, shared", "mva3-shared-cls"),
    ("First-K, p = 64", "first 24", "the encoder's outputs", "firstk24-outputs"),
    ("First-K, p = 64", "first 24", "the input", "firstk24-input")]


_selection = selection_table("mva", [
    ("MVA¹, the config (tied_init, lr 2e-5)", "mva1"), ("MVA¹, tied_init, lr 1e-4", "mva1-lr1e-4"),
    ("MVA¹, independent projections, lr 2e-5", "mva1-independent"),
    ("MVA¹, independent projections, lr 1e-4", "mva1-independent-lr1e-4"),
    ("MVA¹ from the encoder of the DE fine-tuned on the training part", "mva1-from-de"),
    ("MVA¹, no training (`--trainer.max_steps 0`)", "mva1-untrained"),
    ("MVA², 24 document [CLS] started distinct (`cls_init`'s default)", "mva2"),
    ("MVA², 24 document [CLS] started as copies", "mva2-copies"),
    ("MVA³, 16 document [CLS] started distinct", "mva3"), ("MVA³, 16 document [CLS] started as copies", "mva3-copies")])
_mva1_settings = metrics_table("change", [NDCG], [
    ("the config (tied_init, lr 2e-5)", "mva1", "mva"),
    ("independent projections, lr 1e-4 (EARL's real-data rate)", "mva1-independent-lr1e-4", "mva"),
    ("independent projections, lr 2e-5", "mva1-independent", "mva"), ("tied_init, lr 1e-4", "mva1-lr1e-4", "mva"),
    ("tied_init, lr 2e-5, encoder from the fine-tuned DE", "mva1-from-de", "mva"),
    ("no training (tied_init; `--trainer.max_steps 0`)", "mva1-untrained", "mva"),
    ("DE, no training (`--trainer.max_steps 0`)", "de-untrained", "de")])


def _pretrained(files: Files) -> str:
    table = metrics_table("run", MEASURES, [("MVA¹ from all-MiniLM-L6-v2 (the config)", "mva1", "mva"),
                                            ("MVA¹ from `mva.pretrain`'s model", "mva1-pretrained", "mva")])(files)
    record = files.run_file("mva1-pretrained", "pretrain.json")
    if record is None:
        return table
    loss = record["probe_loss"]
    return (f"{table}\n\nThe probe batch's MLM loss (`runs/mva1-pretrained/pretrain.json`): "
            f"{loss['before']['mlm']:.2f} before, {loss['after']['mlm']:.2f} after.")


#: The pre-training steps of the chain's runs, as the table names them.
CHAIN_STEPS = {"de": "DE", "mva2": "MVA²", "mva3": "MVA³"}


def _chain(files: Files) -> str:
    """Sec. 3's chain (DE pre-trained, MVA pre-trained from it, fine-tuned) against MVA² and MVA³ from the MiniLM, both
    with 8 query [CLS]."""
    table = metrics_table("run", MEASURES, [
        ("MVA² with 8 query [CLS] from all-MiniLM-L6-v2", "mva2-query-cls8", "mva"),
        ("MVA² from the chain (`mva.pretrain` DE, then MVA)", "mva2-chain", "mva"),
        ("MVA³ with 8 query [CLS] from all-MiniLM-L6-v2", "mva3-query-cls8", "mva"),
        ("MVA³ from the chain (the same DE)", "mva3-chain", "mva")])(files)
    losses = []
    for run, step in (("mva2-chain", "de"), ("mva2-chain", "mva2"), ("mva3-chain", "mva3")):
        record = files.run_file(run, f"pretrain-{step}.json")
        if record is not None:
            before, after = record["probe_loss"]["before"], record["probe_loss"]["after"]
            losses.append(f"{CHAIN_STEPS[step]} MLM {before['mlm']:.2f} -> {after['mlm']:.2f}, "
                          f"NSP {before['nsp']:.2f} -> {after['nsp']:.2f}")
    if not losses:
        return table
    text = f"The probe batches' losses before and after pre-training (`runs/mva*-chain`): {'; '.join(losses)}."
    return f"{table}\n\n{textwrap.fill(text, 120, break_on_hyphens=False)}"


#: TREC DL's stores of one model in two row types: model, row type, run folder (the store's name in store_reads.csv).
STORE_DTYPES = [("MVA²", "fp32", "store-mva2-fp32"), ("MVA²", "int8", "store-mva2-int8"),
                ("MVA³", "fp32", "store-mva3-fp32"), ("MVA³", "int8", "store-mva3-int8")]


TABLES = [
    Table("mva/speed", _speed("base")),
    Table("mva/speed-small", _speed("small")),
    Table("mva/default", _default),
    Table("mva/depth-100", _depth_100),
    Table("mva/default-multipass", _default_multipass),
    Table("mva/trec-dl", _trec_dl),
    Table("mva/cls-starts", _labelled_runs(("run", "query side", "[CLS] starts"), CLS_STARTS)),
    Table("mva/mva1-settings", _mva1_settings),
    Table("mva/selection", _selection),
    Table("mva/pretrained", _pretrained),
    Table("mva/chain", _chain),
    Table("mva/pooling-readings", _labelled_runs(("run", "document timesteps", "reading"), POOLING_READINGS)),
    Table("mva/store-dtypes", store_dtypes_table("mva", STORE_DTYPES)),
]
