"""PyTorch FSDP's own memory accounting for a small GPT, measured on the CPU.

Why: axsim's FSDP memory model (workloads/hybrid/framework_memory.py) names the tensors
FSDP allocates; this module instantiates the same model in torch, wraps it in
FullyShardedDataParallel as configured, runs a training step and reads FSDP's own
tensors at every dispatched op: the fp32 sharded flat parameters (`_local_shard`), the
padded unsharded ones (`_full_param_padded`, freed storage = 0 bytes), the gradients
(`flat_param.grad`, `_saved_grad_shard`) and the optimizer's state. A fake process group
(torch.testing's FakeStore, one process standing for rank 0 of `world`) gives every
tensor its real sharded size without a cluster; collectives move nothing, which
accounting does not need.

On the CPU the run is synchronous: no CPU runs ahead of a GPU, so the unsharded units it
holds at once are the lower bound of what a GPU run holds (the rate limiter lets one
more all-gather be in flight there). Run `python -m validation.references.fsdp_memory --out F`
to regenerate tests/data/fsdp_cpu_reference.json.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Any

SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")
PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")


@dataclass(frozen=True)
class RefModel:
    """The small GPT (axsim TransformerSpec fields): learned positions, LayerNorm,
    biases, a GELU MLP of 4 x hidden, the output layer tied to the word embedding."""

    vocab: int = 256
    hidden: int = 64
    heads: int = 4
    layers: int = 4
    seq_len: int = 32
    batch: int = 2


@dataclass(frozen=True)
class RefConfig:
    """How FSDP wraps it: one unit per block (the root keeps the rest)."""

    world: int = 4
    sharding_strategy: str = "FULL_SHARD"
    reduce_dtype: str = "fp32"
    backward_prefetch: str = "BACKWARD_PRE"
    forward_prefetch: bool = False


def _torch_model(m: RefModel) -> Any:
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = m.hidden
            self.ln1, self.ln2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
            self.qkv, self.out = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
            self.up, self.down = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

        def forward(self, x: Any) -> Any:
            b, t, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, -1)

            def heads(z: Any) -> Any:
                return z.view(b, t, m.heads, h // m.heads).transpose(1, 2)

            a = torch.nn.functional.scaled_dot_product_attention(
                heads(q), heads(k), heads(v), is_causal=True
            )
            x = x + self.out(a.transpose(1, 2).reshape(b, t, h))
            return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

    class Gpt(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(m.vocab, m.hidden)
            self.wpe = torch.nn.Embedding(m.seq_len, m.hidden)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(m.layers))
            self.lnf = torch.nn.LayerNorm(m.hidden)

        def forward(self, idx: Any) -> Any:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.lnf(x) @ self.wte.weight.t()

    return Gpt(), Block


def _nbytes(t: Any) -> int:
    return 0 if t is None else int(t.untyped_storage().nbytes())


def measure(model: RefModel, cfg: RefConfig) -> dict[str, Any]:
    """One training step of the model under FSDP; FSDP's tensors in bytes (rank 0)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        MixedPrecision,
        ShardingStrategy,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as Fsdp
    from torch.distributed.fsdp._traversal_utils import _get_fsdp_handles
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils._python_dispatch import TorchDispatchMode

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=cfg.world)
    try:
        torch.manual_seed(0)
        net, block = _torch_model(model)
        reduce = torch.float32 if cfg.reduce_dtype == "fp32" else torch.bfloat16
        prefetch = (
            None if cfg.backward_prefetch == "NONE" else BackwardPrefetch[cfg.backward_prefetch]
        )
        fsdp = Fsdp(
            net,
            auto_wrap_policy=ModuleWrapPolicy({block}),
            mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=reduce),
            sharding_strategy=ShardingStrategy[cfg.sharding_strategy],
            device_id=torch.device("cpu"),
            backward_prefetch=prefetch,
            forward_prefetch=cfg.forward_prefetch,
            limit_all_gathers=True,
        )
        handles = _get_fsdp_handles(fsdp)
        peaks = {"unsharded_params": 0, "unsharded_grads": 0}

        def sample() -> None:
            params = sum(
                _nbytes(getattr(h.flat_param, "_full_param_padded", None)) for h in handles
            )
            grads = sum(
                _nbytes(h.flat_param.grad)
                for h in handles
                if h.flat_param.grad is not None
                and h.flat_param.grad.numel() > h.flat_param._local_shard.numel()
            )
            peaks["unsharded_params"] = max(peaks["unsharded_params"], params)
            peaks["unsharded_grads"] = max(peaks["unsharded_grads"], grads)

        class Sampler(TorchDispatchMode):
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                out = func(*args, **(kwargs or {}))
                sample()
                return out

        opt = torch.optim.Adam(fsdp.parameters())
        idx = torch.randint(0, model.vocab, (model.batch, model.seq_len))
        with Sampler():
            loss = fsdp(idx).float().logsumexp(-1).mean()
            loss.backward()
        grads = sum(_nbytes(h.flat_param.grad) for h in handles)
        opt.step()
        state = sum(
            int(t.untyped_storage().nbytes())
            for st in opt.state.values()
            for t in st.values()
            if torch.is_tensor(t) and t.dim() > 0
        )
        return {
            "model": asdict(model),
            "config": asdict(cfg),
            "torch": torch.__version__,
            "units": [int(h.flat_param._unpadded_unsharded_size.numel()) for h in handles],
            "sharded_params_bytes": sum(_nbytes(h.flat_param._local_shard) for h in handles),
            "sharded_grads_bytes": grads,
            "optimizer_state_bytes": state,
            "peak_unsharded_params_bytes": peaks["unsharded_params"],
            "peak_unsharded_grads_bytes": peaks["unsharded_grads"],
        }
    finally:
        dist.destroy_process_group()


CONFIGS = (
    RefConfig(),
    RefConfig(reduce_dtype="bf16"),
    RefConfig(backward_prefetch="BACKWARD_POST"),
    RefConfig(backward_prefetch="NONE"),
    RefConfig(sharding_strategy="SHARD_GRAD_OP"),
    RefConfig(forward_prefetch=True),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args()
    rows = [measure(RefModel(), c) for c in CONFIGS]
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
