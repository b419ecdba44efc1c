"""ModernBERT from transformers: parity and round trips.

The reference is a random transformers ModernBERT (PyTorch, float32 on the CPU, eager
attention: the padded path) of 4 layers, so that layers 0 and 3 attend globally and 1 and 2
within a window of 16 tokens (8 each side); inputs shorter than, as long as and longer than
the window, padded. Its weights are converted by bert_jax.conversion.hf and run by
bert_jax.modeling.model: last hidden states and MLM logits within 1e-4, the sequence (cls
and mean pooling) and token classification heads too, and bert_jax -> transformers reloads
with the same outputs.
"""
from flax import traverse_util
import numpy as np
import pytest

from bert_jax.conversion import hf
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from tests.fixtures import parity

torch = parity.require("torch")
transformers = parity.require("transformers")

VOCAB_SIZE = 99
PAD = 0
TOL = 1e-4
# Shorter than, as long as and longer than the local layers' window.
LENGTHS = (8, 16, 40)


def _hf_config(**overrides):
  kw = dict(vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=128, local_attention=16,
            global_attn_every_n_layers=3, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
            cls_token_id=1, sep_token_id=2, attn_implementation="eager")
  kw.update(overrides)
  return transformers.ModernBertConfig(**kw)


def _random(cls, **overrides):
  """A transformers model with every tensor perturbed (LayerNorm scales too)."""
  torch.manual_seed(0)
  model = cls(_hf_config(**overrides)).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.05)
  if hasattr(model, "tie_weights"):
    model.tie_weights()
  return model


def _batch(length, seed=0):
  """Three rows: one full, one half padding, one with three padding tokens."""
  rng = np.random.default_rng(seed + length)
  ids = rng.integers(3, VOCAB_SIZE, (3, length)).astype(np.int64)
  mask = np.ones((3, length), np.int64)
  mask[1, length // 2:] = 0
  mask[2, length - 3:] = 0
  ids[mask == 0] = PAD
  return ids, mask


def _run_hf(model, ids, mask):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp("modernbert_mlm")
  model = _random(transformers.ModernBertForMaskedLM)
  model.save_pretrained(path, safe_serialization=True)
  return path, model


def test_config_maps_both_ways(mlm_dir):
  path, model = mlm_dir
  config = hf.read_config(str(path))
  assert (config.model_type, config.num_layers, config.intermediate_size) == ("modernbert", 4, 48)
  assert (config.rope_theta, config.local_rope_theta) == (160_000.0, 10_000.0)
  assert (config.local_window, config.global_every) == (16, 3)
  assert [config.is_local(i) for i in range(4)] == [False, True, True, False]
  assert config.norm_first and config.glu and not (config.linear_bias or config.norm_bias)
  back = model_config.to_hf_dict(config)
  for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "local_attention",
              "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta",
              "pad_token_id", "norm_eps", "vocab_size"):
    assert back[key] == getattr(model.config, key), key


@pytest.mark.parametrize("length", LENGTHS)
def test_hidden_states_and_mlm_logits_match_transformers(mlm_dir, length):
  path, model = mlm_dir
  loaded = hf.load_hf_params(str(path))
  config, params = loaded["config"], loaded["params"]
  assert loaded["heads"] == ("mlm",) and not loaded["dropped"]
  ids, mask = _batch(length)
  theirs = _run_hf(model, ids, mask).logits.numpy()
  hidden = model.model(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor(mask)).last_hidden_state.detach().numpy()
  args = (ids.astype(np.int32), mask.astype(np.int32), np.zeros_like(ids, np.int32))
  ours = model_lib.BertModel(config, add_pooler=False).apply(
      {"params": params["bert"]}, *args)["sequence_output"]
  # Real tokens only: a padding query with no real key within its window averages every key
  # in transformers and the keys of its block here; no real token reads it.
  real = mask > 0
  np.testing.assert_allclose(np.asarray(ours)[real], hidden[real], atol=TOL, rtol=0)
  every = np.tile(np.arange(length, dtype=np.int32), (3, 1))  # logits at every position
  logits = model_lib.BertForPreTraining(config, with_nsp=False).apply(
      {"params": params}, *args, every)["mlm_logits"]
  np.testing.assert_allclose(np.asarray(logits)[real], theirs[real], atol=TOL, rtol=0)
  if length > 16:  # the window matters: global attention everywhere gives other states
    wide = model_lib.BertModel(config.replace(local_window=0), add_pooler=False).apply(
        {"params": params["bert"]}, *args)["sequence_output"]
    assert np.abs(np.asarray(wide) - hidden)[real].max() > 1e-3


