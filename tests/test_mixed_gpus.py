"""A mixed machine: `cluster.node_gpus` gives runs of nodes another GPU type.

The vocabulary is checked like every config field (one line naming the entry, exit 2),
the compute of those nodes' ranks is their GPU's, the plan and the memory check are made
for the GPU with least memory, and the engine simulates one rank per refined class.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.errors import ConfigError
from tests.cli_helpers import one_line_error

SMALL = [
    "cluster.machine=perlmutter",
    "cluster.gpus=16",
    "model.name=gpt-tiny",
    "parallel.grid={x: 2, y: 2, z: 2, data: 2}",
    "training.batch_tokens=4096",
]


@pytest.mark.parametrize(
    "runs,message",
    [
        (
            "[{first_node: 3, nodes: 2, gpu: a40}]",
            "node_gpus.0: nodes 3..4 go past the machine's 4 nodes",
        ),
        (
            "[{first_node: 0, nodes: 2, gpu: a40}, {first_node: 1, nodes: 1, gpu: h100}]",
            "node_gpus.1: nodes 1..1 overlap node_gpus.0 (nodes 0..1)",
        ),
        ("[{first_node: 0, nodes: 1, gpu: a41}]", "node_gpus.0.gpu: unknown GPU 'a41'"),
        ("[{first_node: 0, nodes: 0, gpu: a40}]", "node_gpus.0.nodes"),
        ("[{first_node: -1, nodes: 1, gpu: a40}]", "node_gpus.0.first_node"),
        ("[{first_node: 0, nodes: 1}]", "node_gpus.0.gpu"),
    ],
)
def test_bad_node_gpus_fail_in_one_line(
    runs: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [*SMALL, f"cluster.node_gpus={runs}"])
    assert message in str(err.value)
    args = ["simulate", *(a for o in SMALL for a in ("--set", o))]
    assert message in one_line_error([*args, "--set", f"cluster.node_gpus={runs}"], capsys)


def test_slower_nodes_slow_the_run_and_refine_the_classes() -> None:
    base = simulate(load_config(None, SMALL))
    mixed = simulate(
        load_config(None, [*SMALL, "cluster.node_gpus=[{first_node: 2, nodes: 2, gpu: a40}]"])
    )
    same = simulate(
        load_config(None, [*SMALL, "cluster.node_gpus=[{first_node: 0, nodes: 4, gpu: a100-40gb}]"])
    )
    assert same.report.iteration_time_s == base.report.iteration_time_s  # the machine's own GPU
    assert mixed.report.iteration_time_s > base.report.iteration_time_s
    assert mixed.engine.mode == "symmetric" and len(mixed.engine.timeline.ranks) == 2
    reason = next(c["reason"] for c in mixed.report.choices if c["what"] == "engine mode")
    assert "2 GPU types" in reason and "2 classes" in reason
    # the A40 (48 GB) against the A100 40 GB: the least memory is the A100's
    assert mixed.report.memory_capacity_bytes == base.report.memory_capacity_bytes
    # the percentage of peak is of the mean peak (half A100: 312, half A40: 149.7 TFLOP/s)
    per_gpu = mixed.report.tflops_per_gpu
    assert mixed.report.percent_of_advertised_peak == pytest.approx(100 * per_gpu / 230.85)


def test_a_calibration_must_speak_for_every_gpu_type(tmp_path: Path) -> None:
    """A calibration speaks for the GPUs it measured: a mixed machine's other type needs
    its tables too, or the run would price those nodes uncalibrated."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("version: 1\ngpus:\n  a100-40gb:\n    overlap_slowdown: 1.1\n")
    over = [*SMALL, f"engine.calibration={cal}"]
    simulate(load_config(None, over))  # the machine's own GPU: calibrated
    mixed = [*over, "cluster.node_gpus=[{first_node: 2, nodes: 2, gpu: a40}]"]
    with pytest.raises(ConfigError, match="no tables for GPU 'a40'"):
        simulate(load_config(None, mixed))
