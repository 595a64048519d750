"""The ``nerve`` command.

    nerve info [--json]                          version, CPU, kernel dispatch table, CUDA
    nerve bench ops [--repeat N] [--quick] [--json]   kernel speed on this machine

Also runnable as ``python -m nerve`` or ``python -m nerve.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

__all__ = ["main", "format_info"]


def format_info(desc: dict) -> str:
    """The text of ``nerve info`` for a nerve.info() dict."""
    cpu = desc["cpu"]
    lines = [
        f"nerve {desc['version']}",
        f"library   {desc['library']}",
        f"cpu       {cpu['arch']}, {cpu['count']} logical CPUs",
        f"features  {' '.join(cpu['features']) or '(none detected)'}",
    ]
    disabled = os.environ.get("NERVE_DISABLE")
    if disabled:
        lines.append(f"disabled  NERVE_DISABLE={disabled}")
    lines += ["", "kernels   (variants best first; * chosen, + runnable here, ~ disabled (NERVE_DISABLE), "
                  "- needs CPU features this machine lacks)"]
    table = desc["variants"]
    width = max(len("op"), *(len(op) for op in table))
    chosen_width = max(len("chosen"), *(len(str(v)) for v in desc["kernels"].values()))
    lines.append(f"  {'op'.ljust(width)}  {'chosen'.ljust(chosen_width)}  variants")
    for op, variants in table.items():
        marks = " ".join(
            v["name"] + ("*" if v["selected"] else "-" if not v["runnable"] else "~" if v["disabled"] else "+")
            for v in variants
        )
        lines.append(f"  {op.ljust(width)}  {str(desc['kernels'][op]).ljust(chosen_width)}  {marks}")
    cuda = desc["cuda"]
    lines.append("")
    if cuda["devices"]:
        lines.append(f"cuda      {cuda['devices']} device(s)")
        for dev in cuda.get("device_list", []):
            lines.append(
                f"  [{dev['index']}] {dev['name']}  sm_{dev['cc_major']}{dev['cc_minor']}  "
                f"{dev['sm_count']} SMs  {dev['total_memory'] / 2**30:.1f} GiB"
                + ("  integrated" if dev["integrated"] else "")
            )
    else:
        lines.append(f"cuda      no devices: {cuda['reason']}")
    return "\n".join(lines)


def _cmd_info(args) -> int:
    import nerve

    desc = nerve.info()
    if args.json:
        print(json.dumps(desc, indent=2))
    else:
        print(format_info(desc))
    return 0


def _cmd_bench_ops(args) -> int:
    from . import bench

    result = bench.run(repeat=args.repeat, quick=args.quick)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(bench.format_report(result))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nerve", description="nerve edge inference SDK")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    info = commands.add_parser("info", help="version, CPU features, kernel dispatch table, CUDA devices")
    info.add_argument("--json", action="store_true", help="print nerve.info() as JSON")
    info.set_defaults(func=_cmd_info)

    bench = commands.add_parser("bench", help="benchmarks")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE")
    suites.required = True
    bench_ops = suites.add_parser("ops", help="kernel speed next to memcpy, unfused ops and the reference kernels")
    bench_ops.add_argument("--repeat", type=int, default=None, metavar="N",
                           help="samples per measurement; the median is reported (default 7, quick 3)")
    bench_ops.add_argument("--quick", action="store_true", help="small sizes, a few seconds (smoke test)")
    bench_ops.add_argument("--json", action="store_true", help="print the results as JSON")
    bench_ops.set_defaults(func=_cmd_bench_ops)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``nerve`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    if getattr(args, "repeat", None) is not None and args.repeat < 1:
        print("nerve: --repeat must be >= 1", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # `nerve info | head`
        return 0
    except Exception as exc:  # noqa: BLE001 - report nerve errors as one line, not a traceback
        from .errors import NerveError

        if isinstance(exc, NerveError):
            print(f"nerve: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
