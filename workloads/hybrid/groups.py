"""Process groups of the hybrid generator and the ZeRO++ partition levels.

Group kinds (members in rank order):
- tp: the tensor-parallel GPUs (consecutive ranks);
- cp: the context-parallel GPUs splitting one sequence (stride tp; only when cp > 1);
- dp: every GPU holding the same weights as this one: the data-parallel ranks of one
  (tp, stage) position (shard x replicate) times the context-parallel ones (Megatron
  reduces gradients over data x context parallel);
- shard / replicate: the sharding group and the replicas of a shard (HSDP);
- pp: one GPU per pipeline stage (position = stage), for send/recv;
- embed: the first and last stage (tied word embeddings under pipelining);
- amax (FP8 only): every GPU of a pipeline stage, Megatron's FP8 amax reduction group
  (tensor x data x context parallel);
- zpair, znode, zinter, zpair_x, znode_x: ZeRO++ partition levels (pure data-parallel
  runs only): a GCD pair, a node, the same local GPU across nodes, the same position of
  every pair, the same pair position inside a node.
"""

from __future__ import annotations

import numpy as np

from workloads.errors import WorkloadError
from workloads.groups import ProcessGroups, strided_groups
from workloads.hybrid.setup import HybridSetup, Level

LEVEL_GROUP: dict[str, str] = {"global": "shard", "node": "znode", "pair": "zpair"}
REFRESH_GROUP: dict[str, str] = {"node": "zinter", "pair": "zpair_x"}


def gradient_groups(level: Level) -> tuple[str, ...]:
    """The hierarchy of a gradient reduction starting at `level`, finest first."""
    if level == "global":
        return ("shard",)
    if level == "node":
        return ("znode", "zinter")
    return ("zpair", "znode_x", "zinter")


def uses_levels(setup: HybridSetup) -> bool:
    """True if some ZeRO++ collective runs on a partition level other than 'global'."""
    sh = setup.sharding
    return setup.sharded and (
        sh.forward_level != "global"
        or sh.backward_level != "global"
        or sh.gradient_level != "global"
    )


def hybrid_groups(setup: HybridSetup) -> ProcessGroups:
    """All group kinds of a hybrid setup."""
    t, p, c = setup.tp, setup.pp, setup.cp
    s, r = setup.shard, setup.replicate
    world = setup.world
    ranks = np.arange(world, dtype=np.int64).reshape(p, r, s, c, t)
    kinds: dict[str, np.ndarray] = {
        "tp": ranks.reshape(-1, t),
        "dp": ranks.transpose(0, 4, 1, 2, 3).reshape(-1, r * s * c),
        "pp": ranks.transpose(1, 2, 3, 4, 0).reshape(-1, p),
        "shard": ranks.transpose(0, 1, 3, 4, 2).reshape(-1, s),
        "replicate": ranks.transpose(0, 2, 3, 4, 1).reshape(-1, r),
    }
    if c > 1:
        kinds["cp"] = ranks.transpose(0, 1, 2, 4, 3).reshape(-1, c)
    if p > 1:
        kinds["embed"] = kinds["pp"][:, [0, p - 1]]
    if setup.fp8:  # Megatron's amax reduction group: tensor x data x context parallel
        kinds["amax"] = ranks.reshape(p, -1)
    if uses_levels(setup):
        kinds.update(level_groups(setup))
    return ProcessGroups(world, kinds)


def level_groups(setup: HybridSetup) -> dict[str, np.ndarray]:
    """The ZeRO++ level groups; they need a pure data-parallel run sharded over all GPUs
    and whole nodes (and pairs)."""
    world, gpn = setup.world, setup.gpus_per_node
    if setup.tp != 1 or setup.pp != 1 or setup.shard != world:
        raise WorkloadError(
            "parallel: ZeRO++ partition levels need pure data parallelism sharded over all GPUs"
        )
    if gpn < 2 or gpn % 2 or world % gpn:
        raise WorkloadError(
            f"parallel: ZeRO++ partition levels need whole nodes of an even GPU count "
            f"({world} GPUs, {gpn} per node)"
        )
    return {
        "zpair": strided_groups(world, 2, 1),
        "zpair_x": strided_groups(world, world // 2, 2),
        "znode": strided_groups(world, gpn, 1),
        "znode_x": strided_groups(world, gpn // 2, 2),
        "zinter": strided_groups(world, world // gpn, gpn),
    }


def group_size(setup: HybridSetup, name: str) -> int:
    """Size of a group kind without building the groups."""
    gpn = setup.gpus_per_node
    sizes = {
        "tp": setup.tp,
        "cp": setup.cp,
        "dp": setup.grad_ranks,
        "pp": setup.pp,
        "shard": setup.shard,
        "replicate": setup.replicate,
        "embed": 2,
        "amax": setup.world // setup.pp,
        "zpair": 2,
        "zpair_x": setup.world // 2,
        "znode": gpn,
        "znode_x": gpn // 2,
        "zinter": setup.world // gpn if gpn else 1,
    }
    return sizes[name]
