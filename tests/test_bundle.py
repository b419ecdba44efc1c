"""Self-describing checkpoints: exact save/load, atomic overwrite, clear errors."""
from flax import traverse_util
import json
import os
import pathlib
import shutil

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.modeling import model as model_lib
from tests.fixtures import tiny_encoder
from tests.fixtures import write_faults
from tests.fixtures.tiny_encoder import BUNDLE_CONFIG as CONFIG


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                            + [f"w{i}" for i in range(19)]) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def params():
  rng = np.random.default_rng(0)
  shapes = bundle.pretraining_shapes(CONFIG)
  return traverse_util.unflatten_dict(
      {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}, sep="/")


@pytest.fixture(scope="module")
def saved(params, vocab_file, tmp_path_factory):
  path = str(tmp_path_factory.mktemp("b") / "bundle")
  bundle.save_bundle(path, params, CONFIG, vocab_file, lowercase=False, info={"step": 7})
  return path


def _equal_trees(a, b):
  fa, fb = traverse_util.flatten_dict(a, sep="/"), traverse_util.flatten_dict(b, sep="/")
  assert sorted(fa) == sorted(fb)
  for k in fa:
    np.testing.assert_array_equal(np.asarray(fa[k]), np.asarray(fb[k]), err_msg=k)


def test_round_trip_exact(saved, params, vocab_file):
  b = bundle.load_bundle(saved)
  _equal_trees(b.params, params)
  assert isinstance(traverse_util.flatten_dict(b.params, sep="/")["bert/pooler/kernel"], np.ndarray)
  assert b.config == CONFIG
  assert b.lowercase is False
  assert b.heads == ("pooler", "mlm", "nsp")
  assert b.info["step"] == 7 and b.info["format_version"] == bundle.FORMAT_VERSION
  assert b.info["num_params"] == sum(x.size for x in jax.tree.leaves(params))
  assert open(b.vocab_file).read() == open(vocab_file).read()
  assert bundle.is_bundle(saved) and not bundle.is_bundle(os.path.dirname(vocab_file))


def test_scanned_params_are_stored_unscanned(params, vocab_file, tmp_path):
  scan_config = CONFIG.replace(scan_layers=True)
  stacked = model_lib.match_scan_layout(params, scan_config)
  assert "layers" in stacked["bert"]["encoder"]
  path = str(tmp_path / "b")
  bundle.save_bundle(path, stacked, scan_config, vocab_file, lowercase=True)
  b = bundle.load_bundle(path)
  assert sorted(b.params["bert"]["encoder"]) == ["layer_0", "layer_1"]
  _equal_trees(b.params, params)
  _equal_trees(model_lib.match_scan_layout(b.params, scan_config), stacked)


def test_refuses_to_overwrite_and_overwrites_atomically(params, vocab_file, tmp_path):
  path = str(tmp_path / "b")
  p1 = jax.tree.map(lambda x: x + 1.0, params["bert"])
  p2 = jax.tree.map(lambda x: x + 2.0, params["bert"])
  bundle.save_bundle(path, {"bert": p1}, CONFIG, vocab_file, lowercase=True)
  with pytest.raises(FileExistsError, match="not empty.*overwrite"):
    bundle.save_bundle(path, {"bert": p2}, CONFIG, vocab_file, lowercase=True)
  _equal_trees(bundle.load_bundle(path).params, {"bert": p1})
  bundle.save_bundle(path, {"bert": p2}, CONFIG, vocab_file, lowercase=True, overwrite=True)
  _equal_trees(bundle.load_bundle(path).params, {"bert": p2})
  assert sorted(os.listdir(tmp_path)) == ["b"]  # no temporary or old directories left


def _state(dst: pathlib.Path, earlier: dict, new: bundle.Bundle) -> str:
  if not dst.exists():
    return "absent"
  if write_faults.snapshot(dst) == earlier:
    return "earlier"
  try:
    got = bundle.load_bundle(str(dst))
  except (FileNotFoundError, ValueError) as e:
    return f"unreadable: {e}"
  same = traverse_util.flatten_dict(got.params).keys() == traverse_util.flatten_dict(
      new.params).keys() and all(
          np.array_equal(a, b) for a, b in zip(jax.tree.leaves(got.params),
                                               jax.tree.leaves(new.params)))
  return "new" if same and got.config == new.config else "another bundle"


