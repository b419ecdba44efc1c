"""End-to-end pretraining: runs, exact resume, checkpoint fallback, NaN stop, bad configs."""
import json
import logging
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import checksum
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.inference import mask_filling
from bert_jax import pretrain
from bert_jax.runtime import console
from bert_jax.training import train_core
from tests.fixtures.pretraining import OBJECTIVES
from tests.fixtures.pretraining import WORDS
from tests.fixtures.pretraining import logged_losses
from tests.fixtures.pretraining import small_config
from tests.fixtures.repo import ROOT


class _Compiles(logging.Handler):
  def __init__(self):
    super().__init__()
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


_STRAIGHT = {}


def _overrides(objective, corpus, tmp_path_factory):
  overrides = dict(OBJECTIVES[objective][0])
  if objective == "distill":
    overrides["teacher_checkpoint"] = _straight_run("mlm_nsp", corpus, tmp_path_factory)[0]
  return overrides


def _straight_run(objective, corpus, tmp_path_factory):
  """6 steps of `objective` from scratch (once per module), counting train-step compiles."""
  if objective not in _STRAIGHT:
    overrides = _overrides(objective, corpus, tmp_path_factory)
    workdir = str(tmp_path_factory.mktemp(f"straight_{objective}"))
    handler = _Compiles()
    logging.getLogger("jax").addHandler(handler)
    try:
      with jax.log_compiles(True):
        summary = pretrain.train(small_config(corpus, **overrides), workdir)
    finally:
      logging.getLogger("jax").removeHandler(handler)
    summary["train_step_compiles"] = sum(
        m.startswith("Compiling jit(train_step)") for m in handler.messages)
    _STRAIGHT[objective] = workdir, summary
  return _STRAIGHT[objective]


