"""Sparsifiner's whole inference path in one fused CPU kernel: a predictor that really costs less than it saves.

``sparsifiner_attention(predictor, q, k, v, keep_rate, kernel="fused")`` returns what the reference path
returns (``predictor(q, k, keep_rate)["index"]`` and ``attention_over_connections``, equal to
``masked_dense_attention`` with ``connectivity_mask``), but replaces the dense up-projection (n x n_down x n
multiply-adds), ``torch.topk`` over all n keys of every query and the CSR attention by one C++ loop per
(example, head) and query. torch computes A_down and A~_down with the predictor's own methods (so the kernel
starts from the reference's coefficients, bit for bit; computing them in the kernel was no faster); the
kernel takes the raw W_up columns of the current tokens and prunes the basis W~_up as ``sparse_basis`` does.
``kernel="torch"`` runs the reference path.

Per query i it selects by the predictor's ranking rule (``bab.sparsifiner.predictor``, module docstring), with
the same arithmetic, so the index sets are the torch path's bit for bit:

1. The primary score S_j = sum_m A~_down[i, m] W~_up[m, j] in double, accumulated over the nonzero coefficients
   (a few of n_down) in increasing m, each over the nonzero entries of its basis row (CSR of W~_up, built once
   per forward): the additions of ``ranking_scores`` in its order (a product of two float32 numbers is exact in
   double, and the zero terms ``ranking_scores`` also adds change no sum). Keys no such row touches score 0.
2. The k-th largest S: rounded to float, S keeps its order, so the k-th largest float (found among the keys
   with a positive score when there are at least k of them, else among all n) splits the keys into winners
   (above it), losers (below) and a group equal to it, usually one key. Only where that group holds more keys
   than places are left is it ranked exactly: by S in double, then, among keys whose S ties at the last place,
   by the secondary score T_j = sum_m A_down[i, m] W~_up[m, j] (double, increasing m, as ``ranking_scores``),
   then by the lower index. A row whose k-th score is 0 (fewer than k positive scores: a query whose
   coefficients all fall below tau, or a keep rate above the candidates' share) takes T for most keys.

No sort of the n keys: the k-th largest float is found by bisection on the bits of the floats (counting passes
that vectorize), starting below the leading bits that all values share (their smallest and largest agree there;
one row's scores mostly share sign and exponent); every 4 bits only the values sharing the prefix found so far
are kept. The candidates are found in one pass that rounds S to float and keeps the positive ones with their
rounded values, which the k-th search then reads in sequence. A tied group is split by ``std::nth_element``.

Then per query: scores q . k_j / sqrt(d) over its k keys, softmax (a vectorizable exp), weighted sum of
v_j; the CLS query with ``cls_dense`` attends to every key (and gets no prediction). The other options:
the coefficient rule (tau or top-m), ``predictor_scale`` and ``connectivity_projections`` act through the
predictor's own A_down and A~_down; ``basis_threshold_abs`` and ``up_prune`` in the kernel's pruning; a basis
shared by the heads (``basis="shared"``) is repeated per head before the kernel reads it; ``positions`` (token
pruning) select each example's W_down and W_up columns (one basis per example and head); ``phase1_scores`` only
changes what phase 1 trains, not inference.

Inference only: float32 CPU tensors, no autograd. The kernel's C++ source is ``csrc/fused_forward.cpp`` (package
data beside this module); it is compiled on first use with ``torch.utils.cpp_extension.load`` (needs a C++
compiler and ninja; about 40 s once per machine). Build flags (``build_flags``): -O3 -fopenmp-simd
-fno-trapping-math and, on x86-64 Linux, -march=native (AVX-512 paths under ``#ifdef __AVX512F__``, plain loops
elsewhere). torch caches the build under ``TORCH_EXTENSIONS_DIR`` (default ~/.cache/torch_extensions) by
extension name; the name carries a fingerprint of the CPU (model and instruction-set flags), so a home directory
shared by machines with different CPUs never loads a build for the wrong instruction set. If the build fails (no
compiler, no ninja), ``kernel="fused"`` warns once and runs the torch path, and the ViT's ``attention="fused"``
raises an error saying why.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import warnings
from pathlib import Path

import torch

from bab.sparsifiner.kernels import attention_over_connections
from bab.sparsifiner.predictor import ConnectivityPredictor, num_connections

INFERENCE_KERNELS = ("fused", "torch")
SOURCES = [Path(__file__).with_name("csrc") / "fused_forward.cpp"]  # the kernel and its Python binding

_state = {"module": None, "error": None, "warned": False}


def cpu_fingerprint() -> str:
    """8 hex digits naming this CPU (machine, model name and instruction-set flags from /proc/cpuinfo)."""
    text = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            lines = cpuinfo.read().split("\n\n")[0].splitlines()
        text += "".join(line for line in lines if line.split(":")[0].strip() in ("model name", "flags", "Features"))
    except OSError:
        pass  # not Linux: the machine name alone (no -march=native there, see build_flags)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def build_flags(portable: bool = False) -> list[str]:
    """-O3 everywhere; -march=native on x86-64 Linux only, where the CPU fingerprint in the extension's name
    keeps a build for one instruction set from being loaded on another; -fopenmp-simd for the simd pragmas;
    -fno-trapping-math so g++ may turn float comparisons in loops into vector selects (we never read the
    floating-point exception flags; results are unchanged). ``portable``: no -march=native, so the plain
    loops written for CPUs without AVX-512 are compiled (the tests build this variant too)."""
    flags = ["-O3", "-fopenmp-simd", "-fno-trapping-math"]
    if not portable and platform.machine() in ("x86_64", "AMD64") and platform.system() == "Linux":
        flags.append("-march=native")
    return flags


def _build(portable: bool = False):
    """Compile (or load the cached build of) the extension; raises whatever the toolchain raises."""
    from torch.utils.cpp_extension import load

    if shutil.which("ninja") is None:  # pip's ninja lives next to the interpreter, off PATH unless activated
        try:
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass  # load then raises, and the caller falls back

    name = f"bab_sparsifiner_fused_{'portable' if portable else cpu_fingerprint()}"
    return load(name=name, sources=[str(path) for path in SOURCES], extra_cflags=build_flags(portable), verbose=False)


def load_extension():
    """The compiled kernel module, or None when it cannot be built here (the error is kept for the warning)."""
    if _state["module"] is None and _state["error"] is None:
        try:
            _state["module"] = _build()
        except Exception as error:  # noqa: BLE001 (no compiler, no ninja, a failed build: all mean "fall back")
            _state["error"] = error
    return _state["module"]


def fused_available() -> bool:
    """True when the fused kernel is compiled (or compiles now) on this machine."""
    return load_extension() is not None


def _why_not_built() -> str:
    error = _state["error"]
    return (f"it could not be built here ({type(error).__name__}: {error}); it needs a C++ compiler (g++) and "
            f"ninja (pip install -r requirements.txt)")


def require_extension(instead: str = "kernel='torch'"):
    """The compiled kernel module, or a RuntimeError saying why it is not built and what runs ``instead``."""
    module = load_extension()
    if module is None:
        raise RuntimeError(f"the fused Sparsifiner kernel is not available: {_why_not_built()}. Use {instead} "
                           f"instead (same results, slower).")
    return module


def _warn_fallback() -> None:
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(f"the fused Sparsifiner kernel is not available: {_why_not_built()}. Running the torch path "
                      f"instead (same results, slower).", RuntimeWarning, stacklevel=3)


def validate_inputs(predictor, q, k, v, positions=None) -> None:
    """Raise an error that says how to fix inputs the fused kernel cannot take."""
    if not isinstance(predictor, ConnectivityPredictor):
        raise TypeError(f"predictor must be a ConnectivityPredictor, got {type(predictor).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [B, H, n, d], got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, H, n, d] (4 dimensions), got {tuple(t.shape)}")
        if t.dtype != torch.float32:
            raise TypeError(f"the fused kernel computes in float32; {name} is {t.dtype}: pass {name}.float(), or "
                            f"use kernel='torch'")
        if t.device.type != "cpu":
            raise ValueError(f"the fused kernel runs on the CPU; {name} is on {t.device}: pass {name}.cpu(), or "
                             f"use kernel='torch'")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v must have the same shape [B, H, n, d], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, H, n, _ = q.shape
    if H != predictor.num_heads:
        raise ValueError(f"q has {H} heads but the predictor was built for {predictor.num_heads}")
    if n > predictor.w_up.shape[-1]:
        raise ValueError(f"{n} tokens but the predictor covers at most {predictor.w_up.shape[-1]} (max_tokens)")
    if n - predictor.first_query < 1:
        raise ValueError("with cls_dense the sequence needs at least 2 tokens (CLS and one predicted query)")
    if positions is not None and tuple(positions.shape) != (B, n):
        raise ValueError(f"positions must have shape [B, n] = {(B, n)}, got {tuple(positions.shape)}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError("the fused kernel is for inference and has no autograd: call it under "
                           "torch.no_grad() (or torch.inference_mode()), or use kernel='torch' for training")


def fused_inference(predictor: ConnectivityPredictor, q, k, v, keep_rate: float,
                    positions: torch.Tensor | None = None, with_attention: bool = True, module=None,
                    a_down: torch.Tensor | None = None, coefficients: torch.Tensor | None = None) -> dict:
    """The fused kernel (raises if it is not built) on q, k, v [B, H, n, d], with what the predictor's forward
    returns beside its output: {"out": [B, H, n, d] (None with ``with_attention=False``, which runs the predictor
    and the selection only), "index": [B, H, n_q, k], "coefficients": A~_down [B, H, n_q, n_down],
    "first_query": int}. ``module``: another build of the kernel (the tests pass ``_build(portable=True)``);
    default ``require_extension()``. ``a_down`` and ``coefficients``: A_down and A~_down where the caller has
    computed them already (the predictor's forward), which are otherwise computed here the same way."""
    validate_inputs(predictor, q, k, v, positions)
    module = module or require_extension()
    B, H, n, d = q.shape
    kk = num_connections(keep_rate, n)
    with torch.no_grad():
        # A_down and A~_down exactly as the reference computes them (torch's matmuls and, for top-m, torch.topk's
        # choice): the kernel then selects from the same coefficients. Computing them inside the kernel was no
        # faster (measured) and let float rounding at tau flip a coefficient now and then.
        if (a_down is None) != (coefficients is None):
            raise ValueError("pass both a_down and coefficients (the predictor's A_down and A~_down), or neither")
        if a_down is None:
            a_down = predictor.low_rank_attention(q, k, positions)  # [B, H, n_q, n_down]
            coefficients = predictor.sparsify_coefficients(a_down)
        n_down = a_down.shape[-1]
        # the raw W_up columns of the current tokens, [H, n_down, n] or [B, H, n_down, n]: the kernel prunes them.
        # A basis shared by the heads ([1, n_down, n] or [B, 1, n_down, n]) is repeated per head, as the kernel
        # reads one basis per head.
        w_up = predictor._columns(predictor.w_up, n, positions).detach().float()
        w_up = w_up.expand(*w_up.shape[:-3], H, n_down, n).contiguous()
        out, index = module.fused_forward(
            *(t.contiguous().view(B * H, n, d) for t in (q, k, v)),
            *(t.float().contiguous().view(B * H, -1, n_down) for t in (a_down, coefficients)), w_up.view(-1, n_down, n),
            H, kk, predictor.first_query, predictor.up_prune, predictor.basis_threshold_abs,
            with_attention)
    first = predictor.first_query
    return {"out": out.view(B, H, n, d) if with_attention else None, "index": index.view(B, H, n - first, kk),
            "coefficients": coefficients, "first_query": first}


def fused_sparsifiner_attention(predictor: ConnectivityPredictor, q, k, v, keep_rate: float,
                                positions: torch.Tensor | None = None, with_attention: bool = True,
                                module=None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``fused_inference``'s (out [B, H, n, d] or None, index [B, H, n_q, k]), as ``sparsifiner_attention``
    returns them."""
    result = fused_inference(predictor, q, k, v, keep_rate, positions, with_attention, module)
    return result["out"], result["index"]


def fused_selection(predictor: ConnectivityPredictor, q, k, keep_rate: float, positions: torch.Tensor | None = None,
                    a_down: torch.Tensor | None = None, coefficients: torch.Tensor | None = None) -> torch.Tensor:
    """The predictor's top-k index [B, H, n_q, k] by the fused kernel (A_down, ranking scores, selection; no
    attention): the same sets as ``predictor(q, k, keep_rate, positions)["index"]``. ``a_down``, ``coefficients``:
    A_down and A~_down already computed (``fused_inference``)."""
    with torch.no_grad():  # the kernel has no autograd; the index it returns needs none
        return fused_inference(predictor, q, k, k, keep_rate, positions, with_attention=False, a_down=a_down,
                               coefficients=coefficients)["index"]


def torch_sparsifiner_attention(predictor: ConnectivityPredictor, q, k, v, keep_rate: float,
                                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference path: ``predictor`` (dense up-projection, torch.topk) then ``attention_over_connections``
    (CSR kernel without autograd). Returns (out [B, H, n, d], index [B, H, n_q, k])."""
    pred = predictor(q, k, keep_rate, positions)
    out, _ = attention_over_connections(q, k, v, pred["index"], pred["first_query"])
    return out, pred["index"]


def sparsifiner_attention(predictor: ConnectivityPredictor, q, k, v, keep_rate: float,
                          positions: torch.Tensor | None = None, kernel: str = "fused"):
    """Sparsifiner's whole inference path, predictor + top-k + sparse attention: q, k, v [B, H, n, d] ->
    (out [B, H, n, d], index [B, H, n_q, k]); row i of index holds the keys of query first_query + i.

    ``kernel="fused"``: the C++ kernel (module docstring); where it cannot be built, one warning and the torch
    path. ``kernel="torch"``: the reference path. Both give the same index sets and outputs (to float rounding).
    """
    if kernel not in INFERENCE_KERNELS:
        raise ValueError(f"kernel must be one of {INFERENCE_KERNELS}, got {kernel!r}")
    if kernel == "fused":
        validate_inputs(predictor, q, k, v, positions)
        if load_extension() is not None:
            return fused_sparsifiner_attention(predictor, q, k, v, keep_rate, positions)
        _warn_fallback()
    return torch_sparsifiner_attention(predictor, q, k, v, keep_rate, positions)
