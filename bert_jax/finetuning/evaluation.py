"""Fine-tuning's evaluation: predictions over every example, the eval sets' scores (zero-shot,
per seed, their mean), and what is written or said at the end of a run."""
import dataclasses
import json
import sys
from typing import Any, Callable, Optional

from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np

from bert_jax.batching import length_buckets
from bert_jax.checkpoints import bundle
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.modeling import model as model_lib
from bert_jax.runtime import atomic_files
from bert_jax.runtime import console
from bert_jax.runtime import stop_signals
from bert_jax.runtime import text_files
from bert_jax.runtime import time_split
from bert_jax.runtime import train_log
from bert_jax.runtime import workdirs
from bert_jax.tasks import task as task_lib
from bert_jax.training import sharding


# An evaluation says how far it is every this many seconds (a long one is never silent).
PROGRESS_SECONDS = console.BEAT_SECONDS


class EvaluationStopped(Exception):
  """A stop signal arrived during an evaluation (which then stops within a batch)."""


def predict(predict_step, params, arrays: dict, batch_size: int, mesh, rules=(), *,
            bucketing: bool = False, buckets: Optional[tuple[int, ...]] = None,
            stop: Optional[stop_signals.StopSignals] = None,
            on_batch: Optional[Callable[[int, int], None]] = None) -> dict:
  """Model outputs for every row of `arrays` (padded to whole batches, never dropped).

  Args:
    predict_step: jitted fn(params, global batch) -> outputs.
    params: the params.
    arrays: feature arrays, all rows (the same on every host).
    batch_size: global eval batch size.
    mesh: the device mesh.
    rules: logical -> mesh axis rules.
    bucketing: rows sorted by length and each batch cut to its bucket length
      (outputs must then be per example, [batch, ...] of no token axis).
    buckets: the bucket lengths (default: every fixed length up to the arrays' length).
    stop: the run's stop signals, checked before each batch.
    on_batch: called with (batches done, batches) before each batch and after the last.

  Returns:
    Outputs gathered on every host as numpy, [n, ...] for the n rows, in row order.

  Raises:
    EvaluationStopped: a stop signal arrived.
  """
  n = arrays["input_ids"].shape[0]
  batches = finetune_batches.predict_batches(arrays, batch_size, bucketing, buckets)
  pi, pc = jax.process_index(), jax.process_count()
  chunks = []
  for batch in batches:
    if stop is not None and stop.reached():
      raise EvaluationStopped(stop.name)
    if on_batch is not None:
      on_batch(len(chunks), len(batches))
    local = length_buckets.cut(arrays, length_buckets.host_share(batch, pi, pc),
                               task_lib.MODEL_INPUTS)
    with sharding.mesh_context(mesh, rules):
      out = predict_step(params, sharding.host_to_global(local, mesh))
    chunks.append(multihost_utils.process_allgather(out, tiled=True))
  outputs = length_buckets.scatter_outputs(jax.device_get(chunks), batches, n)
  if on_batch is not None:
    on_batch(len(chunks), len(batches))
  return outputs


@dataclasses.dataclass(frozen=True)
class Scorer:
  """What scoring params on a task's eval sets takes: the jitted predict step, the task, how
  its eval batches are cut (batch size, length bucketing and its lengths) and the mesh."""
  predict_step: Any
  task: Any
  batch_size: int
  bucketing: bool
  buckets: Optional[tuple[int, ...]]
  mesh: Any
  rules: Any = ()

  def score(self, params, workdir: Optional[str], stop=None, progress: Optional[str] = None,
            checkpoint_written: Optional[Callable[[], None]] = None) -> tuple[dict, list, bool]:
    """(results of every eval set, their warnings, whether the task checks for constant
    predictions); every process scores, files are written to `workdir` unless None;
    `progress`: the label of the progress lines (None: none). `checkpoint_written` waits for
    the checkpoint of `params`: called once every set is predicted, before any is scored and
    its files written, so that the save overlaps the predictions."""
    # A line every PROGRESS_SECONDS from a thread: the first batch compiles the program, and
    # scoring (SQuAD's answers, NER's entities) and writing the predictions take a while too.
    where = ["0 batches"]
    beat = console.Heartbeat(progress, every=PROGRESS_SECONDS, enabled=bool(progress),
                             file=sys.stdout, at_start=False, status=lambda: where[0])

    def on_batch(done, total):
      where[0] = f"{done} of {total} batches"
    outputs, results, warnings, checked = [], {}, [], False
    with beat:
      for eval_set in self.task.eval_sets:
        where[0], beat.label = "0 batches", f"{progress} {eval_set.name}"
        outputs.append(predict(self.predict_step, params, eval_set.arrays, self.batch_size,
                               self.mesh, self.rules, bucketing=self.bucketing,
                               buckets=self.buckets, stop=stop, on_batch=on_batch))
      if checkpoint_written is not None:
        where[0], beat.label = "writing the checkpoint of the end of training", progress
        checkpoint_written()
      for eval_set, out in zip(self.task.eval_sets, outputs):
        where[0], beat.label = "scoring the predictions", f"{progress} {eval_set.name}"
        scores = eval_set.score(out, workdir)
        checked |= task_lib.WARNINGS in scores
        warnings += scores.pop(task_lib.WARNINGS, [])
        results.update(scores)
    return results, warnings, checked


