"""Dense retrieval on a BEIR-layout dataset: its files, exact and HNSW search, and the ranking
metrics it is scored with."""
