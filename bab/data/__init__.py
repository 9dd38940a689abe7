"""Data sets: the synthetic marked-token task, text classification CSVs, Fashion-MNIST, language-model text."""