@dataclasses.dataclass(frozen=True)
class RunOutput:
  """Where a run reports: its metrics log, its time split, its workdir, and whether this
  process is the one that writes files and prints."""
  logger: train_log.RunLogger
  split: time_split.TimeSplit
  workdir: str
  is_writer: bool


@dataclasses.dataclass(frozen=True)
class ExportPlan:
  """What the fine-tuned bundle holds besides its params: the model config, the init
  checkpoint's vocabulary and tokenizer (loading.Pretrained) and the task model's record."""
  model_cfg: Any
  pretrained: Any
  task_model: Any


def zero_shot(scorer: Scorer, params, split: time_split.TimeSplit, is_writer: bool,
              stop=None) -> Optional[dict]:
  """The eval sets' scores of the state before training, as `zero_shot_<metric>` (printed);
  None when a stop signal that came before it ended the evaluation (the first step then saves
  and stops). A signal during it ends the program at once: nothing is trained yet."""
  if is_writer:
    print("zero-shot: scoring the init checkpoint on " + ", ".join(
        f"{es.name} ({len(es.arrays['input_ids'])})" for es in scorer.task.eval_sets)
        + " before training", flush=True)
  # Nothing is trained yet: a stop signal ends the program at once (Python would run no handler
  # while the first batch compiles), and the same command starts again.
  try:
    with split.phase("eval"), stop_signals.first_compile(
        doing="scoring the init checkpoint before training", stop=stop):
      results = scorer.score(params, None, stop, "zero-shot" if is_writer else None)[0]
  except EvaluationStopped:
    return None
  results = {f"zero_shot_{k}": v for k, v in results.items()}
  if is_writer:
    print("zero-shot (the init checkpoint before training): " + ", ".join(
        f"{k} {v}" if isinstance(v, int) else f"{k} {v:.4f}" for k, v in sorted(results.items())),
        flush=True)
  return results


def evaluate_seed(scorer: Scorer, seed: int, state, out: RunOutput, stop=None,
                  ckpts=None) -> dict:
  """Scores every eval set with `state`'s params; the seed's results (logged and printed).

  `ckpts` (the run's TrainCheckpoints, or None): its saves, the seed's end of training among
  them, are committed after the predictions and before the first file or record that says the
  seed is done. A kill before then leaves the previous checkpoint and no trace of these
  results; a kill after, the end-of-training checkpoint, which the same command evaluates.

  Raises:
    EvaluationStopped: a stop signal arrived (checked before each batch).
  """
  is_writer = out.is_writer
  if is_writer:
    print(f"seed {seed}: evaluating " + ", ".join(
        f"{es.name} ({len(es.arrays['input_ids'])})" for es in scorer.task.eval_sets),
        flush=True)
  with out.split.phase("eval"):
    results, warnings, checked = scorer.score(
        state.params, out.workdir if is_writer else None, stop,
        f"seed {seed}: evaluating" if is_writer else None,
        ckpts.wait if ckpts is not None else None)
  out.logger.log(int(state.step), {k: v for k, v in results.items() if isinstance(v, (int, float))},
                 prefix=f"seed{seed}_eval_")
  if checked:
    results["constant_prediction"] = bool(warnings)
  if warnings:
    results["warning"] = "; ".join(warnings)
    if is_writer:
      print(f"WARNING seed {seed}: {results['warning']}", flush=True)
  if is_writer:
    print(f"seed {seed}: " + json.dumps(results, sort_keys=True), flush=True)
  return results


