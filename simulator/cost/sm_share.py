"""What a GEMM keeps of the GPU when a communication kernel holds some of its SMs.

Why its own function: tensor-parallel communication overlap (Transformer Engine's
userbuffers, workloads/hybrid/tp_overlap.py) runs its reduce-scatter and bulk
all-gather kernels on `num_sm` SMs (16 by default) beside the GEMMs, and launches those
GEMMs with `set_sm_margin`: cuBLASLt is told to use sm_count - num_sm SMs
(transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp,
`_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count`, passed to every
`nvte_cublas_gemm` of the overlap). The GEMM is then a smaller GPU: its tiles run in
waves over fewer SMs and its rate is that share of the peak. This is the one place the
kernel model turns an SM reservation into a rate, so a mechanistic interference model
(what a running collective takes from the GPU) can replace it by routing through here.
"""

from __future__ import annotations

from simulator.errors import CostModelError


def sms_for_gemm(sm_count: int, sm_margin: int) -> tuple[int, float]:
    """(SMs the GEMM's waves run on, fraction of the GPU's GEMM peak it can reach) when
    `sm_margin` of the `sm_count` SMs are left to a concurrent communication kernel."""
    if sm_margin <= 0:
        return sm_count, 1.0
    if sm_margin >= sm_count:
        raise CostModelError(
            f"an SM margin of {sm_margin} leaves no SM of the GPU's {sm_count} to the GEMM"
        )
    left = sm_count - sm_margin
    return left, left / sm_count
