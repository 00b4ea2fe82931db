"""The generated bad-input suite: hypothesis over every field of the config schema, every
user file kind (config, sweep spec, custom topology, calibration, trace, sweep journal)
and every flag of every command.

Each case must end in exit 2 with one `axsim: error:` line, or in a finite, physically
possible result (tests/fuzz_support.py: `run_cli`, `physically_possible`); never in a
traceback. Values stay near the small base run (16 DGX H100 GPUs, gpt-tiny): sizes are
drawn from small, zero, negative, just-out-of-bounds and absurd values, so valid cases
simulate in a fraction of a second; runs at the documented limits themselves are the
targeted tests of tests/test_bad_input_reproducers.py (op budgets, closed forms).

AXSIM_FUZZ_PROFILE=nightly runs 10,100 cases (about an hour on 2 cores);
AXSIM_FUZZ_REPORT=FILE writes the counts by outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args

import click
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from simulator.cli import main
from simulator.config import ClusterConfig, EngineConfig, ModelConfig, TrainingConfig
from tests import calibrate_synth as synth
from tests.cli_helpers import all_commands
from tests.fuzz_support import fuzz_settings, physically_possible, run_cli, write_report
from workloads.strategies import STRATEGY_NAMES, ParallelConfig

DATA = Path(__file__).parent / "data"
CUSTOM = DATA / "custom_topology.yaml"
VIDUR = DATA / "vidur_network" / "h100_dgx__all_reduce.csv"
BASE = {
    "cluster": {"machine": "dgx-h100", "gpus": 16},
    "model": {"name": "gpt-tiny"},
    "parallel": {"strategy": "axonn"},
    "training": {"batch_tokens": 4096},
}
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    write_report()


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh working folder for one case (hypothesis runs many cases per test)."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="axsim-fuzz-") as d:
        os.chdir(d)
        try:
            yield Path(d)
        finally:
            os.chdir(old)


# ----------------------------------------------------------------- values
NAMES = ["perlmutter", "frontier", "alps", "dgx-a100", "frontera-rtx", "cpu-host", "custom"]
NAMES += ["gpt-tiny", "gpt-5b", "h100", "mi250x-gcd", "cpu", "auto", "ring", "tree", "direct"]
NAMES += ["full", "symmetric", "alpha-beta", "contention", "none", "oar", "linear", "block"]
NAMES += ["node", "pair", "global", "selective", "sgd", "fp32", "megatron", "fsdp", "zeropp"]
ODD = [None, True, False, 0, -1, 1, 2, 3, 4, 7, 8, 16, 2**31, 2**63, -(2**63), 0.5, -0.0]
ODD += [1e-300, 5e-324, 1e308, float("nan"), float("inf"), -float("inf"), "", " ", "x"]
ODD += ["1e-3", "ü", "[]", "{}", "a: b", "x" * 300, [], {}, [1, 2], [[]], {"x": 1}]
SCALARS = st.one_of(
    st.sampled_from(ODD),
    st.sampled_from(NAMES),
    st.integers(-10, 70),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.text(max_size=12),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(
        st.sampled_from(["x", "y", "z", "data", "rank", "slowdown", "?"]), SCALARS, max_size=4
    ),
    st.lists(st.fixed_dictionaries({"rank": st.integers(-2, 20), "slowdown": SCALARS}), max_size=2),
)


def yaml_text(value: Any) -> str:
    """A value as the YAML text `--set KEY=TEXT` takes."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


# ------------------------------------------------------------- schema fields
def _fields(model: Any) -> list[str]:
    return [name for name in model.model_fields if name != "strategy"]


SECTION_FIELDS = [
    *(f"cluster.{f}" for f in _fields(ClusterConfig)),
    *(f"model.{f}" for f in _fields(ModelConfig)),
    *(f"training.{f}" for f in _fields(TrainingConfig)),
    *(f"engine.{f}" for f in _fields(EngineConfig)),
    "cluster.stragglers.0",
    "cluster.bogus",
    "bogus.field",
]
PARALLEL_FIELDS = {
    name: [f"parallel.{f}" for f in _fields(model)]
    for model in get_args(ParallelConfig)
    for name in get_args(model.model_fields["strategy"].annotation)
}
PARALLEL_FIELDS["axonn"] += [f"parallel.grid.{a}" for a in ("x", "y", "z", "data")]


