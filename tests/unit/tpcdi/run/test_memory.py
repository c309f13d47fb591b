"""The run's memory sampler: the peak of the whole tree, of each part and of each phase."""

from __future__ import annotations

import subprocess
import sys
import time

from tpcdi.run.memory import MemorySampler

CHILD = (
    "import time; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); "
    "print('ready', flush=True); time.sleep(30)"
)


def test_a_child_counts_in_its_part_and_in_the_phase_it_ran_in() -> None:
    sampler = MemorySampler(interval=0.05)
    with sampler:
        sampler.label("quiet")
        time.sleep(0.2)
        sampler.label("busy")
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            time.sleep(0.3)
        finally:
            child.kill()
            child.wait()
        sampler.label(None)
    mb = 1 << 20
    assert sampler.parts["children"] > 80 * mb
    assert sampler.parts["process"] > 10 * mb and sampler.parts["postgres"] == 0
    assert sampler.phases["busy"] > sampler.phases["quiet"] + 60 * mb
    assert sampler.peak >= sampler.phases["busy"]
    report = sampler.as_json()
    assert (
        sampler.phase_parts["busy"]["children"] > 80 * mb > sampler.phase_parts["quiet"]["children"]
    )
    assert set(report) == {"parts", "phases", "phase_parts"}
    assert set(report["phases"]) == {"quiet", "busy"}  # type: ignore[call-overload]