def _encoder_and_head(model, path):
  """bert_jax params of a transformers classifier: its encoder converted, its head and
  classifier renamed (transformers' task heads have no bert_jax export)."""
  model.model.save_pretrained(path, safe_serialization=True)
  loaded = hf.load_hf_params(str(path))
  sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
  return loaded["config"], {
      "bert": loaded["params"]["bert"],
      "head": {"dense": {"kernel": sd["head.dense.weight"].T}, "norm": {"scale": sd["head.norm.weight"]}},
      "classifier": {"kernel": sd["classifier.weight"].T, "bias": sd["classifier.bias"]}}


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_matches_transformers(pooling, tmp_path):
  model = _random(transformers.ModernBertForSequenceClassification, num_labels=3,
                  classifier_pooling=pooling)
  config, params = _encoder_and_head(model, tmp_path)
  ids, mask = _batch(40)
  theirs = _run_hf(model, ids, mask).logits.numpy()
  ours = model_lib.BertForSequenceClassification(config, num_labels=3, head=pooling).apply(
      {"params": params}, ids.astype(np.int32), mask.astype(np.int32), np.zeros_like(ids, np.int32))
  np.testing.assert_allclose(np.asarray(ours), theirs, atol=TOL, rtol=0)


def test_token_classification_matches_transformers(tmp_path):
  model = _random(transformers.ModernBertForTokenClassification, num_labels=5)
  config, params = _encoder_and_head(model, tmp_path)
  params["token_classifier"] = params.pop("classifier")
  ids, mask = _batch(40)
  theirs = _run_hf(model, ids, mask).logits.numpy()
  ours = model_lib.BertForTokenClassification(config, num_labels=5).apply(
      {"params": params}, ids.astype(np.int32), mask.astype(np.int32), np.zeros_like(ids, np.int32))
  real = mask > 0
  np.testing.assert_allclose(np.asarray(ours)[real], theirs[real], atol=TOL, rtol=0)


def test_export_reloads_in_transformers_with_equal_outputs(mlm_dir, tmp_path):
  path, model = mlm_dir
  loaded = hf.load_hf_params(str(path))
  written = hf.params_to_hf(loaded["params"], loaded["config"], str(tmp_path / "out"))
  assert written["architecture"] == "ModernBertForMaskedLM"
  back = transformers.ModernBertForMaskedLM.from_pretrained(
      tmp_path / "out", attn_implementation="eager").eval()
  ids, mask = _batch(40)
  np.testing.assert_allclose(_run_hf(back, ids, mask).logits.numpy(),
                             _run_hf(model, ids, mask).logits.numpy(), atol=TOL, rtol=0)
  again = hf.load_hf_params(str(tmp_path / "out"))
  assert again["config"] == loaded["config"]
  ours, theirs = (traverse_util.flatten_dict(p, sep="/")
                  for p in (loaded["params"], again["params"]))
  assert set(ours) == set(theirs)
  assert all(np.array_equal(ours[k], theirs[k]) for k in ours)


def test_packed_examples_restart_positions_and_windows(mlm_dir):
  """Two examples packed in one row (input_mask 1, 2; positions from 0 each) give the MLM
  logits each gives alone: rotary positions restart and neither attends to the other."""
  path, _ = mlm_dir
  loaded = hf.load_hf_params(str(path))
  config, params = loaded["config"], loaded["params"]
  model = model_lib.BertForPreTraining(config, with_nsp=False)
  rng = np.random.default_rng(1)
  a, b = rng.integers(3, VOCAB_SIZE, 21), rng.integers(3, VOCAB_SIZE, 15)
  row = np.concatenate([a, b, [PAD] * 4])[None].astype(np.int32)
  numbers = np.array([[1] * 21 + [2] * 15 + [0] * 4], np.int32)
  positions = np.concatenate([np.arange(21), np.arange(15), np.zeros(4, int)])[None]
  masked = np.array([[3, 20, 21 + 2, 21 + 14]], np.int32)
  packed = model.apply({"params": params}, row, numbers, np.zeros_like(row), masked,
                       positions.astype(np.int32))["mlm_logits"]
  for ids, cols, k in ((a, [3, 20], 0), (b, [2, 14], 2)):
    alone = model.apply({"params": params}, ids[None].astype(np.int32),
                        np.ones((1, len(ids)), np.int32), np.zeros((1, len(ids)), np.int32),
                        np.array([cols], np.int32))["mlm_logits"]
    np.testing.assert_allclose(np.asarray(packed)[0, k:k + 2], np.asarray(alone)[0],
                               atol=TOL, rtol=0)


