"""A training run's checkpoints folder as Orbax lays it out, and reading one step of it.

  DIRECTORY/<step>/state   the train state (params, optimizer state, step, rng), as saved
                           on any mesh and process count
  DIRECTORY/<step>/meta    JSON: the model description (loading.model_description), the
                           run's config and data position, checksums of the state's arrays

Training writes and resumes it (bert_jax.training.checkpoint.TrainCheckpoints, a
CheckpointFolder that also saves); loading a trained model reads one step of it
(bert_jax.modeling.loading), so reading needs nothing from training.
"""
from typing import Any, Optional

from etils import epath
from flax import traverse_util
import jax
import orbax.checkpoint as ocp

from bert_jax.modeling import bundle
from bert_jax.modeling.model_config import BertConfig

class CheckpointFolder:
  """An Orbax CheckpointManager over a checkpoints folder: its steps and what each holds.

  Args:
    directory: the checkpoints directory (created if missing; local or gs://).
    max_to_keep: how many recent checkpoints are kept (when saving).
    async_save: save in a background thread (when saving).
  """

  def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True):
    path = epath.Path(directory)
    self.directory = path if "://" in str(directory) else path.absolute()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(self.directory, options=options,
                                          item_names=("state", "meta"))

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def read_meta(self, step: int) -> dict[str, Any]:
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


def one_line_cause(e: BaseException, limit: int = 200) -> str:
  """`Type: first line of the message`, without TensorStore's spec dump (which follows
  "See full TensorStore details" and runs over many lines)."""
  text = str(e).split(" See full TensorStore details")[0].strip()
  text = text.split(" [tensorstore_spec=")[0].split(" [source_location=")[0]
  first = text.splitlines()[0] if text else ""
  return f"{type(e).__name__}: {first[:limit]}" if first else type(e).__name__
