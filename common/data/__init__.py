"""Data shared by every paper package: TREC formats, a document store, task sources, BM25, samplers and training
tables."""
