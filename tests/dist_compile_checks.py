"""What each rank runs for the DTensor-under-torch.compile tests of test_recompute_dist.py.

The program draws, in this order: a plain (non-DTensor) ``torch.rand``, a
DTensor dropout of a parameter, a plain ``torch.randn``, a DTensor
``uniform_``, and a checkpointed block of a DTensor dropout; then its
backward pass. Every value is exact arithmetic on draws (dropout of ones by
p = 0.5 gives 0 or 2), so compiled code must give eager code's tensors bit
for bit whatever the backend's float arithmetic, and every generator must
stand where eager code leaves it (the next draws equal).

Each rank runs it on two meshes: the two ranks together (``tp`` of 2), and a
one-rank mesh of its own (the ``tp`` dim of a ``(2, 1)`` mesh): DTensor ops
of one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.utils.checkpoint import checkpoint

import hwrng

F = torch.nn.functional
ROWS, WIDTH = 4, 8
Step = Callable[[DTensor, torch.Tensor], list[torch.Tensor]]
Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def _mesh(kind: str) -> Any:
    if kind == "two_ranks":
        return init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    return init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))["tp"]


def _empty(mesh: Any) -> DTensor:
    return distribute_tensor(torch.empty(ROWS * mesh.size(), WIDTH), mesh, [Shard(0)])


def _ones(mesh: Any) -> DTensor:
    return distribute_tensor(torch.ones(ROWS * mesh.size(), WIDTH), mesh, [Shard(0)])


def _program(mesh: Any, wrap: Wrap, plain_in_block: bool = False) -> Step:
    """The program, its two parts each passed through ``wrap`` (``torch.compile``, or not).

    The checkpointed block is compiled apart: torch 2.13 fails compiling it in
    one graph with a DTensor that requires grad (``save_from_forward``: "expected
    all tensors_saved_with_vc_check to be Tensors", a DeviceMesh among them;
    the same without hwrng). ``plain_in_block`` puts a plain dropout before the
    block's DTensor dropout.
    """

    def draws(weight: DTensor) -> list[torch.Tensor]:
        plain = torch.rand(5)
        dropped = F.dropout(weight, 0.5)
        noise = torch.randn(3)
        filled = torch.empty_like(weight).uniform_()
        return [plain, dropped.to_local(), noise, filled.to_local()]

    def block(h: torch.Tensor) -> torch.Tensor:
        if plain_in_block:
            h = F.dropout(h, 0.5)
        sharded = DTensor.from_local(h, mesh, [Shard(0)], run_check=False)
        return F.dropout(sharded, 0.5).to_local()

    def checkpointed(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, use_reentrant=False)

    first, second = wrap(draws), wrap(checkpointed)
    return lambda weight, x: [*first(weight), second(x)]


def _seed(mesh: Any, adapter: bool) -> None:
    if adapter:
        hwrng.manual_seed(7, mesh, sharded_dims=["tp"], platform="cpu")
    else:
        torch.manual_seed(7 + torch.distributed.get_rank())


def _run(mesh: Any, step: Step, adapter: bool = True) -> list[torch.Tensor]:
    """Two steps, forward and backward, then the next draws and the generator's state."""
    _seed(mesh, adapter)
    weight = _ones(mesh).requires_grad_()
    x = torch.ones(ROWS, WIDTH, requires_grad=True)
    results: list[torch.Tensor] = []
    for _ in range(2):
        outputs = step(weight, x)
        (outputs[1].sum() + outputs[4].sum()).backward()
        grad = weight.grad
        assert isinstance(grad, DTensor) and x.grad is not None
        results += [*(t.detach() for t in outputs), grad.to_local().clone(), x.grad.clone()]
        weight.grad = x.grad = None
    after = _empty(mesh).uniform_().to_local()
    return [*results, torch.rand(4), after, torch.default_generator.get_state()]


