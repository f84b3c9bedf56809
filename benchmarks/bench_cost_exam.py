"""The cost model's exam: its estimates next to AWS's *published hardware measurements*.

    python benchmarks/bench_cost_exam.py --samples DIR [--big] [--only NAME] [--json PATH]

(default PATH: benchmarks/results/cost_exam.json)

The kernels are AWS's own public files, run unmodified from ``DIR`` (never copied into this
repository). Make ``DIR`` with the ``fetch`` of github:aws-neuron/nki-samples:

* ``DIR/mamba_nki_kernels.py``: ``src/nki_samples/tutorials/fused_mamba/`` at commit
  ``SAMPLES_COMMIT`` (the fused-mamba tutorial's kernels);
* ``DIR/kernel-optimization.rst``: aws-neuron-sdk ``nki/guides/tutorials/`` at
  ``SDK_COMMIT``; its ``@nki.jit`` code blocks are written, unmodified, to
  ``DIR/kopt_N.py`` (N in page order) and estimated for the engine utilisations its
  profiles show (``--kopt``);
* ``DIR/nki_samples/reference/``: ``src/nki_samples/reference/`` at ``REFERENCE_COMMIT``
  (the last commit before AWS moved the reference kernels out), plus an empty
  ``DIR/nki_samples/__init__.py``.

Each case records the published value, where it was published, our estimate on the
published generation, and their ratio (``reorder_us``: the same program with
``order="reorder"``, ready instructions taking earlier engine gaps as the compiler's
scheduler may move them; the two bracket a dependency-keeping schedule); ``order``
checks, for each pair of cases on the same generation, whether the model orders them as
the hardware did. No constant of the
model is ever tuned to these numbers: this is its exam, not its training set.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _record import write_record  # noqa: E402  (benchmarks/_record.py)

SAMPLES_COMMIT = "6905a68a122f937e68403727759f035ddd144f95"
REFERENCE_COMMIT = "8370e11ba8d894be5e3c687c0772e7e1e889de4c"
SDK_COMMIT = "81ce03ae261e12925e53437a0f690478e6366155"
MAMBA_DOC = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/tutorials/"
             f"fused_mamba.html (aws-neuron-sdk {SDK_COMMIT[:12]}: "
             "nki/guides/tutorials/fused_mamba.rst)")
SAMPLES_TEST = ("github.com/aws-neuron/nki-samples/blob/{c}/test/unit/{f} "
                "(perf-test parameter, an upper bound, not asserted)")
# The mamba tutorial was published in Sept 2024, before trn2 was available: NeuronCore-v2.
MAMBA_GEN = "trn1"


def _mamba_args(batch: int, seq: int, channels: int, state: int) -> tuple:
    """The tutorial's inputs (float32; values do not matter to the model)."""
    f32 = np.float32
    return (np.ones((batch, channels, seq), f32), np.ones((batch, channels, seq), f32),
            -np.ones((channels, state), f32), np.ones((batch, state, seq), f32),
            np.ones((batch, state, seq), f32))


def mamba_cases(big: bool) -> list[dict]:
    """The fused-mamba tutorial's measured latencies (µs), kernel version and shape."""
    rows = [("v1", 512, 256, 172.93, "toy shape, first kernel"),
            ("v1", 512, 4096, 2340.0, "4K channels"),
            ("v2", 512, 4096, 1610.0, "loop reordering"),
            # the seq_len scaling table (ms, channels 4096)
            ("v2", 1024, 4096, 4400.0, "scaling table"),
            ("v3", 1024, 4096, 3300.0, "scaling table"),
            ("v2", 2048, 4096, 8900.0, "scaling table"),
            ("v3", 2048, 4096, 6600.0, "scaling table")]
    if big:
        rows += [("v2", 8192, 4096, 53330.0, "8K seq_len: spills"),
                 ("v3", 8192, 4096, 27800.0, "seq_len tiling")]
    out = []
    for ver, seq, ch, us, note in rows:
        out.append(dict(name=f"mamba_{ver} b1 sl{seq} c{ch} ss16", module="mamba_nki_kernels",
                        kernel=f"mamba_{ver}", args=lambda s=seq, c=ch: _mamba_args(1, s, c, 16),
                        kwargs={}, target=MAMBA_GEN, published_us=us, kind="measured",
                        source=f"{MAMBA_DOC}: {note}"))
    return out


