"""bert_jax.tasks.glue.metrics against scikit-learn and scipy."""
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from bert_jax.tasks.glue import metrics


def _random_classes(rng, n, k, agreement):
  labels = rng.integers(0, k, n)
  noise = rng.integers(0, k, n)
  predictions = np.where(rng.random(n) < agreement, labels, noise)
  return predictions, labels


@pytest.mark.parametrize("seed", range(20))
def test_classification_metrics_match_sklearn_random(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(2, 400))
  k = 2 if seed % 2 == 0 else 3
  predictions, labels = _random_classes(rng, n, k, agreement=rng.random())
  weights = rng.integers(0, 4, n).astype(np.float64)
  weights[0] = 1.0
  for w in (None, weights):
    assert metrics.accuracy(predictions, labels, w) == pytest.approx(
        skm.accuracy_score(labels, predictions, sample_weight=w), abs=1e-12)
    assert metrics.matthews_corrcoef(predictions, labels, w) == pytest.approx(
        skm.matthews_corrcoef(labels, predictions, sample_weight=w), abs=1e-12)
    if k == 2:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_f1 = skm.f1_score(labels, predictions, sample_weight=w, zero_division=0)
      assert metrics.f1(predictions, labels, w) == pytest.approx(expected_f1, abs=1e-12)


def test_zero_weights_equal_dropping_the_examples():
  rng = np.random.default_rng(0)
  predictions, labels = _random_classes(rng, 300, 2, agreement=0.7)
  # Pad as an eval loop does: 100 extra rows of weight 0 with arbitrary values.
  padded_pred = np.concatenate([predictions, np.ones(100, int)])
  padded_labels = np.concatenate([labels, np.zeros(100, int)])
  weights = np.concatenate([np.ones(300), np.zeros(100)])
  for name in ("accuracy", "f1", "matthews_corrcoef"):
    fn = metrics.METRICS[name]
    assert fn(padded_pred, padded_labels, weights) == pytest.approx(
        fn(predictions, labels), abs=1e-12), name
  # And the padding does change the unweighted value, so the test can fail.
  assert metrics.f1(padded_pred, padded_labels) != pytest.approx(metrics.f1(predictions, labels))


def test_mcc_edge_cases_as_sklearn():
  labels = np.array([0, 1, 1, 0, 1])
  for predictions in (np.zeros(5, int), np.ones(5, int)):
    assert skm.matthews_corrcoef(labels, predictions) == 0.0
    assert metrics.matthews_corrcoef(predictions, labels) == 0.0
  # Constant labels too.
  assert metrics.matthews_corrcoef(labels, np.ones(5, int)) == 0.0
  # Perfect and inverted.
  assert metrics.matthews_corrcoef(labels, labels) == pytest.approx(1.0)
  assert metrics.matthews_corrcoef(1 - labels, labels) == pytest.approx(-1.0)


def test_f1_edge_cases_as_sklearn():
  labels = np.array([0, 0, 0])
  predictions = np.array([0, 0, 0])
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert metrics.f1(predictions, labels) == skm.f1_score(labels, predictions) == 0.0
  assert metrics.f1([1, 1, 0], [1, 0, 0]) == pytest.approx(skm.f1_score([1, 0, 0], [1, 1, 0]))


def test_accuracy_and_f1_mean():
  rng = np.random.default_rng(1)
  predictions, labels = _random_classes(rng, 200, 2, agreement=0.6)
  expected = (skm.accuracy_score(labels, predictions) + skm.f1_score(labels, predictions)) / 2
  assert metrics.accuracy_and_f1(predictions, labels) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_correlations_match_scipy_random(seed):
  rng = np.random.default_rng(100 + seed)
  n = int(rng.integers(3, 500))
  labels = rng.uniform(0, 5, n)
  if seed % 3 == 0:  # STS-B-like: scores on a 0.2 grid, many ties.
    labels = np.round(labels * 5) / 5
  predictions = labels * rng.uniform(-1, 1) + rng.normal(0, rng.uniform(0.1, 3), n)
  if seed % 4 == 0:
    predictions = np.round(predictions)  # Ties in predictions too.
  assert metrics.pearson(predictions, labels) == pytest.approx(
      stats.pearsonr(predictions, labels)[0], abs=1e-10)
  assert metrics.spearman(predictions, labels) == pytest.approx(
      stats.spearmanr(predictions, labels)[0], abs=1e-10)
  # Integer weights act as repetitions; 0 drops the example.
  weights = rng.integers(0, 4, n)
  weights[:2] = [1, 2]
  rep_pred, rep_labels = np.repeat(predictions, weights), np.repeat(labels, weights)
  assert metrics.pearson(predictions, labels, weights) == pytest.approx(
      stats.pearsonr(rep_pred, rep_labels)[0], abs=1e-10)
  assert metrics.spearman(predictions, labels, weights) == pytest.approx(
      stats.spearmanr(rep_pred, rep_labels)[0], abs=1e-10)
  expected_mean = (stats.pearsonr(rep_pred, rep_labels)[0] +
                   stats.spearmanr(rep_pred, rep_labels)[0]) / 2
  assert metrics.pearson_and_spearman(predictions, labels, weights) == pytest.approx(
      expected_mean, abs=1e-10)