@pytest.mark.slow  # a child process per kill point (a few seconds each)
def test_a_kill_at_any_step_of_an_export_over_an_earlier_one_leaves_the_one_or_the_other(
    tmp_path):
  """An export (save_bundle over an earlier bundle, as pretraining and fine-tuning write
  theirs) ended like SIGKILL before each kind of step it takes (its first write of each
  kind, every rename and the exchange): the folder is at every moment the complete earlier
  bundle or the complete new one, never missing; the next write removes what it left."""
  new = tiny_encoder.save_random_bundle(tmp_path / "new", seed=0)
  wider = CONFIG.replace(hidden_size=32, num_heads=4, intermediate_size=64)
  earlier = tiny_encoder.save_random_bundle(tmp_path / "earlier", wider, seed=1, lowercase=False)
  earlier_files = write_faults.snapshot(pathlib.Path(earlier))
  new_bundle = bundle.load_bundle(new)
  root = tmp_path / "workdir"
  dst = root / "export"

  def reset():
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    shutil.copytree(earlier, dst)

  def export(kill_at):
    reset()
    return write_faults.run_killed_at(kill_at, root, "tests.fixtures.export_child",
                                      [new, str(dst)])
  whole = export(0)
  assert whole.returncode == 0 and _state(dst, earlier_files, new_bundle) == "new", whole.output
  kinds = [line.split("\t")[1] for line in whole.calls]
  assert "bert_jax.runtime.atomic_files._exchange" in kinds, whole.calls
  steps = [k for k, kind in enumerate(kinds, 1)
           if k == 1 or kind != kinds[k - 2] or kind in ("os.rename", "os.replace")
           or kind.endswith("_exchange")]
  seen = []
  for k in steps:
    run = export(k)
    assert run.returncode == write_faults.KILLED, run.output[-3000:]
    seen.append(_state(dst, earlier_files, new_bundle))
    assert seen[-1] in ("earlier", "new"), (run.calls[-1], seen[-1])
    assert not list(root.glob("*old-bundle*")), sorted(os.listdir(root))
    assert set(os.listdir(root)) - {"export"} <= set(write_faults.leftovers(root))
    bundle.save_bundle(str(dst), new_bundle.params, new_bundle.config, new_bundle.vocab_file,
                       new_bundle.lowercase, overwrite=True)
    assert _state(dst, earlier_files, new_bundle) == "new", run.calls[-1]
    assert sorted(os.listdir(root)) == ["export"], run.calls[-1]  # the leftovers removed
  # Kills fell before the exchange and after it; none left the folder missing or mixed.
  assert seen[0] == "earlier" and seen[-1] == "new" and set(seen) == {"earlier", "new"}, seen


def test_heads_are_checked(params, vocab_file, tmp_path):
  p = {k: v for k, v in params["bert"].items() if k != "pooler"}
  with pytest.raises(ValueError, match=r"heads \['mlm'\] requested"):
    bundle.save_bundle(str(tmp_path / "b"), {"bert": p}, CONFIG, vocab_file, True, heads=("mlm",))


def test_missing_and_not_a_bundle(tmp_path):
  with pytest.raises(FileNotFoundError, match="checkpoint not found"):
    bundle.load_bundle(str(tmp_path / "absent"))
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(ValueError, match="no model_config.json.*--from hf"):
    bundle.load_bundle(str(tmp_path))


def test_config_of_another_size(saved):
  big = CONFIG.replace(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072)
  with pytest.raises(ValueError, match="checkpoint is L2 H16 .* but config asks L12 H768 .*"
                     "num_layers: checkpoint 2 vs config 12"):
    bundle.load_bundle(saved, expect_config=big)
  # Compute options may differ.
  assert bundle.load_bundle(saved, expect_config=CONFIG.replace(dtype="bfloat16"),
                            with_params=False).params == {}


def _copy(src, dst):
  os.makedirs(dst)
  for root, _, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
      with open(os.path.join(root, f), "rb") as a, open(os.path.join(dst, rel, f), "wb") as b:
        b.write(a.read())


def test_vocab_size_mismatch(saved, tmp_path):
  d = str(tmp_path / "b")
  _copy(saved, d)
  with open(os.path.join(d, "vocab.txt"), "a") as f:
    f.write("one_more\n")
  with pytest.raises(ValueError, match="vocab has 25 tokens but .*vocab_size 24"):
    bundle.load_bundle(d)


