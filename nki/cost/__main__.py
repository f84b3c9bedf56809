"""``python -m nki.cost [--target trn2] [--order reorder] [--out DIR] script.py [args...]``:
run a script and, for every kernel call it makes, print the cost model's summary and write a
Perfetto trace (``DIR/<kernel>_<n>.json.gz``, default DIR ``nki-cost-traces``)."""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from nki.cost.estimate import estimate_spec
from nki.cost.record import recording
from nki.ir.target import get_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nki.cost", description=__doc__)
    parser.add_argument("--target", default=None,
                        help="trn1, trn2 or trn3 (default: each kernel's own target)")
    parser.add_argument("--order", default="program", choices=("program", "reorder"),
                        help="engines in program order (default), or ready instructions "
                        "taking earlier gaps, as the compiler's scheduler may move them")
    parser.add_argument("--out", default="nki-cost-traces", help="folder for the traces")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    os.makedirs(opts.out, exist_ok=True)
    calls: dict[str, int] = {}

    if opts.target:
        # kernels then trace (and run) for that generation, unless one names its own target
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = get_target(opts.target).name

    def watch(kernel, spec) -> None:
        name = getattr(kernel, "__name__", "kernel")
        n = calls[name] = calls.get(name, 0) + 1
        target = get_target(spec.settings.target).name
        est = estimate_spec(spec, target, opts.target is None and "target" not in
                            getattr(kernel, "options", {}), name, order=opts.order)
        path = est.save_trace(os.path.join(opts.out, f"{name}_{n}.json.gz"))
        print(f"{est}\ntrace: {path}\n", file=sys.stderr)

    sys.argv = [opts.script, *opts.args]
    with recording(watch):
        runpy.run_path(opts.script, run_name="__main__")
    print(f"nki.cost: {sum(calls.values())} kernel call(s) estimated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
