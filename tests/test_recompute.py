"""Activation checkpointing redraws exactly what the forward drew, for every hwrng stream.

The oracle (``recompute_harness``): the same model run without checkpointing.
Every gradient of every step must equal it bit for bit, and afterwards every
stream must stand where it stands (the next draws equal), so a recomputation
neither draws other numbers nor moves a stream a second time.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
from typing import Any

import numpy as np
import pytest
import torch
from recompute_harness import (
    BACKWARD_DRAWERS,
    BACKWARD_STREAMS,
    FLAVOURS,
    INNER,
    WHOLE,
    Streams,
    interleaved,
    kinds_for,
    mismatches,
    train,
)
from torch.utils.checkpoint import checkpoint

import hwrng

F = torch.nn.functional


@functools.cache
def _oracle(kinds: tuple[str, ...], steps: int = 3) -> Any:
    return train("plain", kinds, steps=steps)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_stream_redraws_under(flavour: str) -> None:
    """Named state, fork_rng, isolate_rng, invariant ops and a user's region, in one block."""
    kinds = kinds_for(flavour)
    assert mismatches(_oracle(kinds), train(flavour, kinds)) == []


@pytest.mark.parametrize(
    "kinds",
    [("named",), ("fork_rng",), ("isolate_rng",), ("default", "invariant"), ("user_region",)],
    ids="+".join,
)
def test_each_stream_alone_redraws(kinds: tuple[str, ...]) -> None:
    """One stream at a time, so that a failure names it (non-reentrant, reentrant)."""
    for flavour in ("non_reentrant", "reentrant"):
        assert mismatches(_oracle(kinds), train(flavour, kinds)) == [], flavour


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant", "composable"])
def test_a_backward_that_draws_draws_as_without_checkpointing(flavour: str) -> None:
    """Gradient noise, stochastic rounding: a custom Function's backward or a tensor hook
    drawing through a stream the block's forward draws from too. A reentrant checkpoint runs
    the block's backward inside its own backward, after the recomputation: that is no
    recomputation, and must neither replay the forward's draws nor be refused."""
    failed = {}
    for drawer, stream in itertools.product(BACKWARD_DRAWERS, BACKWARD_STREAMS):
        kinds = (stream, f"{drawer}:{stream}")
        try:
            found = mismatches(_oracle(kinds), train(flavour, kinds))
        except hwrng.RecomputationError as error:
            found = [f"refused: {error}"]
        if found:
            failed[f"{drawer}:{stream}"] = found
    assert failed == {}


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # nested reentrant
@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant", "composable"])
@pytest.mark.parametrize("inner", ["nested", "nested_reentrant"])
def test_a_backward_that_draws_in_a_nested_checkpoint_draws_as_without_checkpointing(
    flavour: str, inner: str
) -> None:
    """The same backward draws in a block checkpointed again inside the checkpointed one."""
    failed = {}
    for drawer, stream in itertools.product(BACKWARD_DRAWERS, BACKWARD_STREAMS):
        kinds = (stream, f"{drawer}:{stream}")
        try:
            found = mismatches(_oracle(kinds), train(flavour, kinds, inner=inner))
        except hwrng.RecomputationError as error:
            found = [f"refused: {error}"]
        if found:
            failed[f"{drawer}:{stream}"] = found
    assert failed == {}


@pytest.mark.parametrize("flavour", ["composable", "non_reentrant"])
@pytest.mark.parametrize("inner", INNER)
def test_a_block_that_pushes_saved_tensor_hooks_redraws_under(flavour: str, inner: str) -> None:
    """The block's random part under saved-tensor hooks of its own -- a nested checkpoint,
    save_on_cpu, torch's offload_wrapper -- that hide the checkpoint's hooks: the composable
    checkpoint(module) still finds its forward's contexts."""
    kinds = kinds_for(flavour)
    assert mismatches(_oracle(kinds), train(flavour, kinds, inner=inner)) == []


