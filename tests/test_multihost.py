"""Multi-process JAX on one machine: launch/local_multiprocess.sh, gloo collectives, one checkpoint.

The end-to-end test runs bert_jax.pretrain as 2 processes with one CPU device
each and compares it with one process (8 fake devices) on the same global
batches. The input pipeline gives each host its own documents, so a 2-host
stream differs from a 1-host one; data.host_invariant_stream makes every process
build the 1-host stream and keep its rows of each global batch (the stream's
job, bert_jax.data.stream.pretrain_data), which isolates the runtime
(distributed init, mesh over processes, host_to_global, collectives,
checkpointing, logging) from the data split.
"""
import json
import pathlib
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from bert_jax import pretrain
from bert_jax.runtime import distributed
from bert_jax.training import sharding
from configs import pretrain as pretrain_config
from tests.fixtures.repo import LAUNCH
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env

# The one-process run it compares with has 8 fake CPU devices (tests/device_split.py).
pytestmark = pytest.mark.multidevice

STEPS = 5
# The default config otherwise, fill-mask example included: every process must reach the end.
OVERRIDES = dict(total_steps=STEPS, seq_len=32, batch_size=8, log_every=1, checkpoint_every=STEPS)

_WORDS = ("the a of to and in is was for on that with as by at from his her it an were are which "
          "this be has had one first new time city year people state world water music school "
          "river game team war film book house small large early later north south").split()


def _write_corpus(path: pathlib.Path, docs: int = 40, sentences: int = 8) -> None:
  """A small corpus in the Google BERT layout (tokenizes in well under a second)."""
  rng = np.random.default_rng(0)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(docs):
      for _ in range(sentences):
        f.write(" ".join(rng.choice(_WORDS, rng.integers(5, 14))) + " .\n")
      f.write("\n")


def _restore_on_one_device(path):
  """A checkpoint's full state as saved, on one device, whatever topology wrote it."""
  ckptr = ocp.StandardCheckpointer()
  meta = ckptr.metadata(path)
  meta = getattr(meta, "item_metadata", meta)
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
  return ckptr.restore(path, target)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_match_one_process(tmp_path):
  corpus = tmp_path / "corpus.txt"
  _write_corpus(corpus)
  mp_dir = tmp_path / "two_processes"
  args = [str(LAUNCH), "2", sys.executable, "-m", "bert_jax.pretrain", "--config",
          "configs/pretrain.py:tiny", "--workdir", str(mp_dir),
          "--config.data.max_predictions_per_seq=5", "--config.data.host_invariant_stream=True",
          "--config.data.source=files", f"--config.data.files={corpus}"]
  args += [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
  start = time.time()
  proc = subprocess.Popen(args, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)

  # Meanwhile: the same run in this process, 8 devices, real 1-host pipeline.
  config = pretrain_config.get_config("tiny")
  config.update(OVERRIDES)
  config.data.max_predictions_per_seq = 5
  config.data.source = "files"
  config.data.files = str(corpus)
  ref_dir = tmp_path / "one_process"
  pretrain.train(config, str(ref_dir))

  out, _ = proc.communicate(timeout=600)
  assert proc.returncode == 0, out[-5000:]
  lines = out.splitlines()
  assert any(l.startswith("[0] ") for l in lines) and any(l.startswith("[1] ") for l in lines)
  assert any(l.startswith(f"[0] step {STEPS}/{STEPS}") for l in lines), out[-3000:]
  assert not any(l.startswith("[1] step ") for l in lines)  # only process 0 reports
  # The export and the fill-mask example ran, reported once, and both processes exited.
  assert sum("fill-mask example from the new checkpoint:" in l for l in lines) == 1, out[-3000:]
  assert any(l.startswith("[0]   [MASK] 1: ") for l in lines), out[-3000:]

  # Process 0 alone wrote the metrics (one line per step) and TensorBoard events.
  mp = [json.loads(l) for l in (mp_dir / "metrics.jsonl").read_text().splitlines()]
  ref = [json.loads(l) for l in (ref_dir / "metrics.jsonl").read_text().splitlines()]
  assert [m["step"] for m in mp] == list(range(1, STEPS + 1))
  assert len(list((mp_dir / "tensorboard").glob("events.*"))) == 1
  np.testing.assert_allclose([m["loss"] for m in mp], [m["loss"] for m in ref], atol=1e-5, rtol=0)
  assert mp[-1]["loss"] != mp[0]["loss"]

  # Both processes wrote into one checkpoint, which restores whole and equals the reference.
  state_dir = mp_dir / "checkpoints" / str(STEPS) / "state"
  assert {p.name for p in state_dir.glob("ocdbt.process_*")} == {"ocdbt.process_0", "ocdbt.process_1"}
  got = _restore_on_one_device(str(state_dir))
  want = _restore_on_one_device(str(ref_dir / "checkpoints" / str(STEPS) / "state"))
  assert int(got["step"]) == STEPS
  assert jax.tree.structure(got) == jax.tree.structure(want)
  diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(jax.tree.leaves(got["params"]), jax.tree.leaves(want["params"])))
  assert diff <= 1e-5, diff
  print(f"2-process run: {time.time() - start:.0f} s")