def _double_row_args() -> tuple:
    """512x16K @ 16Kx1024: lhs bf16, rhs fp8 reshaped to [K/2, 2N], column scales [128, N]."""
    m, k, n = 512, 16 * 1024, 1024
    rng = np.random.default_rng(0)
    lhs = rng.random((m, k)).astype(ml_dtypes.bfloat16)
    # the kernel asserts nl.float8_e4m3 (IEEE-style e4m3, ml_dtypes.float8_e4m3)
    rhs = rng.random((k // 2, 2 * n)).astype(ml_dtypes.float8_e4m3)
    scale = rng.random((128, n)).astype(ml_dtypes.bfloat16)   # broadcast to 128 rows
    return lhs, rhs, scale


def _sd_args(dtype, seq: int = 4096, d: int = 128) -> tuple:
    rng = np.random.default_rng(0)
    q = rng.random((1, d, seq)).astype(dtype)
    k = rng.random((1, seq, d)).astype(dtype)
    v = rng.random((1, seq, d)).astype(dtype)
    return q, k, v


def sample_test_cases() -> list[dict]:
    """nki-samples perf-test thresholds (µs) whose kernels are in the reference folder."""
    dr = SAMPLES_TEST.format(c=REFERENCE_COMMIT, f="test_double_row_matmul.py")
    sd = SAMPLES_TEST.format(c=REFERENCE_COMMIT, f="test_SD_attention_small_head.py")
    out = [dict(name="quantized_double_row_matmul 512x16Kx1024",
                kernel="quantized_double_row_matmul",
                module="nki_samples.reference.double_row_matmul", args=_double_row_args,
                kwargs=dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=16),
                target="trn2", published_us=320.0, kind="threshold", source=dr)]
    for dt, us in ((np.float32, 675.0), (ml_dtypes.bfloat16, 536.0)):
        for gen in ("trn1", "trn2"):   # the test does not say which generation
            out.append(dict(name=f"SD attention small head 1x4096 d128 {np.dtype(dt).name} {gen}",
                            kernel="fused_self_attn_for_SD_small_head_size",
                            module="nki_samples.reference.attention",
                            args=lambda dt=dt: _sd_args(dt), kwargs={}, target=gen,
                            published_us=us, kind="threshold", source=sd))
    return out


KOPT_DOC = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/tutorials/"
            f"kernel-optimization.html (aws-neuron-sdk {SDK_COMMIT[:12]})")
# block N of the page -> (step, the profile's active % per engine), trn2, 4096x8192 @ 8192x8192
KOPT_UTIL = {2: ("tiled", {"tensor": 87.28, "dma": 99.93}),
             3: ("hoisted loads", {"tensor": 99.85, "dma": 99.73}),
             4: ("blocked free dims", {"tensor": 99.52, "dma": 95.70}),
             5: ("blocked all dims", {"tensor": 99.50, "dma": 21.54, "vector": 10.55})}


def extract_rst_kernels(rst: str, folder: str) -> list[str]:
    """Write each ``.. code-block:: python`` of ``rst`` that defines an ``@nki.jit`` kernel,
    unmodified (dedented), to ``folder/kopt_N.py``; returns the module names."""
    import re
    import textwrap
    with open(rst) as f:
        text = f.read()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:(?:[ \t]+.*|)\n)+)", text)
    names = []
    for code in (textwrap.dedent(b) for b in blocks):
        if "@nki.jit" in code:
            names.append(f"kopt_{len(names) + 1}")
            with open(os.path.join(folder, names[-1] + ".py"), "w") as f:
                f.write(code)
    return names


def utilisation_rows(folder: str) -> list[dict]:
    """The kernel-optimization tutorial's steps: published vs estimated engine activity (%).
    The profile's DMA figure is the time any DMA is active; ours is the mean queue's busy
    share, so only TensorE and VectorE compare like for like."""
    import importlib

    import nki
    extract_rst_kernels(os.path.join(folder, "kernel-optimization.rst"), folder)
    lhsT, rhs = np.empty((8192, 4096), np.float32), np.empty((8192, 8192), np.float32)
    rows = []
    for block, (step, published) in KOPT_UTIL.items():
        kernel = importlib.import_module(f"kopt_{block}").matrix_multiply_kernel
        est = nki.estimate(kernel, target="trn2")(lhsT, rhs)
        ours = {e: round(100 * est.utilisation(e), 2) for e in published}
        rows.append(dict(step=step, block=block, target="trn2", published_pct=published,
                         estimate_pct=ours, estimate_us=round(est.latency_us, 1),
                         source=KOPT_DOC))
        print(f"{step:<20} published {published}  ours {ours}  ({est.latency_us:.0f} us)",
              flush=True)
    return rows


