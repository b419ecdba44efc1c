"""`convert` replaces --dst whole.

A kill at any write, rename or removal of a conversion leaves --dst the complete earlier folder
or the complete new one (never a mix of two models, never a folder with only config.json), the
same command then finishes, and what the killed run left beside --dst is removed by it. On a
file system without an atomic exchange of two folders the earlier folder is renamed aside
first: a kill then leaves it beside --dst, and the next write there puts it back.
`--overwrite` replaces only a folder an export wrote: a tokenizer.json of an earlier model (which
transformers' AutoTokenizer would read with the new weights) or a user's file is named, and
nothing is touched.
"""
import pathlib
import shutil
import types

from flax import traverse_util
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.conversion import hf
from bert_jax import convert
from bert_jax.runtime import atomic_files
from tests.fixtures import tiny_encoder
from tests.fixtures import write_faults

# The earlier model is wider and cased: loading its weights under the new config fails in
# transformers (a size mismatch), and its tokenizer is another one.
_WIDER = tiny_encoder.BUNDLE_CONFIG.replace(hidden_size=32, num_heads=4, intermediate_size=64)
_NO_EXCHANGE = ("import bert_jax.runtime.atomic_files as atomic_files\n"
                "atomic_files._exchange = lambda a, b: False  # as on NFS\n")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """Two bundles (the new tiny one, an earlier wider cased one), their exports, and the new
  one's export converted back."""
  root = tmp_path_factory.mktemp("models")
  m = types.SimpleNamespace(
      new=tiny_encoder.save_random_bundle(root / "new", seed=0),
      earlier=tiny_encoder.save_random_bundle(root / "earlier", _WIDER, seed=1, lowercase=False),
      new_hf=root / "new_hf", earlier_hf=root / "earlier_hf", new_back=str(root / "new_back"))
  hf.bundle_to_hf(m.new, str(m.new_hf))
  hf.bundle_to_hf(m.earlier, str(m.earlier_hf))
  hf.hf_to_bundle(str(m.new_hf), m.new_back)  # what `--from hf` of new_hf gives
  return m


def _hf_state(dst: pathlib.Path, m) -> str:
  if not dst.exists():
    return "absent"
  files = write_faults.snapshot(dst)
  if files == write_faults.snapshot(m.earlier_hf):
    return "earlier"
  if files == write_faults.snapshot(m.new_hf):
    return "new"
  return f"a mix: {sorted(files)}"


def _kill_at_every_step(root, dst, args, reset, state, rerun, setup=""):
  """Runs `convert ARGS` killed before its 1st, 2nd, ... counted call until one run finishes;
  after each kill checks `state(dst)`, then runs the conversion again in this process, which
  must finish and remove what the killed run left. Returns the states seen after the kills."""
  reset()
  before = "earlier" if dst.exists() else "absent"
  seen, left = [], []
  for k in range(1, 200):
    reset()
    run = write_faults.run_killed_at(k, root, "bert_jax.convert", args, setup=setup)
    after = state(dst)
    if run.returncode == 0:
      assert after == "new" and not write_faults.leftovers(root), (after, run.output[-2000:])
      break
    assert run.returncode == write_faults.KILLED, run.output[-3000:]
    if after == "absent" and any(n.endswith(".earlier") for n in write_faults.leftovers(root)):
      # Two renames, killed between them: the earlier folder is beside dst, and put back.
      atomic_files.remove_leftovers(root)
      after = "put back " + state(dst)
    # Never a mix, and never without the earlier folder while the new one is not there.
    assert after in (before, "new", "put back earlier"), (run.calls[-1], after)
    seen.append(after)
    rerun()
    assert state(dst) == "new", run.calls[-1]
    left += write_faults.leftovers(root)
  else:
    raise AssertionError("the conversion never finished")
  assert not left  # the rerun removed what each killed run left
  return seen


@pytest.mark.slow  # a child process per kill point (a few seconds each)
@pytest.mark.parametrize("earlier,setup", [(True, ""), (True, _NO_EXCHANGE), (False, "")],
                         ids=["over_an_export", "over_an_export_without_exchange", "into_a_new_dst"])
def test_a_kill_at_any_step_of_convert_to_hf_leaves_the_earlier_or_the_new_export(
    models, tmp_path, earlier, setup):
  root = tmp_path / "out"
  dst = root / "hf"

  def reset():
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    if earlier:
      shutil.copytree(models.earlier_hf, dst)
  args = ["--to", "hf", "--src", models.new, "--dst", str(dst), "--overwrite", "--quiet"]
  seen = _kill_at_every_step(
      root, dst, args, reset, lambda d: _hf_state(d, models),
      lambda: hf.bundle_to_hf(models.new, str(dst), overwrite=True), setup)
  if not earlier:  # the rename that puts the folder in place is the run's last step
    assert set(seen) == {"absent"}, seen
  elif setup:
    assert seen[0] == "earlier" and seen[-1] == "new" and "put back earlier" in seen, seen
  else:  # kills fell before the new folder was in place and after it
    assert seen[0] == "earlier" and seen[-1] == "new" and set(seen) == {"earlier", "new"}, seen


