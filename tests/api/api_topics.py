"""Labelled texts for the API tests: three topics with disjoint words, written as CSV files."""

import csv
import random

TOPICS = {
    "sports": "goal match team player coach score league ball win season",
    "science": "atom cell energy theory data experiment physics gene lab study",
    "music": "song album band guitar concert piano melody singer tour record",
}
FILLER = "the a of and to in is on with for".split()


def topic_texts(n_per_class: int, seed: int) -> list[tuple[str, str]]:
    """(text, label) rows: topic words mixed with shared filler words, shuffled."""
    rng = random.Random(seed)
    rows = []
    for label, words in TOPICS.items():
        words = words.split()
        for _ in range(n_per_class):
            rows.append((" ".join(rng.choice(words + FILLER) for _ in range(rng.randint(4, 10))), label))
    rng.shuffle(rows)
    return rows


def write_csv(path, rows, header=("text", "label")):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path
