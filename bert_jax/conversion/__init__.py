"""Checkpoint conversion between bert_jax bundles and Hugging Face / Google TF1 BERT
(name_map.py holds the name tables and hooks; the command line is bert_jax.convert)."""
import os
from typing import Any, Callable, Optional

from etils import epath
from flax import traverse_util
import numpy as np

from bert_jax.checkpoints import bundle
from bert_jax.runtime import workdirs


def to_bundle(load: Callable[..., dict[str, Any]], kind: str, src: str, dst: str, *,
              lowercase: Optional[bool] = None, overwrite: bool = False,
              drop_unexpected: bool = False) -> dict[str, Any]:
  """Reads a foreign checkpoint with `load` (hf.load_hf or tf1.load_tf1) and writes it as a
  bert_jax bundle at `dst`; returns `load`'s summary.

  lowercase None: from the tokenizer files, else guessed from the vocab. overwrite replaces a
  `dst` that is exactly a bundle. A refused write is an OutputWriteError naming `dst`.
  """
  dst_path = epath.Path(dst)
  if dst_path.exists() and any(dst_path.iterdir()):
    if not overwrite:
      raise FileExistsError(f"{dst} exists and is not empty; pass --overwrite to replace it")
    bundle.check_replaceable(dst)  # before the checkpoint is read
    _check_not_a_runs_export(dst_path)
  out = load(src, drop_unexpected=drop_unexpected, lowercase=lowercase)
  check_finite(out["params"], src)
  source = src if "://" in src else os.path.abspath(src)
  # save_bundle builds it whole beside dst and puts it in place in one step: a kill or a full
  # disk leaves dst as it was (the earlier bundle, or nothing), never without a bundle.
  bundle.save_bundle(dst, out["params"], out["config"], out["vocab_file"] or out["vocab"],
                     out["lowercase"],
                     info={**out.get("info", {}), "source": f"{kind}:{source}",
                           "dropped": out["dropped"]},
                     overwrite=overwrite, tokenizer_file=out.get("tokenizer_file"))
  return out


def _check_not_a_runs_export(dst: epath.Path) -> None:
  """Refuses (FileExistsError) a --dst that is a training run's export/: replaced, it would no
  longer be what the run trained, while the run's records say it is."""
  run = dst.parent
  if dst.name == workdirs.EXPORT and any((run / name).exists() for name in (
      workdirs.CHECKPOINTS, workdirs.FINETUNE_CHECKPOINTS, workdirs.RUN_FILE, workdirs.METRICS)):
    raise FileExistsError(f"{dst} is the export of the training run in {run}; --overwrite "
                          "replaces only a bundle of its own: choose another --dst")


def check_finite(params: Any, src: str) -> None:
  """Refuses (ValueError) a checkpoint with NaN/inf values, naming up to 5 tensors and counts."""
  bad = []
  for path, x in traverse_util.flatten_dict(params, sep="/").items():
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating):
      n = int(x.size - np.count_nonzero(np.isfinite(x)))
      if n:
        bad.append(f"{path} ({n} of {x.size})")
  if bad:
    raise ValueError(f"{src} holds NaN/inf values in {len(bad)} tensor(s): "
                     f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; not converted")