def run_case(case: dict) -> dict:
    """Estimate one case; a failure is recorded, never hidden."""
    import importlib

    import nki
    row = {k: case[k] for k in ("name", "kernel", "target", "published_us", "kind", "source")}
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(case["module"])
        est = nki.estimate(getattr(mod, case["kernel"]), target=case["target"])(
            *case["args"](), **case["kwargs"])
    except Exception as exc:   # a kernel our tracer rejects is part of the exam result
        row.update(estimate_us=None, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return row
    # the same program scheduled as a compiler's scheduler could reorder it (order="reorder"):
    # with program order it brackets what a dependency-keeping schedule does
    reordered = nki.estimate(getattr(mod, case["kernel"]), target=case["target"],
                             order="reorder")(*case["args"](), **case["kwargs"])
    row.update(estimate_us=round(est.latency_us, 2),
               ratio=round(est.latency_us / case["published_us"], 3),
               reorder_us=round(reordered.latency_us, 2),
               reorder_ratio=round(reordered.latency_us / case["published_us"], 3),
               bottleneck=est.bottleneck,
               busy_us={e: round(est.busy_ns(e) / 1e3, 2) for e in ("tensor", "vector",
                                                                    "scalar", "gpsimd", "dma")
                        if est.busy_ns(e)},
               top_lines=[dict(location=r.location, critical_us=round(r.critical_ns / 1e3, 2),
                               opcodes=list(r.opcodes)) for r in est.by_line()[:4]],
               model_seconds=round(time.perf_counter() - t0, 1))
    return row


def order_check(rows: list[dict]) -> dict:
    """Pairs of measured cases on one generation: does the model order them as hardware did?"""
    pairs = agree = 0
    wrong = []
    ok = [r for r in rows if r.get("estimate_us") is not None and r["kind"] == "measured"]
    for a, b in itertools.combinations(ok, 2):
        if a["target"] != b["target"] or a["published_us"] == b["published_us"]:
            continue
        pairs += 1
        if (a["published_us"] < b["published_us"]) == (a["estimate_us"] < b["estimate_us"]):
            agree += 1
        else:
            wrong.append(f"{a['name']} vs {b['name']}")
    return dict(pairs=pairs, agree=agree, disagree=wrong)


def summary(rows: list[dict], key: str = "ratio") -> dict:
    """How far from "within 25%": counts and the ratio range of the measured cases."""
    ratios = [r[key] for r in rows if r.get(key) and r["kind"] == "measured"]
    within = sum(0.75 <= x <= 1.25 for x in ratios)
    return dict(measured=len(ratios), within_25pct=within,
                ratio_min=min(ratios, default=None), ratio_max=max(ratios, default=None),
                geomean_ratio=round(float(np.exp(np.mean(np.log(ratios)))), 3) if ratios else None)


def main() -> None:
    from nki.cost.estimate import MODEL_VERSION
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", required=True, help="folder with AWS's kernel files")
    ap.add_argument("--big", action="store_true", help="also the 8K seq_len mamba cases (minutes)")
    ap.add_argument("--only", help="cases whose name contains this")
    ap.add_argument("--kopt", action="store_true",
                    help="also the kernel-optimization tutorial's utilisations (minutes)")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "cost_exam.json"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.samples))
    rows = []
    for case in mamba_cases(args.big) + sample_test_cases():
        if args.only and args.only not in case["name"]:
            continue
        row = run_case(case)
        rows.append(row)
        est = row.get("estimate_us")
        print(f"{row['name']:<48} {row['target']} published {row['published_us']:>9.1f} us "
              f"({row['kind']})  ours {est if est is not None else row.get('error')}"
              f"  ratio {row.get('ratio')}  reordered {row.get('reorder_us')}"
              f"  ratio {row.get('reorder_ratio')}", flush=True)
    result = dict(order=order_check(rows), summary=summary(rows),
                  summary_reorder=summary(rows, "reorder_ratio"))
    if args.kopt:
        result["utilisation"] = utilisation_rows(os.path.abspath(args.samples))
    print(result)
    write_record(args.json, model_version=MODEL_VERSION, samples_commit=SAMPLES_COMMIT,
                 reference_commit=REFERENCE_COMMIT, sdk_commit=SDK_COMMIT, rows=rows, **result)


if __name__ == "__main__":
    main()
