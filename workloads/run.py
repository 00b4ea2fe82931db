"""What every strategy generator needs to know about the run besides its parameters:
the training choices (batch, microbatch, checkpointing, optimizer) and the cluster's
shape (GPU count, GPUs per node, memory per GPU)."""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import WorkloadError
from workloads.models import TransformerSpec


@dataclass(frozen=True)
class TrainingSetup:
    """The training-run choices a workload generator needs (from the config)."""

    batch_tokens: int
    microbatch_sequences: int | None = None
    activation_checkpointing: bool = True
    optimizer: str = "adam"
    flash_attention: bool = True
    compress_microbatches: bool = True  # represent identical middle microbatches once
    # the loss kernel (eager, fused, vocab-parallel); None: the framework's own
    cross_entropy: str | None = None
    # training metrics updated on every microbatch's logits (Composer's; program.py)
    train_metrics: int = 0


@dataclass(frozen=True)
class ClusterShape:
    """The cluster as a workload generator sees it."""

    gpus: int
    gpus_per_node: int
    capacity_bytes: float


def batch_sequences(spec: TransformerSpec, training: TrainingSetup) -> int:
    """Global batch in sequences (the token count must be a whole number of them)."""
    if training.batch_tokens % spec.seq_len:
        raise WorkloadError(
            f"training.batch_tokens={training.batch_tokens} is not a multiple of the sequence length {spec.seq_len}"
        )
    return training.batch_tokens // spec.seq_len


def divisors(n: int) -> list[int]:
    """Positive divisors of n in increasing order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