@pytest.mark.parametrize(
    "flavour",
    [
        "no_preserve",
        "wrapper_no_preserve",
        "reentrant_no_preserve",
        "composable_no_preserve",
        "non_reentrant",
        "reentrant",
    ],
)
def test_a_forward_inside_fork_rng_redraws(flavour: str) -> None:
    """Each step's forward inside hwrng.fork_rng(): it leaves torch's generator where the
    forward found it, so without preserve_rng_state the generator stands, at a region's
    recomputation, where it stood at that region's forward -- and yet torch rewound nothing,
    and the region must leave it as it found it."""
    kinds = kinds_for(flavour)
    forked = functools.partial(hwrng.fork_rng, platform="cpu")
    plain = train("plain", kinds, forward_context=forked)
    assert mismatches(plain, train(flavour, kinds, forward_context=forked)) == []


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")  # the graph breaks
def test_compiled_checkpoints_redraw() -> None:
    """torch.compile over checkpointed blocks: the streams that work under compile at all."""
    kinds = kinds_for("compiled")
    assert mismatches(_oracle(kinds), train("compiled", kinds)) == []


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant"])
def test_presets_tracker_redraws(flavour: str) -> None:
    """Megatron's pattern as the presets teach it: get_rng_tracker().fork()."""

    def run(how: str) -> Any:
        hwrng.presets.megatron_manual_seed(5, tp_rank=1, platform="cpu")
        return train(how, ("named",), tracker=hwrng.presets.get_rng_tracker("cpu"), seed=5)

    assert mismatches(run("plain"), run(flavour)) == []


def test_named_states_alone_draw_new_masks_every_step() -> None:
    """No default draws at all: a recomputation must not be mistaken for the next forward."""
    plain = train("plain", ("named",), steps=4)
    assert mismatches(plain, train("non_reentrant", ("named",), steps=4)) == []
    first_layer = [step[1] for step in plain[0]]  # the first block's weight gradient
    assert all(not torch.equal(a, b) for a, b in itertools.pairwise(first_layer))


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant"])
def test_interleaved_microbatches_redraw_their_own_forward(flavour: str) -> None:
    """1F1B: microbatch k is recomputed after microbatch k+1's forward (and k+2's)."""
    kinds = ("default", "named", "fork_rng", "invariant", "user_region")
    assert mismatches(interleaved("plain", kinds), interleaved(flavour, kinds)) == []


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # nested reentrant
@pytest.mark.parametrize(("outer", "inner"), [(False, False), (False, True), (True, True)])
def test_nested_checkpoints_redraw(outer: bool, inner: bool) -> None:
    streams = {}

    def run(checkpointed: bool) -> list[torch.Tensor]:
        streams["s"] = s = Streams(21)
        torch.manual_seed(21)
        lin = torch.nn.Linear(8, 8)

        def inner_block(x: torch.Tensor) -> torch.Tensor:
            with s.tracker.fork():
                return F.dropout(lin(x), 0.5)

        def outer_block(x: torch.Tensor) -> torch.Tensor:
            with s.tracker.fork():
                x = F.dropout(x, 0.5)
            x = checkpoint(inner_block, x, use_reentrant=inner) if checkpointed else inner_block(x)
            x = hwrng.invariant.dropout(x, WHOLE, 0.5)
            with s.tracker.fork():
                return F.dropout(x, 0.5)

        grads = []
        for _ in range(2):
            x = torch.ones(4, 8, requires_grad=True)
            h = x
            for _ in range(2):
                h = (
                    checkpoint(outer_block, h, use_reentrant=outer)
                    if checkpointed
                    else outer_block(h)
                )
            h.sum().backward()
            grads += [x.grad, lin.weight.grad.clone()]
            lin.zero_grad()
        return grads + s.next_draws()

    plain, nested = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, nested, strict=True))


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_retained_graph_recomputes_alike_twice(reentrant: bool) -> None:
    torch.manual_seed(4)
    lin = torch.nn.Linear(8, 8)
    current: dict[str, Streams] = {}

    def block(x: torch.Tensor) -> torch.Tensor:
        with current["s"].tracker.fork():
            x = F.dropout(lin(x), 0.5)
        return hwrng.invariant.dropout(x, WHOLE, 0.5)

    current["s"] = Streams(4)
    loss = block(torch.ones(4, 8, requires_grad=True)).sum()
    (expected,) = torch.autograd.grad(loss, lin.weight)
    after = current["s"].next_draws()

    current["s"] = Streams(4)
    loss = checkpoint(block, torch.ones(4, 8, requires_grad=True), use_reentrant=reentrant).sum()
    loss.backward(retain_graph=True)  # torch.autograd.grad refuses reentrant checkpoints
    first, lin.weight.grad = lin.weight.grad, None
    loss.backward()
    second = lin.weight.grad
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert all(torch.equal(a, b) for a, b in zip(current["s"].next_draws(), after, strict=True))


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_recomputation_that_forks_otherwise_is_refused(reentrant: bool) -> None:
    """A block that branches on state changed since its forward: refused, nothing drawn."""
    s = Streams(8)
    s.tracker.add("other", 99)
    lin = torch.nn.Linear(8, 8)
    choice = {"name": "model-parallel-rng"}

    def block(x: torch.Tensor) -> torch.Tensor:
        with s.tracker.fork(choice["name"]):
            return F.dropout(lin(x), 0.5)

    loss = checkpoint(block, torch.ones(4, 8, requires_grad=True), use_reentrant=reentrant).sum()
    choice["name"] = "other"
    states = s.tracker.get_states()
    default = torch.get_rng_state()
    with pytest.raises(hwrng.RecomputationError, match=r"entered named state .*'other'"):
        loss.backward()
    assert all(torch.equal(states[k], v) for k, v in s.tracker.get_states().items())
    assert torch.equal(torch.get_rng_state(), default)


