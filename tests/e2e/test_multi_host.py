"""Several machines: the test makes two network namespaces joined by a veth pair, each a
"machine" with its own address, and starts one job across them with the user's own mpirun
(`mpirun -np 2 -H A:1,B:1`, OpenMPI's launcher reaching B through an rsh agent that is
`ip netns exec`, tests/e2e/netns_rsh_agent.sh; TCP between them). cpc-run joins as one rank
per machine: MAE-tiny dp2 ZeRO-1 trains equal to the one-host dp2 run (loss and grad_norm within
1e-5), and a checkpoint it saves resumes on one host. Making namespaces needs root: run by
anyone else, the test says SKIP and why (CI and scripts/setup run as root; iproute2 is in the
setup's packages).
"""
import json
import os
import subprocess
import sys

import numpy as np

from cpctest import Results, SOURCE, compile_plan, export_mae, load_jsonl, run, tempdir, tool, MAE_RECIPE, MPI_ENV

results = Results()
RECIPE = dict(MAE_RECIPE, gradient_accumulation=2)
TOL = 1e-5
suffix = os.getpid() % 200 + 20
NAMESPACES = ["cpc-host-a-%d" % os.getpid(), "cpc-host-b-%d" % os.getpid()]
ADDRESSES = ["10.%d.77.1" % suffix, "10.%d.77.2" % suffix]


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, text=True)


def make_machines():
    """Two namespaces, lo up in each, a veth pair between them with one address each."""
    a, b = NAMESPACES
    for ns in NAMESPACES:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", "cpcva%d" % suffix, "netns", a, "type", "veth", "peer", "name", "cpcvb%d" % suffix,
       "netns", b)
    for ns, dev, address in ((a, "cpcva%d" % suffix, ADDRESSES[0]), (b, "cpcvb%d" % suffix, ADDRESSES[1])):
        sh("ip", "-n", ns, "addr", "add", address + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def remove_machines():
    for ns in NAMESPACES:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "4"])
    rng = np.random.default_rng(0)
    imgs, noise = os.path.join(work, "imgs.npy"), os.path.join(work, "noise.npy")
    np.save(imgs, rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(noise, rng.random((8, 16)).astype(np.float32))
    data = ["--input", "imgs=" + imgs, "--input", "noise=" + noise, "--steps", "6"]
    plan, _ = compile_plan(work, model, "dp2", ["--dp", "2", "--zero", "1"], RECIPE)
    one_host = os.path.join(work, "one-host.jsonl")
    run([tool("cpc-run"), plan, "--metrics", one_host, *data])

    if os.geteuid() != 0:
        print("SKIP: making network namespaces needs root; this test runs as uid %d" % os.geteuid())
        sys.exit(0)
    try:
        make_machines()
        made = None
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        made = "cannot make network namespaces as root: %s" % getattr(e, "stderr", e)

    def two_machines():
        assert made is None, made
        metrics = os.path.join(work, "two-hosts.jsonl")
        agent = os.path.join(SOURCE, "tests", "e2e", "netns_rsh_agent.sh")
        subnet = ADDRESSES[0].rsplit(".", 1)[0] + ".0/24"
        log = os.path.join(work, "agent.log")
        env = dict(os.environ, CPC_NETNS_HOSTS=" ".join("%s=%s" % p for p in zip(ADDRESSES, NAMESPACES)),
                   CPC_NETNS_LOG=log)
        args = ["ip", "netns", "exec", NAMESPACES[0], "mpirun", "-np", "2", "-H", "%s:1,%s:1" % tuple(ADDRESSES),
                "--mca", "plm_rsh_agent", agent, "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", subnet,
                "--mca", "oob_tcp_if_include", subnet, "-x", "OPENBLAS_NUM_THREADS", "-x", "OMPI_ALLOW_RUN_AS_ROOT",
                "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                tool("cpc-run"), plan, "--metrics", metrics, "--checkpoint-dir", os.path.join(work, "ckpt"), *data]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, "exit %d:\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        # mpirun reached the second machine through the agent (the first is its own).
        assert open(log).read().split() == [ADDRESSES[1], NAMESPACES[1]], open(log).read()
        ours, theirs = load_jsonl(metrics), load_jsonl(one_host)
        assert len(ours) == len(theirs) == 6, (len(ours), len(theirs))
        for a, b in zip(ours, theirs):
            for key in ("loss", "grad_norm"):
                assert abs(a[key] - b[key]) <= TOL * abs(b[key]), "step %d %s: %.9g on two machines, %.9g on one" % (
                    a["step"], key, a[key], b[key])
        assert ours[-1]["comm"]["all_reduce"]["bytes"] > 0, ours[-1]["comm"]
        print("   two machines (%s, %s): losses %s" % (ADDRESSES[0], ADDRESSES[1],
                                                     " ".join("%.5f" % m["loss"] for m in ours)))

    def resumed_on_one_host():
        assert made is None, made
        metrics = os.path.join(work, "resumed.jsonl")
        run([tool("cpc-run"), plan, "--metrics", metrics, *data[:-2], "--steps", "7", "--resume",
             os.path.join(work, "ckpt")])
        assert [m["step"] for m in load_jsonl(metrics)] == [7]

    try:
        results.check("dp2 ZeRO-1 across two machines equals one host", two_machines)
        results.check("its checkpoint resumes on one host", resumed_on_one_host)
    finally:
        remove_machines()

results.finish()
