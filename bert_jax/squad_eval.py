r"""SQuAD evaluation: the official v1.1 and v2.0 scores, same JSON as their scripts.

  python -m bert_jax.squad_eval DATA_FILE PRED_FILE [--na_prob_file F] [--na_prob_thresh 1.0]

DATA_FILE is a SQuAD JSON (its "version" picks the v1.1 or v2.0 evaluation;
without one, v2.0 when any question has "is_impossible"); PRED_FILE maps
question id -> answer text ("" for no answer). Prints, like the official scripts:
  v1.1: {"exact_match": .., "f1": ..} (percentages)
  v2.0: exact, f1, total, HasAns_exact, HasAns_f1, HasAns_total, NoAns_exact,
        NoAns_f1, NoAns_total (each part only when the data has such questions),
        and with --na_prob_file: best_exact, best_exact_thresh, best_f1,
        best_f1_thresh.

The scores are bert_jax.tasks.squad.metrics' (the published definitions; a
question without a prediction scores 0 and is reported on stderr).
"""
import json
import sys
from typing import Optional, Sequence

from absl import flags
from etils import epath

from bert_jax import cli
from bert_jax.tasks.squad import metrics as squad_metrics


def _load_json(path, what):
  try:
    return json.loads(epath.Path(path).read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as e:
    raise SystemExit(f"bert_jax.squad_eval: error: cannot read {what} {path}: {e}") from None


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line: DATA_FILE PRED_FILE [flags] (argv without the program name)."""
  args = flags.FlagValues()
  flags.DEFINE_string("na_prob_file", None, "v2.0: JSON question id -> probability of no answer",
                      short_name="n", flag_values=args)
  flags.DEFINE_float("na_prob_thresh", 1.0,
                     "v2.0: predict no answer above this na probability (default 1.0)",
                     short_name="t", flag_values=args)
  flags.DEFINE_alias("na-prob-file", "na_prob_file", flag_values=args)
  flags.DEFINE_alias("na-prob-thresh", "na_prob_thresh", flag_values=args)
  data_file, pred_file = map(cli.absolute, cli.parse(
      args, argv, "bert_jax.squad_eval", __doc__, positional=("DATA_FILE", "PRED_FILE"),
      paths=("na_prob_file",)))
  dataset_json = _load_json(data_file, "data file")
  predictions = _load_json(pred_file, "prediction file")
  if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
    raise SystemExit(f"bert_jax.squad_eval: error: {data_file} is not a SQuAD file (no "
                     "top-level 'data' list)")
  if not isinstance(predictions, dict):
    raise SystemExit(f"bert_jax.squad_eval: error: {pred_file} must hold a JSON object id -> "
                     "answer")
  not_text = [k for k, v in predictions.items() if not isinstance(v, str)]
  if not_text:
    raise SystemExit(f"bert_jax.squad_eval: error: {pred_file}: {len(not_text)} prediction(s) "
                     f"are not strings, e.g. {not_text[0]!r}: {predictions[not_text[0]]!r}")
  try:
    version = squad_metrics.dataset_version(dataset_json)
    squad_metrics.check_dataset(dataset_json, version, data_file)
    na_probs = None
    if args.na_prob_file:
      if version == "1.1":
        print("bert_jax.squad_eval: --na_prob_file is ignored for SQuAD v1.1", file=sys.stderr)
      else:
        na_probs = _load_json(args.na_prob_file, "na prob file")
        squad_metrics.check_na_probs(na_probs, args.na_prob_file)
    result = squad_metrics.evaluate(dataset_json, predictions, na_probs, args.na_prob_thresh)
  except ValueError as e:
    raise SystemExit(f"bert_jax.squad_eval: error: {e}") from None
  if version == "1.1":
    print(json.dumps(result))
  else:
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
