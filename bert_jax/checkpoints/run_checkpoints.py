"""Train checkpoints: where a run's state is saved, and every way a run can start.

  TrainCheckpoints  an Orbax CheckpointManager in `workdir/checkpoints`
                    (checkpoints.folder's layout): each step holds the full
                    train state (`state`, restored straight into its shardings) and a
                    JSON item (`meta`: data position and the model description); an
                    unreadable latest checkpoint is moved to
                    `workdir/checkpoints_unreadable/` (never deleted) and the previous
                    one is used
  config_resume_check  a resumed checkpoint must have been saved by this run's config
  initial_state     the initialisation policy of every entry point, in one place

What a run starts from (checkpoints.loading.load_pretrained) is a module of its own,
so that programs which only use a trained model need nothing from here.
"""
import contextlib
from typing import Any, Callable, Optional, Sequence, Union

from absl import logging
from etils import epath
from flax import traverse_util
import flax.linen as nn
import jax
import numpy as np
import optax
import orbax.checkpoint as ocp

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import checksum
from bert_jax.checkpoints.folder import CheckpointFolder, one_line_cause
from bert_jax.checkpoints import loading
from bert_jax.modeling import fp8
from bert_jax.modeling import model as model_lib
from bert_jax.runtime import write_errors
from bert_jax.training import sharding


class ResumeMismatchError(ValueError):
  """A workdir's checkpoint was saved by another config than the run resuming it."""


class CheckpointSaveError(RuntimeError):
  """An (asynchronous) checkpoint save failed: a full disk, a lost permission, a bucket gone."""


class UnreadableCheckpointsError(RuntimeError):
  """A workdir had checkpoints and none of them can be read."""


