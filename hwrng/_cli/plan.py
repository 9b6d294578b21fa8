"""``hwrng plan``: every rank's seed before a job starts, and where a trainer's formula collides.

Without ``--preset`` it prints hwrng's own plan (``seed + linear index over the
sharded dims``), which never gives ranks that should differ one seed. With
``--preset megatron|slapo|d9d|torchtitan`` it prints every stream's seed per
rank as that trainer computes it, and exits 1 naming each pair of ranks and
stream that share a seed though they should draw apart.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from hwrng import presets
from hwrng._cli._arguments import non_negative, parse_dims, parse_mesh
from hwrng._cli._status import EXIT_FAILED, EXIT_PASSED
from hwrng._cli._table import format_table
from hwrng._exceptions import InvalidArgumentError, MeshError
from hwrng._mesh import check_sizes, linear_index, require_known, unravel_index
from hwrng._plan import rank_seed, seed_plan
from hwrng.hookspecs import hookimpl

__all__ = ["JSON_RANK_LIMIT", "hwrng_register_commands", "run_plan"]

#: ``hwrng plan --json`` lists every rank; past this many it refuses rather than print gigabytes.
JSON_RANK_LIMIT = 2**22
#: The dims each preset knows; a mesh of ``--preset`` may name only these.
PRESET_DIMS = {
    "megatron": ("pp", "dp", "tp", "ep", "etp"),
    "slapo": ("pp", "dp", "tp"),
}
#: Collisions ``--preset`` names, at most (the rest are counted).
SHOWN_COLLISIONS = 16


def run_plan(args: argparse.Namespace) -> int:
    """Print the plan; exit status 1 when a preset's formula gives ranks one seed."""
    if args.preset is None:
        if args.data_parallel_random_init or args.collision_free:
            raise InvalidArgumentError(
                "--data-parallel-random-init and --collision-free are options of --preset"
            )
        return _hwrng_plan(args)
    return _preset_plan(args)


def _hwrng_plan(args: argparse.Namespace) -> int:
    mesh: dict[str, int] = args.mesh
    sharded = args.sharded or []
    names = list(mesh)
    world = math.prod(mesh.values())
    if args.json:
        if world > JSON_RANK_LIMIT:
            raise MeshError(
                f"--json lists every rank; {world:,} ranks is more than {JSON_RANK_LIMIT:,}"
            )
        seeds = seed_plan(args.seed, mesh, sharded)
        document = {"seed": args.seed, "mesh": mesh, "sharded": sharded}
        print(json.dumps({**document, "seeds": [int(s) for s in seeds]}))
        return EXIT_PASSED
    rank_seed(args.seed, dict.fromkeys(names, 0), mesh, sharded)  # check before printing
    rows = []
    for rank, coordinate in _shown(mesh, args.limit):
        rows.append([rank, *coordinate.values(), rank_seed(args.seed, coordinate, mesh, sharded)])
    print(
        f"seed {args.seed}, mesh {_mesh_text(mesh)} ({world} ranks), sharded dims: "
        f"{', '.join(sharded) if sharded else 'none'}"
    )
    print(format_table(["rank", *names, "seed"], rows))
    _more(world, len(rows))
    shared = [n for n in names if n not in sharded]
    distinct = math.prod(mesh[n] for n in sharded)  # exact: fewer than 2**64 ranks
    print(f"\n{distinct} distinct seed(s) over {world} ranks")
    if shared:
        print(f"ranks that differ only along {', '.join(shared)} share a seed (replicas)")
    else:
        print("every rank has its own seed")
    return EXIT_PASSED


def _shown(mesh: dict[str, int], limit: int) -> list[tuple[int, dict[str, int]]]:
    """The first ``limit`` ranks (all with 0) and their coordinates; the mesh may be huge."""
    world = math.prod(mesh.values())
    shown = world if limit == 0 else min(limit, world)
    sizes = list(mesh.values())
    return [(r, dict(zip(mesh, unravel_index(r, sizes), strict=True))) for r in range(shown)]


def _mesh_text(mesh: dict[str, int]) -> str:
    return " x ".join(f"{n}={s}" for n, s in mesh.items())


def _more(world: int, shown: int) -> None:
    if shown < world:
        print(f"... {world - shown} more ranks (--limit 0 prints all)")


def _preset_formulas(args: argparse.Namespace) -> dict[str, presets.Formula]:
    """The preset's formulas for this mesh, refusing dims and options it does not know."""
    mesh = check_sizes(args.mesh)
    preset = args.preset
    if preset in PRESET_DIMS:
        unknown = [d for d in mesh if d not in PRESET_DIMS[preset]]
        if unknown:
            raise MeshError(
                f"the {preset} preset knows the dims {', '.join(PRESET_DIMS[preset])}, not "
                f"{', '.join(unknown)}"
            )
        if args.sharded is not None:
            raise InvalidArgumentError(
                f"--sharded is hwrng's plan; the {preset} preset's formulas say which dims differ"
            )
        return presets.preset_formulas(
            preset,
            sizes=mesh,
            data_parallel_random_init=args.data_parallel_random_init,
            collision_free=args.collision_free,
            dims=list(mesh) if preset == "slapo" else None,
        )
    distinct = args.sharded if args.sharded is not None else []
    if preset == "d9d":
        distinct = distinct or ["pp"]
        if len(distinct) != 1:
            raise InvalidArgumentError("d9d seeds distinct along one dim: --sharded names one")
    require_known(distinct, list(mesh))
    if args.data_parallel_random_init or args.collision_free:
        raise InvalidArgumentError(
            f"the {preset} preset has no such option: its seeds never collide"
        )
    return presets.preset_formulas(preset, sizes=mesh, dims=distinct)