def test_config_edited_to_another_size_fails_before_restore(saved, tmp_path):
  d = str(tmp_path / "b")
  _copy(saved, d)
  path = os.path.join(d, "model_config.json")
  cfg = json.load(open(path))
  cfg["intermediate_size"] = 48
  json.dump(cfg, open(path, "w"))
  with pytest.raises(ValueError, match=r"do not match its model_config.json.*intermediate/kernel: "
                     r"stored \(16, 32\) vs expected \(16, 48\)"):
    bundle.load_bundle(d)


def test_guess_lowercase(tmp_path):
  lower = tmp_path / "lower.txt"
  lower.write_text("\n".join(["[PAD]", "[UNK]"] + [f"w{i}" for i in range(200)]))
  cased = tmp_path / "cased.txt"
  cased.write_text("\n".join(["[PAD]", "[UNK]"] + [f"W{i}" for i in range(20)]
                             + [f"w{i}" for i in range(200)]))
  assert bundle.guess_lowercase(str(lower))
  assert not bundle.guess_lowercase(str(cased))


def test_checkpoints_dir_with_only_an_interrupted_save(tmp_path):
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  (tmp_path / "checkpoints" / "20.orbax-checkpoint-tmp-1763").mkdir(parents=True)
  for path in (tmp_path, tmp_path / "checkpoints"):
    with pytest.raises(ValueError, match=r"checkpoints holds no finished checkpoint \(only "
                                         r"20\.orbax-checkpoint-tmp-1763: a save interrupted"):
      loading.load_pretrained(str(path))


def test_checksums_see_every_bit_and_position():
  from bert_jax.checkpoints import checksum  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  tree = {"a": rng.normal(size=(3, 5)).astype(np.float32), "b": {"c": np.arange(7, dtype=np.int32)},
          "d": rng.normal(size=4).astype(jax.numpy.bfloat16)}
  sums = checksum.tree_checksums(tree)
  assert sorted(sums) == ["a", "b/c", "d"]
  checksum.verify(tree, sums, "ckpt")
  checksum.verify({"a": tree["a"]}, sums, "ckpt")  # a subset (params of a full state)
  checksum.verify(tree, None, "old ckpt")  # saved before checksums: nothing to compare
  for bit in range(32):  # every single-bit flip of an element
    flipped = tree["a"].copy()
    flipped.view(np.uint32)[1, 2] ^= np.uint32(1 << bit)
    with pytest.raises(checksum.ChecksumError, match="1 restored array.*: a$"):
      checksum.verify(dict(tree, a=flipped), sums, "ckpt")
  swapped = tree["b"]["c"][[1, 0, 2, 3, 4, 5, 6]]  # same values, other positions
  with pytest.raises(checksum.ChecksumError, match="b/c"):
    checksum.verify({"b": {"c": swapped}}, sums, "ckpt")


@pytest.mark.parametrize("changes, message", [
    ({"num_layers": 20_000}, r"declares num_layers 20,000 \(at most 1,024\)"),
    ({"hidden_size": 1_000_000, "num_heads": 1}, r"declares hidden_size 1,000,000 \(at most"),
    ({"num_layers": 500}, r"declares num_layers 500 but the params hold 2 encoder layers"),
])
def test_a_crafted_config_is_refused_before_anything_is_built(saved, tmp_path, changes, message):
  """A model_config.json claiming 20,000 layers is refused before the model's shapes are traced
  (tracing them first would hang fill_mask, embed and finetune): the declared sizes are compared
  with CONFIG_LIMITS and with the arrays on disk."""
  d = str(tmp_path / "b")
  _copy(saved, d)
  path = os.path.join(d, "model_config.json")
  json.dump(dict(json.load(open(path)), **changes), open(path, "w"))
  with pytest.raises(ValueError, match=message):
    bundle.load_bundle(d, with_params=False)


def test_a_checkpoint_of_the_same_member_with_other_settings_is_named_as_such():
  from bert_jax.modeling.model_config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_jax.members import registry as members  # pylint: disable=g-import-not-at-top
  base = members.get("modernbert").build(BertConfig(vocab_size=24, hidden_size=16, num_layers=2,
                                                    num_heads=2, intermediate_size=32), 0)
  with pytest.raises(ValueError, match=r"^ckpt: checkpoint is a modernbert with other settings "
                                       r"than the config asks \(local_window: checkpoint 128 vs "
                                       r"config 64\)$"):
    bundle.check_arch(base.replace(local_window=128), base.replace(local_window=64), "ckpt")
