"""The ``nerve`` command.

    nerve info [--json]                          version, CPU, kernel dispatch table, CUDA
    nerve bench ops [--repeat N] [--quick] [--json]   kernel speed on this machine
    nerve bench asr [--audio FILE.wav ...]       the speech pipeline vs onnxruntime and pocketsphinx
    nerve bench quant [--repeat N] [--quick] [--json] W4/W8 linear layers (GEMV, small GEMM) vs fp32 and
                                                 onnxruntime's MatMulNBits/MatMulInteger
    nerve bench robot [--repeat N] [--quick] [--json] serial link round trip, speech final / "stop" -> robot ack
    nerve bench MODEL [--vs onnxruntime] [--dim NAME=N] [--input NAME=x.npy] [--threads N] [--json]
                                                 one model's latency (median, p99), next to a peer
    nerve quantize MODEL --out PLAN.nrv [--scheme w8a8|w8a32|w4a8|w4a32] [--calib DIR_OR_NPZ] [--policy auto|all]
                                                 INT4 linears, sensitivity-driven; prints the choices
    nerve plan MODEL [--dim NAME=N] [--save out.nrv]  the compiled plan: fused ops, kernels, arena
    nerve run MODEL --input NAME=x.npy ... [--output out.npz]   run a model on .npy inputs
    nerve replay LOG                             re-run a provenance log, confirm every output
    nerve robot-sim --listen URL [--log F.jsonl] a simulated robot on the far end of a serial link
    nerve robot --port URL --wav F.wav|--raw -   speech -> commands -> serial link (nerve.robot)
    nerve models fetch moonshine-base            fetch a speech model once (pip), verify, compile
    nerve asr FILE.wav|- [--json] [--words F] [--phrases F]   speech to text (nerve.asr.cli)

Also runnable as ``python -m nerve`` or ``python -m nerve.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
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
                f"{dev['sm_count']} SMs  {dev['smem_per_sm'] // 1024} KiB shared/SM  "
                f"{dev['total_memory'] / 2**30:.1f} GiB"
                + ("  integrated" if dev["integrated"] else "")
            )
            try:
                from . import cuda as nerve_cuda

                sel = nerve_cuda.select(dev["index"])
                lines.append(
                    f"      layernorm_linear warp_rows<= {sel['layernorm_linear']['warp_rows_max']} rows, "
                    f"linear_w4 {sel['w4']['gemv_layout']}/{sel['w4']['gemm_layout']}, memory {sel['memory']}"
                    + ("  (NERVE_FORCE_CC)" if sel["cc_forced"] else ""))
            except Exception as exc:  # noqa: BLE001 - a bad NERVE_FORCE_CC must not hide the device list
                lines.append(f"      kernel selection failed: {exc}")
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


def _cmd_bench(args) -> int:
    if args.target == "asr":
        from .asr import bench as asr_bench

        chosen = args.precision or ("int8" if args.int8 else None)
        result = asr_bench.run(args.audio, repeat=args.repeat or (1 if args.quick else 3),
                               precisions=[chosen] if chosen else None, model=args.model)
        print(json.dumps(result, indent=2, default=str) if args.json else asr_bench.format_report(result))
        return 0
    if args.target == "quant":
        from . import bench_quant

        result = bench_quant.run(repeat=args.repeat, quick=args.quick)
        print(json.dumps(result, indent=2, default=str) if args.json else bench_quant.format_report(result))
        return 0
    if args.target == "robot":
        from . import bench_robot

        result = bench_robot.run(repeat=args.repeat, quick=args.quick)
        print(json.dumps(result, indent=2, default=str) if args.json else bench_robot.format_report(result))
        return 0
    if args.target == "ops":
        from . import bench

        result = bench.run(repeat=args.repeat, quick=args.quick)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(bench.format_report(result))
        return 0
    from . import modeltools as mt

    specs = mt.input_specs(args.target)
    dims = {k: int(v) for k, v in mt.parse_assignments(args.dim, "--dim").items()}
    feeds = mt.example_feeds(specs, dims, mt.parse_assignments(args.input, "--input"))
    dims = mt.dims_from_feeds(specs, feeds, dims)
    state = mt.parse_assignments(args.state, "--state") if args.state else mt.default_state(specs)
    result = mt.bench_model(args.target, feeds, dims, args.vs, threads=args.threads,
                            seconds=1.0 if args.quick else 4.0, repeat=args.repeat or (3 if args.quick else 7),
                            state=state, profile=args.profile)
    print(json.dumps(result, indent=2) if args.json else mt.format_bench(result))
    return 0


def _session_for(args, feeds=None):
    from . import modeltools as mt
    from .session import Session

    specs = mt.input_specs(args.model)
    dims = {k: int(v) for k, v in mt.parse_assignments(args.dim, "--dim").items()}
    if feeds is None:
        feeds = mt.example_feeds(specs, dims, {})
    return Session(args.model, dims=mt.dims_from_feeds(specs, feeds, dims)), feeds


def _read_calibration(path: str) -> list:
    """Feed dicts from an .npz (each array's first axis: the samples) or a folder of .npz files
    (one feed each, in name order)."""
    import numpy as np

    from .errors import InputError

    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.npz"))
        if not files:
            raise InputError(f"--calib {path}: the folder holds no .npz files")
        return [dict(np.load(f)) for f in files]
    if not p.is_file():
        raise InputError(f"--calib {path}: no such file or folder")
    data = dict(np.load(p))
    counts = {k: v.shape[0] if v.ndim else None for k, v in data.items()}
    if not data or None in counts.values() or len(set(counts.values())) != 1:
        raise InputError(f"--calib {path}: every array needs the same leading sample axis, got {counts}")
    return [{k: v[i] for k, v in data.items()} for i in range(next(iter(counts.values())))]


def _cmd_quantize(args) -> int:
    from . import modeltools as mt
    from .quant import quantize

    dims = {k: int(v) for k, v in mt.parse_assignments(args.dim, "--dim").items()}
    plan = quantize(args.model, scheme=args.scheme, calibration=_read_calibration(args.calib) if args.calib else None,
                    method=args.method, policy=args.policy, group_size=args.group, budget=args.budget,
                    dims=dims or None, progress=not args.json)
    path = plan.save(args.out)
    if args.json:
        print(json.dumps(plan.report, indent=2, default=str))
    else:
        print(f"wrote {path} ({len(plan)} bytes)")
    return 0


def _cmd_plan(args) -> int:
    from . import modeltools as mt

    sess, _ = _session_for(args)
    if args.save:
        sess.plan.save(args.save)
    print(mt.format_plan(sess))
    if args.save:
        print(f"\nsaved {args.save} ({len(sess.plan)} bytes)")
    return 0


def _cmd_run(args) -> int:
    import numpy as np

    from . import modeltools as mt

    specs = mt.input_specs(args.model)
    files = mt.parse_assignments(args.input, "--input")
    missing = [s["name"] for s in specs if s["name"] not in files]
    if missing:
        print(f"nerve: no --input for {missing}", file=sys.stderr)
        return 2
    sess, feeds = _session_for(args, mt.example_feeds(specs, {}, files))
    out = sess.run(feeds)
    if args.output:
        np.savez(args.output, **out)
    for name, arr in out.items():
        flat = arr.reshape(-1)
        preview = ", ".join(f"{x:.6g}" if arr.dtype.kind == "f" else str(x) for x in flat[:6])
        print(f"{name}  {arr.dtype}{list(arr.shape)}  [{preview}{', ...' if flat.size > 6 else ''}]")
    return 0


def _cmd_replay(args) -> int:
    from .provenance import replay

    r = replay(args.log)
    print(f"{r['runs']} runs replayed: {r['identical']} identical, {r['close']} within tolerance, "
          f"{len(r['mismatched'])} mismatched")
    for k in r["kernel_changes"]:
        print(f"  kernels changed since line {k['line']}: recorded {k['recorded']}, now {k['now']}")
    for m in r["mismatched"][:20]:
        print(f"  line {m['line']}: max |diff| {m['max_abs_diff']}")
    return 0 if not r["mismatched"] else 1


def _cmd_robot_sim(args) -> int:
    from .robot_sim import serve

    return serve(args.listen, log=args.log, baudrate=args.baudrate, once=args.once)


def _cmd_robot(args) -> int:
    from .errors import InputError
    from .robot import run

    if args.raw is not None and args.raw != "-":
        raise InputError("--raw takes '-' (raw s16le PCM on stdin)")
    return run(args.port, wav=args.wav, raw=sys.stdin.buffer if args.raw == "-" else None, rate=args.rate,
               channels=args.channels, grammar=args.grammar, model=args.model, precision=args.precision,
               timeout_s=args.timeout, retries=args.retries, as_json=args.json)


def _cmd_cuda_select(args) -> int:
    from . import cuda as nerve_cuda

    targets: List[object]
    if args.device == "all":
        targets = list(nerve_cuda.PRESETS)
    elif args.device is None:
        targets = list(range(nerve_cuda.device_count()))
        if not targets:
            print(f"no CUDA device here ({nerve_cuda.unavailable_reason()}); showing the 'orin' preset "
                  "(name another preset, or 'all')", file=sys.stderr)
            targets = ["orin"]
    else:
        targets = [int(args.device) if args.device.isdigit() else args.device]
    selections = [nerve_cuda.select(t, force_cc=args.cc, memory=args.memory, in_features=args.in_features)
                  for t in targets]
    if args.json:
        print(json.dumps(selections, indent=2))
    else:
        print("\n\n".join(nerve_cuda.format_selection(s) for s in selections))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nerve", description="nerve edge inference SDK")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    info = commands.add_parser("info", help="version, CPU features, kernel dispatch table, CUDA devices")
    info.add_argument("--json", action="store_true", help="print nerve.info() as JSON")
    info.set_defaults(func=_cmd_info)

    csel = commands.add_parser("cuda-select", help="the CUDA kernels, W4 layouts and memory mode nerve picks for a "
                                                   "device (a present GPU or a preset such as orin, a100), and why")
    csel.add_argument("device", nargs="?", default=None, metavar="INDEX|PRESET|all",
                      help="a GPU index, a preset (v100 t4 a100 rtx3090 xavier orin orin-nano rtx4090 h100 h200) or 'all' "
                           "(default: every present GPU, else orin)")
    csel.add_argument("--cc", default=None, metavar="X.Y", help="force the compute capability (as NERVE_FORCE_CC)")
    csel.add_argument("--memory", default=None, metavar="MODE",
                      help="auto, pinned, zero_copy or managed (as NERVE_CUDA_MEMORY)")
    csel.add_argument("--in", dest="in_features", type=int, default=4096, metavar="N",
                      help="input width for the W4 rows-per-block figure (4096)")
    csel.add_argument("--json", action="store_true", help="print the selections as JSON")
    csel.set_defaults(func=_cmd_cuda_select)

    bench = commands.add_parser("bench", help="benchmarks: 'ops' (kernels), 'asr', 'quant' (W4/W8 linears), 'robot' "
                                              "(serial link and speech -> robot latency) or a model file")
    bench.add_argument("target", metavar="ops|asr|quant|robot|MODEL",
                       help="'ops' for the kernel suite, 'asr' for the speech pipeline vs its peers, 'quant' for W4/W8 "
                            "linear layers vs fp32 and onnxruntime's quantized MatMuls, 'robot' for the serial link's "
                            "round trip (clean and noisy) and speech final / 'stop' partial -> robot ack on loopback, "
                            "or an .onnx/.nrv model")
    bench.add_argument("--int8", action="store_true", help="asr: nerve at precision int8 only (= --precision int8)")
    bench.add_argument("--precision", default=None, metavar="P",
                       help="asr: nerve at this precision only (default: the columns --model gives; fp32, int8, fp16, "
                            "w8a32, w4a32, w4a8[:gN][:gptq]; nerve.precision)")
    bench.add_argument("--model", default=None,
                       help="asr: moonshine-base or moonshine-tiny, at fp32 and int8 (default: base at fp32, int8 and "
                            "w4a8[:gptq], and tiny at int8)")
    bench.add_argument("--audio", action="append", metavar="FILE",
                       help="asr: a recording to use (default: the example WAVs and the model's own recording)")
    bench.add_argument("--repeat", type=int, default=None, metavar="N",
                       help="samples (ops, quant) or interleaved rounds (model); the median is reported")
    bench.add_argument("--quick", action="store_true", help="fewer/smaller measurements (smoke test)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")
    bench.add_argument("--vs", metavar="PEER", help="also time PEER on the same inputs (onnxruntime)")
    bench.add_argument("--dim", action="append", metavar="NAME=N",
                       help="size of a symbolic dimension (default: 1 for a batch or leading axis, 64 for an "
                            "image's height and width, 16 otherwise)")
    bench.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    bench.add_argument("--threads", type=int, default=1, help="threads for both runtimes (default 1)")
    bench.add_argument("--profile", nargs="?", const=15, default=0, type=int, metavar="N",
                       help="model: after the timing, where a run's time goes: per op type and the N slowest ops "
                            "(default 15) from nerve's per-op counters and, with --vs onnxruntime, its own profiler")
    bench.add_argument("--state", action="append", metavar="OUTPUT=INPUT",
                       help="also time nerve with this output carried into this input inside the session "
                            "(silero VAD: stateN=state by default)")
    bench.set_defaults(func=_cmd_bench)

    plan = commands.add_parser("plan", help="compile a model and print the plan: fused ops, kernels, arena, bytes")
    plan.add_argument("model", metavar="MODEL")
    plan.add_argument("--dim", action="append", metavar="NAME=N", help="upper bound of a symbolic dimension")
    plan.add_argument("--save", metavar="OUT.nrv", help="also write the plan file")
    plan.set_defaults(func=_cmd_plan)

    qz = commands.add_parser("quantize", help="quantize a model's layers (INT8 weights and activations, or INT4 "
                             "weights) and write the plan")
    qz.add_argument("model", metavar="MODEL")
    qz.add_argument("--scheme", default="w8a8", choices=["w8a8", "w8a32", "w4a8", "w4a32"],
                    help="w8a8 (default): linears and 1-D convs, int8 activations, GPTQ weights with --calib; "
                         "w8a32: linears, int8 weights, fp32 activations; w4a8/w4a32: linears, W4")
    qz.add_argument("--calib", metavar="DIR_OR_NPZ", help="held-out feeds: an .npz (leading sample axis) or a "
                    "folder of .npz files (needed by --policy auto)")
    qz.add_argument("--out", required=True, metavar="PLAN.nrv")
    qz.add_argument("--method", default="mse", choices=["minmax", "mse", "percentile"])
    qz.add_argument("--group", type=int, default=64, choices=[32, 64, 128])
    qz.add_argument("--policy", default="auto", choices=["auto", "all"],
                    help="auto: the most sensitive layers stay fp32 within --budget; all: every layer at --scheme")
    qz.add_argument("--budget", type=float, default=None,
                    help="auto: weight bytes allowed, as a fraction of their fp32 bytes (default 0.5 for w8a8, "
                    "0.25 for w4)")
    qz.add_argument("--dim", action="append", metavar="NAME=N", help="upper bound of a symbolic dimension")
    qz.add_argument("--json", action="store_true", help="print the report (sensitivities, choices, accuracy) as JSON")
    qz.set_defaults(func=_cmd_quantize)

    run = commands.add_parser("run", help="run a model on inputs from .npy files")
    run.add_argument("model", metavar="MODEL")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeat per input)")
    run.add_argument("--output", metavar="OUT.npz", help="write the outputs to an .npz file")
    run.add_argument("--dim", action="append", metavar="NAME=N", help="upper bound of a symbolic dimension")
    run.set_defaults(func=_cmd_run)

    rep = commands.add_parser("replay", help="re-run the runs of a provenance log and confirm their outputs")
    rep.add_argument("log", metavar="LOG.jsonl")
    rep.set_defaults(func=_cmd_replay)

    sim = commands.add_parser("robot-sim", help="a simulated robot on the far end of a serial link (nerve.serial)")
    sim.add_argument("--listen", required=True, metavar="URL",
                     help="tcp://HOST:PORT (or socket://HOST:PORT) to listen for links on (port 0: any free one), "
                          "or a serial device / pyserial URL to serve (/dev/ttyUSB1, rfc2217://...)")
    sim.add_argument("--log", metavar="FILE.jsonl", help="append one JSON line per command received")
    sim.add_argument("--baudrate", type=int, default=115200, help="for a serial device (default 115200)")
    sim.add_argument("--once", action="store_true", help="exit when the first link disconnects")
    sim.set_defaults(func=_cmd_robot_sim)

    robot = commands.add_parser("robot", help="speech -> grammar commands -> serial link (stop/halt first, from partials)")
    robot.add_argument("--port", required=True, metavar="URL",
                       help="the robot's link: /dev/ttyUSB0, socket://HOST:PORT (e.g. a nerve robot-sim), rfc2217://...")
    src = robot.add_mutually_exclusive_group(required=True)
    src.add_argument("--wav", metavar="FILE", help="speech from a WAV or FLAC file")
    src.add_argument("--raw", metavar="-", help="'-': raw s16le PCM on stdin (e.g. from arecord)")
    robot.add_argument("--rate", type=int, default=16000, help="--raw sample rate (default 16000)")
    robot.add_argument("--channels", type=int, default=1, help="--raw channels (default 1)")
    robot.add_argument("--grammar", metavar="FILE.json", help="command grammar (default: docs/COMMANDS.md's robot grammar)")
    robot.add_argument("--model", default="moonshine-base", help="moonshine-base (default) or moonshine-tiny")
    robot.add_argument("--precision", default="fp32", help="recogniser precision (fp32, int8, w4a8, ...)")
    robot.add_argument("--timeout", type=float, default=0.2, metavar="S", help="ack timeout per attempt (0.2 s)")
    robot.add_argument("--retries", type=int, default=5, help="attempts per command before it fails (5)")
    robot.add_argument("--json", action="store_true", help="one JSON line per command")
    robot.set_defaults(func=_cmd_robot)

    from .asr.cli import add_commands as add_speech_commands  # models, asr

    add_speech_commands(commands)
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
            message = str(exc)
            if "dims={" in message and hasattr(args, "dim"):  # the Python spelling of a bound: say this one's
                message += " (on the command line: --dim NAME=N for each)"
            print(f"nerve: {message}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