def test_a_recomputation_with_more_random_contexts_is_refused() -> None:
    Streams(8)
    lin = torch.nn.Linear(8, 8)
    extra = {"on": False}

    def block(x: torch.Tensor) -> torch.Tensor:
        if extra["on"]:
            x = hwrng.invariant.dropout(x, WHOLE, 0.5)
        return lin(x)

    loss = checkpoint(block, torch.ones(4, 8, requires_grad=True), use_reentrant=False).sum()
    extra["on"] = True
    with pytest.raises(hwrng.RecomputationError, match="its forward entered only 0"):
        loss.backward()


def test_an_unreadable_torch_is_refused_at_the_first_recomputation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where torch's checkpointing is not what hwrng reads: forwards run, recomputations refuse."""
    from hwrng._recompute import _torch_frames

    monkeypatch.setattr(_torch_frames, "_layout_or_reason", lambda: "torch 9.9 moved it")
    s = Streams(2)
    lin = torch.nn.Linear(8, 8)

    def block(x: torch.Tensor) -> torch.Tensor:
        with s.tracker.fork():
            return F.dropout(lin(x), 0.5)

    for reentrant in (False, True):
        loss = checkpoint(block, torch.ones(4, 8, requires_grad=True), use_reentrant=reentrant)
        with pytest.raises(hwrng.RecomputationError, match=r"torch 9\.9 moved it"):
            loss.sum().backward()
    plain = block(torch.ones(4, 8, requires_grad=True)).sum()
    plain.backward()  # no recomputation: nothing to refuse


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_recomputation_that_raises_leaves_the_streams(reentrant: bool) -> None:
    s = Streams(6)
    lin = torch.nn.Linear(8, 8)
    fail = {"on": False}

    def block(x: torch.Tensor) -> torch.Tensor:
        with hwrng.isolate_rng(platform="cpu"):
            x = lin(x) * random.random()
        with s.tracker.fork():
            if fail["on"]:  # before the block's last saved tensor: early stop cannot skip it
                raise KeyError("inside the recomputation")
            return F.dropout(x, 0.5)

    loss = checkpoint(block, torch.ones(4, 8, requires_grad=True), use_reentrant=reentrant).sum()
    fail["on"] = True
    named, default = s.tracker.get_states(), torch.get_rng_state()
    python, numpy_state = random.getstate(), np.random.get_state()
    with pytest.raises(KeyError, match="inside the recomputation"):
        loss.backward()
    assert all(torch.equal(named[k], v) for k, v in s.tracker.get_states().items())
    assert torch.equal(torch.get_rng_state(), default)
    assert random.getstate() == python
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])
    assert s.tracker.forked == frozenset()


