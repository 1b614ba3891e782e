"""Every integration the README claims, run for real on this machine (not only its 'not installed'
branch): TensorBoard event files and Weights & Biases offline runs read back and compared with
metrics.jsonl, Hugging Face `datasets` from local files, the Slurm executor against stand-in Slurm
commands, and the report rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from reslab.cli import main
from reslab.errors import ReslabError
from reslab.train.loop import train
from tests.train_helpers import tiny_config, tiny_run, write_corpus
from tests.kill_helpers import SAFETY_NET_S


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


def _quiet(*_):
    pass


def _metric_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _scalar_series(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every numeric field of metrics.jsonl, in file order."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        for k, v in r.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(k, []).append((r["step"], float(v)))
    return out


def _interrupt_at(monkeypatch, stop_step: int):
    """Make the training loop raise KeyboardInterrupt (as at Ctrl-C) just before update `stop_step`."""
    import reslab.train.loop as loop

    real = loop.learning_rate  # called once per update, with the update's step first

    def learning_rate(step, *args, **kwargs):
        if step == stop_step:
            raise KeyboardInterrupt
        return real(step, *args, **kwargs)

    monkeypatch.setattr(loop, "learning_rate", learning_rate)
    return lambda: monkeypatch.setattr(loop, "learning_rate", real)


# ---- TensorBoard ------------------------------------------------------------------------------------
def _tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _assert_same_series(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        assert [s for s, _ in got[tag]] == [s for s, _ in want[tag]], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in want[tag]], rel=1e-6), tag  # float32


def test_tensorboard_events_equal_metrics_jsonl(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "c", **{"train.tensorboard": True, "train.steps": 12,
                                                  "train.eval_interval": 6})
    result = train(cfg, tmp_path / "r", log=_quiet)
    rows = _metric_rows(result.path)
    want = _scalar_series(rows)
    assert {"train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s"} <= set(want)
    assert [s for s, _ in want["val_loss"]] == [0, 6, 12] and len(want["train_loss"]) == 12
    _assert_same_series(_tensorboard_scalars(result.path / "tensorboard"), want)


def test_tensorboard_after_an_interrupted_run_resumes_equals_metrics_jsonl(tmp_path, corpus, monkeypatch):
    """Rows logged after the last checkpoint by the interrupted process are trained again on resume:
    TensorBoard must show them once (purge_step), exactly as metrics.jsonl does."""
    cfg = tiny_config(corpus, tmp_path / "c", **{"train.tensorboard": True, "train.steps": 12,
                                                  "train.eval_interval": 4})
    restore = _interrupt_at(monkeypatch, 6)  # checkpoint at 4; updates 5 and 6 logged, then stopped
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "r", log=_quiet)
    restore()
    assert max(s for s, _ in _tensorboard_scalars(tmp_path / "r" / "tensorboard")["train_loss"]) == 6
    train(cfg, tmp_path / "r", log=_quiet)
    assert len(list((tmp_path / "r" / "tensorboard").glob("events.*"))) == 2
    want = _scalar_series(_metric_rows(tmp_path / "r"))
    assert [s for s, _ in want["train_loss"]] == list(range(1, 13))
    _assert_same_series(_tensorboard_scalars(tmp_path / "r" / "tensorboard"), want)


@pytest.mark.parametrize("module, key, hint", [("torch.utils.tensorboard", "train.tensorboard", "pip install tensorboard"),
                                               ("wandb", "train.wandb", "pip install wandb")])
def test_a_missing_logging_package_is_one_clear_line(tmp_path, corpus, monkeypatch, capsys, module, key, hint):
    import tomli_w

    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    cfg = tmp_path / "a.toml"
    cfg.write_text(tomli_w.dumps(tiny_run(corpus, tmp_path / "c", **{key: True, "train.steps": 2})))
    assert main(["train", str(cfg), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("reslab: error")]
    assert key in line and hint in line


# ---- Weights & Biases, offline ----------------------------------------------------------------------
@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode, every file it writes under tmp_path, no network, no login."""
    pytest.importorskip("wandb", reason="wandb is in the [test] extra")
    home = tmp_path / "home"
    for sub in ("wandb", "cache", "config", "data", "artifacts"):
        (home / sub).mkdir(parents=True)
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
           "WANDB_DISABLE_CODE": "true", "WANDB_DIR": str(home / "wandb"), "WANDB_CACHE_DIR": str(home / "cache"),
           "WANDB_CONFIG_DIR": str(home / "config"), "WANDB_DATA_DIR": str(home / "data"),
           "WANDB_ARTIFACT_DIR": str(home / "artifacts"), "WANDB_CONSOLE": "off", "WANDB_X_DISABLE_STATS": "true",
           "WANDB_BASE_URL": "http://127.0.0.1:9"}  # were it to try a server, it would fail at once
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return home