@pytest.fixture(scope="module")
def straight_run(corpus, tmp_path_factory):
  return _straight_run("mlm_nsp", corpus, tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_runs_logs_and_checkpoints(objective, corpus, tmp_path_factory):
  workdir, summary = _straight_run(objective, corpus, tmp_path_factory)
  assert summary["step"] == 6
  # Static shapes: the train step compiles once, never again after the first step.
  assert summary["train_step_compiles"] == 1
  records = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
  for key in ("loss", "learning_rate", "tokens_per_second", "mfu") + OBJECTIVES[objective][1]:
    assert all(np.isfinite(r[key]) for r in records), key
  other_pair = {"mlm_nsp": "sop_accuracy", "mlm_sop": "nsp_accuracy"}.get(objective, "nsp_accuracy")
  assert other_pair not in records[0]
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6"]
  assert os.listdir(os.path.join(workdir, "tensorboard"))
  config = loading.read_model_config(workdir)
  assert config.model_type == ("deberta-v2" if objective == "deberta" else
                               "electra" if objective == "electra" else "bert")
  if objective in ("electra", "distill"):  # a padded decoder; the params keep the vocab's rows
    pretrained = loading.load_pretrained(workdir)
    rows = pretrained.params["bert"]["embeddings"]["word_embeddings"]["embedding"].shape[0]
    assert rows == len(pretrained.vocab) == 30522
  if objective == "deberta":  # the EMD's table is trained, checkpointed, and read by fill-mask
    pretrained = loading.load_pretrained(workdir)
    assert bundle.heads_of(pretrained.params) == ("mlm", "emd")
    top = mask_filling.fill_mask(pretrained, ["the old [MASK] walked to the river ."], top_k=2)
    assert len(top[0][0]) == 2
  if objective == "distill":  # the state (what is checkpointed) holds the 1-layer student only
    state = summary["state"]
    assert sorted(state.params) == ["bert", "mlm", "mlm_output_bias"]
    assert list(state.params["bert"]["encoder"]) == ["layer_0"]
    size = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    assert size(state.opt_state) <= 2 * size(state.params) + 16  # Adam's two moments


# mlm_sop and mlm use mlm_nsp's objective code; their data streams' resume is exact in
# test_data_pipeline. ELECTRA has its own state (two models, one optimizer); distillation
# a teacher outside the state, loaded again on resume.
@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm_nsp", "electra", "distill"])
def test_resume_after_preemption_is_exact(objective, corpus, tmp_path_factory, tmp_path):
  straight, _ = _straight_run(objective, corpus, tmp_path_factory)
  overrides = _overrides(objective, corpus, tmp_path_factory)
  workdir = str(tmp_path / "resumed")
  first = pretrain.train(small_config(corpus, **overrides), workdir, preempt_at_step=4)
  assert first["step"] == 4  # preempted: checkpoint written at step 4
  assert "4" in os.listdir(os.path.join(workdir, "checkpoints"))
  pretrain.train(small_config(corpus, **overrides), workdir)
  a, b = logged_losses(straight), logged_losses(workdir)
  for step in (5, 6):
    assert a[step] == b[step], (step, a[step], b[step])


@pytest.mark.slow
def test_a_log_window_cut_by_a_resume_is_logged_whole(corpus, tmp_path):
  """A stop mid-window (log every 3 steps, stopped after step 4): the resumed run's line at
  step 6 is the uninterrupted run's, bit for bit, over steps 4 to 6, not a mean of 5 and 6."""
  timed = ("tokens_per_second", "steps_per_second", "mfu", "input_wait")

  def records(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      return {r["step"]: {k: v for k, v in r.items() if k not in timed}
              for r in map(json.loads, f) if "loss" in r}
  config = lambda: small_config(corpus, log_every=3, checkpoint_every=3)  # noqa: E731
  straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
  pretrain.train(config(), straight)
  assert pretrain.train(config(), resumed, preempt_at_step=4)["step"] == 4
  pretrain.train(config(), resumed)
  want, got = records(straight), records(resumed)
  assert sorted(got) == sorted(want) == [3, 6]
  assert got[6] == want[6], (got[6], want[6])


@pytest.mark.slow
def test_unreadable_latest_checkpoint_falls_back(corpus, straight_run, tmp_path, capsys):
  workdir = str(tmp_path / "copy")
  shutil.copytree(straight_run[0], workdir)
  # Truncate every file of the newest checkpoint's state.
  state_dir = pathlib.Path(workdir, "checkpoints", "6", "state")
  for f in state_dir.rglob("*"):
    if f.is_file() and f.stat().st_size > 0:
      f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
  summary = pretrain.train(small_config(corpus, total_steps=7), workdir)
  out = capsys.readouterr().out
  assert "checkpoint step 6 unreadable" in out
  assert "resumed from" in out and "/3 " in out
  assert os.path.isdir(os.path.join(workdir, "checkpoints_unreadable", "6"))  # kept, not deleted
  assert summary["step"] == 7


@pytest.mark.slow
def test_a_flipped_byte_in_array_data_is_detected_by_the_checksums(corpus, straight_run, tmp_path,
                                                                   capsys):
  workdir = tmp_path / "flipped"
  shutil.copytree(straight_run[0], workdir)
  # One bit of the largest array-data file of the newest checkpoint (Orbax alone restores it).
  data_files = [f for f in (workdir / "checkpoints" / "6" / "state").rglob("d/*") if f.is_file()]
  target = max(data_files, key=lambda f: f.stat().st_size)
  data = bytearray(target.read_bytes())
  data[len(data) // 2] ^= 0x10
  target.write_bytes(bytes(data))
  with pytest.raises(checksum.ChecksumError, match=r"checkpoints/6: 1 restored array\(s\) differ"):
    loading.load_pretrained(str(workdir / "checkpoints"))
  # A resume treats it as corruption: moved aside (kept), the previous checkpoint used.
  summary = pretrain.train(small_config(corpus, total_steps=7), str(workdir))
  out = capsys.readouterr().out
  assert "checkpoint step 6 unreadable (ChecksumError: " in out and "/3 " in out
  assert (workdir / "checkpoints_unreadable" / "6").is_dir() and summary["step"] == 7


@pytest.mark.slow
def test_metrics_hold_each_step_once_after_a_resume(corpus, straight_run, tmp_path):
  workdir = tmp_path / "killed"
  shutil.copytree(straight_run[0], workdir)
  # Killed after logging step 6 but before its checkpoint was committed: resumes from 3.
  shutil.rmtree(workdir / "checkpoints" / "6")
  with open(workdir / "metrics.jsonl", "a") as f:
    f.write('{"step": 6, "loss": 1.')  # and a torn line
  pretrain.train(small_config(corpus, total_steps=7), str(workdir))
  records = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6, 7]
  straight = logged_losses(straight_run[0])
  assert all(r["loss"] == straight[r["step"]] for r in records if r["step"] <= 6)


@pytest.mark.slow
def test_unreadable_checkpoint_is_never_moved_into_an_earlier_one(corpus, straight_run, tmp_path):
  workdir = tmp_path / "again"
  shutil.copytree(straight_run[0], workdir)
  earlier = workdir / "checkpoints_unreadable" / "6"
  earlier.mkdir(parents=True)
  (earlier / "marker").write_text("moved aside by an earlier run")
  for f in (workdir / "checkpoints" / "6" / "state").rglob("*"):
    if f.is_file():
      f.write_bytes(b"")
  pretrain.train(small_config(corpus, total_steps=7), str(workdir))
  assert sorted(os.listdir(earlier)) == ["marker"]  # untouched, nothing nested inside
  assert (workdir / "checkpoints_unreadable" / "6.1" / "state").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("override,changed", [
    ({"optimizer.name": "adamw"}, "optimizer.name 'lamb' -> 'adamw'"),
    ({"variant": "mini"}, "variant 'tiny' -> 'mini'"),
])
def test_resume_with_a_changed_config_is_an_error_that_moves_nothing(
    corpus, straight_run, tmp_path, override, changed):
  workdir = tmp_path / "changed"
  shutil.copytree(straight_run[0], workdir)
  before = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))
  with pytest.raises(ckpt_lib.ResumeMismatchError, match="another model or optimizer") as e:
    pretrain.train(small_config(corpus, total_steps=8, **override), str(workdir))
  assert changed in str(e.value) and "new --workdir" in str(e.value)
  assert sorted(p.relative_to(workdir) for p in workdir.rglob("*")) == before