class TrainCheckpoints(CheckpointFolder):
  """Async saving, keep-last-K, and restore with fallback.

  Args:
    directory: the checkpoints directory (created if missing; local or gs://).
    max_to_keep: how many recent checkpoints are kept.
    async_save: save in a background thread.
  """

  def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True):
    super().__init__(directory, max_to_keep, async_save)
    self._failed = False  # a save failed: close() does not wait on it again

  def describe_latest(self) -> str:
    """The latest checkpoint's path, or 'none saved yet' (for messages)."""
    last = self.latest_step()
    return f"{self.directory}/{last}" if last is not None else "none saved yet"

  def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
    """Starts saving (asynchronously); a step already saved is left as it is.

    Raises:
      CheckpointSaveError: this save, or an earlier one still in flight, failed.
    """
    if step in self._manager.all_steps():
      return
    meta = dict(meta, checksums=checksum.tree_checksums(state))  # verified at restore
    with self._save_errors():
      self._manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))

  def wait(self) -> None:
    """Blocks until pending saves are committed; CheckpointSaveError if one failed."""
    with self._save_errors():
      self._manager.wait_until_finished()

  def check_saves(self) -> None:
    """Without blocking: CheckpointSaveError when a finished background save failed.

    Called at every log step, so a full disk stops the run within `log_every`
    steps of the failed save rather than at the next checkpoint.
    """
    if not self._manager.is_saving_in_progress():
      self.wait()  # nothing in flight: returns at once, or raises the failed save's error

  @contextlib.contextmanager
  def _save_errors(self):
    """Turns Orbax's failure (and its chain) into one CheckpointSaveError line."""
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      self._failed = True
      kept = ", ".join(str(s) for s in self.all_steps()) or "none"
      raise CheckpointSaveError(
          f"saving a checkpoint to {self.directory} failed ({write_errors.write_error_cause(e)}); "
          f"stopping. Checkpoints saved before are intact (steps: {kept})") from None

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
    """Restores `step` into the shardings of `abstract_state` (ShapeDtypeStructs)."""
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
    checksum.verify(out["state"], out["meta"].get("checksums"), f"{self.directory}/{step}")
    return out["state"], out["meta"]

  def restore_latest(self, abstract_state: Any, run_config: Optional[dict] = None, *,
                     check: Optional[Callable[[str, dict], None]] = None,
                     start_over: bool = False, start_over_hint: str = "",
                     ) -> Optional[tuple[int, Any, dict[str, Any]]]:
    """Restores the newest readable checkpoint, or None when there is none.

    A checkpoint whose saved arrays (names and shapes, from its metadata) differ
    from `abstract_state` was written by another config: that is an error
    (ResumeMismatchError, naming the differences and, with `run_config`, the
    config keys that changed), and nothing is moved; so is a checkpoint that
    `check(path, meta)` refuses (it raises). Only a checkpoint that matches and
    still fails to restore (truncated file, partial copy) is unreadable: the
    next older one is tried, and once one is restored the unreadable newer ones
    are logged and moved to `<directory>_unreadable/<step>` (never nested:
    `<step>.1`, ... when that exists). When none can be read, nothing is moved:
    UnreadableCheckpointsError names them and `start_over_hint`; with
    `start_over` they are moved aside and None is returned.
    """
    unreadable = []  # (step, error), newest first
    for step in reversed(self.all_steps()):
      mismatch = self._layout_mismatch(step, abstract_state)
      if mismatch:
        raise ResumeMismatchError(self._mismatch_message(step, mismatch, run_config))
      try:
        meta = self.read_meta(step)
      except Exception as e:  # pylint: disable=broad-except
        unreadable.append((step, e))
        continue
      if check is not None:
        check(f"{self.directory}/{step}", meta)
      try:
        state, meta = self.restore(step, abstract_state)
      except Exception as e:  # pylint: disable=broad-except
        unreadable.append((step, e))
        continue
      self._move_aside(unreadable, f"falling back to step {step}")
      return step, state, meta
    if unreadable and not start_over:
      listed = "; ".join(f"step {step}: {one_line_cause(e)}" for step, e in unreadable)
      raise UnreadableCheckpointsError(
          f"{self.directory}: none of its checkpoints can be read ({listed}); nothing was "
          f"moved or overwritten. {start_over_hint}".rstrip())
    self._move_aside(unreadable, "starting over")
    return None

  def _move_aside(self, unreadable: list, then: str) -> None:
    """Moves unreadable checkpoints to `<directory>_unreadable/` (kept, never deleted)."""
    for step, e in unreadable:
      aside = self._aside_path(step)
      logging.info("checkpoint %s/%d is unreadable", self.directory, step, exc_info=e)
      print(f"WARNING: checkpoint step {step} unreadable ({one_line_cause(e)}); moved to "
            f"{aside}; {then}", flush=True)
      aside.parent.mkdir(parents=True, exist_ok=True)
      (self.directory / str(step)).rename(aside)
    if unreadable:
      self._manager.reload()

  def _aside_path(self, step: int) -> epath.Path:
    """Where an unreadable checkpoint goes: a new name beside earlier ones, never inside."""
    root = epath.Path(str(self.directory) + "_unreadable")
    aside, n = root / str(step), 0
    while aside.exists():
      n += 1
      aside = root / f"{step}.{n}"
    return aside

  def _layout_mismatch(self, step: int, abstract_state: Any) -> list[str]:
    """How the saved arrays of `step` differ from `abstract_state`.

    [] when they match, or when the metadata itself is unreadable or empty
    (restoring then reports the checkpoint as unreadable). A mismatch is never
    taken for corruption: misjudged, it stops the run with nothing moved.
    """
    try:
      saved = bundle.read_metadata_tree(ocp.StandardCheckpointer(),
                                        self.directory / str(step) / "state")
    except Exception:  # pylint: disable=broad-except
      return []
    saved = ocp.tree.to_flat_dict(saved or {}, sep="/")
    if not saved:  # a truncated metadata file reads as no arrays: unreadable, not another config
      return []
    want = ocp.tree.to_flat_dict(abstract_state, sep="/")
    params_first = lambda k: (not k.startswith("params/"), k)  # pylint: disable=unnecessary-lambda-assignment
    out = [f"{k}: saved {tuple(saved[k].shape)}, this run {tuple(want[k].shape)}"
           for k in sorted(saved.keys() & want.keys(), key=params_first)
           if tuple(saved[k].shape) != tuple(want[k].shape)]
    out += [f"{k}: only in the checkpoint" for k in sorted(saved.keys() - want.keys())]
    out += [f"{k}: only in this run" for k in sorted(want.keys() - saved.keys())]
    return out

  def _mismatch_message(self, step: int, mismatch: list[str], run_config: Optional[dict]) -> str:
    changed = ""
    if run_config is not None:
      saved = self.read_meta(step).get("config")
      if isinstance(saved, dict):
        a = traverse_util.flatten_dict(saved, sep=".")
        b = traverse_util.flatten_dict(run_config, sep=".")
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        listed = ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:8])
        changed = f"; config keys changed since: {listed}" + (" ..." if len(keys) > 8 else "")
    return (f"{self.directory}/{step} was saved by a run with another model or optimizer "
            f"({len(mismatch)} arrays differ: {'; '.join(mismatch[:3])}{changed}). Resume with the "
            "config it was saved with, or start this config in a new --workdir; nothing was "
            "moved or deleted")

  def close(self) -> None:
    """Waits for pending saves and releases Orbax's threads; after a failed save, quietly."""
    try:
      if not self._failed:
        self.wait()
    finally:
      try:
        self._manager.close()
      except Exception:  # pylint: disable=broad-except
        if not self._failed:
          raise


