"""cpc-run across processes: launching under mpirun, the handshake, and faults (a rank's error, a
rank killed), through cpc-run's internal --self-test-world mode (no multi-rank plans needed)."""
import os
import signal
import subprocess
import time

from cpctest import Results, tempdir, tool

results = Results()
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def cpc_run(args, tmp, timeout=60):
    """Runs cpc-run with TMPDIR=tmp (where the ranks' log would go)."""
    env = dict(os.environ, TMPDIR=tmp)
    return subprocess.run([tool("cpc-run")] + args, capture_output=True, text=True, timeout=timeout, env=env)


def one_error_line(proc, *needles):
    assert proc.returncode == 1, "exit %d (want 1)\nstdout:\n%s\nstderr:\n%s" % (
        proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, "want one error line, got:\n" + proc.stderr
    assert lines[0].startswith("cpc-run: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], "%r not in %r" % (needle, lines[0])


with tempdir() as work:
    token = os.path.join(work, "token.bin")
    with open(token, "wb") as f:
        f.write(os.urandom(4096))
    logs = os.path.join(work, "tmp")
    os.mkdir(logs)

    def succeeds(n):
        def fn():
            proc = cpc_run([token, "--self-test-world", str(n), "--steps", "3"], logs)
            assert proc.returncode == 0, proc.stderr
            assert proc.stderr == "", proc.stderr
            lines = proc.stdout.strip().splitlines()
            assert len(lines) == 3, proc.stdout  # rank 0 only
            # sum over ranks of (rank + 1), and one all-reduce of 8 bytes: 2(n-1)/n * 8 sent.
            want = "all_reduce %d  comm 1 call %d B" % (n * (n + 1) // 2, 2 * (n - 1) * 8 // n)
            for s, line in enumerate(lines, 1):
                assert line.startswith("step %d/3" % s) and want in line, line
            assert os.listdir(logs) == [], "log left behind: %s" % os.listdir(logs)
        return fn

    results.check("2 ranks", succeeds(2))
    results.check("4 ranks", succeeds(4))

    def rank_error():
        start = time.time()
        proc = cpc_run([token, "--self-test-world", "4", "--steps", "20", "--self-test-fail-rank", "3",
                        "--self-test-fail-step", "2"], logs)
        one_error_line(proc, "rank 3: self-test failure at step 2")
        assert time.time() - start < 30, "took %.1f s" % (time.time() - start)
        assert "step 1/20" in proc.stdout and "step 3/20" not in proc.stdout, proc.stdout
        assert os.listdir(logs) == []
    results.check("a rank's error ends the job with one line", rank_error)

    def rank_zero_error():
        proc = cpc_run([token, "--self-test-world", "2", "--self-test-fail-rank", "0", "--self-test-fail-step", "1"],
                       logs)
        one_error_line(proc, "rank 0: self-test failure at step 1")
    results.check("rank 0's error", rank_zero_error)

    def verbose_keeps_log():
        proc = cpc_run([token, "--self-test-world", "2", "--self-test-fail-rank", "1", "--self-test-fail-step", "1",
                        "--verbose"], logs)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 2 and "rank 1: self-test failure" in lines[0], proc.stderr
        kept = os.listdir(logs)
        try:
            assert len(kept) == 1 and os.path.join(logs, kept[0]) in lines[1], (kept, lines)
            text = open(os.path.join(logs, kept[0])).read()
            assert "cpc-run: error: rank 1: self-test failure" in text, text
        finally:
            for name in kept:
                os.remove(os.path.join(logs, name))
    results.check("--verbose keeps the ranks' log", verbose_keeps_log)

    def killed_rank():
        pids = os.path.join(work, "pids.txt")
        env = dict(os.environ, TMPDIR=logs)
        proc = subprocess.Popen([tool("cpc-run"), token, "--self-test-world", "4", "--steps", "300",
                                 "--self-test-pid-file", pids], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        try:
            assert proc.stdout.readline().startswith("step 1/300"), "no first step"
            ranks = dict(line.split() for line in open(pids).read().splitlines())
            assert sorted(ranks) == ["0", "1", "2", "3"], ranks
            killed = time.time()
            os.kill(int(ranks["2"]), signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            took = time.time() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
        print("  job ended %.2f s after the SIGKILL" % took)
        one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                       "rank 2 exited on signal 9 (Killed)")
        assert took < 30
        assert os.listdir(logs) == []
    results.check("a rank killed with SIGKILL ends the job", killed_rank)

    def interrupted_launcher():
        # Not a training run: a SIGINT to cpc-run ends mpirun and every rank at once (a training
        # run stops at a step boundary instead: tests/e2e/test_checkpoint.py).
        pids = os.path.join(work, "pids-int.txt")
        proc = subprocess.Popen([tool("cpc-run"), token, "--self-test-world", "2", "--steps", "300",
                                 "--self-test-pid-file", pids], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, TMPDIR=logs))
        try:
            assert proc.stdout.readline().startswith("step 1/300"), "no first step"
            ranks = [int(line.split()[1]) for line in open(pids).read().splitlines()]
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0, "exit 0 after SIGINT"
        deadline = time.time() + 10
        while time.time() < deadline and any(os.path.exists("/proc/%d" % pid) for pid in ranks):
            time.sleep(0.1)
        alive = [pid for pid in ranks if os.path.exists("/proc/%d" % pid)]
        assert not alive, "ranks still running after SIGINT: %s" % alive
    results.check("SIGINT to the launcher of a non-training run ends every rank", interrupted_launcher)

    def wrong_world_size():
        # Started by the user's own mpirun with 3 ranks; mpirun's own banner follows our line.
        env = dict(os.environ, **ROOT_ENV)
        proc = subprocess.run(["mpirun", "-np", "3", "--oversubscribe", tool("cpc-run"), token, "--self-test-world", "2"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode != 0
        ours = [l for l in proc.stderr.splitlines() if l.startswith("cpc-run: error:")]
        assert ours == ["cpc-run: error: the plan was compiled for 2 ranks but runs on 3"], proc.stderr
    results.check("world size mismatch", wrong_world_size)

    def plan_mismatch():
        other = os.path.join(work, "other.bin")
        with open(other, "wb") as f:
            f.write(b"different")
        env = dict(os.environ, **ROOT_ENV)
        proc = subprocess.run(["mpirun", "--oversubscribe", "-np", "1", tool("cpc-run"), token, "--self-test-world", "2",
                               ":", "-np", "1", tool("cpc-run"), other, "--self-test-world", "2"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode != 0
        ours = [l for l in proc.stderr.splitlines() if l.startswith("cpc-run: error:")]
        assert len(ours) == 1 and "rank 1 read different plan bytes than rank 0" in ours[0], proc.stderr
        assert "step" not in proc.stdout
    results.check("plan bytes differ between ranks", plan_mismatch)

    def missing_file():
        proc = cpc_run([os.path.join(work, "nope.bin"), "--self-test-world", "2"], logs)
        one_error_line(proc, "rank ", "nope.bin: cannot read the file")
    results.check("a file missing on the ranks", missing_file)

results.finish()
