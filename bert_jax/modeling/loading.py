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
from typing import Optional, Sequence

from etils import epath
import jax
import numpy as np

from bert_jax.modeling import bundle
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.checkpoint_folder import CheckpointFolder
from bert_jax.modeling.model_config import BertConfig
from bert_jax.runtime import checksum
from bert_jax.runtime.json_file import read_json
from bert_jax.runtime import workdir_layout


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
  if (path / workdir_layout.CHECKPOINTS).is_dir():
    return path / workdir_layout.CHECKPOINTS
  if path.is_dir() and any(p.name.split(".")[0].isdigit() for p in path.iterdir()):
    return path
  return None


def _locate(path: str) -> tuple[Optional[epath.Path], Optional[CheckpointFolder], int]:
  """Where the checkpoint at `path` is: (bundle dir, None, -1) or (None, checkpoints, step).

  Raises:
    FileNotFoundError / ValueError naming the path and why it is no checkpoint.
  """
  root = epath.Path(path)
  if not root.exists():
    raise FileNotFoundError(f"checkpoint {path} does not exist")
  if bundle.is_bundle(str(root)):
    return root, None, -1
  ckpt_dir = _checkpoints_dir(root)
  export = root / workdir_layout.EXPORT
  if bundle.is_bundle(str(export)):
    newer = _newer_than_export(export, ckpt_dir)
    if newer is None:
      return export, None, -1
    return None, *newer
  if ckpt_dir is None and ((root / workdir_layout.RUN_FILE).exists()
                           or (root / workdir_layout.FINETUNE_CHECKPOINTS).is_dir()):
    raise ValueError(f"checkpoint {path} is a fine-tuning run that has not finished (its "
                     f"{workdir_layout.EXPORT}/ is written at the end): finish it with the same "
                     f"python -m bert_jax.finetune command (--workdir {path}), then use "
                     f"{root / workdir_layout.EXPORT}")
  if ckpt_dir is None:
    raise ValueError(f"checkpoint {path} is neither a bert_jax bundle (no model_config.json), "
                     "a pretraining workdir, nor a checkpoints directory; convert Hugging Face or "
                     "Google checkpoints first with python -m bert_jax.convert")
  ckpts = CheckpointFolder(str(ckpt_dir), async_save=False)
  step = ckpts.latest_step()
  if step is None:
    unfinished = sorted(p.name for p in ckpt_dir.iterdir() if "orbax-checkpoint-tmp" in p.name)
    raise ValueError(f"checkpoint directory {ckpt_dir} holds no finished checkpoint" + (
        f" (only {', '.join(unfinished)}: a save interrupted before it completed)"
        if unfinished else ""))
  return None, ckpts, step


def _newer_than_export(export: epath.Path, ckpt_dir: Optional[epath.Path]
                       ) -> Optional[tuple[CheckpointFolder, int]]:
  """A workdir's checkpoints and latest step when they are newer than its export, else None.

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
  ckpts = CheckpointFolder(str(ckpt_dir), async_save=False)
  latest = ckpts.latest_step()
  if latest is None or latest <= step:
    return None
  print(f"note: {ckpt_dir}/{latest} (step {latest}) is newer than {export} (step {step}); "
        "using the checkpoint", file=sys.stderr, flush=True)
  return ckpts, latest


def read_model_config(path: str) -> BertConfig:
  """The model config of any checkpoint load_pretrained accepts, without reading params.

  For checks before a run's setup (a pretraining init_checkpoint of another
  size is refused before the data is read).
  """
  bundle_dir, ckpts, step = _locate(path)
  if bundle_dir is not None:
    return bundle.read_config(str(bundle_dir))
  source = f"{ckpts.directory}/{step}"
  return BertConfig.from_dict(ckpts.read_meta(step)["model_config"], source=source)


def load_pretrained(path: str, expect: Optional[BertConfig] = None) -> Pretrained:
  """Loads params and their description from any checkpoint a run can start from.

  Reads only; nothing is written anywhere. A missing path or one that is no
  checkpoint raises FileNotFoundError / ValueError naming the path and why.

  Args:
    path: a bundle (converted Hugging Face / Google checkpoint, or a workdir's
      export/), a pretraining workdir (its export/ when the run finished, else
      its latest checkpoint), or a `checkpoints/` directory (latest step).
    expect: when given, the checkpoint's architecture must match it.
  """
  # A run that is still training saves newer checkpoints and deletes older ones: one deleted
  # while it was read is read again at the newest step (or the export, once there); a
  # failure on a checkpoint that is still there and still the newest is its own.
  located = _locate(path)
  for attempt in range(READ_ATTEMPTS):
    bundle_dir, ckpts, step = located
    if bundle_dir is not None:
      b = bundle.load_bundle(str(bundle_dir), expect_config=expect)
      return Pretrained(b.params, b.config, tuple(bundle.vocab_lines(b.vocab_file)),
                        b.lowercase, str(bundle_dir), b.tokenizer_file)
    try:
      return _load_checkpoint(ckpts, step, expect)
    except Exception:  # pylint: disable=broad-except
      if attempt == READ_ATTEMPTS - 1:
        raise
      located = _locate(path)
      if located[1] is not None and located[2] == step and (
          located[1].directory / str(step)).exists():
        raise
  raise AssertionError("unreachable")


# Reads of a checkpoint that a training run deleted meanwhile (its rotation), before giving up.
READ_ATTEMPTS = 4


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
  params = state["params"]
  params = params.get("discriminator", params)  # ELECTRA's state: the discriminator is the model
  params = jax.tree.map(np.asarray, model_lib.unstack_layers(params))
  return Pretrained(params, config.replace(scan_layers=False), tuple(meta["vocab"]),
                    bool(meta["lowercase"]), source, meta.get("tokenizer_file"))