def config_resume_check(config_record: dict, vocab: Sequence[str], may_change: Sequence[str],
                        never_change: Sequence[str], vocab_keys: str
                        ) -> Callable[[str, dict], None]:
  """check(path, meta) for TrainCheckpoints.restore_latest: the saved run must be this run.

  Refuses (ResumeMismatchError, one line, nothing moved) a checkpoint saved with another
  value of a config key outside `may_change` (a key ending in '.' covers its section) or of
  one in `never_change` (the saved position counts its batches), or with another vocabulary
  (the same tokens in the same order). `vocab_keys`: the message's words for the keys that
  choose the vocabulary.
  """
  current = traverse_util.flatten_dict(config_record, sep=".")
  may_change_words = ", ".join(k + "*" if k.endswith(".") else k for k in may_change)

  def check(path: str, meta: dict) -> None:
    saved_vocab = meta.get("vocab")
    if saved_vocab is not None:
      diff = loading.vocab_difference(saved_vocab, vocab)
      if diff:
        raise ResumeMismatchError(
            f"{path} was trained with another vocabulary than this run's tokenizer (saved {diff})"
            f"; resume with the vocab it was trained with ({vocab_keys}), or start a new "
            "--workdir; nothing was moved or written")
    saved = meta.get("config")
    if not isinstance(saved, dict):  # saved before configs were recorded
      return
    saved = traverse_util.flatten_dict(saved, sep=".")
    changed = sorted(k for k in saved.keys() | current.keys()
                     if saved.get(k) != current.get(k))
    never = [k for k in changed if k in never_change]
    refused = [k for k in changed if k in never or not any(
        k == a or (a.endswith(".") and k.startswith(a)) for a in may_change)]
    if not refused:
      return
    listed = ", ".join(f"{k} {saved.get(k)!r} -> {current.get(k)!r}" for k in refused)
    how = (f"; {never[0]} cannot change on resume (the saved data position counts batches "
           f"of {saved.get(never[0])}): start a new --workdir with "
           f"--config.init_checkpoint={path}" if never else
           f"; to change them on purpose pass --config.resume_allow_changes="
           f"{','.join(refused)}")
    raise ResumeMismatchError(
        f"{path} was saved with other settings ({listed}){how}; or resume with the saved "
        f"settings (always allowed to change: {may_change_words}); nothing was moved "
        "or written")
  return check


def merge_params(init: dict, loaded: dict, source: str) -> dict:
  """Loaded params over freshly initialised ones (same layout).

  Sub-trees missing from `loaded` (new task heads) keep their fresh values;
  sub-trees only in `loaded` (pretraining heads a task model lacks) are dropped;
  a shape mismatch is an error naming the parameter.
  """
  def merge(a, b, path):
    if not isinstance(a, dict):
      if tuple(np.shape(a)) != tuple(np.shape(b)):
        raise ValueError(f"{source}: param {'/'.join(path)} has shape {tuple(np.shape(b))}, "
                         f"the model expects {tuple(np.shape(a))}")
      return b
    if not isinstance(b, dict):
      raise ValueError(f"{source}: {'/'.join(path)} is a tensor, the model expects a sub-tree")
    return {k: merge(v, b[k], path + (k,)) if k in b else v for k, v in a.items()}
  return merge(init, loaded, ())