def _preset_plan(args: argparse.Namespace) -> int:
    formulas = _preset_formulas(args)
    mesh: dict[str, int] = args.mesh
    names, world = list(mesh), math.prod(mesh.values())
    found, total = presets.find_collisions(formulas, args.seed, mesh, limit=SHOWN_COLLISIONS)
    collisions = [_named(c, mesh) for c in found]
    if args.json:
        if world > JSON_RANK_LIMIT:
            raise MeshError(
                f"--json lists every rank; {world:,} ranks is more than {JSON_RANK_LIMIT:,}"
            )
        document = {
            "seed": args.seed,
            "mesh": mesh,
            "preset": args.preset,
            "formulas": {name: f.describe() for name, f in formulas.items()},
            "seeds": [
                {name: f.seed(args.seed, coordinate) for name, f in formulas.items()}
                for _, coordinate in _shown(mesh, 0)
            ],
            "collisions": collisions,
            "collisions_total": total,
        }
        print(json.dumps(document))
        return EXIT_FAILED if total else EXIT_PASSED
    rows = [
        [rank, *coordinate.values(), *(f.seed(args.seed, coordinate) for f in formulas.values())]
        for rank, coordinate in _shown(mesh, args.limit)
    ]
    authors = sorted({f.author for f in formulas.values()})
    print(
        f"seed {args.seed}, mesh {_mesh_text(mesh)} ({world} ranks), preset {args.preset} "
        f"({', '.join(authors)}'s formulas)"
    )
    print(format_table(["rank", *names, *formulas], rows))
    _more(world, len(rows))
    print()
    for name, formula in formulas.items():
        along = ", ".join(formula.along) or "no dim"
        print(f"{name} = {formula.describe()}   (should differ along {along})")
    if not total:
        print("\nno two ranks that should differ share a seed")
        return EXIT_PASSED
    print(f"\n{total} seed(s) shared by ranks that should draw apart:")
    for collision in collisions:
        print(f"  {collision['text']}")
    if total > len(collisions):
        print(f"  ... and {total - len(collisions)} more")
    if args.preset in PRESET_DIMS and not args.collision_free:
        print("to keep them apart: --collision-free (hwrng's formulas; the numbers then differ)")
    return EXIT_FAILED


def _named(collision: presets.Collision, mesh: dict[str, int]) -> dict[str, Any]:
    """A collision between the lowest ranks holding each coordinate (others along other dims)."""
    sizes = list(mesh.values())
    ranks = []
    for along in (collision.first, collision.second):
        coordinate = {d: along.get(d, 0) for d in mesh}
        ranks.append((linear_index(list(coordinate.values()), sizes), coordinate))
    (a, first), (b, second) = ranks
    replicas = [d for d in mesh if d not in collision.formula.along and mesh[d] > 1]
    also = f", and their replicas along {', '.join(replicas)}" if replicas else ""
    formula = collision.formula
    return {
        "stream": formula.stream,
        "ranks": [a, b],
        "seed": collision.seed,
        "text": (
            f"{formula.stream}: rank {a} {first} and rank {b} {second} share seed "
            f"{collision.seed}{also} ({formula.author}'s formula {formula.describe()})"
        ),
    }


@hookimpl
def hwrng_register_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Add ``hwrng plan``."""
    plan = subcommands.add_parser(
        "plan",
        help="print the seed of every rank of a mesh (a trainer's with --preset)",
        description="Print the seed of every rank of a mesh: hwrng's plan, or with --preset "
        "every stream's seed as that trainer computes it. Exit status: 0, or 1 when a "
        "preset's formula gives ranks that should draw apart one seed (each pair named).",
    )
    plan.add_argument(
        "--mesh", type=parse_mesh, required=True, help="dims and sizes: dp=2,pp=2,tp=2"
    )
    plan.add_argument(
        "--sharded",
        type=parse_dims,
        default=None,
        help="sharded dims, slowest first: pp,tp (d9d: its distinct dim; torchtitan: its "
        "distinct dims, first fastest)",
    )
    plan.add_argument("--seed", type=int, required=True, help="the job's seed, in [0, 2**64)")
    plan.add_argument("--preset", choices=presets.PRESETS, help="a trainer's seed formulas")
    plan.add_argument(
        "--data-parallel-random-init",
        action="store_true",
        help="megatron: data-parallel ranks 10 apart",
    )
    plan.add_argument(
        "--collision-free",
        action="store_true",
        help="megatron, slapo: hwrng's collision-free formulas instead of the trainer's",
    )
    plan.add_argument(
        "--limit", type=non_negative, default=1024, help="print at most this many ranks (0: all)"
    )
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plan.set_defaults(func=run_plan)
