"""Running the notebooks: ``python -m bab report run`` and ``python -m bab notebooks refresh``.

``build`` executes the numbered notebooks with papermill in a staging folder and replaces reports/<profile>/ only
when all is written; ``schedule`` decides how many run at once, with how many threads, in which order; ``progress``
prints a line per notebook and per cell; ``timings`` says afterwards where the seconds went. ``notebooks`` keeps
notebooks/ itself: the jupytext pairs and the stored smoke outputs, cleaned of machine paths and volatile metadata.
"""
