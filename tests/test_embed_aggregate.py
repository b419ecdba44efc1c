"""bert_jax.embed aggregation: ensembles of checkpoints, chunks of long texts, --combine.

References are embed's own single-checkpoint, unchunked vectors (checked against
the encoder run alone in test_embed): a window of a long text embeds like the
text of its words, so chunking is checked window by window.
"""
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax import embed
from bert_jax.inference import aggregate
from bert_jax.inference import embedding
from tests.fixtures.tiny_encoder import CONFIG
from tests.fixtures.tiny_encoder import VOCAB
from tests.fixtures.tiny_encoder import WORDS
from tests.fixtures.tiny_encoder import random_params

LONG = " ".join(WORDS[i % 11] for i in range(20))  # 20 one-piece words
TEXTS = ["the cat sat", LONG, "hello world ."]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
  d = tmp_path_factory.mktemp("aggregate")
  (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  paths = []
  for seed in (0, 1):
    paths.append(str(d / f"bundle{seed}"))
    bundle.save_bundle(paths[-1], random_params(CONFIG, seed), CONFIG, str(d / "vocab.txt"),
                       lowercase=True)
  return paths


@pytest.fixture(scope="module")
def loaded(ckpts):
  return [loading.load_pretrained(p) for p in ckpts]


def _embed(pretrained, texts, **kw):
  return embedding.embed(pretrained, texts, pooling="mean", normalize=False, max_length=8, **kw)[0]


def test_chunk_windows_cover_every_token_with_the_stride():
  assert aggregate.chunk_windows(10, 4, 3) == [(0, 4), (3, 7), (6, 10)]
  assert aggregate.chunk_windows(11, 4, 3) == [(0, 4), (3, 7), (6, 10), (9, 11)]
  assert aggregate.chunk_windows(4, 4, 2) == [(0, 4)]
  assert aggregate.chunk_windows(0, 4, 2) == [(0, 0)]
  assert aggregate.chunk_windows(8, 4, 4) == [(0, 4), (4, 8)]
  with pytest.raises(ValueError, match=r"--chunk_stride 5 must be in \[1, 4\]"):
    aggregate.chunk_windows(10, 4, 5)


def test_ensemble_of_a_checkpoint_with_itself(loaded):
  one = _embed(loaded[0], TEXTS)
  for how, weights in (("mean", None), ("max", None), ("weighted_mean", (1.0, 3.0))):
    got, _ = embedding.embed_ensemble([loaded[0], loaded[0]], TEXTS, combine=how, weights=weights,
                                      pooling="mean", normalize=False, max_length=8)
    np.testing.assert_allclose(got, one, atol=1e-6)
  got, _ = embedding.embed_ensemble([loaded[0], loaded[0]], TEXTS, combine="concat",
                                    pooling="mean", normalize=False, max_length=8)
  assert got.shape == (3, 2 * CONFIG.hidden_size)
  np.testing.assert_allclose(got, np.concatenate([one, one], -1), atol=1e-6)


def test_ensemble_of_two_checkpoints_weighted_and_normalised(loaded):
  a, b = (_embed(p, TEXTS) for p in loaded)
  assert np.abs(a - b).max() > 0.1  # different models
  got, _ = embedding.embed_ensemble(loaded, TEXTS, combine="weighted_mean", weights=(1.0, 3.0),
                                    pooling="mean", normalize=False, max_length=8)
  np.testing.assert_allclose(got, 0.25 * a + 0.75 * b, atol=1e-5)
  got, _ = embedding.embed_ensemble(loaded, TEXTS, combine="mean", pooling="mean", normalize=True,
                                    max_length=8)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
  np.testing.assert_allclose(got, unit(unit(a) + unit(b)), atol=1e-5)
  with pytest.raises(ValueError, match="--weights has 1 value"):
    embedding.embed_ensemble(loaded, TEXTS, combine="weighted_mean", weights=(1.0,))


def test_chunks_are_windows_of_max_length_combined(loaded):
  p = loaded[0]
  words = LONG.split()
  windows = aggregate.chunk_windows(len(words), 6, 4)  # max_length 8: 6 tokens + [CLS] [SEP]
  assert windows == [(0, 6), (4, 10), (8, 14), (12, 18), (16, 20)]
  per_window = _embed(p, [" ".join(words[s:e]) for s, e in windows])
  unchunked = _embed(p, TEXTS)
  tokens = np.array([e - s for s, e in windows], np.float64)
  for how, want in (("mean", per_window.mean(0)), ("max", per_window.max(0)),
                    ("weighted_mean", (per_window * tokens[:, None]).sum(0) / tokens.sum())):
    got, stats = embedding.embed(p, TEXTS, pooling="mean", normalize=False, max_length=8,
                                 chunk_stride=4, combine=how)
    assert stats.chunks == 7 and stats.num_texts == 3
    np.testing.assert_allclose(got[1], want, atol=1e-5)
    # Texts that fit in one window keep their unchunked vectors.
    np.testing.assert_allclose(got[[0, 2]], unchunked[[0, 2]], atol=1e-6)


def test_cli_ensemble_and_chunk_errors(ckpts, tmp_path):
  inp = tmp_path / "in.txt"
  inp.write_text("\n".join(TEXTS) + "\n")
  out = tmp_path / "o.npy"
  base = ["--checkpoint", ckpts[0], "--checkpoint", ckpts[1], "--input", str(inp), "--output",
          str(out), "--max_length", "8"]
  assert embed.main(base + ["--combine", "concat"]) == 0
  assert np.load(out).shape == (3, 2 * CONFIG.hidden_size)
  with pytest.raises(ValueError, match="--weights has 3 value"):
    embed.main(base + ["--combine", "weighted_mean", "--weights", "1,2,3"])
  with pytest.raises(ValueError, match="--weights applies to --combine weighted_mean"):
    embed.main(base + ["--weights", "1,2"])
  with pytest.raises(ValueError, match="concat cannot merge chunks"):
    embed.main(base + ["--combine", "concat", "--chunk_stride", "4"])
  with pytest.raises(ValueError, match=r"--chunk_stride 7 must be in \[1, 6\]"):
    embed.main(base + ["--chunk_stride", "7"])
  # Before any input is read or any header printed: the input here does not even exist.
  missing = [str(tmp_path / "missing.txt") if a == str(inp) else a for a in base]
  with pytest.raises(ValueError, match=r"--chunk_stride 7 must be in \[1, 6\]"):
    embed.main(missing + ["--chunk_stride", "7"])
