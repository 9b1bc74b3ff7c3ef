#!/usr/bin/python3
"""Import speed of MAE exports: exports each size once (cached in --work-dir), then times
`cpc import --summary` (whole process: parse, check, shape inference, import, clean-up).

    bench/import_speed.py [--sizes base,large] [--opsets 13,17] [--work-dir out/bench] [--repeat 3] [--verify]

Goal (issue 2): ViT-L imports in under 10 s on the 2-core machine. Prints one line per model.
"""
import argparse
import os
import subprocess
import sys
import time

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,base,large")
    ap.add_argument("--opsets", default="17")
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpc", default=os.path.join(SOURCE, "build", "bin", "cpc"))
    ap.add_argument("--verify", action="store_true", help="also write the IR and re-parse it with cpc-opt")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    print("%-8s %-6s %10s %12s %10s %s" % ("size", "opset", "file MB", "params", "best s", "all runs s"))
    for size in args.sizes.split(","):
        for opset in [int(o) for o in args.opsets.split(",")]:
            model = os.path.join(args.work_dir, "mae-%s-opset%d.onnx" % (size, opset))
            if not os.path.exists(model):
                subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"),
                                "--size", size, "--opset", str(opset), "--out-dir", args.work_dir],
                               check=True, stdout=subprocess.DEVNULL)
            data = model + ".data"
            mb = (os.path.getsize(model) + (os.path.getsize(data) if os.path.exists(data) else 0)) / 2**20
            times, params = [], "?"
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                proc = subprocess.run([args.cpc, "import", model, "--summary"], capture_output=True, text=True)
                times.append(time.perf_counter() - t0)
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    sys.exit(1)
                for line in proc.stdout.splitlines():
                    if "parameters:" in line:
                        params = line.split("tensors,")[1].split()[0]
            verified = ""
            if args.verify:
                mlir = model[:-len(".onnx")] + ".mlir"
                subprocess.run([args.cpc, "import", model, "-o", mlir], check=True)
                opt = os.path.join(os.path.dirname(args.cpc), "cpc-opt")
                subprocess.run([opt, mlir, "-o", os.devnull], check=True)
                verified = "  (re-parsed and verified by cpc-opt)"
            print("%-8s %-6d %10.1f %12s %10.2f %s%s" % (size, opset, mb, params, min(times),
                                                       " ".join("%.2f" % t for t in times), verified), flush=True)


if __name__ == "__main__":
    main()
