"""The FlexAttention checks that need a GPU, as functions a GPU check script calls (they run on CPU too, forward only).

`flex_errors`: ``impl="flex"`` against the dense reference, output and gradients; `auto_choice`: what ``impl="auto"``
runs after its compile probe; `count_compilations`: the graphs dynamo compiles over (B, N) shapes, and whether every
call ran one. Inputs are QDS layouts (`common.kernels.patterns`) differing per example in global count and padding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

import common.kernels
from common.kernels import flex
from common.kernels.flex import FlexKernel, flex_attention_qds
from common.kernels.patterns import global_tokens, synthetic_layout
from common.kernels.reference import WINDOW, reference_attention

GRADIENTS = ("dq", "dk", "dv", "dq_global", "dk_global", "dv_global")


def qds_inputs(batch: int, n: int, heads: int, head_dim: int, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32, seed: int = 0) -> dict:
    """`qds_attention`'s keyword arguments for a batch of QDS layouts, (B, H, N, D) tensors of N(0, 1/4)."""
    generator = torch.Generator().manual_seed(seed)
    is_global = torch.stack([global_tokens("qds", synthetic_layout(n, query_len=4 + 7 * b % 20,
                                                                   sentence_every=20 + 9 * b % 30))
                             for b in range(batch)])
    padding = torch.zeros(batch, n, dtype=torch.bool)
    if batch > 1:
        padding[1, n - n // 3:] = True
    tensors = [(torch.randn(batch, heads, n, head_dim, generator=generator) / 2).to(device, dtype) for _ in range(6)]
    q, k, v, *global_qkv = tensors
    return dict(q=q, k=k, v=v, is_global=(is_global & ~padding).to(device), key_padding_mask=padding.to(device),
                window=WINDOW, global_qkv=tuple(global_qkv))


def flex_errors(device: torch.device | str, dtype: torch.dtype = torch.float32, batch: int = 3, n: int = 700,
                heads: int = 4, head_dim: int = 64, kernel: FlexKernel | None = None) -> dict[str, float]:
    """Largest errors of ``impl="flex"`` against the float32 reference, output and `GRADIENTS`, relative."""
    device = torch.device(device)
    inputs = qds_inputs(batch, n, heads, head_dim, device, dtype)
    gradients = device.type != "cpu"
    got = _output_and_gradients(flex_attention_qds, inputs, gradients, kernel=kernel)
    want = _output_and_gradients(reference_attention, _mapped(inputs, Tensor.float), gradients)
    return {name: _relative(a, b) for name, a, b in zip(("out", *GRADIENTS), got, want)}


def _output_and_gradients(attention: Callable, inputs: dict, gradients: bool, **options) -> list[Tensor]:
    """The output of ``attention(**inputs)`` and, with `gradients`, its six input gradients, in float32."""
    inputs = _mapped(inputs, lambda x: x.detach().requires_grad_(gradients))
    with torch.set_grad_enabled(gradients):
        out = attention(**inputs, **options)
    results = [out.detach().float()]
    if gradients:
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.device)
        leaves = [inputs["q"], inputs["k"], inputs["v"], *inputs["global_qkv"]]
        results += [g.float() for g in torch.autograd.grad((out.float() * weight).sum(), leaves)]
    return results


def _mapped(inputs: dict, function: Callable[[Tensor], Tensor]) -> dict:
    """`inputs` with `function` applied to q, k, v and the global projections."""
    return dict(inputs, q=function(inputs["q"]), k=function(inputs["k"]), v=function(inputs["v"]),
                global_qkv=tuple(map(function, inputs["global_qkv"])))


def auto_choice(device: torch.device | str, heads: int = 12, head_dim: int = 64, dtype: torch.dtype = torch.float32,
                window: int = WINDOW) -> tuple[str, str | None]:
    """What ``impl="auto"`` runs on `device` after its compile probe, and why not ``flex`` where it fell back."""
    device = torch.device(device)
    chosen = common.kernels.auto_implementation(device, head_dim)
    if chosen != "flex":
        return chosen, None
    reason = flex.KERNEL.unusable(torch.empty(1, heads, 1, head_dim, device=device, dtype=dtype), window)
    return ("portable", reason) if reason else ("flex", None)


def count_compilations(shapes: Iterable[tuple[int, int]], device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32, heads: int = 4, head_dim: int = 64,
                       backend: str | Callable = "inductor", gradients: bool = False) -> dict:
    """Run ``impl="flex"`` on a fresh `FlexKernel` over (B, N) `shapes`; the graphs compiled and calls run."""
    from torch._dynamo.backends.registry import lookup_backend

    device = torch.device(device)
    counts = dict(graphs=0, graph_calls=0, flex_calls=0)

    def counting(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:  # a dynamo backend
        counts["graphs"] += 1
        compiled = (lookup_backend(backend) if isinstance(backend, str) else backend)(graph, example_inputs)

        def run(*args):
            counts["graph_calls"] += 1
            return compiled(*args)

        return run

    kernel = FlexKernel(counting, compiled_on=(device.type,))
    worst = 0.0

    def counted(*args, **kwargs) -> Tensor:
        counts["flex_calls"] += 1
        return kernel(*args, **kwargs)

    for seed, (batch, n) in enumerate(shapes):
        inputs = qds_inputs(batch, n, heads, head_dim, device, dtype, seed)
        out = _output_and_gradients(flex_attention_qds, inputs, gradients, kernel=counted)[0]
        with torch.no_grad():
            worst = max(worst, _relative(out, reference_attention(**_mapped(inputs, Tensor.float))))
    return dict(counts, max_error=worst)


def _relative(got: Tensor, want: Tensor) -> float:
    """max |got - want| / max |want|."""
    return float((got - want).abs().max() / want.abs().max().clamp(min=torch.finfo(want.dtype).tiny))