@pytest.mark.slow
def test_the_new_export_loads_in_transformers(models):
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForPreTraining.from_pretrained(str(models.new_hf))
  assert type(model).__name__ == "BertForPreTraining"
  assert model.config.hidden_size == tiny_encoder.BUNDLE_CONFIG.hidden_size


def _bundle_state(dst: pathlib.Path, m, earlier_files) -> str:
  if not dst.exists():
    return "absent"
  if write_faults.snapshot(dst) == earlier_files:
    return "earlier"
  try:
    got, want = bundle.load_bundle(str(dst)), bundle.load_bundle(m.new_back)
  except (FileNotFoundError, ValueError) as e:
    return f"unreadable: {e}"
  got_params, want_params = (traverse_util.flatten_dict(x.params, sep="/") for x in (got, want))
  same = got_params.keys() == want_params.keys() and all(
      np.array_equal(got_params[k], want_params[k]) for k in want_params)
  return "new" if got.config == want.config and same else "another bundle"


@pytest.mark.slow  # a child process per kill point (a few seconds each)
def test_a_kill_at_any_step_of_convert_from_hf_leaves_the_earlier_or_the_new_bundle(
    models, tmp_path):
  root = tmp_path / "out"
  dst = root / "bundle"
  earlier_files = write_faults.snapshot(pathlib.Path(models.earlier))

  def reset():
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    shutil.copytree(models.earlier, dst)
  args = ["--from", "hf", "--src", str(models.new_hf), "--dst", str(dst), "--overwrite",
          "--quiet"]
  seen = _kill_at_every_step(
      root, dst, args, reset, lambda d: _bundle_state(d, models, earlier_files),
      lambda: hf.hf_to_bundle(str(models.new_hf), str(dst), overwrite=True))
  assert seen[0] == "earlier" and seen[-1] == "new" and set(seen) == {"earlier", "new"}, seen


def test_overwrite_names_files_an_export_does_not_write_and_touches_nothing(models, tmp_path):
  dst = tmp_path / "hf"
  shutil.copytree(models.earlier_hf, dst)
  # An earlier model's fast tokenizer (AutoTokenizer reads tokenizer.json before vocab.txt) and
  # the user's notes.
  (dst / "tokenizer.json").write_text('{"model": {"type": "WordPiece"}}')
  (dst / "README.md").write_text("my notes")
  before = write_faults.snapshot(dst)
  with pytest.raises(FileExistsError, match=r"hf holds README.md, tokenizer.json, which an "
                                            r"export does not write; --overwrite replaces only "
                                            r"an earlier export"):
    convert.main(["--to", "hf", "--src", models.new, "--dst", str(dst), "--overwrite",
                  "--quiet"])
  assert write_faults.snapshot(dst) == before and not write_faults.leftovers(tmp_path)
  # Without them, the new export replaces the earlier one whole: only the new model's files.
  (dst / "tokenizer.json").unlink()
  (dst / "README.md").unlink()
  convert.main(["--to", "hf", "--src", models.new, "--dst", str(dst), "--overwrite", "--quiet"])
  assert write_faults.snapshot(dst) == write_faults.snapshot(models.new_hf)


@pytest.mark.parametrize("record", ["run.json", "checkpoints", "finetune_checkpoints"])
def test_overwrite_refuses_a_training_runs_export(models, tmp_path, record):
  """A run's export/ replaced by a conversion would no longer be what the run trained, while
  its records (run.json: finished) say it is: refused, nothing touched."""
  run = tmp_path / "run"
  shutil.copytree(models.earlier, run / "export")
  (run / record).mkdir() if record.endswith("checkpoints") else (run / record).write_text("{}")
  before = write_faults.snapshot(run)
  with pytest.raises(FileExistsError, match=r"export is the export of the training run in .*run; "
                                            r"--overwrite replaces only a bundle of its own"):
    convert.main(["--from", "hf", "--src", str(models.new_hf), "--dst", str(run / "export"),
                  "--overwrite", "--quiet"])
  assert write_faults.snapshot(run) == before and not write_faults.leftovers(tmp_path)
  # A bundle of its own named export/ (no run beside it) is replaced as before.
  alone = tmp_path / "alone" / "export"
  shutil.copytree(models.earlier, alone)
  convert.main(["--from", "hf", "--src", str(models.new_hf), "--dst", str(alone), "--overwrite",
                "--quiet"])
