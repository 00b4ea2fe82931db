"""`axsim presets`: the machines, models, GPUs and strategies axsim knows, with their key
numbers, so a user can pick names for `--machine`, `--model`, `cluster.gpu` and
`--strategy` without reading the data files."""

from __future__ import annotations

import json
from typing import Any, get_args

import click

from simulator.commands.options import json_option

KINDS = ("machines", "models", "gpus", "strategies")


def machine_rows() -> list[dict[str, Any]]:
    """One row per machine preset (topologies/data/machines.yaml)."""
    from topologies.catalogue import machine_presets

    return [
        {
            "name": m.name,
            "gpu": m.gpu,
            "gpus_per_node": m.gpus_per_node,
            "nics_per_node": m.nics_per_node,
            "nic_GBps": m.nic_bandwidth_GBps,
            "fabric": str(m.fabric.get("kind", "-")),
            "description": m.description,
        }
        for m in machine_presets().values()
    ]


def model_rows() -> list[dict[str, Any]]:
    """One row per model preset (workloads/data/models.yaml)."""
    from workloads.models import model_presets

    return [
        {
            "name": name,
            "params": spec.num_params,
            "layers": spec.layers,
            "hidden": spec.hidden,
            "heads": spec.heads,
            "kv_heads": spec.kv_heads or spec.heads,
            "ffn_hidden": spec.ffn_hidden or 4 * spec.hidden,
            "seq_len": spec.seq_len,
            "vocab": spec.vocab,
        }
        for name, spec in model_presets().items()
    ]


def gpu_rows() -> list[dict[str, Any]]:
    """One row per GPU of the catalogue (topologies/data/gpus.yaml)."""
    from topologies.hardware import gpu_catalogue

    return [
        {
            "name": name,
            "display_name": g.display_name,
            "peak_TFLOPs": g.peak_tflops,
            "empirical_gemm_TFLOPs": (
                None if g.empirical_gemm_flops is None else g.empirical_gemm_flops / 1e12
            ),
            "memory_GB": g.memory_bytes / 1e9,
            "hbm_TBps": g.hbm_bandwidth_Bps / 1e12,
        }
        for name, g in gpu_catalogue().items()
    ]


def strategy_rows() -> list[dict[str, Any]]:
    """One row per strategy: what it is, and the parameters it leaves to axsim (None:
    chosen for the machine) or takes with a default."""
    from workloads.strategies import ParallelConfig

    rows = []
    for model in get_args(ParallelConfig):
        names = get_args(model.model_fields["strategy"].annotation)
        doc = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
        chosen = [
            f for f, info in model.model_fields.items() if f != "strategy" and info.default is None
        ]
        for name in names:
            rows.append({"name": name, "summary": doc, "chosen_automatically": chosen})
    return rows


ROWS = {
    "machines": machine_rows,
    "models": model_rows,
    "gpus": gpu_rows,
    "strategies": strategy_rows,
}


def _render(kind: str, rows: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from simulator.outputs.render import stdout_console

    table = Table(title=f"{kind} (axsim presets {kind} --json for all fields)")
    cols = list(rows[0]) if rows else []
    for col in cols:
        table.add_column(
            col, justify="left" if col in ("name", "description", "summary") else "right"
        )
    for row in rows:
        table.add_row(*(escape(_count(row[c]) if c == "params" else _cell(row[c])) for c in cols))
    stdout_console().print(table)


def _count(n: int) -> str:
    """5_050_000_000 -> '5.05 B' (parameter counts)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return str(n)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def presets_schema() -> dict[str, object]:
    """`axsim presets --json` (simulator/outputs/json_schemas.py)."""
    from simulator.outputs.json_schemas import presets_json_schema

    return presets_json_schema()


def register(app: click.Group) -> None:
    @app.command("presets")
    @click.argument("kind", required=False, type=click.Choice(KINDS))
    @json_option("presets", presets_schema, "One object: kind -> rows.")
    def presets_cmd(kind: str | None, as_json: bool) -> None:
        """List the machines, models, GPUs and strategies (KIND: one of them; default all)
        with their key numbers."""
        kinds = (kind,) if kind else KINDS
        data = {k: ROWS[k]() for k in kinds}
        if as_json:
            from simulator.outputs.versions import stamp

            click.echo(json.dumps(stamp(dict(data)), default=str))
            return
        for k in kinds:
            _render(k, data[k])
