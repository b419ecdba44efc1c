"""A gs:// workdir end to end, against a GCS emulator running on this machine.

The emulator is gcp-storage-emulator (PyPI, in the `test` extra). What this
exercises, in a child process whose environment points the clients at it:
  * etils.epath on gs:// through its fsspec backend (gcsfs honours
    STORAGE_EMULATOR_HOST): checkpoint directories and metadata, metrics.jsonl,
    the export bundle's JSON and vocab, eval_results.json, prediction files;
  * Orbax array data through tensorstore's gcs driver (TENSORSTORE_GCS_HTTP_URL);
  * TensorBoard events through tensorboardX's GCS writer (google-cloud-storage).
What it does not: tf.io.gfile's own GCS client, which epath uses for gs:// when
TensorFlow is installed; its endpoint (www.googleapis.com) is compiled in, so no
local server can stand in for it. The child therefore switches epath to its
fsspec backend; input data and vocab stay local.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # pretraining and fine-tuning end to end against an emulator

ROOT = pathlib.Path(__file__).resolve().parents[1]
gcsfs = pytest.importorskip("gcsfs", reason="needs gcsfs (the `test` extra) for gs:// paths")
pytest.importorskip("gcp_storage_emulator",
                    reason="needs gcp-storage-emulator (the `test` extra) for a local GCS")

WORDS = ("the old man walked to the river and saw a boat near the house . "
         "she said that the war was over , and they went home in the evening . "
         "a small dog ran across the field while the children played by the trees").split(" . ")

# The launcher fills two gaps of the emulator against real GCS. Its media download omits
# the x-goog-generation header that tensorstore's conditional reads (Orbax's OCDBT
# manifest) need; and it lacks the objects.move API (moveTo), which gcsfs tries first
# for a rename and retries with backoff on the emulator's 501 before copying (minutes).
_EMULATOR = textwrap.dedent('''\
    import sys
    from http import HTTPStatus
    from gcp_storage_emulator import server, settings
    from gcp_storage_emulator.handlers import objects
    _download = objects.download

    def download(request, response, storage, *args, **kwargs):
      try:
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
        response["x-goog-generation"] = obj["generation"]
        response["x-goog-metageneration"] = obj["metageneration"]
      except Exception:  # a missing object: the handler answers 404
        pass
      return _download(request, response, storage, *args, **kwargs)

    def move(request, response, storage, *args, **kwargs):
      bucket, src, dst = (request.params[k] for k in ("bucket_name", "object_id", "dest_object_id"))
      try:
        response.json(objects._copy(request.base_url, storage, bucket, src, bucket, dst))
        storage.delete_file(bucket, src)
      except objects.NotFound:
        response.status = HTTPStatus.NOT_FOUND

    objects.download = download
    server.HANDLERS = tuple(
        (rf"^{prefix}/b/(?P<bucket_name>[-.\\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
         r"(?P<dest_object_id>.*[^/]+)$", {"POST": move})
        for prefix in (settings.API_ENDPOINT, "")) + server.HANDLERS
    from gcp_storage_emulator.__main__ import main  # builds its routes with the patched handler
    main(sys.argv[1:])
''')

_WORKER = textwrap.dedent('''\
    """Runs jobs with gs:// workdirs in one process; argv: json list of [job, settings, out]."""
    import json, sys
    from etils.epath import gpath
    gpath._is_tf_installed = lambda: False  # epath on gs:// through fsspec (see the test)
    sys.path.insert(0, sys.argv[2])
    from bert_jax import finetune, pretrain
    from configs import glue as glue_config
    from configs import pretrain as pretrain_config
    for job, settings, out in json.loads(sys.argv[1]):
      if job == "pretrain":
        c = pretrain_config.get_config("tiny")
        for key, value in settings.items():
          section, _, field = key.rpartition(".")
          (c[section] if section else c)[field] = value
        summary = pretrain.train(c, settings["workdir"])
        pretrain.export_and_demo(summary, c, settings["workdir"])
      else:
        c = glue_config.get_config("task=mrpc")
        for key, value in settings.items():
          c[key] = value
        finetune.finetune(c, out)