def test_a_backward_on_another_thread_redraws() -> None:
    """The recomputation runs where the backward runs: here a thread of its own."""
    kinds = ("default", "named", "isolate_rng", "invariant", "user_region")

    def on_a_thread(loss: torch.Tensor) -> None:
        failures: list[BaseException] = []

        def run() -> None:
            try:
                loss.backward()
            except BaseException as error:  # pragma: no cover - reported below
                failures.append(error)

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        assert failures == []

    got = train("non_reentrant", kinds, steps=2, backward=on_a_thread)
    assert mismatches(_oracle(kinds, 2), got) == []


def test_outside_checkpoints_the_check_is_cheap_and_silent() -> None:
    """No checkpoint around: nothing is recorded, and the streams advance as always."""
    from hwrng import _recompute

    assert _recompute.site() is None
    with torch.no_grad():
        assert _recompute.site() is None  # no_grad alone is no reentrant forward
    assert _recompute.unsupported_reason() is None


@pytest.mark.parametrize(
    "flavour",
    ["reentrant", "non_reentrant", "wrapper", "wrapper_reentrant", "selective", "composable"],
)
def test_the_reader_tells_a_forward_from_its_recomputation(flavour: str) -> None:
    """torch's frames as hwrng reads them (no generator involved: runs on every torch)."""
    from recompute_harness import wrap

    from hwrng._recompute._torch_frames import enclosing

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(enclosing())
            return torch.tanh(self.lin(x))

    wrap(flavour, Probe())(torch.ones(2, 4, requires_grad=True)).sum().backward()
    forward, recomputation = seen
    assert forward is not None and forward.replaying is None and len(forward.recording) == 1
    assert recomputation is not None and recomputation.replaying is not None
    assert recomputation.replaying[0] is forward.recording[0]
    seen.clear()
    Probe()(torch.ones(2, 4, requires_grad=True)).sum().backward()
    assert seen == [None]


class _Seen(torch.autograd.Function):
    """The identity, whose backward notes where hwrng's reader says it runs."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seen: list[Any]) -> torch.Tensor:
        ctx.seen = seen
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        from hwrng._recompute._torch_frames import enclosing

        ctx.seen.append(("function", enclosing()))
        return grad, None


@pytest.mark.parametrize(
    "flavour", ["reentrant", "wrapper_reentrant", "non_reentrant", "selective", "composable"]
)
def test_the_reader_tells_a_blocks_backward_from_its_recomputation(flavour: str) -> None:
    """A custom Function's backward and a tensor hook of a checkpointed block run in no
    checkpoint (a reentrant checkpoint runs them inside its own backward, after the
    recomputation): read from torch's frames, no generator involved."""
    from recompute_harness import wrap

    from hwrng._recompute._torch_frames import enclosing

    seen: list[Any] = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(("forward", enclosing()))
            h = _Seen.apply(torch.tanh(self.lin(x)), seen)
            if h.requires_grad:  # not in a reentrant forward, which runs without grad
                h.register_hook(lambda grad: seen.append(("hook", enclosing())))
            return torch.tanh(h)

    wrap(flavour, Probe())(torch.ones(2, 4, requires_grad=True)).sum().backward()
    where = dict.fromkeys(("function", "hook"), "not run")
    for name, found in seen:
        if name != "forward":
            where[name] = "none" if found is None else "in a checkpoint"
    forward, recomputation = (found for name, found in seen if name == "forward")
    assert forward is not None and forward.replaying is None
    assert recomputation is not None and recomputation.replaying is not None
    assert where == {"function": "none", "hook": "none"}


