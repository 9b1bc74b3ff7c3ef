#!/usr/bin/python3
"""GEMMs under every OpenBLAS core this machine executes: cpc cuts a GEMM over threads only where
the selected core's kernels compute each element as the uncut call does (kernels/cpu/GemmCuts.h),
so the GEMM, split, batch and 16-bit matmul tests of cpc-unit-tests (1, 2, 3 and 5 threads, shapes
whose cuts end inside every kernel's unroll) must pass with OPENBLAS_CORETYPE set to each core:
Haswell and Zen (whose SGEMM kernel sums by tile position) as well as the SkylakeX family
(small-matrix kernels) and the older SSE/AVX cores. Cores whose instructions this CPU lacks
(the FMA4 AMD cores on an Intel host, AVX-512 on an AVX2 one) are named as not executable;
Cooperlake cannot be forced in 0.3.21 and has SkylakeX's kernels.
"""
from cpctest import GEMM_TESTS, OPENBLAS_CORES, Results, cpu_flags, run_on_core, tool


def main():
    results = Results()
    skipped = []
    for core in OPENBLAS_CORES:
        proc = run_on_core([tool("cpc-unit-tests"), "--gtest_filter=" + GEMM_TESTS], core)
        if proc is None:
            skipped.append(core)
            continue

        def passes(proc=proc):
            assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
            assert "[  PASSED  ]" in proc.stdout and " 0 tests" not in proc.stdout, proc.stdout[-2000:]
        results.check("OPENBLAS_CORETYPE=%s: GEMMs give the 1-thread bits at 2, 3 and 5 threads" % core, passes)
    print("not executable on this CPU (SIGILL): %s" % (", ".join(skipped) or "none"))

    def covers_the_kernel_families():
        ran = set(OPENBLAS_CORES) - set(skipped)
        if {"avx2", "fma"} <= cpu_flags():
            assert {"Haswell", "Zen"} <= ran, "the Haswell/Zen SGEMM kernel was not tested: ran %s" % sorted(ran)
        if "avx512f" in cpu_flags():
            assert "SkylakeX" in ran, "the SkylakeX kernels were not tested: ran %s" % sorted(ran)
        assert len(ran) >= 4, "only %s ran" % sorted(ran)
    results.check("every kernel family this CPU can execute was among them", covers_the_kernel_families)
    results.finish()


if __name__ == "__main__":
    main()