''')


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """A fresh in-memory GCS on a free port with bucket 'bkt'; yields the child env."""
  port = _free_port()
  launcher = tmp_path_factory.mktemp("gcs") / "emulator.py"
  launcher.write_text(_EMULATOR)
  server = subprocess.Popen(
      [sys.executable, str(launcher), "start", "--host=127.0.0.1",
       f"--port={port}", "--in-memory", "--default-bucket=bkt"],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 30
  while time.time() < deadline:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=1).close()
      break
    except OSError:
      time.sleep(0.2)
  url = f"http://127.0.0.1:{port}"
  env = dict(os.environ, STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url,
             GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", FSSPEC_GS_TOKEN="anon",
             GOOGLE_CLOUD_PROJECT="bert-jax-test", JAX_PLATFORMS="cpu",
             XLA_FLAGS="", PYTHONPATH=str(ROOT))
  os.environ["STORAGE_EMULATOR_HOST"] = url  # for this process's own gcsfs reads
  yield env
  del os.environ["STORAGE_EMULATOR_HOST"]
  server.terminate()
  server.wait(timeout=10)


def _run(env, tmp_path, jobs):
  """Runs [(job, settings, out), ...] in one child process (one start-up for all)."""
  worker = tmp_path / "gcs_worker.py"
  worker.write_text(_WORKER)
  proc = subprocess.run([sys.executable, str(worker), json.dumps(jobs), str(ROOT)],
                        env=env, capture_output=True, text=True, timeout=600, cwd=str(ROOT))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc.stdout


def _write_inputs(d: pathlib.Path):
  words = sorted({w for s in WORDS for w in s.split()})
  letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
  tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
            + [c for c in letters if c not in words] + ["##" + c for c in letters])
  (d / "vocab.txt").write_text("\n".join(tokens) + "\n")
  rng = np.random.default_rng(0)
  lines = []
  for _ in range(40):
    lines += [WORDS[i] + " ." for i in rng.choice(len(WORDS), 4)] + [""]
  (d / "corpus.txt").write_text("\n".join(lines))
  (d / "MRPC").mkdir()
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
  for split, n in (("train", 16), ("dev", 8)):
    rows = [f"{i % 2}\t{i}\t{i + 100}\t{WORDS[i % 3]} .\t{WORDS[(i + 1) % 3]} ." for i in range(n)]
    (d / "MRPC" / f"{split}.tsv").write_text("\n".join([header] + rows) + "\n")


def test_pretrain_resume_and_finetune_on_a_gs_workdir(gcs, tmp_path):
  _write_inputs(tmp_path)
  run = "gs://bkt/run"
  settings = {"workdir": run, "total_steps": 10, "seq_len": 32, "batch_size": 8,
              "log_every": 5, "checkpoint_every": 5, "warmup_steps": 1, "fill_mask_example": "",
              "data.source": "files", "data.files": str(tmp_path / "corpus.txt"),
              "data.vocab_file": str(tmp_path / "vocab.txt"),
              "data.max_predictions_per_seq": 5}
  # Pretrain to 10; the same workdir again to 12 (resumes from gs://.../checkpoints/10);
  # fine-tune from the gs:// pretraining workdir into a gs:// workdir.
  out = _run(gcs, tmp_path, [
      ("pretrain", settings, ""),
      ("pretrain", dict(settings, total_steps=12, log_every=2), ""),
      ("finetune", {"init_checkpoint": run, "data_dir": str(tmp_path), "max_seq_length": 32,
                    "batch_size": 8, "eval_batch_size": 8, "num_epochs": 1.0, "log_every": 1},
       "gs://bkt/ft")])
  assert "resumed from gs://bkt/run/checkpoints/10" in out
  # gcsfs.core's class: the package default probes the bucket type over gRPC, which
  # the emulator does not serve (a minute's timeout per call).
  fs = gcsfs.core.GCSFileSystem(token="anon")
  steps = sorted(int(p.rsplit("/", 1)[1]) for p in fs.ls("bkt/run/checkpoints")
                 if p.rsplit("/", 1)[1].isdigit())
  assert steps == [5, 10, 12]
  records = [json.loads(line) for line in fs.cat("bkt/run/metrics.jsonl").decode().splitlines()]
  # The first run's records kept, each step once.
  assert [r["step"] for r in records] == [5, 10, 12] and all(np.isfinite(r["loss"]) for r in records)
  assert any("tfevents" in p for p in fs.find("bkt/run/tensorboard"))
  assert json.loads(fs.cat("bkt/run/export/model_config.json"))["num_layers"] == 2

  results = json.loads(fs.cat("bkt/ft/eval_results.json"))
  assert 0.0 <= results["accuracy"] <= 1.0 and "f1" in results
  assert fs.exists("bkt/ft/export/params") and fs.exists("bkt/ft/metrics.jsonl")