def _compiler(backend: str) -> Wrap:
    """``torch.compile`` with ``backend`` (``inductor_fallback_random``: inductor running
    torch's own random ops, ``torch._inductor.config.fallback_random``)."""
    import torch._inductor.config

    torch._dynamo.reset()
    if backend != "inductor_fallback_random":
        return lambda function: torch.compile(function, backend=backend)

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        compiled = torch.compile(function, backend="inductor")

        def with_fallback(*args: Any) -> Any:
            with torch._inductor.config.patch(fallback_random=True):
                return compiled(*args)

        return with_fallback

    return wrap


def _differences(
    mesh: Any, backends: list[str], adapter: bool, plain_in_block: bool = False
) -> dict[str, list[int] | str]:
    """For each backend, the indices of :func:`_run`'s tensors that differ from eager code's
    (or ``"refused: ..."``, hwrng's error, where hwrng refused to run the compiled code)."""
    if adapter:
        hwrng.dtensor.install("cpu")
    try:
        eager = _run(mesh, _program(mesh, lambda f: f, plain_in_block), adapter)
        found: dict[str, list[int] | str] = {}
        for backend in backends:
            try:
                got = _run(mesh, _program(mesh, _compiler(backend), plain_in_block), adapter)
            except hwrng.DTensorHookError as error:
                found[backend] = f"refused: {error}"
                continue
            pairs = enumerate(zip(eager, got, strict=True))
            found[backend] = [i for i, (a, b) in pairs if not torch.equal(a, b)]
        return found
    finally:
        if adapter:
            hwrng.dtensor.uninstall()
        torch._dynamo.reset()


def compiled_matches_eager(mesh_kind: str, backends: list[str]) -> dict[str, list[int] | str]:
    """With hwrng's adapter: what each backend's run of the program differs in from eager's."""
    return _differences(_mesh(mesh_kind), backends, adapter=True)


def inductor_is_refused(mesh_kind: str) -> dict[str, Any]:
    """Inductor's own random numbers: refused while compiling, before anything is drawn."""
    mesh = _mesh(mesh_kind)
    hwrng.dtensor.install("cpu")
    try:
        step = _program(mesh, _compiler("inductor"))
        _seed(mesh, adapter=True)
        before = torch.default_generator.get_state()
        try:
            step(_ones(mesh), torch.ones(ROWS, WIDTH))
        except Exception as error:  # torch wraps hwrng's error: its message is the report
            message = str(error)
        else:
            message = ""
        return {
            "message": message,
            "generator_untouched": torch.equal(torch.default_generator.get_state(), before),
        }
    finally:
        hwrng.dtensor.uninstall()
        torch._dynamo.reset()


def torch_alone(backends: list[str], plain_in_block: bool = False) -> dict[str, list[int] | str]:
    """The same program without hwrng, on the same torch (two ranks, each seeded apart).

    Without the adapter a DTensor op on a CPU mesh draws from each rank's own
    generator, as a plain op does (torch has no tracker for CPU meshes).
    """
    return _differences(_mesh("two_ranks"), backends, adapter=False, plain_in_block=plain_in_block)


def plain_draws_in_a_compiled_checkpoint(
    backends: list[str],
) -> dict[str, dict[str, list[int] | str]]:
    """A plain dropout in the checkpointed block, with and without hwrng's adapter."""
    mesh = _mesh("two_ranks")
    return {
        "hwrng": _differences(mesh, backends, adapter=True, plain_in_block=True),
        "torch": _differences(mesh, backends, adapter=False, plain_in_block=True),
    }


def invariant_mode_is_refused() -> str:
    """``install(invariant=True)``: a compiled DTensor dropout is refused while tracing."""
    mesh = _mesh("two_ranks")
    hwrng.dtensor.install("cpu", invariant=True)
    try:
        compiled = _compiler("aot_eager")(lambda t: F.dropout(t, 0.5) + 1)
        try:
            compiled(_ones(mesh))
        except Exception as error:  # torch wraps hwrng's error: its message is the report
            return str(error)
        return ""
    finally:
        hwrng.dtensor.uninstall()
        torch._dynamo.reset()