def test_every_schema_field_is_fuzzed() -> None:
    """Every field of every section and of every strategy is a fuzz target."""
    assert set(PARALLEL_FIELDS) == set(STRATEGY_NAMES)
    for section in ("cluster", "model", "training", "engine"):
        assert any(f.startswith(section + ".") for f in SECTION_FIELDS)
    assert "cluster.nic_bandwidth_GBps" in SECTION_FIELDS
    assert "parallel.virtual_stages" in PARALLEL_FIELDS["megatron"]


@st.composite
def config_sets(draw: st.DrawFn) -> list[str]:
    """`--set` overrides: a strategy, then 1-3 of its fields and the sections' fields set
    to odd values."""
    strategy = draw(st.sampled_from(STRATEGY_NAMES))
    paths = draw(
        st.lists(
            st.sampled_from(SECTION_FIELDS + PARALLEL_FIELDS[strategy]), min_size=1, max_size=3
        )
    )
    out = [f"parallel.strategy={strategy}"]
    out += [f"{p}={yaml_text(draw(VALUES))}" for p in paths]
    return out


@fuzz_settings("config-set")
@given(config_sets(), st.booleans())
def test_config_fields(sets: list[str], alpha_beta: bool) -> None:
    argv = ["simulate", *SMALL, "--json", "--no-progress"]
    argv += [a for s in sets for a in ("--set", s)]
    if alpha_beta:
        argv += ["--network", "alpha-beta"]
    with scratch():
        run = run_cli("config-set", argv, verdicts=(3,))
    if run.code == 0:
        physically_possible(json.loads(run.out))