class _RecordedRun:
    """A real W&B run, with what reslab hands to its public API (log, finish) written down.

    W&B's files on disk are its own internal format, which changes between releases (0.31 changed
    it under a hand-written reader); what reslab promises is the calls it makes, and W&B itself, run
    for real in offline mode, checks and accepts them."""

    def __init__(self, run, init_kwargs: dict):
        self._run, self.init = run, init_kwargs
        self.history: dict[int, dict] = {}
        self.exit_code = None
        self.id, self.project, self.name = run.id, run.project, run.name
        self.config = dict(run.config)
        self.dir = Path(run.dir).parent  # wandb/offline-run-<time>-<id>

    def log(self, data, step=None, **kwargs):
        self._run.log(data, step=step, **kwargs)
        self.history.setdefault(step, {}).update(data)

    def finish(self, exit_code=None, **kwargs):
        self._run.finish(exit_code=exit_code, **kwargs)
        self.exit_code = exit_code

    def __getattr__(self, name):  # starting_step and anything else: the real run's
        return getattr(self._run, name)


@pytest.fixture
def wandb_runs(wandb_offline, monkeypatch):
    """Every W&B run opened in the test, oldest first, each recorded (_RecordedRun)."""
    import wandb

    runs: list[_RecordedRun] = []
    real_init = wandb.init

    def init(**kwargs):
        runs.append(_RecordedRun(real_init(**kwargs), kwargs))
        return runs[-1]

    monkeypatch.setattr(wandb, "init", init)
    return runs


def _assert_offline_run_written(run: _RecordedRun, run_dir: Path) -> None:
    """W&B wrote the run where `wandb sync` looks for it: run_dir/wandb/offline-run-*-<id>/run-<id>.wandb."""
    assert run.dir.parent == run_dir / "wandb" and run.dir.name.startswith("offline-run-")
    assert f"-{run.id}" in run.dir.name  # offline-run-<time>-<id>, and "-1" after it for a second one
    log = run.dir / f"run-{run.id}.wandb"
    assert log.is_file() and log.stat().st_size > 0


def _history_from_metrics(rows: list[dict]) -> dict[int, dict]:
    """What W&B should hold: the numeric fields of metrics.jsonl, rows of one step merged."""
    out: dict[int, dict] = {}
    for r in rows:
        out.setdefault(r["step"], {}).update({k: v for k, v in r.items() if k != "step"
                                              and isinstance(v, (int, float)) and not isinstance(v, bool)})
    return out


def test_wandb_offline_run_logs_what_metrics_jsonl_holds(tmp_path, corpus, wandb_offline, wandb_runs):
    cfg = tiny_config(corpus, tmp_path / "c", **{"train.wandb": True, "train.wandb_project": "lab",
                                                  "train.steps": 12, "train.eval_interval": 6})
    result = train(cfg, tmp_path / "r", log=_quiet)
    (run,) = wandb_runs
    assert (run.id, run.project, run.name, run.exit_code) == ("r", "lab", "t", 0)
    assert run.init["resume"] == "allow"  # a relaunch continues this W&B run
    assert run.config["train"]["steps"] == 12 and run.config["model"]["n_layer"] == 2  # the whole config
    want = _history_from_metrics(_metric_rows(result.path))
    assert {"train_loss", "val_loss", "lr", "grad_norm"} <= {k for row in want.values() for k in row}
    assert run.history == want  # every key, every step, every value
    assert run.history[12]["val_loss"] == result.final_val_loss
    _assert_offline_run_written(run, result.path)
    assert not list((wandb_offline / "config").rglob("*.json"))  # no login settings were written


def test_wandb_offline_resumed_run_continues_the_same_run(tmp_path, corpus, wandb_runs, monkeypatch):
    cfg = tiny_config(corpus, tmp_path / "c", **{"train.wandb": True, "train.steps": 12, "train.eval_interval": 4})
    restore = _interrupt_at(monkeypatch, 8)  # last checkpoint at step 8: nothing logged after it
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "r", log=_quiet)
    restore()
    train(cfg, tmp_path / "r", log=_quiet)
    first, second = wandb_runs
    assert first.id == second.id == "r"  # `wandb sync` continues one W&B run
    assert first.exit_code != 0 and second.exit_code == 0  # the interrupted part is marked failed
    assert max(first.history) == 8 and min(second.history) == 9  # it continues, nothing twice
    assert {**first.history, **second.history} == _history_from_metrics(_metric_rows(tmp_path / "r"))
    for run in (first, second):
        _assert_offline_run_written(run, tmp_path / "r")
    assert first.dir != second.dir  # the relaunch did not write over the interrupted part


def test_wandb_resumed_online_run_skips_steps_the_server_already_has(tmp_path, monkeypatch):
    """Online, a resumed W&B run starts at the step after its last logged one (run.starting_step);
    W&B refuses smaller steps, so the sink does not send the ones trained again."""
    import types

    import wandb

    from reslab.train.sinks import Sinks

    sent, finished = [], []

    class FakeRun:
        starting_step = 7

        def log(self, row, step):
            sent.append(step)

        def finish(self, exit_code=0):
            finished.append(exit_code)

    monkeypatch.setattr(wandb, "init", lambda **kw: FakeRun())
    t_cfg = types.SimpleNamespace(tensorboard=False, wandb=True, wandb_project="p")
    sinks = Sinks(t_cfg, tmp_path / "run", "n", {})
    for step in range(5, 10):
        sinks.log({"step": step, "train_loss": 1.0})
    sinks.close()
    assert sent == [7, 8, 9] and finished == [0]

    def refuse(**kw):
        raise wandb.errors.UsageError("Run ID cannot contain the characters: /\\#?%:\nmore detail")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(ReslabError) as e:
        Sinks(t_cfg, tmp_path / "a:b", "n", {})
    assert str(e.value).count("\n") == 0 and "train.wandb" in str(e.value) and "'a:b'" in str(e.value)