def test_built_sizes_are_the_released_ones():
  base = model_config.for_pretraining(model_config.variant("base", 50368), "modernbert", 50283)
  assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (
      22, 768, 12, 1152)
  large = model_config.for_pretraining(model_config.variant("large", 50368), "modernbert", 50283)
  assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (
      28, 1024, 16, 2624)
  theirs = transformers.ModernBertConfig()
  assert (base.rope_theta, base.local_rope_theta, base.local_window, base.global_every) == (
      theirs.global_rope_theta, theirs.local_rope_theta, theirs.local_attention,
      theirs.global_attn_every_n_layers)
  torch.manual_seed(0)
  n_theirs = sum(p.numel() for p in transformers.ModernBertModel(theirs).parameters())
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  shapes = bundle.pretraining_shapes(base)
  n_ours = sum(int(np.prod(s)) for p, s in shapes.items()
               if p.startswith("bert/") and not p.startswith("bert/pooler/"))
  assert n_ours == n_theirs
  # MFU's count of the layers' params (GLU kernels, no biases, scale-only LayerNorms; the
  # first layer's missing attention norm is the final norm's width).
  from bert_jax.modeling import flops  # pylint: disable=g-import-not-at-top
  assert flops.encoder_params(base) == sum(
      int(np.prod(s)) for p, s in shapes.items() if p.startswith("bert/encoder/"))


def test_settings_bert_jax_does_not_compute_are_named():
  d = _hf_config(attention_bias=True, classifier_activation="silu").to_dict()
  with pytest.raises(ValueError, match="attention_bias=True.*classifier_activation='silu'"):
    model_config.from_hf_dict(d)