@pytest.mark.slow
def test_every_phase_of_a_run_says_what_it_is_doing_within_a_beat(corpus, tmp_path, monkeypatch,
                                                                  capsys):
  # A beat every 0.02 s instead of every 9: each phase lasts longer, so each is named.
  monkeypatch.setattr(console, "BEAT_SECONDS", 0.02)
  workdir = str(tmp_path / "run")
  config = small_config(corpus, total_steps=3, checkpoint_every=3, log_every=3)
  config.fill_mask_example = "the old [MASK] walked to the river ."
  pretrain.export_and_demo(pretrain.train(config, workdir), config, workdir)
  out = capsys.readouterr().out
  beats = re.findall(r"^bert_jax.pretrain: (.*) \(\d+ s\)$", out, re.M)
  for phase in ("making the model, the optimizer and the initial state",
                "compiling the train step", "training, step [0-2] of 3",
                "saving the checkpoint of step 3", "step 3 of 3, writing the last checkpoint",
                f"writing the export to {workdir}/export", "running the fill-mask example"):
    assert any(re.fullmatch(phase, beat) for beat in beats), (phase, out)
  time.sleep(0.1)
  assert capsys.readouterr().out == ""  # the beats end with their phases


@pytest.mark.slow
def test_nothing_follows_the_line_saying_a_stopped_run_exits(corpus, tmp_path, monkeypatch,
                                                             capsys):
  # Beats every 0.02 s: closing the writers after the stop would print one if it could.
  monkeypatch.setattr(console, "BEAT_SECONDS", 0.02)
  summary = pretrain.train(small_config(corpus, total_steps=8), str(tmp_path / "run"),
                           preempt_at_step=2)
  assert summary["stopped_by"] == "SIGTERM"
  time.sleep(0.1)
  lines = capsys.readouterr().out.splitlines()
  assert lines[-1].startswith("SIGTERM: saved checkpoint at step 2 ") and lines[-1].endswith(
      "exiting (the same command resumes it)"), lines[-3:]