# ---- Slurm, through stand-in commands ---------------------------------------------------------------
# A stand-in for the few Slurm commands submitit uses (sbatch, srun, sacct, scancel; squeue for
# completeness), written into tmp_path and put first on PATH. sbatch keeps a copy of each batch
# script, prints "Submitted batch job N" at once and runs the array's tasks in a detached process
# (at most %P at a time), each with the SLURM_* variables a task sees; srun runs its command with
# the --output/--error files of the script; sacct answers in the --parsable2 format. Every call is
# recorded in calls.jsonl. FAKE_SLURM_REJECT=<message> makes sbatch refuse the job, as Slurm does.
FAKE_SLURM = r'''
import json, os, re, signal, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STATE = Path(os.environ["FAKE_SLURM_STATE"])


def record(cmd, argv):
    with open(STATE / "calls.jsonl", "a") as f:
        f.write(json.dumps([cmd, *argv]) + "\n")


def write(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def expand(pattern, env):
    values = {"A": env.get("SLURM_ARRAY_JOB_ID", ""), "a": env.get("SLURM_ARRAY_TASK_ID", ""),
              "j": env.get("SLURM_JOB_ID", ""), "t": env.get("SLURM_PROCID", "0"), "%": "%"}
    return re.sub(r"%([Aajt%])", lambda m: values[m.group(1)], pattern)


def sbatch(argv):
    record("sbatch", argv)
    if argv[:1] == ["--fake-run"]:
        return run_array(argv[1:])
    script = Path(argv[-1])
    text = script.read_text()
    opts = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", text, re.M))
    counter = STATE / "next_job_id"
    jid = int(counter.read_text()) if counter.exists() else 4242
    write(counter, str(jid + 1))
    copy = STATE / f"{jid}.sbatch"
    copy.write_text(text)
    if os.environ.get("FAKE_SLURM_REJECT"):
        print(f"sbatch: error: {os.environ['FAKE_SLURM_REJECT']}", file=sys.stderr)
        return 1
    m = re.fullmatch(r"(\d+)-(\d+)(?:%(\d+))?", opts.get("array", ""))
    keys = [f"{jid}_{i}" for i in range(int(m[1]), int(m[2]) + 1)] if m else [str(jid)]
    for key in keys:
        write(STATE / f"{key}.state", "PENDING")
    parallel = str(int(m[3]) if m and m[3] else len(keys))
    subprocess.Popen([sys.executable, __file__, "sbatch", "--fake-run", str(copy), parallel, *keys],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=open(STATE / "runner.err", "ab"))
    print(f"Submitted batch job {jid}")
    return 0


def run_array(argv):
    script, parallel, keys = Path(argv[0]), int(argv[1]), argv[2:]
    opts = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script.read_text(), re.M))

    def task(key):
        jid, _, index = key.partition("_")
        env = dict(os.environ, SLURM_JOB_ID=str(int(jid) + 1 + int(index or 0)) if index else jid,
                   SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0", SLURM_PROCID="0",
                   SLURM_LOCALID="0", SLURM_JOB_NODELIST="localhost",
                   SLURM_CPUS_PER_TASK=opts.get("cpus-per-task", "1"))
        if index:
            env.update(SLURM_ARRAY_JOB_ID=jid, SLURM_ARRAY_TASK_ID=index)
        out = expand(opts["output"], env)
        err = expand(opts.get("error", opts["output"]), env)
        if (STATE / f"{key}.state").read_text() == "CANCELLED":
            return
        write(STATE / f"{key}.state", "RUNNING")
        with open(out, "ab") as o, open(err, "ab") as e:
            proc = subprocess.Popen(["bash", str(script)], stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
            write(STATE / f"{key}.pid", str(proc.pid))
            code = proc.wait()
        if (STATE / f"{key}.state").read_text() != "CANCELLED":
            write(STATE / f"{key}.state", "COMPLETED" if code == 0 else "FAILED")

    with ThreadPoolExecutor(max(1, parallel)) as pool:
        list(pool.map(task, keys))
    return 0


def srun(argv):
    record("srun", argv)
    out = err = None
    while argv and argv[0].startswith("-"):
        flag = argv.pop(0)
        if flag in ("--output", "-o"):
            out = argv.pop(0)
        elif flag in ("--error", "-e"):
            err = argv.pop(0)
    env = os.environ
    with open(expand(out, env) if out else os.devnull, "ab") as o, \
            open(expand(err, env) if err else os.devnull, "ab") as e:
        return subprocess.call(argv, stdout=o if out else None, stderr=e if err else None)


def sacct(argv):
    record("sacct", argv)
    jobs = [argv[i + 1] for i, a in enumerate(argv) if a == "-j"]
    print("JobID|State|NodeList")
    for jid in jobs:
        for path in sorted(STATE.glob(f"{jid}*.state")):
            key = path.name[:-len(".state")]
            if key == jid or key.startswith(jid + "_"):
                state = path.read_text()
                print(f"{key}|{state}|localhost")
                print(f"{key}.batch|{state}|localhost")  # job steps: submitit must skip these


def squeue(argv):
    record("squeue", argv)
    print("JOBID|STATE")
    for path in sorted(STATE.glob("*.state")):
        if path.read_text() in ("PENDING", "RUNNING"):
            print(f"{path.name[:-len('.state')]}|{path.read_text()}")


def scancel(argv):
    record("scancel", argv)
    jid = next(a for a in argv if not a.startswith("-"))
    for path in sorted(STATE.glob(f"{jid}*.state")):
        key = path.name[:-len(".state")]
        if path.read_text() in ("PENDING", "RUNNING"):
            write(path, "CANCELLED")
            pid = STATE / f"{key}.pid"
            if pid.exists():
                try:
                    os.killpg(int(pid.read_text()), signal.SIGTERM)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":
    sys.exit(globals()[sys.argv[1]](sys.argv[2:]) or 0)
'''

