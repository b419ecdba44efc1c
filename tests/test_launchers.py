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
import tempfile
import textwrap
import time

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env

GPU_SLURM = ROOT / "launch" / "gpu_slurm.sh"
TPU_POD = ROOT / "launch" / "tpu_pod.sh"

# --------------------------------------------------------------------------------------------
# launch/gpu_slurm.sh under SLURM

_SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue",
                   "scancel")


def _slurm_program(name: str):
  """Its path, also where PATH lacks the sbin folders (the daemons are there, as on Debian)."""
  return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin",
                                                  "/sbin"]))


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
    return subprocess.run([_slurm_program(args[0]), *args[1:]], env=self.env,
                          capture_output=True, text=True, timeout=60, **kwargs)

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
      self.procs.append(subprocess.Popen([_slurm_program(args[0]), *args[1:]], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True))

  def _wait(self, ready, what: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not ready():
      dead = [os.path.basename(p.args[0]) for p in self.procs if p.poll() is not None]
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
  missing = [p for p in _SLURM_PROGRAMS if _slurm_program(p) is None]
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
    left = [os.path.basename(p.args[0]) for p in cluster.procs if p.poll() is None]
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
  try:
    env = slurm_cluster.job_env(child_env())
    python = sys.executable
    if sys.prefix != sys.base_prefix:
      # The launcher activates this test's virtualenv, as BERT_JAX_VENV asks: `python` is found
      # through the activation alone.
      env["BERT_JAX_VENV"] = sys.prefix
      venv_bin = os.path.join(sys.prefix, "bin")
      env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
      python = "python"
    mp_dir = tmp_path / "two_tasks"
    out = tmp_path / "job.out"
    # The script's #SBATCH defaults are for GPU nodes: one CPU node of 2 tasks here.
    job = subprocess.run([_slurm_program("sbatch"), "--wait", "--parsable", "--nodes=1",
                          "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1",
                          f"--output={out}", str(GPU_SLURM), python, *_PRETRAIN, "--workdir",
                          str(mp_dir)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log = out.read_text() if out.exists() else ""
    assert job.returncode == 0, (job, log[-5000:], slurm_cluster.logs())
    job_id = job.stdout.strip()
    ref_out, _ = ref.communicate(timeout=900)
    assert ref.returncode == 0, ref_out[-5000:]
  finally:
    if ref.poll() is None:
      ref.kill()
      ref.wait()

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


@pytest.mark.slow
def test_gpu_slurm_stops_every_task_when_one_fails(slurm_cluster, tmp_path):
  # Task 1 fails once task 0 is up (a marker file: the tasks start up to tens of ms apart, and
  # SLURM kills task 0 within about a tenth of a second of the failure); task 0 would sleep for
  # two minutes.
  out, up = tmp_path / "job.out", tmp_path / "task0_up"
  start = time.time()
  job = subprocess.run(
      [_slurm_program("sbatch"), "--wait", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0",
       "--cpus-per-task=1", f"--output={out}", str(GPU_SLURM), sys.executable, "-c",
       "import os, pathlib, sys, time; print('up', flush=True); up = pathlib.Path(sys.argv[1])\n"
       "if os.environ['SLURM_PROCID'] == '0': up.touch(); time.sleep(120)\n"
       "deadline = time.time() + 60\n"
       "while not up.exists() and time.time() < deadline: time.sleep(0.01)\n"
       "sys.exit(3)", str(up)],
      cwd=ROOT, env=slurm_cluster.job_env(child_env()), capture_output=True, text=True,
      timeout=300)
  log = out.read_text()
  assert job.returncode != 0, (job, log)
  assert time.time() - start < 90, log
  assert "0: up" in log and "1: up" in log, log


def test_gpu_slurm_outside_a_job_says_how_to_submit():
  env = {k: v for k, v in child_env().items() if not k.startswith("SLURM_")}
  res = subprocess.run([str(GPU_SLURM), "python", "-V"], env=env, capture_output=True, text=True)
  assert res.returncode == 2, res
  assert "not inside a SLURM job; submit with: sbatch launch/gpu_slurm.sh CMD" in res.stderr
  res = subprocess.run([str(GPU_SLURM)], env=env, capture_output=True, text=True)
  assert res.returncode == 2 and "Usage: sbatch [SBATCH OPTIONS] launch/gpu_slurm.sh" in res.stderr


# --------------------------------------------------------------------------------------------
# launch/tpu_pod.sh against a stand-in for gcloud

# The stand-in `gcloud` (Python, run by this interpreter). $FAKE_GCLOUD_DIR holds calls.jsonl
# (one line per call: its argv, and for scp and ssh what each worker got and did), tpus/NAME.json
# (the TPU VMs that exist) and workers/NAME/I (worker I's home). $FAKE_GCLOUD_ZONE is the
# configured compute/zone (unset: none).
_GCLOUD = r'''
import json, os, pathlib, shutil, subprocess, sys, tarfile

top = pathlib.Path(os.environ["FAKE_GCLOUD_DIR"])
args = sys.argv[1:]
call = {"argv": args}


def done(rc=0, err=""):
  with open(top / "calls.jsonl", "a") as f:
    f.write(json.dumps(call) + "\n")
  if err:
    print(err, file=sys.stderr)
  sys.exit(rc)


if args[:2] == ["config", "get-value"]:
  value = {"compute/zone": os.environ.get("FAKE_GCLOUD_ZONE")}.get(args[2])
  if value:
    print(value)
  else:
    print("(unset)", file=sys.stderr)  # as gcloud: nothing on stdout, status 0
  done()
if args[:3] != ["compute", "tpus", "tpu-vm"]:
  done(2, f"ERROR: (gcloud) the stand-in knows no {args}")
verb, rest = args[3], args[4:]
flags, positional, i = {}, [], 0
while i < len(rest):
  a = rest[i]
  if a == "--command":  # the one flag tpu_pod.sh gives with a separate value
    flags["command"] = rest[i + 1]
    i += 2
    continue
  if a.startswith("--"):
    key, _, value = a[2:].partition("=")
    flags[key] = value or True
  else:
    positional.append(a)
  i += 1
if "zone" not in flags:
  done(1, "ERROR: (gcloud.compute.tpus.tpu-vm) the stand-in wants --zone")
name = positional[0].split(":")[0] if verb != "scp" else positional[1].split(":")[0]
state = top / "tpus" / f"{name}.json"
where = f"projects/{flags.get('project', 'my-project')}/locations/{flags['zone']}/nodes/{name}"
if verb == "create":
  if state.exists():
    done(1, f"ERROR: (gcloud.compute.tpus.tpu-vm.create) ALREADY_EXISTS: {where}")
  family, chips = flags["accelerator-type"].rsplit("-", 1)
  # Hosts of a slice: v4 and v5p count TensorCores (8 a host), v5e and v6e chips (4 a host of
  # a multi-host slice).
  hosts = max(1, int(chips) // 8) if family in ("v4", "v5p") else (
      1 if int(chips) <= 8 else int(chips) // 4)
  state.parent.mkdir(exist_ok=True)
  state.write_text(json.dumps({"acceleratorType": flags["accelerator-type"], "hosts": hosts,
                               "runtimeVersion": flags["version"], "spot": "spot" in flags,
                               "zone": flags["zone"]}))
  done()
if not state.exists():
  done(1, f"ERROR: (gcloud.compute.tpus.tpu-vm.{verb}) NOT_FOUND: {where} was not found")
tpu = json.loads(state.read_text())
if verb == "describe":
  print(f"acceleratorType: {tpu['acceleratorType']}\nname: {where}\n"
        f"runtimeVersion: {tpu['runtimeVersion']}\nstate: READY")
  done()
if verb == "delete":
  state.unlink()
  done()
worker = flags.get("worker", "0")
homes = [top / "workers" / name / str(w)
         for w in (range(tpu["hosts"]) if worker == "all" else [int(worker)])]
if verb == "scp":
  src, dst = positional[0], positional[1].split(":", 1)[1]
  call["copied"] = {"src": src, "dst": dst, "workers": len(homes)}
  if tarfile.is_tarfile(src):
    with tarfile.open(src) as t:
      call["copied"]["members"] = t.getnames()
  for home in homes:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, home / dst)
  done()
if verb == "ssh":
  if "command" not in flags:
    done()  # an interactive shell: nothing to play
  # Each worker's sshd hands the command to the user's shell (bash -c); the stand-ins for
  # python3 -m venv, sudo and apt-get come first on its PATH.
  call["runs"], rc = [], 0
  for home in homes:
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(home), PATH=os.environ["FAKE_WORKER_BIN"] + ":"
               + os.environ["PATH"])
    res = subprocess.run(["bash", "-c", flags["command"]], cwd=home, env=env,
                         capture_output=True, text=True)
    call["runs"].append({"worker": home.name, "command": flags["command"], "rc": res.returncode,
                         "stdout": res.stdout, "stderr": res.stderr})
    rc = rc or res.returncode
  done(rc)
done(2, f"ERROR: (gcloud) the stand-in knows no tpu-vm {verb}")
'''

# A worker's `python3`: `-m venv DIR` makes a virtualenv whose pip records its calls (cwd and
# argv, in $HOME/pip.log) and whose python is this interpreter; anything else is this interpreter.
_WORKER_PYTHON3 = r'''#!/usr/bin/env bash
if [[ $1 == -m && $2 == venv ]]; then
  mkdir -p "$3/bin"
  venv=$(cd "$3" && pwd)
  printf 'export VIRTUAL_ENV=%q\nexport PATH="$VIRTUAL_ENV/bin:$PATH"\n' "$venv" \
    > "$venv/bin/activate"
  printf '#!/usr/bin/env bash\necho "$PWD: pip $*" >> "$HOME/pip.log"\n' > "$venv/bin/pip"
  printf '#!/usr/bin/env bash\nexec %q "$@"\n' "$REAL_PYTHON" > "$venv/bin/python"
  chmod +x "$venv/bin/pip" "$venv/bin/python"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
'''
_WORKER_RECORDER = '#!/usr/bin/env bash\necho "$(basename "$0") $*" >> "$HOME/root_commands.log"\n'


class FakeGcloud:
  """The stand-in on PATH, and what it recorded."""

  def __init__(self, folder: pathlib.Path):
    self.folder = folder
    bin_dir, worker_bin = folder / "bin", folder / "worker_bin"
    bin_dir.mkdir(parents=True)
    worker_bin.mkdir()
    (bin_dir / "gcloud").write_text(f"#!{sys.executable}\n{_GCLOUD}")
    (worker_bin / "python3").write_text(_WORKER_PYTHON3)
    for name in ("sudo", "apt-get"):
      (worker_bin / name).write_text(_WORKER_RECORDER)
    for p in [bin_dir / "gcloud", *worker_bin.iterdir()]:
      p.chmod(p.stat().st_mode | stat.S_IXUSR)
    (folder / "tmp").mkdir()
    self.env = child_env(PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_GCLOUD_DIR=str(folder),
                         FAKE_WORKER_BIN=str(worker_bin), REAL_PYTHON=sys.executable,
                         TMPDIR=str(folder / "tmp"))
    self.env.pop("FAKE_GCLOUD_ZONE", None)

  def pod(self, *args, zone=None):
    """Runs launch/tpu_pod.sh ARGS; returns its result and the gcloud calls it made."""
    before = len(self.calls())
    env = dict(self.env, **({"FAKE_GCLOUD_ZONE": zone} if zone else {}))
    res = subprocess.run([str(TPU_POD), *args], env=env, capture_output=True, text=True,
                         timeout=120)
    return res, self.calls()[before:]

  def calls(self):
    log = self.folder / "calls.jsonl"
    return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []

  def home(self, name, worker):
    return self.folder / "workers" / name / str(worker)


def _tpu_calls(calls):
  """The tpu-vm calls' argv after `gcloud compute tpus tpu-vm` (the config queries left out)."""
  return [c["argv"][3:] for c in calls if c["argv"][:3] == ["compute", "tpus", "tpu-vm"]]


# What the user's command prints on a worker: its arguments as received, where it runs, which
# python and virtualenv, and what bert_jax.runtime.distributed will read.
_SHOW = ("import json, os, shutil, sys; print(json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(), "
         "python=shutil.which('python'), venv=os.environ.get('VIRTUAL_ENV'), "
         "distributed=os.environ.get('BERT_JAX_DISTRIBUTED'))))")
# Arguments a shell would otherwise split, expand, glob or end at.
_HARD_ARGS = ["two words", "it's \"quoted\"", "$HOME", "gs://bucket/corpus/*.txt", "a;b && c",
              "--config.mesh.shape='(1,-1,1)'", "back\\slash", "new\nline", "", "`id`"]


@pytest.mark.slow
def test_tpu_pod_sends_every_worker_the_checkout_and_the_command(tmp_path):
  gcloud = FakeGcloud(tmp_path / "gcloud")
  zone = ("--zone", "us-central2-b")

  # create: the accelerator's runtime version, --spot and --project passed on; once.
  res, calls = gcloud.pod("create", "pod-a", *zone, "--accelerator", "v4-16", "--spot",
                          "--project", "proj-1")
  assert res.returncode == 0, res
  gflags = ["--zone=us-central2-b", "--project=proj-1"]
  assert _tpu_calls(calls) == [
      ["describe", "pod-a", *gflags],
      ["create", "pod-a", *gflags, "--accelerator-type=v4-16", "--version=tpu-ubuntu2204-base",
       "--spot"]]
  res, calls = gcloud.pod("create", "pod-a", *zone)
  assert res.returncode == 0 and "pod-a exists in us-central2-b" in res.stdout, res
  assert [c[0] for c in _tpu_calls(calls)] == ["describe"]

  # setup (the zone from gcloud's configuration): the checkout copied to both workers (v4-16:
  # 2 hosts), unpacked, a virtualenv made and the checkout installed with the tpu extra.
  res, calls = gcloud.pod("setup", "pod-a", zone="us-central2-b")
  assert res.returncode == 0, res
  scp, ssh = calls[-2:]
  assert scp["argv"][3] == "scp" and scp["argv"][5:] == ["pod-a:bert_jax.tar.gz", "--worker=all",
                                                         "--zone=us-central2-b"], scp
  members = set(scp["copied"]["members"])
  tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
  assert {f for f in tracked if (ROOT / f).is_file()} <= members
  assert not [m for m in members if m.startswith((".git/", ".venv/")) or "__pycache__" in m]
  assert not list((tmp_path / "gcloud" / "tmp").iterdir())  # the archive is removed
  assert ssh["argv"][3:] == ["ssh", "pod-a", "--worker=all", "--zone=us-central2-b", "--command",
                             ssh["runs"][0]["command"]]
  assert [r["worker"] for r in ssh["runs"]] == ["0", "1"]
  for run in ssh["runs"]:
    assert run["rc"] == 0, run
    assert f"{jax.__version__} 1 devices" in run["stdout"], run
    home = gcloud.home("pod-a", run["worker"])
    assert (home / "bert_jax" / "launch" / "tpu_pod.sh").read_bytes() == TPU_POD.read_bytes()
    assert (home / "pip.log").read_text().splitlines() == [
        f"{home}: pip install -q --upgrade pip", f"{home}/bert_jax: pip install -q -e .[tpu]"]
    assert not (home / "root_commands.log").exists()  # python3 -m venv worked: no apt-get

  # run: on every worker, in the checkout, with the virtualenv active and
  # BERT_JAX_DISTRIBUTED=auto; every argument arrives as it was given.
  res, calls = gcloud.pod("run", "pod-a", *zone, "--", "python", "-c", _SHOW, *_HARD_ARGS)
  assert res.returncode == 0, res
  (ssh,) = [c for c in calls if c["argv"][0] == "compute"]
  assert ssh["argv"][3:6] == ["ssh", "pod-a", "--worker=all"]
  assert ssh["runs"][0]["command"].startswith(
      "cd ~/bert_jax && source ~/bert_jax_venv/bin/activate && BERT_JAX_DISTRIBUTED=auto python ")
  for run in ssh["runs"]:
    assert run["rc"] == 0, run
    home = gcloud.home("pod-a", run["worker"])
    assert json.loads(run["stdout"]) == dict(
        argv=_HARD_ARGS, cwd=str(home / "bert_jax"), python=str(home / "bert_jax_venv/bin/python"),
        venv=str(home / "bert_jax_venv"), distributed="auto")
  # A worker's failure is the launcher's exit status.
  res, _ = gcloud.pod("run", "pod-a", *zone, "--", "bash", "-c", "exit 3")
  assert res.returncode == 3, res

  # up: create, setup and run on a new slice; on an existing one setup alone (no command).
  res, calls = gcloud.pod("up", "pod-b", *zone, "--accelerator", "v6e-8", "--", "python", "-c",
                          _SHOW, "x y")
  assert res.returncode == 0, res
  assert [c[0] for c in _tpu_calls(calls)] == ["describe", "create", "scp", "ssh", "ssh"]
  assert _tpu_calls(calls)[1][3:] == ["--accelerator-type=v6e-8", "--version=v2-alpha-tpuv6e"]
  assert json.loads(calls[-1]["runs"][0]["stdout"])["argv"] == ["x y"]
  res, calls = gcloud.pod("up", "pod-a", *zone)
  assert res.returncode == 0, res
  assert [c[0] for c in _tpu_calls(calls)] == ["describe", "scp", "ssh"]

  # ssh: one worker's shell; delete: without a prompt, and the slice is gone.
  res, calls = gcloud.pod("ssh", "pod-a", *zone, "--worker", "1")
  assert res.returncode == 0 and _tpu_calls(calls) == [["ssh", "pod-a", "--worker=1",
                                                        "--zone=us-central2-b"]], res
  res, calls = gcloud.pod("delete", "pod-a", *zone)
  assert res.returncode == 0 and _tpu_calls(calls) == [["delete", "pod-a", "--zone=us-central2-b",
                                                        "--quiet"]], res
  res, _ = gcloud.pod("run", "pod-a", *zone, "--", "true")
  assert res.returncode != 0 and "NOT_FOUND" in res.stderr, res
  # A setup that fails (no such slice) leaves no archive behind either.
  res, _ = gcloud.pod("setup", "pod-a", *zone)
  assert res.returncode != 0 and not list((tmp_path / "gcloud" / "tmp").iterdir()), res


@pytest.mark.parametrize("accelerator, version", [
    ("v4-32", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "v2-alpha-tpuv5-lite"),
    ("v5p-16", "v2-alpha-tpuv5"),
    ("v6e-16", "v2-alpha-tpuv6e"),
])
def test_tpu_pod_runtime_version_of_each_accelerator(tmp_path, accelerator, version):
  gcloud = FakeGcloud(tmp_path)
  res, calls = gcloud.pod("create", "pod", "--zone", "z", "--accelerator", accelerator)
  assert res.returncode == 0, res
  assert _tpu_calls(calls)[-1] == ["create", "pod", "--zone=z", f"--accelerator-type={accelerator}",
                                   f"--version={version}"]
  # --version wins over the default.
  res, calls = gcloud.pod("create", "pod2", "--zone", "z", "--accelerator", accelerator,
                          "--version", "my-runtime")
  assert res.returncode == 0 and _tpu_calls(calls)[-1][-1] == "--version=my-runtime", res


@pytest.mark.parametrize("args, message", [
    (("create", "pod", "--zone", "z"), "create needs --accelerator (e.g. v4-32)"),
    (("create", "pod", "--zone", "z", "--accelerator", "v3-8"),
     "no default --version for accelerator 'v3-8'; pass --version"),
    (("run", "pod", "--zone", "z"), "run needs a command after --"),
    (("run", "pod", "--zone", "z", "python"),
     "unknown option 'python' (commands go after --)"),
    (("start", "pod"), "unknown action 'start'"),
    (("run", "pod", "--", "true"), "no zone: pass --zone"),
    (("run",), "Usage: launch/tpu_pod.sh ACTION NAME"),
])
def test_tpu_pod_refuses_in_one_line_before_any_change(tmp_path, args, message):
  gcloud = FakeGcloud(tmp_path)
  res, calls = gcloud.pod(*args)
  assert res.returncode == 2 and message in res.stderr, res
  assert not [c for c in _tpu_calls(calls) if c[0] != "describe"], calls


def test_tpu_pod_without_gcloud_says_so(tmp_path):
  # Only bash on PATH: no gcloud, with or without --zone.
  (tmp_path / "bin").mkdir()
  (tmp_path / "bin" / "bash").symlink_to(shutil.which("bash"))
  for args in (("run", "pod", "--", "true"), ("run", "pod", "--zone", "z", "--", "true")):
    res = subprocess.run([str(TPU_POD), *args], env=dict(os.environ, PATH=str(tmp_path / "bin")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "gcloud not found" in res.stderr, res
