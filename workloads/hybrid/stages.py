"""Pipeline stage layouts: how many transformer layers each pipeline rank runs.

Even by default; uneven from an explicit list (`layers_per_stage`) or from Megatron-Core's
rule that the embedding and the loss count as a layer of the first and last stage
(`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split` in
megatron/core/transformer/transformer_config.py). Llama 3 405B was trained that way: 126
layers on 16 stages, 7 on the first and the last, 8 on the others (Dubey et al. 2024,
"The Llama 3 Herd of Models", Section 3.3.2).
"""

from __future__ import annotations

from workloads.errors import WorkloadError
from workloads.hybrid.params import DeepSpeedParallel, HybridParallel, MegatronParallel
from workloads.hybrid.setup import HybridSetup
from workloads.models import TransformerSpec


def stage_layers_for(spec: TransformerSpec, params: HybridParallel, pp: int) -> tuple[int, ...]:
    """Transformer layers per pipeline rank the parameters ask for; () = an even split.

    Megatron-Core's rule for account_for_embedding / account_for_loss: the embedding and
    the loss count as one layer each, the sum splits evenly over the stages, and the
    first / last stage runs one transformer layer fewer (num_layers + 1 + 1 on pp ranks,
    megatron/core/transformer/transformer_config.py)."""
    if not isinstance(params, MegatronParallel | DeepSpeedParallel):
        return ()
    if params.layers_per_stage is not None:
        given = tuple(params.layers_per_stage)
        if sum(given) != spec.layers:
            raise WorkloadError(
                f"parallel.layers_per_stage puts {sum(given)} layers on the stages but the "
                f"model has {spec.layers}"
            )
        return given
    if isinstance(params, DeepSpeedParallel):
        return ()
    extra = (int(params.account_for_embedding), int(params.account_for_loss))
    if not any(extra):
        return ()
    units = spec.layers + sum(extra)
    if units % pp:
        raise WorkloadError(
            f"parallel.pp={pp} does not divide the model's {spec.layers} layers plus the "
            f"{sum(extra)} counted for the embedding/loss (account_for_embedding/"
            f"account_for_loss)"
        )
    counts = [units // pp] * pp
    counts[0] -= extra[0]
    counts[-1] -= extra[1]
    if min(counts) < 1:
        raise WorkloadError(
            f"parallel.pp={pp}: with the embedding/loss counted as layers a stage of "
            f"{spec.layers} layers would be left without a transformer layer"
        )
    return tuple(counts)


def check_stages(spec: TransformerSpec, setup: HybridSetup) -> None:
    """Raise WorkloadError (naming the field) unless the layers split over the stages
    (and each stage's layers over its virtual-stage chunks)."""
    v = setup.virtual_stages
    if not setup.stage_layers:
        if spec.layers % setup.chunks:
            raise WorkloadError(
                f"parallel.pp={setup.pp} (x virtual_stages={v}) does not divide the model's "
                f"{spec.layers} layers (uneven stages: parallel.layers_per_stage, or "
                f"account_for_embedding / account_for_loss)"
            )
        return
    if len(setup.stage_layers) != setup.pp or sum(setup.stage_layers) != spec.layers:
        raise WorkloadError(
            f"parallel.layers_per_stage: {len(setup.stage_layers)} stages of "
            f"{sum(setup.stage_layers)} layers for pp={setup.pp} and {spec.layers} layers"
        )
    bad = [n for n in setup.stage_layers if n % v]
    if bad:
        raise WorkloadError(
            f"parallel.virtual_stages={v}: a pipeline stage of {bad[0]} layers does not "
            f"split into {v} chunks (stages: {list(setup.stage_layers)})"
        )
