"""GLUE metrics in numpy, with per-example weights.

Eval batches are padded rather than dropped, so every metric takes optional `weights`:
frequency weights as scikit-learn's `sample_weight`, 0 for padding. Values are on
scikit-learn's / scipy's scale, with their edge cases (MCC 0 and correlations NaN for a
constant side, F1 0 without positives). A NaN or inf of positive weight makes every metric
NaN with a RuntimeWarning, never a score (scipy's spearmanr would rank an inf).
"""
from typing import Optional
import warnings

import numpy as np


def _prepare(predictions, labels, weights, *, float_values=False):
  """Checks shapes and returns 1-D arrays (predictions, labels, weights)."""
  dtype = np.float64 if float_values else None
  predictions = np.asarray(predictions, dtype=dtype).reshape(-1)
  labels = np.asarray(labels, dtype=dtype).reshape(-1)
  if predictions.shape != labels.shape:
    raise ValueError(
        f"predictions and labels differ in size: {predictions.shape} vs {labels.shape}")
  if weights is None:
    weights = np.ones(labels.shape, np.float64)
  else:
    weights = np.asarray(weights, np.float64).reshape(-1)
    if weights.shape != labels.shape:
      raise ValueError(
          f"weights and labels differ in size: {weights.shape} vs {labels.shape}")
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
      raise ValueError("weights must be finite and non-negative")
  if weights.sum() <= 0:
    raise ValueError("no examples with positive weight to score")
  return predictions, labels, weights


def _count_nonfinite(values, weights) -> int:
  """How many values of positive weight are NaN or inf (0 for non-float values)."""
  values = np.asarray(values).reshape(-1)
  if not np.issubdtype(values.dtype, np.inexact):
    return 0
  return int(np.sum(~np.isfinite(values) & (np.asarray(weights).reshape(-1) > 0)))


def _nonfinite(name, predictions, labels, weights) -> bool:
  """True, with a RuntimeWarning, when a value of positive weight is NaN or inf."""
  predictions, labels, weights = _prepare(predictions, labels, weights)
  bad_pred, bad_labels = (_count_nonfinite(predictions, weights),
                          _count_nonfinite(labels, weights))
  if bad_pred or bad_labels:
    warnings.warn(f"{name}: {bad_pred} prediction(s) and {bad_labels} label(s) of "
                  f"{labels.size} are NaN or inf; the metric is NaN", RuntimeWarning,
                  stacklevel=3)
    return True
  return False


def accuracy(predictions, labels, weights: Optional[np.ndarray] = None) -> float:
  """Weighted fraction of predictions equal to the labels."""
  if _nonfinite("accuracy", predictions, labels, weights):
    return float("nan")
  predictions, labels, weights = _prepare(predictions, labels, weights)
  return float(np.sum(weights * (predictions == labels)) / np.sum(weights))


def f1(predictions, labels, weights: Optional[np.ndarray] = None,
       positive_label: int = 1) -> float:
  """Binary F1 of `positive_label` (scikit-learn's default); 0 when 2 TP + FP + FN is 0."""
  if _nonfinite("f1", predictions, labels, weights):
    return float("nan")
  predictions, labels, weights = _prepare(predictions, labels, weights)
  pred_pos = predictions == positive_label
  gold_pos = labels == positive_label
  tp = np.sum(weights * (pred_pos & gold_pos))
  fp = np.sum(weights * (pred_pos & ~gold_pos))
  fn = np.sum(weights * (~pred_pos & gold_pos))
  denominator = 2 * tp + fp + fn
  return float(2 * tp / denominator) if denominator > 0 else 0.0


def accuracy_and_f1(predictions, labels,
                    weights: Optional[np.ndarray] = None) -> float:
  """(accuracy + f1) / 2 (GLUE's MRPC / QQP average)."""
  if _nonfinite("accuracy_and_f1", predictions, labels, weights):
    return float("nan")
  return (accuracy(predictions, labels, weights) + f1(predictions, labels, weights)) / 2


def matthews_corrcoef(predictions, labels,
                      weights: Optional[np.ndarray] = None) -> float:
  """Multiclass Matthews correlation (Gorodkin's R_K) as scikit-learn; 0 for a constant side."""
  if _nonfinite("matthews_corrcoef", predictions, labels, weights):
    return float("nan")
  predictions, labels, weights = _prepare(predictions, labels, weights)
  classes, encoded = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
  gold, pred = encoded[:labels.size], encoded[labels.size:]
  k = classes.size
  confusion = np.zeros((k, k), np.float64)  # [gold, predicted]
  np.add.at(confusion, (gold, pred), weights)
  t_sum = confusion.sum(axis=1)
  p_sum = confusion.sum(axis=0)
  n_correct = np.trace(confusion)
  n_samples = p_sum.sum()
  cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
  cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
  cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
  if cov_ypyp * cov_ytyt == 0:
    return 0.0
  return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def _weighted_pearson(x, y, w) -> float:
  """Pearson correlation of x and y under frequency weights w."""
  total = w.sum()
  dx = x - np.sum(w * x) / total
  dy = y - np.sum(w * y) / total
  sxx = np.sum(w * dx * dx)
  syy = np.sum(w * dy * dy)
  # A side that is constant (up to rounding of its mean) has no correlation.
  if sxx <= 0 or syy <= 0 or np.ptp(x[w > 0]) == 0 or np.ptp(y[w > 0]) == 0:
    return float("nan")
  r = np.sum(w * dx * dy) / np.sqrt(sxx * syy)
  return float(np.clip(r, -1.0, 1.0))