# ------------------------------------------------------------- structures
def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (dict keys / list indices) into a parsed YAML tree."""
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, tree: Any, extra_keys: list[str]) -> Any:
    """`tree` with 1-3 mutations: a value replaced, an entry deleted or duplicated, an
    unknown key added, a level wrapped in a list."""
    tree = json.loads(json.dumps(tree))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(tree)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "duplicate", "add", "wrap"]))
        if not path:
            tree = draw(VALUES) if op == "replace" else tree
            continue
        parent = tree
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        if op == "replace":
            parent[last] = draw(VALUES)
        elif op == "delete":
            del parent[last]
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[last])))
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from([*extra_keys, "bogus", ""]))] = draw(VALUES)
        elif op == "wrap":
            parent[last] = [parent[last]]
    return tree


def _dump(tree: Any, path: Path) -> Path:
    try:
        path.write_text(yaml.safe_dump(tree, allow_unicode=True))
    except (yaml.YAMLError, ValueError):
        path.write_text(json.dumps(tree, default=str))
    return path


@fuzz_settings("config-file")
@given(mutated(BASE, ["cluster", "model", "parallel", "training", "engine", "grid"]))
def test_config_files(tree: Any) -> None:
    with scratch() as d:
        run = run_cli("config-file", ["simulate", str(_dump(tree, d / "c.yaml")), "--json"], (3,))
    if run.code == 0:
        physically_possible(json.loads(run.out))


SPEC = {
    "base": BASE,
    "set": {"cluster.nic_bandwidth_GBps": 25},
    "axes": {"engine.network": ["contention", "alpha-beta"], "parallel.overlap": [[], ["oar"]]},
}


@fuzz_settings("sweep-spec")
@given(mutated(SPEC, ["base", "set", "axes", "cluster.gpus", "model.name", "parallel.grid.x"]))
def test_sweep_specs(tree: Any) -> None:
    with scratch() as d:
        spec = _dump(tree, d / "s.yaml")
        run = run_cli("sweep-spec", ["sweep", str(spec), "--out", "o", "--no-progress"])
        if run.code == 0:
            for line in (d / "o" / "rows.jsonl").read_text().splitlines():
                row = json.loads(line)
                assert row["status"] in ("ok", "error")
                if row["status"] == "ok":
                    assert row["iteration_time_s"] > 0


CUSTOM_TREE = yaml.safe_load(CUSTOM.read_text())


@fuzz_settings("topology")
@given(mutated(CUSTOM_TREE, ["kind", "bandwidth_GBps", "latency_us", "node", "gpu"]), st.booleans())
def test_custom_topologies(tree: Any, collective: bool) -> None:
    with scratch() as d:
        path = str(_dump(tree, d / "t.yaml"))
        if collective:
            run_cli(
                "topology",
                [
                    "collective",
                    "--machine",
                    "custom",
                    "--file",
                    path,
                    "--group",
                    "2",
                    "--bytes",
                    "1M",
                ],
            )
        else:
            run_cli("topology", ["topology", "--machine", "custom", "--file", path, "--json"])


NAME_TEXT = st.lists(
    st.sampled_from(
        [*"ab[]/=: \\", "\x1b", "\x07", "\r", "\t", "\u202e", "[bold]", "[/]", "\x1b[2J"]
    ),
    min_size=1,
    max_size=8,
).map("".join)


@fuzz_settings("names")
@given(NAME_TEXT, NAME_TEXT, NAME_TEXT)
def test_names_from_files_are_printed_as_text(name: str, description: str, device: str) -> None:
    """Rich markup ("[/]" raised MarkupError) and terminal codes in a custom topology's
    names reach the terminal as text (issue 33)."""
    tree = json.loads(json.dumps(CUSTOM_TREE))
    tree["name"], tree["description"] = name, description
    old = tree["devices"][0]["name"]
    tree["devices"][0]["name"] = device
    for link in tree["links"]:
        for end in ("src", "dst"):
            link[end] = device if link[end] == old else link[end]
    with scratch() as d:
        path = str(_dump(tree, d / "t.yaml"))
        run = run_cli("names", ["topology", "--machine", "custom", "--file", path])
    assert not any(ch in run.out for ch in "\x1b\x07\r\u202e"), run.out


@pytest.fixture(scope="module")
def calibration_tree(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("cal") / "cal.yaml"
    assert main(["calibrate", str(VIDUR), "-o", str(out)]) == 0
    return yaml.safe_load(out.read_text())


@fuzz_settings("calibration")
@given(data=st.data())
def test_calibration_files(calibration_tree: Any, data: st.DataObject) -> None:
    tree = data.draw(mutated(calibration_tree, ["gpus", "h100", "collectives", "alpha_s"]))
    with scratch() as d:
        cal = str(_dump(tree, d / "cal.yaml"))
        run = run_cli("calibration", ["simulate", *SMALL, "--calibration", cal, "--json"], (3,))
    if run.code == 0:
        physically_possible(json.loads(run.out))


TRACE_KEYS = ["ts", "dur", "name", "pid", "tid", "cat", "ph", "args", "id", "s"]
ARG_KEYS = ["device", "stream", "correlation", "External id", "Collective name", "In msg nelems"]


@st.composite
def damaged_traces(draw: st.DrawFn) -> tuple[int, dict[str, Any]]:
    """One rank's synthetic trace with 1-3 events (or top-level keys) damaged."""
    rank = draw(st.integers(0, 1))
    trace = synth.rank_trace(rank)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 9)) == 0:  # the top level
            trace[draw(st.sampled_from(["traceEvents", "deviceProperties", "schemaVersion"]))] = (
                draw(VALUES)
            )
            continue
        events = trace.get("traceEvents")
        if not isinstance(events, list) or not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if not isinstance(ev, dict):
            events[i] = draw(VALUES)
            continue
        if draw(st.booleans()) and isinstance(ev.get("args"), dict):
            ev["args"][draw(st.sampled_from(ARG_KEYS))] = draw(VALUES)
        elif draw(st.booleans()):
            ev.pop(draw(st.sampled_from(TRACE_KEYS)), None)
        else:
            ev[draw(st.sampled_from(TRACE_KEYS))] = draw(VALUES)
    return rank, trace


