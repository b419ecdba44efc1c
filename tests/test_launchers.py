"""The pod launchers under what they drive: launch/gpu_slurm.sh under a real one-node SLURM
cluster, launch/tpu_pod.sh against a stand-in for gcloud.

The SLURM test starts munged, slurmctld and slurmd on this machine (as root, each with its own
configuration, ports and folders), submits a tiny pretraining as 2 tasks through sbatch and
compares it with the same command as one process; every daemon is stopped at the end. It skips
where the SLURM and munge programs are missing (Debian: `apt-get install slurmctld slurmd
slurm-client munge`; .ci/run installs them).

The TPU test puts a `gcloud` first on PATH that records every call, keeps the TPU VMs it was
asked to create, and plays each worker of `tpu-vm ssh --worker=all --command=CMD` by running CMD
with bash in a home folder of its own (stand-ins for `python3 -m venv` and pip record the
install), so what a worker would run is run, not only read.
"""
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time

import jax
import numpy as np
import pytest

from bert_jax.modeling import bundle
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env

GPU_SLURM = ROOT / "launch" / "gpu_slurm.sh"
TPU_POD = ROOT / "launch" / "tpu_pod.sh"

# --------------------------------------------------------------------------------------------
# launch/gpu_slurm.sh under SLURM

_SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue",
                   "scancel")
# jax.distributed's SLURM detection puts the coordinator on the first node at a port derived
# from the job id: 61440 + job id % 4096.
_JAX_SLURM_PORT_BASE, _JAX_SLURM_PORTS = 65536 - 4096, 4096


def _free_port(candidates=None) -> int:
  for port in candidates or [0]:
    with socket.socket() as s:
      try:
        s.bind(("", port))
      except OSError:
        continue
      return s.getsockname()[1]
  raise RuntimeError("no free port")


def _stop(proc: subprocess.Popen, seconds: float = 15) -> None:
  if proc.poll() is None:
    proc.terminate()
    try:
      proc.wait(seconds)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


def _processes_with_env(entry: str):
  """Pids of the processes whose environment holds `entry` (e.g. SLURM_CONF=<this cluster's>)."""
  pids = []
  for d in pathlib.Path("/proc").iterdir():
    if d.name.isdigit() and int(d.name) != os.getpid():
      try:
        if entry.encode() in (d / "environ").read_bytes().split(b"\0"):
          pids.append(int(d.name))
      except OSError:
        pass
  return pids


