"""One study per notebook, each beside its smoke / quick / paper profile: the notebooks call these."""
