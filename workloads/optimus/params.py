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
    """

    strategy: Literal["optimus"] = "optimus"
    q: int | None = Field(default=None, ge=1)
    data: int | None = Field(default=None, ge=1)
    prefetch_broadcasts: bool = False
