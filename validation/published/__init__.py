"""Published numbers the repo holds, each with its source, as plain data.

Data files (validation/published/data/):

| file | what | source |
|---|---|---|
| axonn_perlmutter.yaml | AxoNN weak scaling on Perlmutter (PFLOP/s, % of peak, time per batch) | SC'24 Table III / Fig. 6 |
| axonn_frontier.yaml | AxoNN weak scaling on Frontier (PFLOP/s, % of peak, time per batch) | SC'24 Table III |
| axonn_frontier_overlap.yaml | overlap ablation, GPT-80B on 8,192 Frontier GCDs | SC'24 Fig. 5 |
| axonn_frontier_split.yaml | computation and non-overlapped communication per configuration, 512-8,192 GCDs | SC'24 Fig. 7 |
| axonn_bandwidths.yaml | AxoNN's measured group bandwidths, Perlmutter and Frontier | SC'24 §V-B, comm_model.py |
| axonn_environments.yaml | the software environment of each machine's AxoNN runs (GPUDirect RDMA, ...) | the authors' launch scripts, RCCL source |
| axonn_overlap.yaml | "nearly 53% improvement" of OAR+ORS+OAG for a 20B model | arXiv 2305.13525 v2 |
| nccl_nvswitch.yaml | 8-GPU NVSwitch all-reduce alpha and bus bandwidth (A100, H100) | Vidur's NCCL profiles |
| vidur_gemm_subset.csv | measured GEMM kernel times (A100, H100) | Vidur's operator profiles |

Figures overlay these where they exist and `axsim validate` compares every one of them
with a simulation; nothing here is a simulated value.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml


def load_yaml(name: str) -> dict[str, Any]:
    """One data file as a mapping (e.g. 'axonn_perlmutter')."""
    text = resources.files("validation.published").joinpath(f"data/{name}.yaml").read_text()
    return dict(yaml.safe_load(text))


def source(name: str) -> str:
    """The source line of a data file, whitespace normalised."""
    return " ".join(str(load_yaml(name)["source"]).split())


@dataclass(frozen=True)
class ScalingPoint:
    """One published weak-scaling point."""

    gpus: int
    model: str
    pflops: float
    percent_of_peak: float
    time_per_batch_s: float


def axonn_perlmutter() -> list[ScalingPoint]:
    """AxoNN on Perlmutter, paper Table III (sustained PFLOP/s) and Fig. 6 (time)."""
    return [ScalingPoint(**row) for row in load_yaml("axonn_perlmutter")["rows"]]


def axonn_frontier() -> list[ScalingPoint]:
    """AxoNN on Frontier, paper Table III (time implied by the model-FLOP formula)."""
    return [ScalingPoint(**row) for row in load_yaml("axonn_frontier")["rows"]]


@dataclass(frozen=True)
class BandwidthEntry:
    """One cell of AxoNN's bandwidth table and the group placement that represents it."""

    machine: str
    gpus_per_node: int
    inner: int
    own: int
    GBps: float
    label: str
    environment: dict[str, Any] = field(default_factory=dict)


def axonn_bandwidths() -> list[BandwidthEntry]:
    """AxoNN's measured group bandwidths, all machines."""
    data = load_yaml("axonn_bandwidths")
    return [
        BandwidthEntry(
            machine=m,
            gpus_per_node=int(spec["gpus_per_node"]),
            environment=axonn_environment(spec),
            **row,
        )
        for m, spec in data["machines"].items()
        for row in spec["rows"]
    ]


def axonn_environment(data: dict[str, Any]) -> dict[str, Any]:
    """The config fields (`cluster`, `engine`) of the environment a data file's
    `environment:` names in axonn_environments.yaml; {} where it names none."""
    name = data.get("environment")
    if name is None:
        return {}
    envs = load_yaml("axonn_environments")["environments"]
    if name not in envs:
        raise KeyError(f"axonn_environments.yaml: no environment '{name}'")
    return {k: dict(v) for k, v in envs[name].items() if k in ("cluster", "engine")}


def vidur_gemm_rows() -> list[dict[str, str]]:
    """Vidur's measured GEMM times (a subset; see vidur_gemm_subset.NOTICE.md)."""
    path = resources.files("validation.published").joinpath("data/vidur_gemm_subset.csv")
    with path.open() as f:
        return list(csv.DictReader(f))
