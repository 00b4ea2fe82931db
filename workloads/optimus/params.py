"""Parameters of Optimus' 2D (SUMMA) tensor parallelism with data parallelism on top."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topologies.user_model import UserModel


class OptimusParallel(UserModel):
    """Optimus (Xu et al. 2021): a q x q mesh per model replica, `data` replicas.

    q: mesh side (None: chosen, the smallest that fits). data: replicas (None: GPUs /
    q^2). prefetch_broadcasts: issue SUMMA step t+1's broadcasts while step t's GEMM
    runs (off: every broadcast completes before its GEMM, as a plain SUMMA loop does).
    mesh_layout: how mesh positions map to GPUs: 'rows' (rank = j + q·i + q²·replica:
    a mesh row on consecutive GPUs, the released code without --rank-rearrange) or
    'node-blocks' (the released code's --rank-rearrange, summa/arguments.py
    rank_rearrange, written for TACC's 4-GPU nodes: each node holds a 2 x 2 block of the
    mesh, so every row and every column has 2 GPUs on each of q/2 nodes).
    """

    strategy: Literal["optimus"] = "optimus"
    q: int | None = Field(default=None, ge=1)
    data: int | None = Field(default=None, ge=1)
    prefetch_broadcasts: bool = False
    mesh_layout: Literal["rows", "node-blocks"] = "rows"
