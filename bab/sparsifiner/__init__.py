"""Sparsifiner: a low-rank connectivity predictor choosing the top-k keys of every query, the sparse
attention kernels, a ViT that uses them, Linformer and token pruning baselines, and the speed bench.

See docs/sparsifiner.md.
"""
