import subprocess
import sys

import pytest

from bab.core.memory import release_freed_memory

# a fresh process: fill the heap with 64 KB blocks (under glibc's mmap threshold), free all but the last (which keeps
# the heap's top in place, so free() alone returns nothing), and read the resident set before and after the call
PROGRAM = """
from bab.core.memory import release_freed_memory

def resident_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

blocks = [bytearray(64 * 1024) for _ in range(3000)]
del blocks[:-1]
before = resident_mb()
released = release_freed_memory()
print(released, before, resident_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not release_freed_memory(),
                    reason="needs glibc's malloc_trim and /proc")
def test_freed_heap_pages_go_back_to_the_operating_system():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True).stdout.split()
    released, before, after = out[0] == "True", float(out[1]), float(out[2])
    assert released
    assert before - after > 150, (before, after)  # ~190 MB freed in the heap's middle
