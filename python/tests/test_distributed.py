"""mxtrain.distributed (re-exported by mxtrain.torch): MXFP8 dispatch and combine over
torch.distributed, and ExpertParallelGroupedLinear, on 2 processes with gloo on 127.0.0.1.

The ranks are dist_worker.py, started once for the module (one interpreter start and one
process group for every case); each test reads its case's outcome from both ranks. A hang
fails, it does not block: the ranks run under a deadline and are killed past it, and their
collectives time out sooner. Without torch.distributed or gloo these tests fail: nothing
here is skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import dist_worker  # noqa: E402

WORLD = 2
DEADLINE_S = 150  # every case of both ranks; the collectives' own timeout is 60 s
HERE = pathlib.Path(__file__).resolve().parent


class Ranks:
    def __init__(self, results: list[dict], logs: list[str], timed_out: bool) -> None:
        self.results = results
        self.logs = logs
        self.timed_out = timed_out

    def outcome(self, case: str) -> list[dict]:
        """Each rank's result of case; fails with the reason where a rank has none."""
        out = []
        for rank, (res, log) in enumerate(zip(self.results, self.logs)):
            if case not in res:
                done = [k for k in res if not k.startswith("_")]
                failed = [k for k in done if not res[k]["ok"]]
                why = (f"rank {rank} failed case {failed[0]} and stopped" if failed else
                       f"the ranks ran past the {DEADLINE_S} s deadline and were killed "
                       f"(a hang?); rank {rank} finished {done or 'no case'}"
                       if self.timed_out else f"rank {rank} exited early")
                pytest.fail(f"case {case} did not run: {why}\n--- rank {rank} log ---\n"
                            f"{log[-4000:]}")
            out.append(res[case])
        return out


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Ranks:
    import torch.distributed as dist

    assert dist.is_available(), "torch.distributed is not available in this torch"
    assert dist.is_gloo_available(), "torch.distributed has no gloo backend in this torch"
    tmp = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if pathlib.Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's connections on 127.0.0.1
    procs, logs = [], []
    for rank in range(WORLD):
        log = open(tmp / f"rank{rank}.log", "w")  # files, not pipes: a full pipe would block
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "dist_worker.py"), "--rank", str(rank),
             "--world", str(WORLD), "--init", str(tmp / "store"),
             "--out", str(tmp / f"rank{rank}.json")],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp)))
    deadline = time.monotonic() + DEADLINE_S
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for log in logs:
        log.close()
    results = []
    for rank in range(WORLD):
        path = tmp / f"rank{rank}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
    texts = [(tmp / f"rank{rank}.log").read_text() for rank in range(WORLD)]
    return Ranks(results, texts, timed_out)


@pytest.mark.parametrize("case", [name for name, _ in dist_worker.CASES])
def test_case(ranks: Ranks, case: str) -> None:
    # Every rank's error: the first to fail has the cause, its peers a broken connection.
    errors = [f"rank {rank}, case {case}:\n{result['error']}"
              for rank, result in enumerate(ranks.outcome(case)) if not result["ok"]]
    assert not errors, "\n".join(errors)


def test_sqnr_figures(ranks: Ranks) -> None:
    """The ep_wire_sqnr case's figures, printed (pytest -s) for the record."""
    for rank, result in enumerate(ranks.outcome("ep_wire_sqnr")):
        assert result["ok"], result.get("error")
        for what, figures in result["info"].items():
            line = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
            print(f"rank {rank} {what}: {line} (dB)")
    for rank, result in enumerate(ranks.results):
        assert result["_meta"]["gloo"], f"rank {rank}: no gloo"
