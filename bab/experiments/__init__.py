"""One folder per notebook (its profiles, its study, its analyses), each registered once in ``registry.py``, beside
the machinery the studies share: the notebooks call these."""
