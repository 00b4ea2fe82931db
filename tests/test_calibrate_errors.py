"""Bad calibrate/compare input: one line naming the file (and rank), exit code 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from simulator.cli import main
from tests import calibrate_synth as synth


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("axsim: error:") and err.count("\n") == 1, err
    return err


@pytest.fixture
def good(tmp_path: Path) -> Path:
    folder = tmp_path / "good"
    synth.write_run(folder)
    return folder


def test_truncated_gzip(tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress((good / "rank0.json").read_bytes())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.json.gz").write_bytes(data[: len(data) // 2])
    err = _run(["calibrate", str(bad), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "rank0.json.gz" in err
    assert not (tmp_path / "c.yaml").exists()  # never a partial result


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"foo": 1}, "not a Kineto trace"),
        ({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7}]}, "'ts'"),
        ([1, 2, 3], "not a Kineto trace"),
    ],
)
def test_not_a_trace_or_missing_fields(
    tmp_path: Path, content: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(content))
    err = _run(["calibrate", str(f), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "rank0.json" in err and message in err


def test_mixed_runs(tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((good / "rank1.json").read_text())
    doc["distributedInfo"]["world_size"] = 4
    (good / "rank1.json").write_text(json.dumps(doc))
    err = _run(["calibrate", str(good), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "different runs mixed" in err and "rank1.json" in err


def test_duplicate_rank(tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (good / "rank0_copy.json").write_text((good / "rank0.json").read_text())
    err = _run(["calibrate", str(good), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "both are rank 0" in err


def test_nothing_usable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                            "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0}]}  # fmt: skip
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(doc))
    err = _run(["calibrate", str(f), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "nothing usable" in err and "rank0.json" in err


def test_unknown_gpu_and_unknown_inputs(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("rank0.json", "rank1.json"):
        doc = json.loads((good / name).read_text())
        for p in doc["deviceProperties"]:
            p["name"] = "AMD Radeon Graphics"
        (good / name).write_text(json.dumps(doc))
    err = _run(["calibrate", str(good), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "not in the GPU catalogue" in err and "rank 0" in err and "--gpu" in err
    # mi300x: the synthetic GEMMs (231 TFLOP/s) are impossible on an MI250X GCD (192 peak)
    assert main(["calibrate", str(good), "--gpu", "mi300x", "-o", str(tmp_path / "c.yaml")]) == 0
    capsys.readouterr()
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n")
    assert "neither a Vidur" in _run(
        ["calibrate", str(csv), "-o", str(tmp_path / "c.yaml")], capsys
    )
    missing = tmp_path / "nope"
    assert "no such file" in _run(
        ["calibrate", str(missing), "-o", str(tmp_path / "c.yaml")], capsys
    )


def test_compare_world_size_mismatch(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = {"format": "axsim-torch4d-run/1", "world_size": 4, "device": "cpu",
           "config": {"grid": {"x": 2, "y": 2, "z": 1, "data": 1},
                      "dims": {"name": "tiny", "layers": 1, "hidden": 64, "heads": 4,
                               "seq_len": 32, "batch": 8}}}  # fmt: skip
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps(run))
    err = _run(["compare", "--traces", str(good), "--config", str(cfg)], capsys)
    assert "world size 4" in err and "2 ranks" in err
    yaml_cfg = tmp_path / "exp.yaml"
    yaml_cfg.write_text(
        "cluster: {machine: dgx-h100, gpus: 16}\nmodel: {name: gpt-tiny}\n"
        "parallel: {strategy: axonn, grid: {x: 2, y: 2, z: 2, data: 2}}\n"
        "training: {batch_tokens: 4096}\n"
    )
    err = _run(["compare", "--traces", str(good), "--config", str(yaml_cfg)], capsys)
    assert "16 GPUs" in err and "2 ranks" in err
    err = _run(["compare", "--traces", str(good)], capsys)
    assert "give --config" in err