@pytest.mark.slow
def test_diverged_state_stops_the_run_and_is_never_saved(corpus, tmp_path):
  # learning_rate 1e30: step 1 runs at lr 0 (warmup), step 2's update makes every param ~1e30,
  # finite but diverged, while its loss and gradients are finite: the state check stops it.
  workdir = tmp_path / "diverged"
  config = small_config(corpus, learning_rate=1e30, checkpoint_every=1)
  with pytest.raises(train_core.NonFiniteLossError, match="diverged") as e:
    pretrain.train(config, str(workdir))
  assert os.listdir(workdir / "checkpoints") == ["1"]
  assert f"last good checkpoint: {workdir / 'checkpoints' / '1'}" in str(e.value)
  params = jax.tree.leaves(loading.load_pretrained(str(workdir)).params)
  assert max(float(np.abs(x).max()) for x in params) < 10.0


@pytest.mark.slow
def test_failed_async_save_stops_the_run_at_once_with_older_checkpoints_intact(
    corpus, tmp_path, monkeypatch):
  # A full disk from the second checkpoint on: files may not grow past 64 KiB (RLIMIT_FSIZE;
  # writes fail with EFBIG instead of SIGXFSZ killing the process).
  workdir = tmp_path / "full"
  config = small_config(corpus, total_steps=12, checkpoint_every=3)
  soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
  orig_save = ckpt_lib.TrainCheckpoints.save

  def save(self, step, state, meta):
    if step == 6:
      self.wait()  # step 3's background save committed first (a loaded machine may lag)
      resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
    return orig_save(self, step, state, meta)
  monkeypatch.setattr(ckpt_lib.TrainCheckpoints, "save", save)
  previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  try:
    with pytest.raises(ckpt_lib.CheckpointSaveError,
                       match=r"failed \(.*File too large\); stopping.*intact \(steps: 3\)"):
      pretrain.train(config, str(workdir))
  finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, previous)
  # It stopped at the first log step after the failure, not at the next checkpoint (step 9).
  assert max(logged_losses(workdir)) < 9
  assert sorted(os.listdir(workdir / "checkpoints"))[0] == "3"
  assert loading.load_pretrained(str(workdir / "checkpoints")).source.endswith("/3")


@pytest.mark.parametrize("override,message", [
    ({"seq_len": 1024}, "seq_len 1024 exceeds"),
    ({"data.max_predictions_per_seq": 64}, "max_predictions_per_seq"),
    ({"on_nan": "ignore"}, "on_nan"),
    ({"optimizer.grad_accum_steps": 3}, "grad_accum_steps"),
    ({"learning_rate": -1e-3}, "learning_rate must be positive and finite, got -0.001"),
    ({"learning_rate": 0.0}, "learning_rate must be positive"),
    ({"warmup_steps": -5}, "warmup_steps must be >= 0, got -5"),
    ({"optimizer.b2": 1.0}, r"optimizer.b2 must be in \[0, 1\)"),
    ({"optimizer.eps": 0.0}, "optimizer.eps must be positive"),
    ({"optimizer.weight_decay": -0.01}, "optimizer.weight_decay must be >= 0"),
    ({"model.dropout_rate": -0.5}, r"model.dropout_rate must be in \[0, 1\), got -0.5"),
    ({"model.vocab_pad_multiple": -8}, r"model.vocab_pad_multiple must be an int >= 0 \(0: "
     r"auto\), got -8"),
    ({"eval_batches": 0}, "eval_batches must be >= 1, got 0"),
    ({"profile_start_step": -3}, "profile_start_step must be >= 0, got -3"),
    ({"model.attention_dropout_rate": 2.0},
     r"model.attention_dropout_rate must be in \[0, 1\), got 2.0"),
    ({"objective": "mlm_nsp", "data.mode": "full_sentences"},
     r"objective 'mlm_nsp' needs data.mode in \['nsp'\], got 'full_sentences' \(MLM alone is "
     r"objective='mlm'\)"),
    ({"objective": "mlm_sop"}, r"objective 'mlm_sop' needs data.mode in \['sop'\], got 'nsp'"),
    ({"objective": "sop"}, "objective 'sop' not in"),
    ({"objective": "electra", "electra.generator_hidden_fraction": 0.0},
     r"electra.generator_hidden_fraction 0.0 must be in \(0, 1\]"),
    ({"objective": "electra", "electra.disc_weight": -1.0}, "electra.disc_weight must be positive"),
    ({"data.masking": "span"}, r"config.data.masking='span'; expected one of"),
    ({"model_type": "gpt2"}, r"model_type 'gpt2' not in \['bert', 'roberta', 'distilbert'"),
    ({"model_type": "electra", "objective": "mlm", "data.mode": "full_sentences"},
     r"model_type 'electra' is trained by objective='electra', not 'mlm'"),
    ({"model_type": "distilbert"}, r"model_type 'distilbert' has no pooler for objective "
     r"'mlm_nsp''s sentence task"),
    ({"model_type": "deberta-v2", "objective": "electra", "data.mode": "full_sentences"},
     r"objective 'electra' trains ELECTRA's own encoders; model_type 'deberta-v2' is not"),
    ({"emd": True}, r"emd \(DeBERTa's enhanced mask decoder\) needs model_type 'deberta-v2' "
     r"and objective mlm, mlm_nsp or mlm_sop; got model_type 'bert'"),
    ({"objective": "distill"}, r"objective='distill' needs teacher_checkpoint"),
    ({"objective": "distill", "teacher_checkpoint": "/no/such/teacher"},
     "teacher_checkpoint /no/such/teacher does not exist"),
    ({"teacher_checkpoint": "/no/such/teacher"},
     "teacher_checkpoint is only read by objective='distill', not 'mlm_nsp'"),
])
def test_bad_configs_fail_fast(corpus, tmp_path, override, message):
  with pytest.raises(ValueError, match=message):
    pretrain.train(small_config(corpus, **override), str(tmp_path))