SLURM_COMMANDS = ("sbatch", "srun", "sacct", "squeue", "scancel")


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """The stand-in Slurm commands first on PATH; returns their state folder."""
    pytest.importorskip("submitit", reason="submitit is in the [test] extra")
    bin_dir, state = tmp_path / "slurm-bin", tmp_path / "slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    impl = bin_dir / "fake_slurm.py"
    impl.write_text(FAKE_SLURM)
    for cmd in SLURM_COMMANDS:
        launcher = bin_dir / cmd
        launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {impl} {cmd} \"$@\"\n")
        launcher.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_STATE", str(state))
    yield state
    for pid_file in state.glob("*.pid"):  # a task a failed test left running (its own session): stop it
        if (state / pid_file.name.replace(".pid", ".state")).read_text() == "RUNNING":
            try:
                os.killpg(int(pid_file.read_text()), 9)
            except (ProcessLookupError, PermissionError, ValueError):
                pass


def _poll(condition, timeout: float) -> bool:
    """Whether `condition()` becomes true before `timeout` seconds (a safety net, not a wait)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _calls(state: Path) -> list[list[str]]:
    path = state / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _sbatch_options(script: str) -> dict[str, str]:
    return {k: v for k, v in re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.M)}


def _sweep_cli(spec: Path, store: Path, *extra: str, timeout: float = SAFETY_NET_S) -> subprocess.CompletedProcess:
    """`reslab sweep run` in a child process: a hung executor fails the test instead of hanging it."""
    cmd = [sys.executable, "-m", "reslab.cli", "sweep", "run", str(spec), "--store", str(store), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parent.parent)


def _run_folders(store_dir: Path) -> dict[str, Path]:
    return {p.name.rsplit("-", 1)[1]: p for p in (store_dir / "runs").iterdir()}


def test_slurm_executor_runs_a_sweep_end_to_end_with_the_local_pools_curves(tmp_path, fake_slurm):
    from reslab.sweep.store import Store
    from tests.sweep_helpers import assert_same_curves, curves, spec_dict, write_spec

    data = spec_dict(tmp_path, seeds=[1], steps=12, eval_interval=6)
    data["slurm"] = {"partition": "cpu-short", "time_min": 17, "gpus_per_run": 0, "cpus_per_task": 1}
    spec = write_spec(tmp_path, data)
    local = _sweep_cli(spec, tmp_path / "local", "--jobs", "2")
    assert local.returncode == 0, local.stderr[-2000:]
    slurm = _sweep_cli(spec, tmp_path / "slurm", "--jobs", "2", "--executor", "slurm")
    assert slurm.returncode == 0, slurm.stderr[-2000:] + (fake_slurm / "runner.err").read_text()

    store = Store(tmp_path / "slurm")
    rows = store.runs(spec="demo")
    assert len(rows) == 2 and all(r["status"] == "completed" and r["best_val_loss"] is not None for r in rows)
    ours, ref = _run_folders(tmp_path / "slurm"), _run_folders(tmp_path / "local")
    assert set(ours) == set(ref)
    for run_id in ours:  # the same runs, trained the same way
        assert_same_curves(curves(ours[run_id]), curves(ref[run_id]), rel=1e-6)

    calls = _calls(fake_slurm)
    submits = [c for c in calls if c[0] == "sbatch" and c[1] != "--fake-run"]
    assert len(submits) == 1  # one job array for the whole sweep
    assert sorted(c[0] for c in calls if c[0] == "srun") == ["srun", "srun"]  # one srun per task
    (script,) = fake_slurm.glob("*.sbatch")
    opts = _sbatch_options(script.read_text())
    assert opts["partition"] == "cpu-short" and opts["time"] == "17" and opts["cpus-per-task"] == "1"
    assert opts["array"] == "0-1%2" and opts["ntasks-per-node"] == "1" and opts["job-name"] == "reslab-demo"
    assert not {"gpus-per-node", "gres", "gpus", "gpus-per-task"} & set(opts)  # a CPU run asks for no GPU
    command = [line for line in script.read_text().splitlines() if line.startswith("srun ")]
    assert len(command) == 1 and command[0].endswith(f"-m submitit.core._submit {tmp_path / 'slurm' / 'submitit'}")
    # submitit sees a task's result file a moment before its process exits: wait for the exits
    states = lambda: sorted(p.read_text() for p in fake_slurm.glob("*.state"))  # noqa: E731
    assert _poll(lambda: states() == ["COMPLETED", "COMPLETED"], timeout=SAFETY_NET_S), states()


def test_slurm_batch_script_for_multi_gpu_runs_and_a_refused_submission(tmp_path, fake_slurm, monkeypatch):
    """A refused sbatch is one clear line (its own message) and nothing is marked running; the
    script it was given asks for the spec's partition, account, time, memory, GPUs and CPUs."""
    from reslab.sweep.store import Store
    from tests.sweep_helpers import spec_dict, write_spec

    data = spec_dict(tmp_path, seeds=[1, 2, 3], steps=12)
    data["slurm"] = {"partition": "gpu", "account": "lab42", "time_min": 90, "gpus_per_run": 4,
                     "cpus_per_task": 16, "mem_gb": 64, "max_parallel": 3}
    spec = write_spec(tmp_path, data)
    monkeypatch.setenv("FAKE_SLURM_REJECT", "Batch job submission failed: Invalid account or account/partition combination specified")
    out = _sweep_cli(spec, tmp_path / "store", "--executor", "slurm")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("reslab: error")]
    assert "--executor slurm" in line and "sbatch: error: Batch job submission failed: Invalid account" in line
    rows = Store(tmp_path / "store").runs(spec="demo")
    assert [r["status"] for r in rows] == ["pending"] * 6  # nothing was marked running

    (script,) = fake_slurm.glob("*.sbatch")
    opts = _sbatch_options(script.read_text())
    assert (opts["partition"], opts["account"], opts["time"], opts["mem"]) == ("gpu", "lab42", "90", "64GB")
    assert (opts["gpus-per-node"], opts["cpus-per-task"], opts["ntasks-per-node"]) == ("4", "16", "1")
    assert opts["array"] == "0-5%3"  # 6 runs, at most max_parallel at once