def mean_over_seeds(per_seed: list[dict]) -> dict:
  """Mean over seeds of every numeric metric, plus `<key>_std` when there are several.

  `constant_prediction` is true when it is for any seed, and `warning` holds the
  warnings of every seed that has one.
  """
  summary = {}
  keys = list(dict.fromkeys(k for r in per_seed for k in r))
  for key in keys:
    values = [r.get(key) for r in per_seed]
    if key == "constant_prediction":
      summary[key] = any(values)
    elif key == "warning":
      summary[key] = "; ".join(v for v in values if v)
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in values) and len(
        set(values)) == 1:  # a count the same for every seed (SQuAD 2.0's HasAns_total)
      summary[key] = values[0]
    elif all(isinstance(v, (int, float)) for v in values):
      summary[key] = float(np.mean(values))
      if len(per_seed) > 1 and not task_lib.is_baseline(key):  # same for every seed
        summary[key + "_std"] = float(np.std(values))
    else:
      summary[key] = values[0]
  return summary


def write_results(out: RunOutput, per_seed: list, params, task, export: Optional[ExportPlan],
                  baselines: Optional[dict] = None) -> dict:
  """Writes eval_results.json (and per seed), the fine-tuned bundle (none when `export` is
  None: an evaluation only); prints the summary and the primary metric against the baselines
  (`baselines`: zero-shot scores)."""
  out_dir, is_writer = epath.Path(out.workdir), out.is_writer
  runs = len(per_seed)
  summary = dict(mean_over_seeds(per_seed), **(baselines or {}))
  if is_writer:
    text, undefined = text_files.dumps_defined(summary, indent=2, sort_keys=True)
    if undefined:
      print(f"WARNING: {', '.join(undefined)} undefined (NaN: constant predictions or labels?); "
            "written as null", flush=True)
    atomic_files.write_text(out_dir / workdirs.RESULTS, text)
    if runs > 1:
      atomic_files.write_text(out_dir / workdirs.RESULTS_PER_SEED,
                              text_files.dumps_defined(per_seed, indent=2)[0])
  if export is not None:
    model_cfg, pretrained = export.model_cfg, export.pretrained
    bundle.save_bundle(str(out_dir / workdirs.EXPORT), model_lib.unstack_layers(params),
                       model_cfg.replace(scan_layers=False), pretrained.vocab,
                       pretrained.lowercase, overwrite=True,
                       info={"source": "finetune", "task": task.name,
                             "init_checkpoint": pretrained.source, **export.task_model.export_info},
                       tokenizer_file=pretrained.tokenizer_file)
  if runs > 1:
    for key in per_seed[0]:
      if key + "_std" in summary:
        print(f"{key}: {summary[key]:.4f} ± {summary[key + '_std']:.4f} over {runs} seeds",
              flush=True)
  if is_writer:
    print("eval_results: " + json.dumps(summary, sort_keys=True), flush=True)
    if summary.get("warning"):
      print(f"WARNING: {summary['warning']}", flush=True)
    against = task_lib.baseline_line(summary, task.primary_metric)
    if against:
      print(against, flush=True)
    bundle_dir = out_dir / workdirs.EXPORT
    written = "" if export is None else f" and the fine-tuned bundle {bundle_dir}"
    print(f"wrote {out_dir / workdirs.RESULTS}{written}", flush=True)
  return summary


def stopped_in_evaluation(signal_name: str, ckpts, seed: int, step: int,
                          is_writer: bool) -> dict:
  """Says where a run stopped by a signal during an evaluation can go on from."""
  if is_writer:
    if ckpts is None:
      where = "nothing was trained (eval_only); the same command evaluates again"
    else:
      ckpts.wait()
      where = (f"the checkpoint at the end of its training is kept "
               f"({ckpts.describe_latest()}); the same command evaluates it")
    print(f"{signal_name}: stopped evaluating seed {seed}; {where}", flush=True)
  return {"stopped_by": signal_name, "seed": seed, "step": step}


def already_finished(out_dir: epath.Path, is_writer: bool, exports: bool = True) -> dict:
  """The results of the workdir's finished run of this config (nothing is run again); a
  missing export/ of a run that writes one (`exports`: not eval_only) is named."""
  summary = text_files.read_json(out_dir / workdirs.RESULTS,
                                 missing=f"{out_dir} says its run finished but holds no "
                                 "eval_results.json; --config.start_over=True runs it "
                                 "anew (the earlier files are set aside)")
  if is_writer:
    print(f"{out_dir} holds this run, finished: eval_results: "
          f"{json.dumps(summary, sort_keys=True)}; nothing to do (--config.start_over=True "
          "sets it aside and trains anew)", flush=True)
    if exports and not (out_dir / workdirs.EXPORT).exists():
      print(f"note: its {workdirs.EXPORT}/ is missing (moved or deleted since the run wrote "
            "it): --config.start_over=True trains the model again", flush=True)
  return summary
