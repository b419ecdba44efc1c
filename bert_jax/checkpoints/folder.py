"""A training run's checkpoints folder as Orbax lays it out, and reading one step of it.

  DIRECTORY/<step>/state   the train state (params, optimizer state, step, rng), as saved
                           on any mesh and process count
  DIRECTORY/<step>/meta    JSON: the model description (loading.model_description), the
                           run's config and data position, checksums of the state's arrays

Training writes and resumes it (bert_jax.checkpoints.run_checkpoints.TrainCheckpoints, a
CheckpointFolder that also saves); loading a trained model reads one step of it
(bert_jax.checkpoints.loading), so reading needs nothing from training. A reader of a folder
that a run is still saving into takes its steps from committed_steps.
"""
import asyncio
from typing import Any, Coroutine, Optional

from etils import epath
from flax import traverse_util
import jax
import orbax.checkpoint as ocp
from orbax.checkpoint._src import asyncio_utils

from bert_jax.checkpoints import bundle
from bert_jax.modeling.model_config import BertConfig


def _run_on_new_loop_finishing_its_reads(coro: Coroutine) -> Any:
  """Orbax's runner of a restore (or save) on a fresh event loop, which also lets the reads
  still in flight finish when one of them fails.

  Orbax gathers the reads of all arrays and raises the first failure (a damaged checkpoint
  that restore_latest then falls back from); its runner closed the loop at once, with the
  other reads pending: TensorStore's threads then delivered their results to a closed loop
  and their tasks were destroyed unfinished, each printing a traceback ("Event loop is
  closed", "Future exception was never retrieved", "Exception ignored in: <coroutine ...>")
  long after the fallback had succeeded. Waiting for them (their errors collected, the
  first one raised as before) costs at most the rest of one checkpoint's reads. An
  interrupt (Ctrl-C) does not wait.
  """
  loop = asyncio.new_event_loop()
  try:
    asyncio.set_event_loop(loop)
    try:
      return loop.run_until_complete(coro)
    except Exception:
      pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
      if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
      raise
  finally:
    asyncio.set_event_loop(None)
    loop.close()


# Every run_sync without a running loop (the programs here never run one) goes through it. An
# Orbax without this private runner is left as it is (tests/test_faults_ckpt.py then shows it).
if hasattr(asyncio_utils, "_run_sync_via_new_loop"):
  setattr(asyncio_utils, "_run_sync_via_new_loop", _run_on_new_loop_finishing_its_reads)


class CheckpointFolder:
  """An Orbax CheckpointManager over a checkpoints folder: its steps and what each holds.

  Args:
    directory: the checkpoints directory (created if missing; local or gs://).
    max_to_keep: how many recent checkpoints are kept (when saving).
    async_save: save in a background thread (when saving).
    read_only: only read, with no manager: nothing is created, saved or deleted,
      and the steps are the committed ones (committed_steps). A manager lists
      every step and reads each one's metadata when it is made, which fails on
      any step that the run saving into the folder deletes meanwhile.
  """

  def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True,
               read_only: bool = False):
    path = epath.Path(directory)
    self.directory = path if "://" in str(directory) else path.absolute()
    self._manager = None
    if not read_only:
      # A save that a kill or a second Ctrl-C cut short leaves `<step>.orbax-checkpoint-tmp*`,
      # a whole state's size that no one reads: the next writer of the folder removes it.
      options = ocp.CheckpointManagerOptions(
          max_to_keep=max_to_keep, create=True, enable_async_checkpointing=async_save,
          cleanup_tmp_directories=True)
      self._manager = ocp.CheckpointManager(self.directory, options=options,
                                            item_names=("state", "meta"))

  def all_steps(self) -> list[int]:
    if self._manager is None:
      return committed_steps(self.directory)
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    if self._manager is None:
      return (committed_steps(self.directory) or [None])[-1]
    return self._manager.latest_step()

  def read_meta(self, step: int) -> dict[str, Any]:
    if self._manager is None:
      return ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(
          self.directory / str(step) / "meta")
    return self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

  def restore_on_one_device(self, step: int, config: BertConfig) -> Any:
    """Step `step`'s train state onto one local device, once its params agree with the
    declared `config` (bundle.check_declared_config); ELECTRA's are its discriminator's."""
    path, source = self.directory / str(step) / "state", f"{self.directory}/{step}"
    ckptr = ocp.StandardCheckpointer()
    meta = bundle.read_metadata_tree(ckptr, path)
    params = meta["params"].get("discriminator", meta["params"])
    bundle.check_declared_config(
        config, {p: tuple(m.shape) for p, m in traverse_util.flatten_dict(params, sep="/").items()},
        source)
    one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
    return ckptr.restore(path, target)


def committed_steps(directory: epath.PathLike) -> list[int]:
  """The steps of a checkpoints folder whose save completed and that are still whole, oldest first.

  Orbax saves a step into `<step>.orbax-checkpoint-tmp*`, writes its commit
  marker, and renames it to `<step>`; it deletes a rotated-out step in place, one
  entry at a time. A reader of a folder that a run is still saving into takes
  only steps that Orbax calls finalized and that still hold the commit marker and
  both items, so that neither a save nor a deletion in progress is chosen. (A
  folder in which no step has the marker was written by an Orbax that wrote
  none on this filesystem: there, the finalized name and both items suffice.)
  """
  # A listing can see only the step that a run deletes right after it commits the next one:
  # when none of the steps listed is whole, the folder is listed again.
  for _ in range(_LISTINGS):
    steps, found = _committed_steps_once(epath.Path(directory))
    if found or not steps:
      return found
  return found


_LISTINGS = 5


def _committed_steps_once(path: epath.Path) -> tuple[dict, list[int]]:
  """(the step folders listed, those committed and whole): committed_steps' one look."""
  try:
    steps = {int(p.name): p for p in path.iterdir() if p.name.isdigit()}
  except FileNotFoundError:
    return {}, []
  marker = ocp.path.atomicity_types.COMMIT_SUCCESS_FILE

  def has(p: epath.Path, name: str) -> bool:
    try:
      return (p / name).exists()
    except OSError:  # deleted while it is looked at
      return False

  whole = {s: p for s, p in steps.items() if has(p, "state") and has(p, "meta")}
  marked = {s for s, p in whole.items() if has(p, marker)}
  if marked or any(has(p, marker) for p in steps.values()):
    whole = {s: whole[s] for s in marked}
  return steps, sorted(s for s, p in whole.items() if _finalized(p))


def _finalized(step_dir: epath.Path) -> bool:
  try:
    return ocp.path.step.is_path_finalized(step_dir)
  except OSError:  # deleted while it is looked at
    return False


def one_line_cause(e: BaseException, limit: int = 200) -> str:
  """`Type: first line of the message`, without TensorStore's spec dump (which follows
  "See full TensorStore details" and runs over many lines)."""
  text = str(e).split(" See full TensorStore details")[0].strip()
  text = text.split(" [tensorstore_spec=")[0].split(" [source_location=")[0]
  first = text.splitlines()[0] if text else ""
  return f"{type(e).__name__}: {first[:limit]}" if first else type(e).__name__