@pytest.mark.parametrize(
    ("flavour", "preserved"),
    [
        ("reentrant", True),
        ("non_reentrant", True),
        ("composable", True),
        ("reentrant_no_preserve", False),
        ("no_preserve", False),
        ("wrapper_no_preserve", False),
        ("composable_no_preserve", False),
    ],
)
def test_the_reader_reads_what_torch_rewound(flavour: str, preserved: bool) -> None:
    """torch's own record of a checkpoint says which generators it rewound: its CPU generator
    unless preserve_rng_state=False, never a user's generator."""
    from recompute_harness import wrap

    from hwrng._recompute._rewound import rewound
    from hwrng._recompute._torch_frames import enclosing

    cpu = hwrng.get_platform("cpu")
    user = torch.Generator()
    read: list[tuple[bool, bool, bool]] = []

    def block(x: torch.Tensor) -> torch.Tensor:
        found = enclosing()
        if found is not None and found.replaying is not None:
            torch_rewound = rewound(found.replaying.owner)
            covers = torch_rewound.covers
            read.append(
                (torch_rewound.preserved, covers(torch.default_generator, cpu), covers(user, cpu))
            )
        return torch.tanh(x * 2)

    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return block(x)

    wrap(flavour, Module())(torch.ones(2, 4, requires_grad=True)).sum().backward()
    assert read == [(preserved, preserved, False)]


def test_an_unreadable_record_of_what_torch_rewound_is_refused() -> None:
    """A checkpoint object without torch's record (another torch's): refused, never guessed."""
    from types import SimpleNamespace

    from hwrng._recompute._rewound import rewound

    for owner in (object(), SimpleNamespace(recompute_fn=lambda: None)):
        with pytest.raises(hwrng.RecomputationError, match="no readable record"):
            rewound(owner)


LOCAL_TENSOR_SCRIPT = """
import torch, torch.distributed as dist, hwrng
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils.checkpoint import checkpoint

dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
mesh = init_device_mesh("cpu", (2,))
hwrng.dtensor.install("cpu")
hwrng.seed_everything(0, "cpu")
with LocalTensorMode(2):
    w = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]).requires_grad_()
    y = checkpoint(lambda t: torch.nn.functional.dropout(t * 2, 0.5), w, use_reentrant=False)
    try:
        y.sum().backward()
    except hwrng.RecomputationError as error:
        print("refused:", error)
    else:
        print("recomputed")
"""


def test_simulated_ranks_refuse_a_recomputation() -> None:
    """LocalTensorMode keeps each simulated rank's generator, which torch never rewinds."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", LOCAL_TENSOR_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: DTensor random ops on LocalTensorMode" in result.stdout


def test_the_docs_table_names_tests_that_exist() -> None:
    """Every test the concepts page's flavours x streams table names is a test of these files."""
    import re
    from pathlib import Path

    here = Path(__file__).parent
    page = (here.parent / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = page[page.index("## Activation checkpointing") :]
    sources = "".join(
        (here / name).read_text(encoding="utf-8")
        for name in ("test_recompute.py", "test_recompute_dist.py", "recompute_harness.py")
    )
    named = re.findall(r"`(test_\w+)(?:\[([^\]`]*)\])?`", section)
    assert len(named) > 30
    for test, parameter in named:
        assert f"def {test}(" in sources, test
        if parameter and parameter != "...":
            assert all(f'"{part}"' in sources for part in parameter.split("+")), (test, parameter)