def test_launcher_stops_everyone_when_one_process_fails(tmp_path):
  # Process 1 fails at once; process 0 would sleep for a minute.
  script = tmp_path / "fail.py"
  script.write_text(textwrap.dedent('''\
      import sys, time
      i = int(sys.argv[-1].split("=")[1])
      print("up", i, sys.argv[1:4], flush=True)
      if i == 1:
        sys.exit(3)
      time.sleep(60)
  '''))
  start = time.time()
  res = subprocess.run([str(LAUNCH), "2", sys.executable, str(script)], capture_output=True,
                       text=True, timeout=60, env=child_env())
  assert res.returncode == 3, res
  assert time.time() - start < 30
  assert "[1] up 1" in res.stdout
  assert "--coordinator_address=localhost:" in res.stdout and "'--num_processes=2'" in res.stdout
  assert "process 1 exited with status 3" in res.stderr


def test_launcher_usage_errors():
  res = subprocess.run([str(LAUNCH), "two", "true"], capture_output=True, text=True)
  assert res.returncode == 2 and "N must be a positive integer" in res.stderr
  res = subprocess.run([str(LAUNCH)], capture_output=True, text=True)
  assert res.returncode == 2 and "Usage: launch/local_multiprocess.sh N CMD" in res.stderr


@pytest.mark.parametrize("flags, message", [
    (("localhost:1234", 2, None), "go together"),
    (("localhost", 2, 0), "must be HOST:PORT"),
    (("localhost:1234", 2, 2), r"--process_id 2 must be in \[0, --num_processes=2\)"),
])
def test_distributed_flag_errors(flags, message):
  with pytest.raises(ValueError, match=message):
    distributed._check_flags(*flags)  # pylint: disable=protected-access


def test_the_coordinators_port_in_use_is_named_in_one_line(tmp_path):
  with socket.socket() as held:  # another run's coordinator
    held.bind(("", 0))
    held.listen()
    port = held.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
         "--workdir", str(tmp_path / "run"), f"--coordinator_address=localhost:{port}",
         "--num_processes=2", "--process_id=0"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    env = child_env(BERT_JAX_COORDINATOR_PORT=str(port))
    launched = subprocess.run([str(LAUNCH), "2", sys.executable, "-c", "print('started')"],
                              env=env, capture_output=True, text=True, timeout=60)
  assert done.returncode == 1, done.stderr[-2000:]
  assert done.stderr.strip().splitlines() == [
      f"bert_jax.pretrain: error: --coordinator_address localhost:{port}: port {port} is in use "
      "on this host (Address already in use; another run's coordinator?): choose another port"]
  assert not (tmp_path / "run").exists()
  # The launcher says so before any process starts.
  assert launched.returncode == 2 and "started" not in launched.stdout
  assert launched.stderr.strip().splitlines() == [
      f"local_multiprocess: port {port} (BERT_JAX_COORDINATOR_PORT) is in use on this host; "
      "unset BERT_JAX_COORDINATOR_PORT for a free one, or choose another"]


def test_batch_shards_shared_by_processes_are_an_error():
  class Dev:

    def __init__(self, process_index):
      self.process_index = process_index

  # 2 hosts x 2 devices; 'tensor' of 2 across the hosts: both hold every batch shard.
  across = np.array([[[Dev(0), Dev(1)], [Dev(0), Dev(1)]]], dtype=object)  # [1, 2, 2]
  with pytest.raises(ValueError, match=r"held by several processes .* keep 'tensor' within a host"):
    sharding.check_batch_layout(type("M", (), {"devices": across, "shape": {"data": 1, "fsdp": 2,
                                                                            "tensor": 2}})())
  within = np.array([[[Dev(0), Dev(0)], [Dev(1), Dev(1)]]], dtype=object)
  sharding.check_batch_layout(type("M", (), {"devices": within, "shape": {}})())