def _tokenizer_json(path):
  """A small byte-level BPE saved as one tokenizer.json, as ModernBERT's is: BERT's
  special tokens ([MASK] taking the space before it), `[CLS] A [SEP]` templates."""
  tokenizers = parity.require("tokenizers")
  from tests.fixtures import pretraining  # pylint: disable=g-import-not-at-top
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=400, special_tokens=specials,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator([" ".join(pretraining.WORDS)] * 4, trainer)
  tok.add_special_tokens([tokenizers.AddedToken("[MASK]", lstrip=True, special=True)])
  tok.post_processor = tokenizers.processors.TemplateProcessing(
      single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
      special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
  tok.save(str(path / "tokenizer.json"))
  return tok.get_vocab_size()


def test_tokenizer_json_bundle_fills_masks_and_embeds_as_transformers(tmp_path):
  """HF folder with tokenizer.json -> `bert_jax.convert` -> bundle: the tokenizer's ids,
  fill-mask's top tokens and probabilities and mean embeddings are transformers'; `--to hf`
  gives the tokenizer back."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax import convert  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import mask_filling  # pylint: disable=g-import-not-at-top
  src, dst, out = (tmp_path / n for n in ("hf", "bundle", "export"))
  src.mkdir()
  n = _tokenizer_json(src)
  model = _random(transformers.ModernBertForMaskedLM, vocab_size=n, pad_token_id=3,
                  cls_token_id=1, sep_token_id=2, bos_token_id=1, eos_token_id=2)
  model.save_pretrained(src, safe_serialization=True)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_file=str(src / "tokenizer.json"), cls_token="[CLS]", sep_token="[SEP]",
      pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
  assert convert.main(["--from", "hf", "--src", str(src), "--dst", str(dst)]) == 0
  pretrained = loading.load_pretrained(str(dst))
  tok = tokenizer_lib.for_checkpoint(pretrained)
  assert (tok.kind, tok.mask_id, tok.pad_id, tok.cls_id) == ("bpe", 4, 3, 1)
  text = "the quick brown [MASK] jumps over the lazy dog."
  ids, positions = mask_filling.encode(tok, [text], 64)
  want = fast(text)["input_ids"]
  assert ids[0] == want and positions[0] == [want.index(fast.mask_token_id)]
  ours = mask_filling.fill_mask(pretrained, [text], top_k=3)[0][0]
  logits = _run_hf(model, np.array([want]), np.ones((1, len(want)), np.int64)).logits.numpy()
  probs = jax.nn.softmax(logits[0, positions[0][0]].astype(np.float64))
  top = np.argsort(-probs)[:3]
  assert [t for t, _ in ours] == fast.convert_ids_to_tokens(top.tolist())
  np.testing.assert_allclose([p for _, p in ours], probs[top], atol=1e-5)
  # Mean embeddings of two texts of different lengths (the shorter padded).
  texts = ["a short text.", "a somewhat longer text than the first one, with more words."]
  encoded = fast(texts, padding=True, return_tensors="np")
  hidden = model.model(input_ids=torch.tensor(encoded["input_ids"]),
                       attention_mask=torch.tensor(encoded["attention_mask"])
                       ).last_hidden_state.detach().numpy()
  m = encoded["attention_mask"][..., None]
  want_mean = (hidden * m).sum(1) / m.sum(1)
  got = api.Encoder.load(str(dst)).embed(texts, pooling="mean", normalize=False)
  np.testing.assert_allclose(np.asarray(got), want_mean, atol=TOL, rtol=0)
  assert convert.main(["--to", "hf", "--src", str(dst), "--dst", str(out)]) == 0
  assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
  # transformers reads it with its special tokens and without token_type_ids, which
  # ModernBertModel does not take.
  exported = transformers.AutoTokenizer.from_pretrained(str(out))
  assert (exported.mask_token, exported.pad_token, exported.cls_token) == ("[MASK]", "[PAD]",
                                                                         "[CLS]")
  again = exported(texts, padding=True, return_tensors="pt")
  assert sorted(again) == ["attention_mask", "input_ids"]
  np.testing.assert_allclose(model.model(**again).last_hidden_state.detach().numpy(), hidden,
                             atol=1e-6)
  # Its tokenizer.json is the export's own: --overwrite replaces the earlier export; beside
  # another tokenizer's vocab.txt it would be an earlier model's, and is refused.
  before = sorted(p.name for p in out.iterdir())
  assert convert.main(["--to", "hf", "--src", str(dst), "--dst", str(out), "--overwrite"]) == 0
  assert sorted(p.name for p in out.iterdir()) == before
  (out / "vocab.txt").write_text("[PAD]\n")
  with pytest.raises(FileExistsError, match="tokenizer.json"):
    convert.main(["--to", "hf", "--src", str(dst), "--dst", str(out), "--overwrite"])


def test_stable_adamw_clips_each_tensor_by_its_update_rms():
  """StableAdamW is AdamW while a tensor's RMS(g^2 / v) is at most 1, and divides that
  tensor's step (with its decay) by the RMS when a gradient spikes past its running scale."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bert_jax.training import optimizer  # pylint: disable=g-import-not-at-top
  opt = ml_collections.ConfigDict(dict(
      name="stable_adamw", b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01, grad_clip_norm=0.0,
      bf16_moments=False, schedule="constant", poly_power=1.0, grad_accum_steps=1))
  optimizer.check_config(opt, 1e-3)
  stable, _ = optimizer.make_optimizer(opt, 1e-3, 0, 10)
  adamw, _ = optimizer.make_optimizer(ml_collections.ConfigDict({**opt.to_dict(), "name": "adamw"}),
                                      1e-3, 0, 10)
  params = {"dense": {"kernel": jnp.ones((4, 3)), "bias": jnp.zeros(3)}}
  steady = {"dense": {"kernel": jnp.full((4, 3), 0.1), "bias": jnp.full(3, 0.1)}}
  spike = {"dense": {"kernel": jnp.full((4, 3), 10.0), "bias": jnp.full(3, 0.1)}}
  s_state, a_state = stable.init(params), adamw.init(params)
  for grads in (steady, steady):
    s_up, s_state = stable.update(grads, s_state, params)
    a_up, a_state = adamw.update(grads, a_state, params)
    for k in ("kernel", "bias"):
      np.testing.assert_allclose(s_up["dense"][k], a_up["dense"][k], rtol=1e-5)
  s_up, s_state = stable.update(spike, s_state, params)
  a_up, _ = adamw.update(spike, a_state, params)
  np.testing.assert_allclose(s_up["dense"]["bias"], a_up["dense"]["bias"], rtol=1e-5)
  nu = s_state[0].nu["dense"]["kernel"] / (1 - 0.98 ** 3)
  rms = float(np.sqrt(np.mean(100.0 / np.asarray(nu))))
  assert rms > 1
  np.testing.assert_allclose(s_up["dense"]["kernel"], a_up["dense"]["kernel"] / rms, rtol=1e-4)


def test_trapezoidal_schedule_warms_up_holds_and_decays_as_one_minus_sqrt():
  from bert_jax.training import optimizer  # pylint: disable=g-import-not-at-top
  s = optimizer.learning_rate_schedule(2.0, 10, 100, "trapezoidal")
  assert [float(s(i)) for i in (0, 5, 10, 50, 90)] == [0.0, 1.0, 2.0, 2.0, 2.0]
  np.testing.assert_allclose([float(s(i)) for i in (91, 95, 100)],
                             [2 * (1 - np.sqrt(0.1)), 2 * (1 - np.sqrt(0.5)), 0.0], atol=1e-6)


@pytest.mark.slow
def test_recipe_pretrains_exports_and_fills_masks(tmp_path):
  """configs/pretrain.py:tiny,recipe=modernbert (shrunk): MLM alone at 30 % on packed rows
  trains ModernBERT, exports it, and fill-mask reads the export; base takes StableAdamW and
  the trapezoidal schedule."""
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import mask_filling  # pylint: disable=g-import-not-at-top
  from bert_jax import pretrain  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pretraining  # pylint: disable=g-import-not-at-top
  config = pretraining.config_module().get_config("tiny,recipe=modernbert")
  assert (config.model_type, config.objective, config.data.mode, config.data.packing,
          config.data.mask_prob) == ("modernbert", "mlm", "full_sentences", True, 0.3)
  base = pretraining.config_module().get_config("base,recipe=modernbert")
  assert (base.optimizer.name, base.optimizer.schedule, base.learning_rate) == (
      "stable_adamw", "trapezoidal", 8e-4)
  config.total_steps, config.warmup_steps, config.log_every = 4, 1, 1
  config.checkpoint_every, config.seq_len, config.batch_size = 4, 64, 8
  config.data.max_predictions_per_seq = 20
  config.fill_mask_example = ""
  workdir = tmp_path / "run"
  pretrain.train_and_export(config, str(workdir))
  assert len(pretraining.logged_losses(str(workdir))) == 4
  trained = loading.load_pretrained(str(workdir / "export"))
  assert trained.config.model_type == "modernbert" and trained.config.norm_first
  filled = mask_filling.fill_mask(trained, ["the [MASK] of the module ."], top_k=2)[0][0]
  assert len(filled) == 2 and all(0 <= p <= 1 for _, p in filled)
  # Fine-tuning through ModernBERT's head (dense, GELU, LayerNorm before the classifier, made
  # afresh), its export and the API's classify.
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  from tests.fixtures import finetuning  # pylint: disable=g-import-not-at-top
  glue = finetuning.write_glue_dir(tmp_path)
  finetune.finetune(finetuning.glue_config(glue, str(workdir / "export"), head="mean"),
                    str(tmp_path / "mrpc"))
  tuned = api.Encoder.load(str(tmp_path / "mrpc" / "export"))
  assert {"head", "classifier"} <= set(tuned.heads)
  [(label, p)] = tuned.classify([("a cat sat .", "a cat sat .")])
  assert label in ("0", "1") and 0 <= p <= 1


def test_a_local_last_layer_computing_only_the_masked_rows_matches_transformers(tmp_path):
  """Every second layer global, so the last is local: pretraining's last layer computes only
  the masked rows (the dense mask cut to the window), the others by blocks."""
  model = _random(transformers.ModernBertForMaskedLM, global_attn_every_n_layers=2)
  model.save_pretrained(tmp_path, safe_serialization=True)
  loaded = hf.load_hf_params(str(tmp_path))
  config, params = loaded["config"], loaded["params"]
  assert config.is_local(3)
  ids, mask = _batch(40)
  theirs = _run_hf(model, ids, mask).logits.numpy()
  masked = np.array([[0, 5, 20, 39], [1, 9, 15, 19], [3, 17, 30, 36]], np.int32)
  ours = model_lib.BertForPreTraining(config, with_nsp=False).apply(
      {"params": params}, ids.astype(np.int32), mask.astype(np.int32),
      np.zeros_like(ids, np.int32), masked)["mlm_logits"]
  np.testing.assert_allclose(np.asarray(ours), np.take_along_axis(theirs, masked[..., None], 1),
                             atol=TOL, rtol=0)


@pytest.mark.slow
def test_fine_tuning_takes_the_prediction_head_from_the_mlm_checkpoint(glue_dir, tmp_path, capsys):
  """transformers' ModernBertForSequenceClassification.from_pretrained(an MLM checkpoint) loads
  `head` (dense, norm) from the MLM head, and only the classifier starts afresh: fine-tuning
  starts the same way (at a learning rate of 1e-12 the export holds the MLM head's transform)."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pretraining  # pylint: disable=g-import-not-at-top
  from tests.fixtures import tiny_encoder  # pylint: disable=g-import-not-at-top
  from tests.fixtures.finetuning import glue_config  # pylint: disable=g-import-not-at-top
  cfg = pretrain_setup.variant_model_config(
      pretraining.config_module().get_config("tiny,recipe=modernbert"), len(tiny_encoder.VOCAB), 0)
  net = model_lib.BertForPreTraining(cfg, with_nsp=False)
  params = jax.device_get(jax.jit(lambda rng: model_lib.init_params(
      net, rng, seq_len=16, num_predictions=2))(jax.random.PRNGKey(5)))
  bundle.save_bundle(str(tmp_path / "mlm"), params, cfg, tiny_encoder.VOCAB, True)
  finetune.finetune(glue_config(glue_dir, str(tmp_path / "mlm"), learning_rate=1e-12,
                                num_epochs=0.25), str(tmp_path / "run"))
  out = capsys.readouterr().out
  assert "fresh: classifier/bias, classifier/kernel)" in out, out
  head = loading.load_pretrained(str(tmp_path / "run" / "export")).params["head"]
  np.testing.assert_allclose(head["dense"]["kernel"], params["mlm"]["transform"]["kernel"],
                             atol=1e-9)
  np.testing.assert_allclose(head["norm"]["scale"], params["mlm"]["transform_norm"]["scale"],
                             atol=1e-9)


@pytest.mark.parametrize("architecture, pooling", [("ModernBertForSequenceClassification", "cls"),
                                                   ("ModernBertForSequenceClassification", "mean"),
                                                   ("ModernBertForTokenClassification", None)])
def test_from_hf_reads_a_fine_tuned_modernbert_with_its_head(architecture, pooling, tmp_path):
  """A ModernBERT classifier saved by transformers converts with its prediction head,
  classifier and id2label (its `head` tensors are not taken for an MLM head); the Encoder
  answers as transformers does."""
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  from bert_jax import convert  # pylint: disable=g-import-not-at-top
  labels = ["O", "B-PER", "I-PER"]
  extra = {"classifier_pooling": pooling} if pooling else {}
  model = _random(getattr(transformers, architecture), num_labels=3,
                  id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)},
                  **extra)
  src = tmp_path / "hf"
  model.save_pretrained(src, safe_serialization=True)
  words = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
  (src / "vocab.txt").write_text("\n".join(words + [f"w{i}" for i in range(VOCAB_SIZE - 5)])
                                 + "\n")
  assert convert.main(["--from", "hf", "--src", str(src), "--dst", str(tmp_path / "b"),
                       "--quiet"]) == 0
  encoder = api.Encoder.load(str(tmp_path / "b"))
  text = ["w5", "w17", "w3", "w40", "w8"]
  ids = np.array([[1] + [5 + int(w[1:]) for w in text] + [2]])
  logits = _run_hf(model, ids, np.ones_like(ids)).logits[0].numpy()
  if architecture.endswith("TokenClassification"):
    from bert_jax.tasks.ner import data as ner  # pylint: disable=g-import-not-at-top
    raw = [labels[i] for i in np.argmax(logits[1:-1], -1)]
    assert encoder.tag([text]) == [ner.convert(raw, "IOB2")]
    return
  (label, prob), = encoder.classify([" ".join(text)])
  probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
  assert label == labels[int(np.argmax(probs))] and abs(prob - probs.max()) < 1e-4