def _weighted_average_ranks(values, w):
  """Ranks from 1 with ties averaged, as scipy's rankdata of the weight-repeated data (a tie
  group of weight W after cumulative weight C gets rank C + (W + 1) / 2)."""
  keep = w > 0
  ranks = np.zeros_like(values, dtype=np.float64)
  uniq, inverse = np.unique(values[keep], return_inverse=True)
  group_weight = np.zeros(uniq.size, np.float64)
  np.add.at(group_weight, inverse, w[keep])
  before = np.cumsum(group_weight) - group_weight
  ranks[keep] = (before + (group_weight + 1) / 2)[inverse]
  return ranks


def pearson(predictions, labels, weights: Optional[np.ndarray] = None) -> float:
  """Pearson's r (scipy.stats.pearsonr's statistic); NaN when either side is constant."""
  if _nonfinite("pearson", predictions, labels, weights):
    return float("nan")
  predictions, labels, weights = _prepare(predictions, labels, weights, float_values=True)
  return _weighted_pearson(predictions, labels, weights)


def spearman(predictions, labels, weights: Optional[np.ndarray] = None) -> float:
  """Spearman correlation (scipy's, ties averaged): Pearson's r of the weighted ranks."""
  if _nonfinite("spearman", predictions, labels, weights):
    return float("nan")
  predictions, labels, weights = _prepare(predictions, labels, weights, float_values=True)
  keep = weights > 0
  pred_ranks = _weighted_average_ranks(predictions, weights)
  label_ranks = _weighted_average_ranks(labels, weights)
  return _weighted_pearson(pred_ranks[keep], label_ranks[keep], weights[keep])


def pearson_and_spearman(predictions, labels,
                         weights: Optional[np.ndarray] = None) -> float:
  """(pearson + spearman) / 2 (GLUE's STS-B average)."""
  if _nonfinite("pearson_and_spearman", predictions, labels, weights):
    return float("nan")
  return (pearson(predictions, labels, weights) + spearman(predictions, labels, weights)) / 2


# Metric name -> function(predictions, labels, weights); the names used in
# eval_results.json and in the GLUE task registry.
METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "accuracy_and_f1": accuracy_and_f1,
    "matthews_corrcoef": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
    "pearson_and_spearman": pearson_and_spearman,
}


def compute(names, predictions, labels, weights: Optional[np.ndarray] = None) -> dict:
  """name -> float for each of `names` (keys of METRICS), in order."""
  unknown = [n for n in names if n not in METRICS]
  if unknown:
    raise ValueError(f"unknown metrics {unknown}; known: {sorted(METRICS)}")
  return {n: METRICS[n](predictions, labels, weights) for n in names}


def majority_rate(labels) -> float:
  """The accuracy of always predicting the most frequent label of `labels`."""
  labels = np.asarray(labels).reshape(-1)
  if labels.size == 0:
    raise ValueError("no labels")
  return float(np.max(np.unique(labels, return_counts=True)[1]) / labels.size)


def constant_prediction_warning(predictions, labels, is_regression: bool = False) -> str:
  """A one-line warning when predictions are NaN/inf or no better than a constant, or ''.

  Classification: one class only, or the majority-class rate; regression: one score only.
  Either way the model has not learned the task, whatever the other metrics say.
  """
  predictions = np.asarray(predictions).reshape(-1)
  labels = np.asarray(labels).reshape(-1)
  nonfinite = _count_nonfinite(predictions, np.ones(predictions.shape))
  if nonfinite:
    return (f"{nonfinite} of the {predictions.size} predictions are NaN or inf: every metric "
            "is NaN (the model has diverged)")
  if is_regression:
    if predictions.size and np.ptp(predictions.astype(np.float64)) < 1e-6:
      return (f"every one of the {predictions.size} predictions is the same score "
              f"{float(predictions[0]):.4g}: the model has not learned the task")
    return ""
  rate = majority_rate(labels)
  acc = accuracy(predictions, labels)
  classes = np.unique(predictions)
  if len(classes) == 1:
    return (f"every one of the {predictions.size} predictions is class {classes[0]}, "
            f"accuracy {acc:.4f} (the majority-class baseline is {rate:.4f}): the model has "
            "not learned the task (try more steps or another learning rate)")
  if abs(acc - rate) < 0.5 / labels.size:
    return (f"accuracy {acc:.4f} equals the majority-class baseline (the accuracy of always "
            f"predicting the most frequent class), though the predictions take {len(classes)} "
            "classes: no better than a constant on accuracy; the model has not learned the "
            "task (try more steps or another learning rate)")
  return ""