def test_run_in_task_launches_torchrun_for_several_gpus(tmp_path, monkeypatch):
    """A task with gpus_per_run > 1 trains through torchrun (one process per GPU) and the ranks
    share the task's CPUs; with one GPU or none it trains in the task's own process."""
    from reslab.sweep import executors, worker

    launched, trained = [], []
    monkeypatch.setattr(executors.subprocess, "call", lambda cmd: launched.append((cmd, dict(os.environ))) or 0)
    monkeypatch.setattr(worker, "run", lambda *dirs: trained.append(dirs) or 0)
    for var in ("RESLAB_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.setenv(var, "unset")  # restored after the test
    assert executors.run_in_task(str(tmp_path / "run"), 4, 16) == 0
    ((cmd, env),) = launched
    assert cmd == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4",
                   "-m", "reslab.sweep.worker", str(tmp_path / "run")]
    assert env["RESLAB_THREADS"] == env["OMP_NUM_THREADS"] == "4" and not trained
    for gpus in (0, 1):
        assert executors.run_in_task(str(tmp_path / "run"), gpus, 3) == 0
    assert trained == [(str(tmp_path / "run"),)] * 2 and len(launched) == 1 and os.environ["RESLAB_THREADS"] == "3"


def test_slurm_executor_without_slurm_is_one_clear_line(tmp_path, monkeypatch):
    pytest.importorskip("submitit", reason="submitit is in the [test] extra")
    from tests.sweep_helpers import spec_dict, write_spec

    spec = write_spec(tmp_path, spec_dict(tmp_path, seeds=[1], steps=4))
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no sbatch, srun or sacct anywhere
    out = _sweep_cli(spec, tmp_path / "store", "--executor", "slurm")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("reslab: error")]
    assert "--executor slurm: no Slurm on this machine (sbatch, srun, sacct not on PATH)" in line


