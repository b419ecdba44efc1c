"""A trained model from any checkpoint a run can start from, and the record that describes it.

  load_pretrained     params, model config, vocab and casing from a bundle
                      (`python -m bert_jax.convert` output, a `workdir/export`), a pretraining
                      workdir, or its `checkpoints/`
  read_model_config   the model config alone, without reading params
  model_description   the record that makes a train checkpoint self-describing

The model description (model config, vocab tokens, casing) is the same record
in both forms: a bundle stores it as model_config.json, vocab.txt and
bundle.json beside its params, a train checkpoint as its `meta` item.
Reading only: training's checkpoints write what is read here.
"""
import dataclasses
import sys
from typing import Callable, Optional, Sequence, TypeVar

from etils import epath
import jax
import numpy as np

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import checksum
from bert_jax.checkpoints.folder import CheckpointFolder, committed_steps
from bert_jax.modeling import fp8
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.runtime.text_files import read_json
from bert_jax.runtime import workdirs

T = TypeVar("T")


def vocab_difference(found: Sequence[str], expected: Sequence[str]) -> str:
  """'' when two vocabularies hold the same tokens in the same order, else where they differ.

  E.g. "30522 tokens vs 30522; first difference at id 1012: '.' vs ','" (a
  permuted vocab of the same size is another vocab: each embedding row belongs
  to the token of its id).
  """
  found, expected = tuple(found), tuple(expected)
  if found == expected:
    return ""
  first = next((i for i, (a, b) in enumerate(zip(found, expected)) if a != b),
               min(len(found), len(expected)))
  at = (f": {found[first]!r} vs {expected[first]!r}"
        if first < min(len(found), len(expected)) else "")
  return f"{len(found)} tokens vs {len(expected)}; first difference at id {first}{at}"


def model_description(config: BertConfig, vocab: Sequence[str], lowercase: bool,
                      tokenizer_file: Optional[str] = None) -> dict:
  """The record that makes a checkpoint self-describing (stored in a train checkpoint's meta).

  Args:
    config: the model config.
    vocab: the tokenizer's tokens in id order.
    lowercase: its casing.
    tokenizer_file: the BPE vocab.json or SentencePiece .model of any tokenizer
      but WordPiece (whose tokens are the whole vocab).
  """
  record = {"model_config": config.replace(scan_layers=False).to_dict(), "vocab": list(vocab),
            "lowercase": bool(lowercase)}
  if tokenizer_file:
    record["tokenizer_file"] = tokenizer_file
  return record


@dataclasses.dataclass(frozen=True)
class Pretrained:
  """Params to start from, with the description that comes with them.

  Attributes:
    params: host (numpy) params in the canonical unscanned layout.
    config: the stored model config.
    vocab: the tokenizer's tokens, in id order.
    lowercase: uncased tokenization.
    source: the path the params came from (a bundle, or `checkpoints/<step>`).
    tokenizer_file: the byte-level BPE vocab.json or SentencePiece .model the
      model was trained with; None: WordPiece, whose tokens are `vocab`.
      `data.tokenizer.for_checkpoint` builds the tokenizer.
  """
  params: dict
  config: BertConfig
  vocab: tuple[str, ...]
  lowercase: bool
  source: str
  tokenizer_file: Optional[str] = None


def _checkpoints_dir(path: epath.Path) -> Optional[epath.Path]:
  """`path/checkpoints`, or `path` itself when it holds step directories (finished or not)."""
  if (path / workdirs.CHECKPOINTS).is_dir():
    return path / workdirs.CHECKPOINTS
  if path.is_dir() and any(p.name.split(".")[0].isdigit() for p in path.iterdir()):
    return path
  return None


def _locate(path: str) -> tuple[Optional[epath.Path], Optional[epath.Path], int]:
  """Where the checkpoint at `path` is: (bundle dir, None, -1) or (None, checkpoints dir, step),
  the step being the newest committed one (checkpoint_folder.committed_steps).

  Raises:
    FileNotFoundError / ValueError naming the path and why it is no checkpoint.
  """
  root = epath.Path(path)
  if not root.exists():
    raise FileNotFoundError(f"checkpoint {path} does not exist")
  if bundle.is_bundle(str(root)):
    return root, None, -1
  ckpt_dir = _checkpoints_dir(root)
  export = root / workdirs.EXPORT
  if bundle.is_bundle(str(export)):
    newer = _newer_than_export(export, ckpt_dir)
    if newer is None:
      return export, None, -1
    return None, *newer
  if ckpt_dir is None and ((root / workdirs.RUN_FILE).exists()
                           or (root / workdirs.FINETUNE_CHECKPOINTS).is_dir()):
    raise ValueError(f"checkpoint {path} is a fine-tuning run that has not finished (its "
                     f"{workdirs.EXPORT}/ is written at the end): finish it with the same "
                     f"python -m bert_jax.finetune command (--workdir {path}), then use "
                     f"{root / workdirs.EXPORT}")
  if ckpt_dir is None:
    raise ValueError(f"checkpoint {path} is neither a bert_jax bundle (no model_config.json), "
                     "a pretraining workdir, nor a checkpoints directory; convert Hugging Face or "
                     "Google checkpoints first with python -m bert_jax.convert")
  steps = committed_steps(ckpt_dir)
  if not steps:
    unfinished = sorted(p.name for p in ckpt_dir.iterdir() if "orbax-checkpoint-tmp" in p.name)
    raise ValueError(f"checkpoint directory {ckpt_dir} holds no finished checkpoint" + (
        f" (only {', '.join(unfinished)}: a save interrupted before it completed)"
        if unfinished else ""))
  return None, ckpt_dir, steps[-1]