@pytest.mark.slow
def test_init_checkpoint_of_another_size_is_refused_before_the_data_is_read(
    corpus, straight_run, tmp_path):
  config = small_config(corpus, variant="mini", init_checkpoint=straight_run[0])
  (tmp_path / "not-read.txt.gz").write_bytes(b"not gzip")  # the data would fail next, when read
  config.data.files = str(tmp_path / "not-read*.gz")
  with pytest.raises(ValueError, match=r"checkpoint is L2 H128.*but config asks L4 H256"):
    pretrain.train(config, str(tmp_path / "w"))


@pytest.mark.slow
def test_distillation_teacher_of_another_vocab_is_refused_before_training(
    corpus, straight_run, tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(
      set(" ".join(WORDS).split()))) + "\n", encoding="utf-8")
  config = small_config(corpus, objective="distill", teacher_checkpoint=straight_run[0])
  config.data.vocab_file = str(vocab)
  with pytest.raises(ValueError, match=r"teacher_checkpoint .*: its vocab \(30522 tokens\) is "
                                       r"not the data's tokenizer's \(\d+ tokens; first difference"):
    pretrain.train(config, str(tmp_path / "w"))
  assert not (tmp_path / "w" / "checkpoints").exists() or not os.listdir(
      tmp_path / "w" / "checkpoints")


def test_cli_bad_config_is_one_line_without_traceback(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
       "--workdir", str(tmp_path), "--config.learning_rate=-0.01"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      "bert_jax.pretrain: error: bad config: learning_rate must be positive and finite, "
      "got -0.01")


def test_cli_rejects_unknown_config_key(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
       "--workdir", str(tmp_path), "--config.no_such_key=1"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert "no_such_key" in proc.stderr


@pytest.mark.slow
def test_convert_to_hf_takes_a_pretraining_workdir_and_its_checkpoints(straight_run, tmp_path):
  """`convert --to hf` takes a pretraining workdir and its checkpoints folder, as every other
  tool does, not only a bundle."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax import convert  # pylint: disable=g-import-not-at-top
  workdir = straight_run[0]
  tensors = []
  for src in (workdir, os.path.join(workdir, "checkpoints")):
    dst = str(tmp_path / str(len(tensors)))
    assert convert.main(["--to", "hf", "--src", src, "--dst", dst]) == 0
    tensors.append(load_file(os.path.join(dst, "model.safetensors")))
    assert open(os.path.join(dst, "vocab.txt")).read().split("\n")[:-1] == list(
        loading.load_pretrained(workdir).vocab)
  assert sorted(tensors[0]) == sorted(tensors[1])
  params = loading.load_pretrained(workdir).params
  np.testing.assert_array_equal(tensors[0]["bert.embeddings.word_embeddings.weight"],
                                params["bert"]["embeddings"]["word_embeddings"]["embedding"])