# ---- Hugging Face datasets, from local files --------------------------------------------------------
@pytest.fixture
def hf_offline(tmp_path, monkeypatch):
    """`datasets` offline with its cache under tmp_path; returns the list of load_dataset calls."""
    datasets = pytest.importorskip("datasets", reason="datasets is in the [test] extra")
    cache = tmp_path / "hf-cache"
    for k, v in {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(cache),
                 "HF_DATASETS_CACHE": str(cache / "datasets"), "HF_HUB_CACHE": str(cache / "hub"),
                 "HF_ENDPOINT": "http://127.0.0.1:9"}.items():  # were it to try the Hub, it would fail at once
        monkeypatch.setenv(k, v)
    # datasets reads those at import; when an earlier test imported it, set its copies too
    for name, value in (("HF_DATASETS_OFFLINE", True), ("HF_HUB_OFFLINE", True), ("HF_CACHE_HOME", str(cache)),
                        ("HF_DATASETS_CACHE", cache / "datasets"), ("HF_MODULES_CACHE", cache / "modules")):
        monkeypatch.setattr(datasets.config, name, value)
    calls, real = [], datasets.load_dataset

    def load_dataset(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


HF_DOCS = [f"Document {i}: the king{' and queen' * (i % 3)} speak of night, day and \u00e9t\u00e9.\nLine two of {i}."
           + ("\n\nA second paragraph." if i % 7 == 0 else "") for i in range(40)]


def _write_hf_source(root: Path, kind: str) -> Path:
    """HF_DOCS in the layout `kind`; returns what data.hf_dataset names."""
    rows = [{"id": i, "text": d} for i, d in enumerate(HF_DOCS)]
    if kind == "jsonl file":
        path = root / "docs.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path
    if kind == "txt files":
        path = root / "texts"
        path.mkdir()
        for i, d in enumerate(HF_DOCS):
            (path / f"{i:03d}.txt").write_text(d, encoding="utf-8")
        return path
    path = root / kind.split()[0]
    path.mkdir()
    if kind == "json folder":  # JSON Lines in a .json file: datasets' json builder
        (path / "train.json").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif kind == "csv folder":
        import csv

        with open(path / "train.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["id", "text"])
            writer.writeheader()
            writer.writerows(rows)
    elif kind == "parquet folder":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": [r["id"] for r in rows], "text": HF_DOCS}), path / "train.parquet")
    return path


@pytest.mark.parametrize("kind, via_datasets", [("json folder", True), ("csv folder", True), ("parquet folder", True),
                                                ("jsonl file", False), ("txt files", False)])
def test_hf_corpus_from_local_files_gives_the_text_corpus_char_ids(tmp_path, hf_offline, kind, via_datasets):
    """corpus='hf' over local files, offline: every document, in order, followed by the separator,
    in the split the preparation chose for it, with exactly the ids the same text gets through
    corpus='text'. Folders of json/csv/parquet are read by `datasets` itself."""
    from reslab.data.config import DataConfig
    from reslab.data.prepare import prepare_dataset

    source = _write_hf_source(tmp_path, kind)
    hf = prepare_dataset(DataConfig(corpus="hf", hf_dataset=str(source), tokenizer="char", download=False,
                                    cache_dir=str(tmp_path / "cache-hf")), progress=False, log=_quiet)
    assert set(hf_offline) == ({str(source)} if via_datasets else set())  # datasets read it (once a pass)
    sep = hf.tokenizer.separator
    joined = tmp_path / "joined.txt"
    joined.write_text("".join(d + sep for d in HF_DOCS), encoding="utf-8")
    text = prepare_dataset(DataConfig(corpus="text", path=str(joined), tokenizer="char",
                                      cache_dir=str(tmp_path / "cache-text")), progress=False, log=_quiet)
    assert hf.vocab_size == text.vocab_size and hf.tokenizer.chars == text.tokenizer.chars

    # which split holds each document: walk both decoded splits in document order
    got = {"train": hf.tokenizer.decode(hf.train), "val": hf.tokenizer.decode(hf.val)}
    at, split_docs = {"train": 0, "val": 0}, {"train": [], "val": []}
    for d in HF_DOCS:
        split = next((s for s in ("train", "val") if got[s].startswith(d + sep, at[s])), None)
        assert split is not None, f"document {d[:20]!r} is in neither split, in order"
        at[split] += len(d + sep)
        split_docs[split].append(d)
    assert at == {s: len(got[s]) for s in at} and split_docs["train"] and split_docs["val"]
    for split, ids in (("train", hf.train), ("val", hf.val)):
        want = text.tokenizer.encode("".join(d + sep for d in split_docs[split]))
        assert np.array_equal(np.asarray(ids), np.asarray(want, dtype=np.asarray(ids).dtype)), split


def test_hf_corpus_problems_reading_local_files_are_one_clear_line(tmp_path, hf_offline):
    from reslab.data.config import DataConfig
    from reslab.data.prepare import prepare_dataset

    folder = tmp_path / "csv"
    folder.mkdir()
    (folder / "train.csv").write_text("id,body\n1,hello\n2,world\n", encoding="utf-8")
    bad = tmp_path / "parquet"
    bad.mkdir()
    (bad / "train.parquet").write_bytes(b"PAR1 this is not a parquet file")
    cases = [(folder, "data.hf_text_field: 'text' is not a column of"),
             (bad, "data.hf_dataset: cannot read")]
    for source, message in cases:
        cfg = DataConfig(corpus="hf", hf_dataset=str(source), tokenizer="char", download=False,
                         cache_dir=str(tmp_path / "cache"))
        with pytest.raises(ReslabError) as e:
            prepare_dataset(cfg, progress=False, log=_quiet)
        assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert set(hf_offline) == {str(folder), str(bad)}


# ---- the report in headless Chromium ----------------------------------------------------------------
def chromium_or_skip() -> str:
    """The headless Chromium to use. Missing: a skip on a developer's machine, a failure in CI (CI
    installs the Debian package `chromium`, see .ci/run)."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                if shutil.which(n)), None)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no headless Chromium is on PATH (.ci/run installs the Debian package chromium)")
        pytest.skip("no headless Chromium on PATH (chromium / google-chrome)")
    return exe


def chromium(exe: str, *args: str, timeout: float = SAFETY_NET_S) -> subprocess.CompletedProcess:
    """One headless Chromium run with a fresh profile and nothing that reaches the network."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


# Injected into a copy of the page: once everything has loaded, the page-coordinate box of every
# figure and table, written into a hidden element that --dump-dom prints.
BOX_SCRIPT = """<script>window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; };
  const out = {width: innerWidth, height: document.documentElement.scrollHeight,
    images: [...document.images].map(i => Object.assign(box(i), {natural: [i.naturalWidth, i.naturalHeight],
                                                                  complete: i.complete, alt: i.alt})),
    tables: [...document.querySelectorAll('table')].map(box)};
  const pre = document.createElement('pre');
  pre.id = 'reslab-boxes'; pre.style.display = 'none'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def _report_store(tmp: Path):
    """A store of hand-written run folders (no training) whose report has every table and figure:
    results, per-seed values, missing runs, diverged and failed runs; validation loss, training
    loss, layer-0 gradient norm, hidden-state growth, ProRes alpha."""
    from reslab.fileio import write_json
    from reslab.sweep.runner import record_spec
    from reslab.spec.expand import expand
    from reslab.spec.load import parse_spec
    from reslab.sweep.store import Store
    from tests.sweep_helpers import spec_dict

    data = spec_dict(tmp, seeds=[1, 2, 3], name="vis")
    data["report"] = {"no_skip": "none"}
    spec = parse_spec(data)
    store = Store(tmp / "store")
    runs = expand(spec)
    record_spec(store, spec, runs, "test")
    for run in runs:
        folder = store.folder_for(run.id, run.label)
        store.write_membership(folder, run.id, run.config.to_dict(), run.membership(), wall_s=1.0)
        off = (0.0 if run.variant == "full" else 1.5) + 0.01 * run.seed
        rows = [{"step": s, "train_loss": 4.0 - s / 15 + off, "lr": 1e-3, "grad_norm": 1.0,
                 "prores_alpha": [min(1.0, s / 10), min(1.0, s / 20)]} for s in range(1, 31)]
        rows += [{"step": s, "val_loss": 4.1 - s / 15 + off} for s in (0, 10, 20, 30)]
        rows.sort(key=lambda r: r["step"])
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        diag = [{"step": s, "loss": 4.1 - s / 15 + off, "grad_norm.block0": 0.5 + 0.01 * s + off,
                 "hidden_norm.embed": 1.0, "hidden_norm.block0": 1.5 + off, "hidden_norm.block1": 2.0 + 2 * off}
                for s in (0, 10, 20, 30)]
        (folder / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in diag))
        status = {("none", 3): "diverged", ("full", 3): "failed"}.get((run.variant, run.seed), "completed")
        best = 4.1 - 30 / 15 + off if status == "completed" else None
        write_json(folder / "status.json", {"status": status, "step": 30, "best_val_loss": best, "final_val_loss": best,
                                            "params": {"total": 1000},
                                            "error": "RuntimeError: boom" if status == "failed" else None})
    store.reindex()
    return store


def _invisible(shot: np.ndarray, boxes: dict, figures: dict[str, np.ndarray]) -> list[str]:
    """What is not visible in the screenshot: a figure whose pixels are not its PNG's, a table
    without dark (text) pixels and border lines."""
    problems = []
    for img in boxes["images"]:
        x, y, w, h = (int(round(img[k])) for k in ("x", "y", "w", "h"))
        name = img["alt"]
        if not img["complete"] or img["natural"][0] == 0 or w < 50 or h < 50:
            problems.append(f"figure {name!r}: not drawn ({img})")
            continue
        want = figures[name]
        if want.shape[:2] != (h, w):  # scaled by the page: compare with the PNG scaled the same way
            from PIL import Image

            want = np.asarray(Image.fromarray(want.astype(np.uint8)).resize((w, h), Image.LANCZOS), dtype=float)
        # the page may place a figure at a fractional pixel: the best of the neighbouring offsets
        diff = min(np.abs(shot[y + dy:y + dy + h, x + dx:x + dx + w] - want).mean()
                   for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                   if shot[y + dy:y + dy + h, x + dx:x + dx + w].shape == want.shape)
        if diff > 3.0:  # of 255: the figure's own pixels, not a blank or broken image
            problems.append(f"figure {name!r}: the screenshot differs from its PNG by {diff:.1f}/255 per channel")
    for i, t in enumerate(boxes["tables"]):
        x, y, w, h = (int(round(t[k])) for k in ("x", "y", "w", "h"))
        region = shot[y:y + h, x:x + w]
        dark = (region.max(axis=2) < 100).mean() if region.size else 0.0  # text
        lines = (np.abs(region - region[h // 2, 1]).max(axis=2) > 0).any(axis=1).mean() if region.size else 0.0
        if w < 50 or h < 20 or dark < 0.01 or lines < 0.5:
            problems.append(f"table {i}: not visible (box {w}x{h}, {dark:.1%} dark pixels)")
    return problems


def _render(exe: str, html: Path, tmp: Path) -> tuple[np.ndarray, dict]:
    """(screenshot as an RGB array, the boxes of every figure and table) for `html`."""
    from PIL import Image

    probe = html.with_name(html.stem + "-probe.html")
    page = html.read_text(encoding="utf-8").replace("<details>", "<details open>")  # folded tables are checked too
    probe.write_text(page.replace("</body>", BOX_SCRIPT + "</body>"), encoding="utf-8")
    width = 1200
    dump = chromium(exe, f"--window-size={width},900", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="reslab-boxes"[^>]*>(.*?)</pre>', dump.stdout, re.S)
    assert found, f"Chromium printed no page boxes (exit {dump.returncode}): {dump.stderr[-1500:]}"
    boxes = json.loads(unescape(found.group(1)))
    assert boxes["width"] == width
    png = tmp / f"{html.stem}.png"
    # the same width, tall enough for the whole page: the layout (which depends on the width only) is the same
    shot = chromium(exe, f"--window-size={width},{boxes['height']}", f"--screenshot={png}", probe.as_uri())
    assert png.is_file(), f"Chromium wrote no screenshot (exit {shot.returncode}): {shot.stderr[-1500:]}"
    return np.asarray(Image.open(png).convert("RGB"), dtype=float), boxes


def test_report_renders_every_table_and_figure_in_headless_chromium(tmp_path):
    exe = chromium_or_skip()
    pytest.importorskip("PIL", reason="matplotlib depends on pillow")
    from PIL import Image

    from reslab.report.build import build_report
    from reslab.report.render import write_report

    report, out = build_report(_report_store(tmp_path), "vis", out_dir=tmp_path / "report", probe=False)
    html = write_report(report, out)["html"]
    titles = [f["title"] for f in report["figures"]]
    assert len(titles) == 5 and html.read_text().count("<table>") == 5  # with the folded "more columns"

    shot, boxes = _render(exe, html, tmp_path)
    assert [b["alt"] for b in boxes["images"]] == titles and len(boxes["tables"]) == 5
    bottom = max(b["y"] + b["h"] for b in boxes["images"] + boxes["tables"])
    assert shot.shape[1] == boxes["width"] and shot.shape[0] >= bottom

    def on_white(path: Path) -> np.ndarray:
        rgba = Image.open(path).convert("RGBA")
        page = Image.new("RGBA", rgba.size, "white")
        page.alpha_composite(rgba)
        return np.asarray(page.convert("RGB"), dtype=float)

    figures = {f["title"]: on_white(out / f["file"]) for f in report["figures"]}
    assert _invisible(shot, boxes, figures) == []

    # the check can fail: the same page with its figures and tables hidden (their boxes unchanged)
    hidden = html.with_name("hidden.html")
    hidden.write_text(html.read_text().replace("</head>", "<style>img,table{visibility:hidden}</style></head>"))
    shot, boxes = _render(exe, hidden, tmp_path)
    assert len(_invisible(shot, boxes, figures)) == 5 + 5


def test_hf_corpus_local_folder_read_by_datasets_is_prepared_again_when_its_files_change(tmp_path, hf_offline):
    from reslab.data.config import DataConfig
    from reslab.data.prepare import prepare_dataset

    folder = tmp_path / "csv"
    folder.mkdir()
    cfg = DataConfig(corpus="hf", hf_dataset=str(folder), tokenizer="char", download=False,
                     cache_dir=str(tmp_path / "cache"))
    (folder / "train.csv").write_text("text\n" + "".join(f"first corpus {i}\n" for i in range(30)))
    first = prepare_dataset(cfg, progress=False, log=_quiet)
    (folder / "train.csv").write_text("text\n" + "".join(f"OTHER words {i}\n" for i in range(30)))
    again = prepare_dataset(cfg, progress=False, log=_quiet)
    assert "OTHER" in again.tokenizer.decode(np.concatenate([again.train, again.val]))
    assert first.folder != again.folder or first.meta["key"] != again.meta["key"]


def test_stacked_seeds_each_log_their_own_wandb_run_and_tensorboard_events(tmp_path, corpus, wandb_runs):
    """Seeds trained as one stack (one process) each get their own W&B run and event files."""
    from reslab.train.loop import train_stacked

    over = {"train.wandb": True, "train.tensorboard": True, "train.steps": 6, "train.eval_interval": 3,
            "model.dropout": 0.0}
    cfgs = [tiny_config(corpus, tmp_path / "c", **{**over, "train.seed": s}) for s in (1, 2)]
    outs = [tmp_path / "seed1", tmp_path / "seed2"]
    train_stacked(cfgs, outs, log=_quiet)
    assert sorted(r.id for r in wandb_runs) == ["seed1", "seed2"]  # one W&B run per seed
    for out in outs:
        rows = _metric_rows(out)
        (run,) = [r for r in wandb_runs if r.id == out.name]
        assert run.exit_code == 0 and run.history == _history_from_metrics(rows)
        _assert_offline_run_written(run, out)
        _assert_same_series(_tensorboard_scalars(out / "tensorboard"), _scalar_series(rows))
