"""EARL: Speedup Transformer-based Rankers with Pre-computed Representation.

Gao, Dai and Callan, 2020 (../shared/papers/earl.txt): Embed Ahead Rank Later,
with document/query understanding and judge blocks over precomputed
representations. Until the EARL issue lands this package only names its paper.
"""
