"""Per-generator records without weak references: bounded, and never inherited by a new generator.

torch.Generator can be weakly referenced only from torch 2.13 (pytorch/pytorch#180290); hwrng
keeps what it remembers per generator in ``hwrng._generator_table.GeneratorTable`` on every
torch. Its users are checked through their own entry points: the host counter
(``MersenneCounter``, which remembers where it wrote), the claims that serialise contexts, and
the device counter that remembers which view serves a generator.
"""

from __future__ import annotations

import threading

import torch

import hwrng
from hwrng import _claims
from hwrng._device_counter import DeviceCounter
from hwrng._generator_table import SWEEP_FROM, GeneratorTable, pinned
from hwrng._host import MersenneCounter

GENERATORS = 100_000


def bound(held: int) -> int:
    """The most generators the tables may pin while ``held`` of them are alive."""
    return max(SWEEP_FROM, 2 * held) + 1


def test_a_hundred_thousand_dropped_generators_leave_the_host_record_bounded() -> None:
    counter = MersenneCounter()
    kept = [torch.Generator() for _ in range(8)]
    for index, generator in enumerate(kept):
        counter.write(generator, 7, 4 * index)
    held = pinned() + 1  # everything pinned now may be alive, and the loop's one generator
    largest = 0
    for index in range(GENERATORS):
        generator = torch.Generator()
        counter.write(generator, 1 + index % 3, 0)
        largest = max(largest, pinned(), len(counter._records))
    del generator
    assert largest <= bound(held), largest
    # the generators still held keep what was written to them
    assert [counter.read(g) for g in kept] == [(7, 4 * i) for i in range(len(kept))]


def test_claims_and_device_views_stay_bounded_too() -> None:
    views = DeviceCounter()
    held = pinned() + 1
    largest = 0
    for _ in range(GENERATORS // 50):
        generator = torch.Generator()
        _claims.claim_for(generator)
        views.read(generator)  # the view's own emulated counter records it as well
        largest = max(largest, pinned(), len(_claims._claims), len(views._chosen))
    assert largest <= bound(held), largest


def test_a_new_generator_never_inherits_a_dead_ones_record() -> None:
    """Dead generators' addresses are reused by new ones; their records must not be."""
    counter = MersenneCounter()
    dead = set()
    while True:  # write to generators and drop them, until a sweep has freed them
        before = pinned()
        generator = torch.Generator()
        dead.add(id(generator))
        counter.write(generator, 42, 1024)
        del generator
        if pinned() < before:
            break
    made = [torch.Generator() for _ in range(2_000)]  # all held: each takes a new address
    reused = [generator for generator in made if id(generator) in dead]
    assert reused, "CPython reused no dead generator's address: the test proves nothing"
    for generator in reused:
        assert counter.anchor(generator, 42) == 0, "a new generator inherited a dead one's anchor"
        generator.manual_seed(42)
        torch.rand(3, generator=generator)
        # it reads from its own history (nothing written to it: offset 4), not from the
        # dead generator's position 1024
        assert counter.read(generator) == (42, 4)


def test_the_table_forgets_only_unreferenced_generators() -> None:
    table: GeneratorTable[str] = GeneratorTable()
    alive = [torch.Generator() for _ in range(3)]
    for number, generator in enumerate(alive):
        table.set(generator, f"alive {number}")
    held = pinned() + 1
    for _ in range(10 * bound(held)):
        table.set(torch.Generator(), "dropped")
    assert [table.get(g) for g in alive] == ["alive 0", "alive 1", "alive 2"]
    assert len(table) <= bound(held)
    table.pop(alive[1])
    assert table.get(alive[1]) is None
    assert table.setdefault(alive[1], lambda: "again") == "again"
    assert table.setdefault(alive[1], lambda: "not made") == "again"


def test_the_default_generator_is_never_forgotten() -> None:
    table: GeneratorTable[int] = GeneratorTable()
    table.set(torch.default_generator, 1)
    for _ in range(10 * bound(pinned())):
        table.set(torch.Generator(), 0)
    assert table.get(torch.default_generator) == 1


def test_threads_recording_at_once_lose_nothing() -> None:
    table: GeneratorTable[int] = GeneratorTable()
    kept: list[list[torch.Generator]] = [[] for _ in range(4)]

    def record(worker: int) -> None:
        for number in range(2_000):
            generator = torch.Generator()
            table.set(generator, number)
            if number % 100 == 0:
                kept[worker].append(generator)

    threads = [threading.Thread(target=record, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for generators in kept:
        assert [table.get(g) for g in generators] == list(range(0, 2_000, 100))


def test_the_host_counter_reads_positions_as_before() -> None:
    """The rewritten record keeps its behaviour: written positions read back, drawing moves on."""
    generator = torch.Generator()
    hwrng.get_platform("cpu").set_seed_offset(generator, 9, 400)
    assert hwrng.get_platform("cpu").get_seed_offset(generator) == (9, 400)
    torch.rand(2, generator=generator)
    assert hwrng.get_platform("cpu").get_seed_offset(generator) == (9, 404)