@fuzz_settings("trace")
@given(damaged_traces())
def test_traces(damaged: tuple[int, dict[str, Any]]) -> None:
    rank, trace = damaged
    with scratch() as d:
        synth.write_run(d / "t")
        (d / "t" / f"rank{rank}.json").write_text(json.dumps(trace, default=str))
        run = run_cli("trace", ["calibrate", str(d / "t"), "-o", "c.yaml", "--gpu", "h100"])
        if run.code == 0:
            from simulator.cost.calibration import load_calibration

            load_calibration(d / "c.yaml")  # what was written loads back


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("journal")
    (folder / "s.yaml").write_text(
        yaml.safe_dump({"base": BASE, "axes": {"engine.network": ["contention"]}})
    )
    assert main(["sweep", str(folder / "s.yaml"), "--out", str(folder / "o"), "--no-progress"]) == 0
    return folder


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
DAMAGE = st.one_of(
    st.binary(max_size=40),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"config_hash": JSON_VALUES, "status": JSON_VALUES}).map(
        lambda v: json.dumps(v).encode()
    ),
)


@fuzz_settings("journal")
@given(data=st.data())
def test_damaged_journals(finished_sweep: Path, data: st.DataObject) -> None:
    lines = data.draw(st.lists(DAMAGE, min_size=1, max_size=4))
    torn = data.draw(st.booleans())
    with scratch() as d:
        shutil.copytree(finished_sweep, d / "w")
        journal = d / "w" / "o" / "rows.jsonl"
        good = journal.read_bytes()
        good_hash = json.loads(good)["config_hash"]
        blob = b"\n".join(line.replace(b"\n", b" ") for line in lines)
        at = data.draw(st.sampled_from([0, len(good)]))
        journal.write_bytes(good[:at] + blob + (b"" if torn and at else b"\n") + good[at:])
        run = run_cli("journal", ["sweep", str(d / "w" / "s.yaml"), "--out", str(d / "w" / "o")])
        assert run.code == 0
        assert "1 already done, 0 run" in run.err  # the good row survived, not recomputed
        kept = [json.loads(x) for x in journal.read_text().splitlines()]
        assert good_hash in {r["config_hash"] for r in kept}


# -------------------------------------------------------------------- flags
FLAG_VALUES = ["", "0", "-1", "1", "2", "3", "8", "16", "nan", "inf", "-inf", "1e400", "1e-400"]
FLAG_VALUES += ["abc", "1K:1G", "1M", "64M:1K", "1,1,1,1", "0,1,1,1", "2,2,2,2", "all", "none"]
# CUSTOM / VIDUR stand for scratch copies of the fixtures (`in_scratch`): a drawn value is
# also an output path (`calibrate -o VIDUR`), and a test must never write into tests/data
FLAG_VALUES += ["oar,ors", "oar,,oar", "/proc/axsim-no/x", "tests", "CUSTOM", "VIDUR"]
FLAG_VALUES += ["perlmutter", "dgx-h100", "custom", "gpt-tiny", "h100", "x" * 300, "ü", "-"]
FLAG_VALUES += ["fsdp", "axonn,fsdp", "fsdp,fsdp", "cluster.gpus=8", "engine.mode=full", "a=b"]
# Base arguments that keep each command small; flags drawn for it come after them (a later
# value of a single-valued option wins). `tail` is appended last: it keeps a command from
# running what the suite cannot afford (a torch training run, a benchmark, every figure).
COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    "simulate": ([*SMALL, "--json", "--no-progress"], []),
    "search": ([*SMALL, "--top", "2", "--json", "--no-progress"], []),
    "compare-strategies": ([*SMALL, "--strategies", "fsdp", "--max-candidates", "1", "--json"], []),
    "collective": (["dgx-h100", "--nodes", "1", "--group", "8", "--bytes", "1M"], []),
    "topology": (["dgx-h100", "--nodes", "1", "--json"], []),
    "sweep": (["SPEC", "--out", "o", "--no-progress"], []),
    "calibrate": (["VIDUR", "-o", "c.yaml"], []),
    "compare": (["--traces", "T", "--machine", "dgx-h100", "--json"], []),
    "presets": ([], []),
    "schema": ([], []),
    "trace-torch": (["--grid", "1,1,1,1"], ["--out", "/proc/axsim-no/run"]),
    "figures": ([], ["--list"]),
    "validate": ([], ["--list"]),
    "bench": ([], ["--only", "no-such-bench-case"]),
}
SKIP_FLAGS = {"--dask-scheduler", "--help", "--version", "--progress"}  # network waits / noise
VERDICTS = {"compare": (3,), "simulate": (3,)}