def test_correlation_of_constant_input_is_nan_as_scipy():
  labels = np.array([1.0, 2.0, 3.0, 4.0])
  constant = np.full(4, 2.5)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert np.isnan(stats.pearsonr(constant, labels)[0])
  assert np.isnan(metrics.pearson(constant, labels))
  assert np.isnan(metrics.spearman(constant, labels))
  # Constant only after the zero-weight padding is removed.
  assert np.isnan(metrics.pearson([2.5, 2.5, 9.0], [1.0, 2.0, 3.0], [1, 1, 0]))


def test_real_looking_glue_predictions():
  """CoLA-like imbalanced labels and STS-B-like scores, with eval padding."""
  rng = np.random.default_rng(7)
  n, pad = 1043, 13  # CoLA dev size, padded up to a multiple of 32.
  labels = (rng.random(n) < 0.69).astype(int)  # 69% acceptable, as CoLA dev.
  predictions = np.where(rng.random(n) < 0.8, labels, 1)
  weights = np.concatenate([np.ones(n), np.zeros(pad)])
  padded_pred = np.concatenate([predictions, np.zeros(pad, int)])
  padded_labels = np.concatenate([labels, np.zeros(pad, int)])
  got = metrics.compute(["matthews_corrcoef", "accuracy", "f1"], padded_pred, padded_labels,
                        weights)
  assert got["matthews_corrcoef"] == pytest.approx(
      skm.matthews_corrcoef(labels, predictions), abs=1e-12)
  assert got["accuracy"] == pytest.approx(skm.accuracy_score(labels, predictions), abs=1e-12)
  assert got["f1"] == pytest.approx(skm.f1_score(labels, predictions), abs=1e-12)


def test_bad_inputs():
  with pytest.raises(ValueError, match="differ in size"):
    metrics.accuracy([0, 1], [0, 1, 1])
  with pytest.raises(ValueError, match="weights"):
    metrics.accuracy([0, 1], [0, 1], [1, -1])
  with pytest.raises(ValueError, match="no examples"):
    metrics.accuracy([0, 1], [0, 1], [0, 0])
  with pytest.raises(ValueError, match="known"):
    metrics.compute(["bleu"], [0], [0])


def test_constant_prediction_warning():
  labels = np.array([1, 1, 1, 0, 0, 1, 1, 0])  # majority class 1: 5 of 8
  assert metrics.majority_rate(labels) == 5 / 8
  ones = metrics.constant_prediction_warning(np.ones(8, int), labels)
  assert "every one of the 8 predictions is class 1" in ones and "0.6250" in ones
  assert "class 0" in metrics.constant_prediction_warning(np.zeros(8, int), labels)
  # Not constant, but exactly as accurate as always answering 1.
  swapped = np.array([1, 1, 1, 1, 0, 0, 1, 1])
  assert metrics.accuracy(swapped, labels) == 5 / 8
  assert "equals the majority-class baseline (the accuracy of always predicting the most " \
         "frequent class), though the predictions take 2 classes" in (
             metrics.constant_prediction_warning(swapped, labels))
  # Better than the baseline: no warning.
  assert metrics.constant_prediction_warning(np.array([1, 1, 1, 0, 0, 1, 0, 0]), labels) == ""
  # Regression: one score for every example.
  assert "same score" in metrics.constant_prediction_warning(np.full(4, 2.5), np.arange(4.0),
                                                             is_regression=True)
  assert metrics.constant_prediction_warning(np.arange(4.0), np.arange(4.0),
                                             is_regression=True) == ""


def test_a_nan_or_inf_makes_every_metric_nan_with_a_warning():
  # Predictions 0..48 and NaN against labels 0..49: ranking NaN as the largest would score
  # spearman 1.0; scipy gives NaN, and so does bert_jax.
  labels = np.arange(50.0)
  nan_last = np.append(np.arange(49.0), np.nan)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert np.isnan(stats.spearmanr(nan_last, labels)[0])
    assert np.isnan(stats.pearsonr(nan_last, labels)[0])
    # For inf scipy is not consistent: pearsonr is NaN, spearmanr ranks inf largest and scores.
    inf_last = np.append(np.arange(49.0), np.inf)
    assert np.isnan(stats.pearsonr(inf_last, labels)[0])
    assert stats.spearmanr(inf_last, labels)[0] == pytest.approx(1.0)
  # bert_jax: NaN for any NaN or inf (the documented choice), with a warning naming the metric.
  for bad in (np.nan, np.inf, -np.inf):
    preds = np.append(np.arange(49.0), bad)
    for name in metrics.METRICS:
      with pytest.warns(RuntimeWarning, match=rf"{name}: 1 prediction\(s\) .* NaN or inf"):
        assert np.isnan(metrics.METRICS[name](preds, labels)), (name, bad)
    with pytest.warns(RuntimeWarning, match=r"0 prediction\(s\) and 1 label\(s\)"):
      assert np.isnan(metrics.spearman(labels, preds))
    assert "1 of the 50 predictions are NaN or inf" in metrics.constant_prediction_warning(
        preds, labels, is_regression=True)
  # A NaN in zero-weight padding does not count, and nothing is warned.
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert metrics.spearman(np.append(labels, np.nan), np.append(labels, 0.0),
                            np.append(np.ones(50), 0.0)) == pytest.approx(1.0)