def _newer_than_export(export: epath.Path, ckpt_dir: Optional[epath.Path]
                       ) -> Optional[tuple[epath.Path, int]]:
  """A workdir's checkpoints dir and newest committed step when newer than its export, else None.

  A run resumed after its export and stopped before the next one leaves an
  export/ older than its checkpoints: the newest state is the checkpoint
  (a one-line note says so). An export that records no step (fine-tuning,
  conversion) is the workdir's model.
  """
  info_file = export / bundle.INFO_FILE
  info = read_json(info_file, missing="") if info_file.exists() else {}
  step = info.get("step") if isinstance(info, dict) else None
  if ckpt_dir is None or not isinstance(step, int):
    return None
  steps = committed_steps(ckpt_dir)
  if not steps or steps[-1] <= step:
    return None
  latest = steps[-1]
  print(f"note: {ckpt_dir}/{latest} (step {latest}) is newer than {export} (step {step}); "
        "using the checkpoint", file=sys.stderr, flush=True)
  return ckpt_dir, latest


def read_model_config(path: str) -> BertConfig:
  """The model config of any checkpoint load_pretrained accepts, without reading params.

  For checks before a run's setup (a pretraining init_checkpoint of another
  size is refused before the data is read).
  """
  def from_checkpoint(ckpts: CheckpointFolder, step: int) -> BertConfig:
    source = f"{ckpts.directory}/{step}"
    return BertConfig.from_dict(ckpts.read_meta(step)["model_config"], source=source)

  return _read_newest(path, lambda d: bundle.read_config(str(d)), from_checkpoint)


def load_pretrained(path: str, expect: Optional[BertConfig] = None) -> Pretrained:
  """Loads params and their description from any checkpoint a run can start from.

  Reads only; nothing is written anywhere. A missing path or one that is no
  checkpoint raises FileNotFoundError / ValueError naming the path and why.

  Args:
    path: a bundle (converted Hugging Face / Google checkpoint, or a workdir's
      export/), a pretraining workdir (its export/ when the run finished, else
      its newest committed checkpoint), or a `checkpoints/` directory (the same).
    expect: when given, the checkpoint's architecture must match it.
  """
  def from_bundle(bundle_dir: epath.Path) -> Pretrained:
    b = bundle.load_bundle(str(bundle_dir), expect_config=expect)
    return Pretrained(b.params, b.config, tuple(bundle.vocab_lines(b.vocab_file)),
                      b.lowercase, str(bundle_dir), b.tokenizer_file)

  return _read_newest(path, from_bundle,
                      lambda ckpts, step: _load_checkpoint(ckpts, step, expect))


# Reads of a checkpoint that a training run deleted meanwhile (its rotation), before giving up.
# A small model saved every step with one kept rotates faster than a read on a busy 2-core
# host: 8 attempts all lost the race there once in about 400 reads; each attempt is one read.
READ_ATTEMPTS = 32


def _read_newest(path: str, from_bundle: Callable[[epath.Path], T],
                 from_checkpoint: Callable[[CheckpointFolder, int], T]) -> T:
  """from_bundle(dir) or from_checkpoint(folder, step) of what `path` resolves to (_locate).

  A run that is still training saves newer checkpoints and deletes older ones:
  one deleted while it was read (Orbax's listing, its metadata or its arrays
  vanish under the reader) is read again at the newest committed step, or the
  export once there; a failure on a checkpoint that is still there and still the
  newest is its own, and raised.
  """
  tried = []
  for _ in range(READ_ATTEMPTS):
    bundle_dir, ckpt_dir, step = _locate(path)
    if bundle_dir is not None:
      return from_bundle(bundle_dir)
    try:
      return from_checkpoint(CheckpointFolder(str(ckpt_dir), read_only=True), step)
    except Exception:  # pylint: disable=broad-except
      steps = committed_steps(ckpt_dir)
      if steps and steps[-1] == step:
        raise
      tried.append(step)
  raise RuntimeError(
      f"checkpoint {path}: the run saving into {ckpt_dir} deleted each checkpoint while it was "
      f"read (steps {', '.join(map(str, tried))}); read it again, or once the run has "
      f"finished (its {workdirs.EXPORT}/), or have it keep more (keep_checkpoints)") from None


def _load_checkpoint(ckpts: CheckpointFolder, step: int,
                     expect: Optional[BertConfig]) -> Pretrained:
  """load_pretrained for checkpoint `step` of `ckpts`."""
  source = f"{ckpts.directory}/{step}"
  meta = ckpts.read_meta(step)
  config = BertConfig.from_dict(meta["model_config"], source=source)
  if expect is not None:
    bundle.check_arch(config, expect, source)
  state = ckpts.restore_on_one_device(step, config)
  checksum.verify(state, meta.get("checksums"), source)
  params = fp8.split(state["params"])[0]  # the FP8 scales are a training run's (modeling/fp8.py)
  params = params.get("discriminator", params)  # ELECTRA's state: the discriminator is the model
  params = jax.tree.map(np.asarray, model_lib.unstack_layers(params))
  return Pretrained(params, config.replace(scan_layers=False), tuple(meta["vocab"]),
                    bool(meta["lowercase"]), source, meta.get("tokenizer_file"))