class SlurmCluster:
  """A one-node SLURM cluster on this machine; `env` is the environment its commands need."""

  def __init__(self, folder: pathlib.Path):
    self.folder = folder
    self.host = socket.gethostname().split(".")[0]
    self.conf = folder / "slurm.conf"
    self.procs = []
    self.env = self.job_env(dict(os.environ))

  def job_env(self, env: dict) -> dict:
    """`env` for a job of this cluster: its SLURM_CONF, and no job variables of any other."""
    env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_",
                                                             "SALLOC_"))}
    return dict(env, SLURM_CONF=str(self.conf))

  def logs(self) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                     for p in sorted((self.folder / "log").glob("*")))

  def run(self, *args, **kwargs):
    return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60,
                          **kwargs)

  def start(self) -> None:
    f = self.folder
    for d in ("munge", "state", "spool", "log"):
      (f / d).mkdir()
    # munged refuses a socket folder that others cannot search, and a key others can read.
    (f / "munge").chmod(0o755)
    key = f / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    socket_path = f / "munge" / "munge.socket"
    # --force: the temp directory's parents may be closed to others, which munged would refuse.
    self._spawn("munged", "--foreground", "--force", f"--socket={socket_path}",
                f"--key-file={key}", f"--pid-file={f / 'munge' / 'munged.pid'}",
                f"--seed-file={f / 'munge' / 'munged.seed'}",
                f"--log-file={f / 'log' / 'munged.log'}")
    self._wait(socket_path.exists, "munged's socket")
    # The coordinator port jax.distributed will derive from the first job id is free here, and
    # so are the daemons' ports: a leftover or neighbouring cluster cannot collide with this one.
    coordinator = _free_port(random.sample(range(_JAX_SLURM_PORT_BASE, 65536), 200))
    first_job_id = coordinator - _JAX_SLURM_PORT_BASE + _JAX_SLURM_PORTS
    self.conf.write_text(textwrap.dedent(f"""\
        ClusterName=bertjaxtest
        SlurmctldHost={self.host}(127.0.0.1)
        SlurmctldPort={_free_port()}
        SlurmdPort={_free_port()}
        SlurmUser=root
        SlurmdUser=root
        AuthType=auth/munge
        CredType=cred/munge
        AuthInfo=socket={socket_path}
        StateSaveLocation={f / 'state'}
        SlurmdSpoolDir={f / 'spool'}
        SlurmctldPidFile={f / 'slurmctld.pid'}
        SlurmdPidFile={f / 'slurmd.pid'}
        SlurmctldLogFile={f / 'log' / 'slurmctld.log'}
        SlurmdLogFile={f / 'log' / 'slurmd.log'}
        FirstJobId={first_job_id}
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        SelectType=select/cons_tres
        SelectTypeParameters=CR_CPU
        MpiDefault=none
        JobAcctGatherType=jobacct_gather/none
        AccountingStorageType=accounting_storage/none
        ReturnToService=2
        # 2 CPUs whatever the machine has, so the node is never drained for having fewer.
        SlurmdParameters=config_overrides
        NodeName={self.host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
        PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
        """))
    self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
    self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", self.host)

    def idle():
      res = self.run("sinfo", "--noheader", "--Node", "--format=%T")
      return res.returncode == 0 and res.stdout.split() == ["idle"]
    self._wait(idle, "the node to be idle")

  def _spawn(self, *args) -> None:
    with open(self.folder / "log" / f"{args[0]}.out", "w") as out:
      self.procs.append(subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True))

  def _wait(self, ready, what: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not ready():
      dead = [p.args[0] for p in self.procs if p.poll() is not None]
      if dead or time.time() > deadline:
        raise RuntimeError(f"SLURM test cluster: no {what} after {seconds} s (exited: {dead})\n"
                           + self.logs())
      time.sleep(0.3)

  def stop(self) -> None:
    """Cancels every job, waits for it to end, stops the daemons; ends any process left with
    this cluster's SLURM_CONF in its environment (a job step whose cancel did not arrive)."""
    try:
      if self.procs and all(p.poll() is None for p in self.procs):
        self.run("scancel", "--full", f"--nodelist={self.host}")
        deadline = time.time() + 30
        while time.time() < deadline:
          res = self.run("squeue", "--noheader", "--format=%i")
          if res.returncode != 0 or not res.stdout.strip():
            break
          time.sleep(0.5)
    finally:
      for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
        _stop(proc)
      for pid in _processes_with_env(f"SLURM_CONF={self.conf}"):
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass


@pytest.fixture
def slurm_cluster():
  missing = [p for p in _SLURM_PROGRAMS if shutil.which(p) is None]
  if missing:
    pytest.skip(f"needs SLURM and munge, missing {', '.join(missing)} (Debian: apt-get install "
                "slurmctld slurmd slurm-client munge)")
  if os.geteuid() != 0:
    pytest.skip("runs slurmctld and slurmd as root (SlurmUser=root)")
  try:
    socket.gethostbyname(socket.gethostname().split(".")[0])
  except OSError:
    pytest.skip("this machine's host name does not resolve: jax.distributed's SLURM coordinator "
                "address is the first node's name")
  # A short folder: munged's and slurmd's Unix sockets live in it (a path of at most 107 bytes).
  folder = pathlib.Path(tempfile.mkdtemp(prefix="bert_jax_slurm_"))
  cluster = SlurmCluster(folder)
  try:
    cluster.start()
    yield cluster
  finally:
    cluster.stop()
    left = [p.args[0] for p in cluster.procs if p.poll() is None]
    shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"still running after the test: {left}"


# Only what a few steps on 2 cores need; the rest is configs/pretrain.py:tiny as a user runs it
# (the built-in corpus, batch 32 x 128, the checkpoint, the export and the fill-mask example).
# host_invariant_stream: both tasks read the one-process stream, so the losses can be compared.
_SLURM_STEPS = 3
_PRETRAIN = ["-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
             f"--config.total_steps={_SLURM_STEPS}", "--config.log_every=1",
             "--config.data.host_invariant_stream=True", "--config.compile_cache=off"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_gpu_slurm_two_tasks_match_one_process(slurm_cluster, tmp_path):
  start = time.time()
  # The same command as one process, meanwhile.
  ref_dir = tmp_path / "one_process"
  ref = subprocess.Popen([sys.executable, *_PRETRAIN, "--workdir", str(ref_dir)], cwd=ROOT,
                         env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)

  # The launcher activates the virtualenv this test runs in, as BERT_JAX_VENV asks.
  in_venv = sys.prefix != sys.base_prefix
  python = "python" if in_venv else sys.executable
  env = slurm_cluster.job_env(child_env())
  if in_venv:
    env["BERT_JAX_VENV"] = sys.prefix
  mp_dir = tmp_path / "two_tasks"
  out = tmp_path / "job.out"
  # The script's #SBATCH defaults are for GPU nodes: one CPU node of 2 tasks here.
  job = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=1", "--ntasks-per-node=2",
                        "--gpus-per-node=0", "--cpus-per-task=1", f"--output={out}",
                        str(GPU_SLURM), python, *_PRETRAIN, "--workdir", str(mp_dir)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  log = out.read_text() if out.exists() else ""
  assert job.returncode == 0, (job, log[-5000:], slurm_cluster.logs())
  job_id = job.stdout.strip()
  ref_out, _ = ref.communicate(timeout=900)
  assert ref.returncode == 0, ref_out[-5000:]

  lines = log.splitlines()
  assert lines[0].startswith(f"gpu_slurm: job {job_id} on 1 node(s) ({slurm_cluster.host}): "
                             "2 tasks: "), log[:2000]
  # srun's --label: rank 0 reports the steps, the export and the fill-mask example, once.
  assert any(l.startswith(f"0: step {_SLURM_STEPS}/{_SLURM_STEPS} |") for l in lines), log[-3000:]
  assert not any(l.startswith("1: step ") for l in lines), log[-3000:]
  assert sum("fill-mask example from the new checkpoint:" in l for l in lines) == 1, log[-3000:]

  # Both tasks joined one JAX job: each wrote its part of the checkpoint.
  state = mp_dir / "checkpoints" / str(_SLURM_STEPS) / "state"
  assert {p.name for p in state.glob("ocdbt.process_*")} == {"ocdbt.process_0", "ocdbt.process_1"}

  def losses(workdir):
    return [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  mp, one = losses(mp_dir), losses(ref_dir)
  assert [m["step"] for m in mp] == [m["step"] for m in one] == list(range(1, _SLURM_STEPS + 1))
  np.testing.assert_allclose([m["loss"] for m in mp], [m["loss"] for m in one], atol=1e-5, rtol=0)
  assert mp[-1]["loss"] != mp[0]["loss"]
  got = bundle.load_bundle(str(mp_dir / "export")).params
  want = bundle.load_bundle(str(ref_dir / "export")).params
  assert jax.tree.structure(got) == jax.tree.structure(want)
  diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
  assert diff <= 1e-5, diff
  print(f"SLURM job and the one-process run: {time.time() - start:.0f} s")