def initial_state(init_fn: Callable[[jax.Array], Any], tx: optax.GradientTransformation,
                  rng: jax.Array, mesh, rules, *,
                  checkpoints: Optional[TrainCheckpoints] = None,
                  pretrained: Union[None, loading.Pretrained, Callable[[], loading.Pretrained]] = None,
                  fresh_heads: Sequence[str] = (),
                  run_config: Optional[dict] = None,
                  **resume_options) -> tuple[Any, Any, Optional[dict], str]:
  """The sharded initial train state of any entry point.

  Decide how to initialise training. The order is important:
    1. `checkpoints` holds a readable checkpoint (this workdir was run before):
       resume it exactly (state, step, rng; its meta carries the data position).
    2. `pretrained` is given (config.init_checkpoint): its params over the model's.
       Params it lacks (a new task head, a pooler) are initialised fresh, and so
       are the heads named in `fresh_heads` even when it has them (a task head
       from fine-tuning another task). Its tensors go straight into their
       shardings; only the fresh params are computed, by a jitted init whose
       other outputs XLA drops (the same values as a full init with this rng).
    3. Otherwise: from scratch, directly into the derived shardings.
  The state's shardings come from `jax.eval_shape(init_fn)` in every case.

  Args:
    init_fn: rng -> train_core.TrainState with boxed (logically named) params.
    tx: the optimizer (its state is initialised from the params the run starts with).
    rng: the init rng.
    mesh: the device mesh.
    rules: logical -> mesh axis rules.
    checkpoints: this run's checkpoints (None: nothing to resume).
    pretrained: params to start from, or a function that loads them (called only
      when nothing is resumed).
    fresh_heads: top-level param groups never taken from `pretrained`.
    run_config: the run's config as saved in checkpoint meta, to name the keys
      that changed when a checkpoint does not fit this run.
    **resume_options: `check`, `start_over`, `start_over_hint` of
      TrainCheckpoints.restore_latest.

  Returns:
    (state, its tree of NamedShardings, the restored meta or None, how it was made).
  """
  target, shardings = sharding.abstract_state(init_fn, mesh, rules, rng)
  if checkpoints is not None:
    restored = checkpoints.restore_latest(target, run_config, **resume_options)
    if restored is not None:
      step, state, meta = restored
      return state, shardings, meta, f"resumed from {checkpoints.directory}/{step}"
  if callable(pretrained):
    pretrained = pretrained()
  if pretrained is None:
    state, _ = sharding.sharded_init(init_fn, mesh, rules, rng)
    return state, shardings, None, "initialised from scratch"

  loaded = {k: v for k, v in pretrained.params.items() if k not in fresh_heads}
  if "layers" in target.params["bert"]["encoder"]:
    loaded = model_lib.stack_layers(loaded)
  merged = traverse_util.flatten_dict(merge_params(target.params, loaded, pretrained.source),
                                      sep="/")
  targets = traverse_util.flatten_dict(target.params, sep="/")
  from_checkpoint = {k: jax.device_put(np.asarray(v, targets[k].dtype), targets[k].sharding)
                     for k, v in merged.items() if not isinstance(v, jax.ShapeDtypeStruct)}

  def init_with_loaded(rng, loaded_flat):
    state = nn.unbox(init_fn(rng))
    params = traverse_util.flatten_dict(state.params, sep="/")
    params = traverse_util.unflatten_dict({k: loaded_flat.get(k, v) for k, v in params.items()},
                                          sep="/")
    return state.replace(params=params, opt_state=tx.init(fp8.split(params)[0]))

  with sharding.mesh_context(mesh, rules):
    state = sharding.run_init(init_with_loaded, rng, from_checkpoint, shardings=shardings)
  fresh = sorted(k for k in targets if k not in from_checkpoint)
  how = f"initialised from {pretrained.source}"
  if fresh:
    how += f" (fresh: {', '.join(fresh[:6])}{' ...' if len(fresh) > 6 else ''})"
  return state, shardings, None, how