def test_every_command_is_fuzzed() -> None:
    assert set(COMMANDS) == set(all_commands())


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A command with its base arguments, then 1-4 of its flags (and sometimes its
    positional argument) with odd values."""
    name = draw(st.sampled_from(sorted(COMMANDS)))
    base, tail = COMMANDS[name]
    cmd = all_commands()[name]
    options = [
        p for p in cmd.params if isinstance(p, click.Option) and not SKIP_FLAGS & set(p.opts)
    ]
    argv = list(base)
    for opt in draw(st.lists(st.sampled_from(options), max_size=4)) if options else []:
        flag = draw(st.sampled_from([o for o in opt.opts if o.startswith("-")]))
        if opt.is_flag:
            argv.append(flag)
            continue
        pool = FLAG_VALUES + list(getattr(opt.type, "choices", ()))
        if flag == "--dask-local":
            pool = ["0", "-1", "x", ""]  # a real LocalCluster takes seconds to start
        argv += [flag, draw(st.sampled_from(pool))]
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    if args and draw(st.integers(0, 4)) == 0:
        argv.insert(0, draw(st.sampled_from(FLAG_VALUES)))  # an odd positional first
    return name, [*argv, *tail]


def in_scratch(argv: list[str], d: Path) -> list[str]:
    """`argv` with its placeholders replaced by files of the scratch folder `d`: SPEC (the
    sweep spec), T (a traced run) and copies of the fixtures CUSTOM and VIDUR, so that a
    drawn output path can only ever overwrite a copy."""
    fixtures = {"CUSTOM": CUSTOM, "VIDUR": VIDUR}
    names = {"SPEC": d / "spec.yaml", "T": d / "traces"}
    for token, source in fixtures.items():
        if token in argv:
            names[token] = d / "fixtures" / source.name
            names[token].parent.mkdir(exist_ok=True)
            shutil.copyfile(source, names[token])
    return [str(names[a]) if a in names else a for a in argv]


@fuzz_settings("flags")
@given(command_lines())
def test_flag_lines_never_name_a_repository_file(line: tuple[str, list[str]]) -> None:
    """Regression: `calibrate VIDUR -o c.yaml -o <fixture>` once overwrote
    tests/data/vidur_network/h100_dgx__all_reduce.csv with a calibration."""
    with scratch() as d:
        argv = in_scratch(line[1], d)
    repo = Path(__file__).resolve().parents[1]
    for a in argv:
        if "/" in a and Path(a).is_absolute():
            assert not Path(a).resolve().is_relative_to(repo), (line, a)


def test_calibrate_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    """The product side of the same hole: `--out` naming an input is one line, exit 2,
    and the measurements are untouched."""
    table = tmp_path / VIDUR.name
    shutil.copyfile(VIDUR, table)
    run = run_cli("flags", ["calibrate", str(table), "-o", "c.yaml", "-o", str(table)])
    assert run.code == 2 and "--out" in run.err and "is the input" in run.err
    assert table.read_bytes() == VIDUR.read_bytes()


@fuzz_settings("flags")
@given(command_lines())
def test_flags(line: tuple[str, list[str]]) -> None:
    name, argv = line
    with scratch() as d:
        (d / "spec.yaml").write_text(
            yaml.safe_dump({"base": BASE, "axes": {"engine.network": ["contention"]}})
        )
        synth.write_run(d / "traces")
        run = run_cli("flags", [name, *in_scratch(argv, d)], VERDICTS.get(name, ()))
    if run.code == 0 and name == "simulate" and run.out.startswith("{"):
        physically_possible(json.loads(run.out))
