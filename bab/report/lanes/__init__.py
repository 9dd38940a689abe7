"""The committed record, rebuilt lane by lane: ``python -m bab record plan`` and ``python -m bab record next``.

A lane is one notebook at one seed of the ``record`` profile (``plan``): sized to finish, training and build
together, within an hour on one core, so two run beside the day's work. ``record next`` runs the lanes not yet
landed (or stale), each into its own staging folder, and lands each as it ends (``landing``): its executed notebook,
page, rows and per-example outcomes go into ``reports/record/``, with ``lanes/<stem>.json`` saying which commit,
machine and seconds made it and the fingerprints that decide its numbers (``fingerprints``); the front page is then
rebuilt from what has landed. A lane stays valid at a later commit while those fingerprints are equal; a claim
whose rows wait for a lane not landed is "not run", naming the lanes it waits for.
"""
