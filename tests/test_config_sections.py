"""Every config key is documented, in its config file or in bert_jax/configuration/sections.py;
parse_arg reads every config's argument."""
import itertools
import pathlib

import jax
import ml_collections
import pytest

from bert_jax import config_help
from bert_jax.configuration import sections as config_sections
from bert_jax.modeling import compute_policy
from bert_jax.modeling.model_config import BertConfig
from bert_jax import pretrain

_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Config file, an argument of get_config.
_CONFIGS = [("pretrain.py", "tiny"), ("pretrain.py", "base,recipe=roberta"), ("glue.py", "task=mrpc"),
            ("squad.py", "version=1.1"), ("ner.py", ""), ("sentence_embeddings.py", "")]
# Section functions of config_sections.py; finetune's arguments (it fills a given config).
_SECTIONS = {"model": None, "optimizer": None, "mesh": None,
             "finetune": dict(data_source="tsv", max_seq_length=128, learning_rate=1e-5,
                              num_epochs=1.0)}
_flatten = config_help.flatten


def _documented(lines: list[str], where: str) -> set[str]:
  """Keys that `lines` declare with a comment (bert_jax.config_help reads them the same way)."""
  return set(config_help.documented(lines, where))


def _section_documented(name: str) -> set[str]:
  return set(config_help.section_comments(name))


def _build(name: str) -> ml_collections.ConfigDict:
  if name != "finetune":
    return getattr(config_sections, name)()
  c = ml_collections.ConfigDict()
  config_sections.finetune(c, **_SECTIONS[name])
  return c


@pytest.mark.parametrize("name", _SECTIONS)
def test_sections_are_fully_documented(name):
  assert set(_flatten(_build(name))) == _section_documented(name)


def test_an_undocumented_key_fails():
  with pytest.raises(config_help.UndocumentedKeyError, match="x.py:3 batch_size has no comment"):
    _documented(["  # Documented.", "  c.seed = 0", "  c.batch_size = 32"], "x.py")
  model_keys = {"model." + k for k in _section_documented("model")}
  assert _documented(["  c.model = config_sections.model()"], "x.py") == model_keys


def _config_module(filename):
  return config_help.load_module(_ROOT / "configs" / filename)


@pytest.mark.parametrize("filename,arg", _CONFIGS)
def test_every_key_has_a_comment(filename, arg):
  path = _ROOT / "configs" / filename
  keys = set(_flatten(_config_module(filename).get_config(arg)))
  # Equal: the shared sections are used whole, and every key is documented.
  assert keys == _documented(path.read_text().splitlines(), filename)


def test_parse_arg_names_flags_and_a_bare_value():
  parse = lambda arg: config_sections.parse_arg(arg, positional="variant", variant="tiny",
                                                phase2=False, steps=10, lr=0.5)
  assert parse(None).to_dict() == dict(variant="tiny", phase2=False, steps=10, lr=0.5)
  assert parse("base,phase2").to_dict() == dict(variant="base", phase2=True, steps=10, lr=0.5)
  a = parse("variant=large,phase2=False,steps=7,lr=1e-3")
  assert (a.variant, a.phase2, a.steps, a.lr) == ("large", False, 7, 1e-3)
  assert parse("phase2=TRUE,mini").variant == "mini" and parse("phase2=TRUE").phase2
  assert config_sections.parse_arg("1.1", positional="version", version="").version == "1.1"


@pytest.mark.parametrize("arg,message", [
    ("base,phase3,lr=1", r"^unknown config options \['lr', 'phase3'\]; known: \['phase2', "
                         r"'steps', 'variant'\] \(e.g. configs/x.py:base,phase2\)$"),
    ("base,large", r"unknown config options \['large'\]"),
    ("mini,variant=base", r"'variant' given twice"),
    ("steps=1.5", r"'steps' takes int, not '1.5'"),
    ("phase2=yes", r"'phase2' is true or false, not 'yes'"),
])
def test_parse_arg_errors_name_the_known_options(arg, message):
  with pytest.raises(ValueError, match=message):
    config_sections.parse_arg(arg, positional="variant", example="configs/x.py:base,phase2",
                              variant="tiny", phase2=False, steps=10)


def test_pretrain_config_arguments():
  get_config = _config_module("pretrain.py").get_config
  assert get_config("tiny").variant == "tiny" and get_config("tiny").seq_len == 128
  for arg in (None, "", "recipe=roberta"):  # a size is asked for, not a tiny run assumed
    with pytest.raises(ValueError, match=r"^configs/pretrain.py needs the model size: "
                       r"configs/pretrain.py:VARIANT, VARIANT one of \['tiny', 'mini'"):
      get_config(arg)
  base, phase2 = get_config("base"), get_config("base,phase2")
  assert (phase2.variant, phase2.seq_len, phase2.data.max_predictions_per_seq) == ("base", 512, 80)
  assert phase2.total_steps == base.total_steps // 9
  assert get_config("base,phase2=false").to_dict() == base.to_dict()
  with pytest.raises(ValueError, match=r"unknown config options \['phase3'\]; known: "
                                       r"\['fused_attention', 'lamb_64k', 'phase2', 'recipe', "
                                       r"'variant'\]"):
    get_config("base,phase3")
  with pytest.raises(ValueError, match=r"unknown variant 'huge'; known: \['base', "):
    get_config("huge")
  with pytest.raises(ValueError, match=r"unknown recipe 'gpt'; known: \['bert', 'roberta', "):
    get_config("base,recipe=gpt")
  with pytest.raises(ValueError, match=r"unknown recipe 'distill'; .*; distillation is an "
                                       r"objective: --config.objective=distill"):
    get_config("tiny,recipe=distill")


@pytest.mark.parametrize("variant", ["tiny", "base"])
def test_each_recipe_is_a_config_pretraining_accepts(variant):
  """Every recipe's objective fits its data mode, batch and mesh (checked before any data)."""
  from bert_jax.data.sources import registry as source_registry  # pylint: disable=g-import-not-at-top
  from bert_jax.members import registry as member_registry  # pylint: disable=g-import-not-at-top
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  from bert_jax.training import sharding  # pylint: disable=g-import-not-at-top
  module = _config_module("pretrain.py")
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  objectives = {}
  for recipe in member_registry.recipes():
    c = module.get_config(f"{variant},recipe={recipe}")
    pretrain_setup.check_config(c, mesh, source_registry.get(c.data.source))
    objectives[recipe] = (c.objective, c.data.mode, c.model_type)
  assert objectives == {"bert": ("mlm_nsp", "nsp", "bert"),
                        "roberta": ("mlm", "full_sentences", "roberta"),
                        "albert": ("mlm_sop", "sop", "albert"),
                        "electra": ("electra", "full_sentences", "electra"),
                        "deberta": ("mlm", "full_sentences", "deberta-v2"),
                        "modernbert": ("mlm", "full_sentences", "modernbert")}
  deberta = pretrain_setup.variant_model_config(module.get_config(f"{variant},recipe=deberta"), 300)
  assert (deberta.position_buckets, deberta.absolute_positions, deberta.type_vocab_size) == (
      256, False, 0)
  roberta = module.get_config(f"{variant},recipe=roberta")
  assert roberta.data.packing and roberta.optimizer.b2 == 0.98
  if variant == "base":  # 8K sequences per update in 32 microbatches
    assert (roberta.batch_size, roberta.optimizer.grad_accum_steps) == (8192, 32)
  assert module.get_config(f"{variant},recipe=bert").to_dict() == module.get_config(variant).to_dict()


def test_config_help_lists_every_key_with_its_comment_and_default():
  loaded = config_help.load(str(_ROOT / "configs" / "pretrain.py") + ":tiny")
  text = config_help.describe(loaded)
  keys = _flatten(loaded.config)
  assert text.splitlines()[0].endswith(f"{len(keys)} keys; override one with --config.KEY=VALUE")
  assert "seq_len = 128\n    Tokens per sequence (static).\n" in text
  # A section key carries its section's comment, not the tiny variant's override note.
  assert ("optimizer.name = 'lamb'\n    'adamw' (BERT), 'lamb' (large-batch BERT) or "
          "'stable_adamw' (ModernBERT: AdamW with per-tensor update clipping).\n") in text
  assert "(no comment)" not in text
  assert len(text.splitlines()) == 1 + 2 * len(keys)
  # A prefix lists its keys; a misspelt one is one line with the nearest, not 0 keys.
  assert config_help.describe(loaded, "optimizer.").startswith(
      f"{loaded.spec}: {sum(k.startswith('optimizer.') for k in keys)} keys")
  with pytest.raises(ValueError, match=r"no key starts with 'optimzer'; did you mean "
                                       r"'optimizer'\?"):
    config_help.describe(loaded, "optimzer")


@pytest.mark.parametrize("override,message", [
    ("--config.optimzer.name=x", "unknown config key 'optimzer.name'; did you mean "
                                 "--config.optimizer.name?"),
    ("--config.optimizer.lr=5", "unknown config key 'optimizer.lr'; did you mean "
                                "--config.learning_rate?"),
    ("--config.totl_steps=3", "did you mean --config.total_steps?"),
    ("--config.model.dropout=0", "did you mean --config.model.dropout_rate?"),
    ("--config.zzzzqq=1", "unknown config key 'zzzzqq' (python -m bert_jax.config_help"),
])
def test_unknown_keys_at_any_depth_name_the_closest_key(override, message):
  config = config_help.load(str(_ROOT / "configs" / "pretrain.py") + ":tiny").config
  assert message in config_help.unknown_override(config, ["--workdir", "d", override])
  assert config_help.unknown_override(config, ["--config.optimizer.name=adamw",
                                               "--config.model=x", "--config.seed", "1"]) is None


def test_the_command_line_answers_an_unknown_key_in_one_line_before_any_work(capsys):
  from bert_jax import pretrain  # pylint: disable=g-import-not-at-top
  config = str(_ROOT / "configs" / "pretrain.py") + ":tiny"
  with pytest.raises(SystemExit) as e:
    pretrain.main(["--config", config, "--workdir", "/nonexistent/x", "--config.optimizer.lr=5"])
  assert str(e.value) == ("bert_jax.pretrain: error: unknown config key 'optimizer.lr'; did "
                          "you mean --config.learning_rate? (python -m bert_jax.config_help "
                          "lists every key)")
  with pytest.raises(SystemExit) as e:
    pretrain.main(["--config", config, "--config.help"])
  assert e.value.code == 0
  assert "data.vocab_file = ''\n    WordPiece vocab" in capsys.readouterr().out
  with pytest.raises(SystemExit, match=r"^bert_jax.pretrain: error: --config .*pretrain.py:huge: "
                                       r"unknown variant 'huge'"):
    pretrain.main(["--config", config[:-len(":tiny")] + ":huge", "--workdir", "/x"])


def test_vocab_pad_multiple_auto_pads_the_decoder_on_accelerators_only():
  """0 (auto): 128 on GPU/TPU; 1 on the CPU, whose losses stay every earlier run's bits.
  Fine-tuning's model section has no key (its models have no MLM decoder): 1."""
  m = config_help.load_module(_ROOT / "configs" / "pretrain.py").get_config("tiny").model
  assert m.vocab_pad_multiple == 0
  assert compute_policy.vocab_pad_multiple(m, "cpu") == 1
  assert (compute_policy.vocab_pad_multiple(m, "gpu") == compute_policy.vocab_pad_multiple(m, "tpu")
          == 128)
  m.vocab_pad_multiple = 64
  assert compute_policy.vocab_pad_multiple(m, "cpu") == 64
  assert "vocab_pad_multiple" not in config_sections.model()
  assert compute_policy.vocab_pad_multiple(config_sections.model(), "gpu") == 1
  header = pretrain._decoder_padding  # the run header's model line
  assert header(BertConfig(vocab_size=30522, vocab_pad_multiple=128)) == (
      " (MLM decoder padded to 30,592)")
  assert header(BertConfig(vocab_size=30522)) == header(BertConfig(vocab_size=256,
                                                                   vocab_pad_multiple=128)) == ""


def test_no_recipe_caps_masking_below_its_rate():
  """max_predictions_per_seq caps the masked positions of a row: every variant, recipe and
  phase, with the large-batch schedule or without, masks its rate (mask_prob x seq_len)."""
  from bert_jax.members import registry as member_registry  # pylint: disable=g-import-not-at-top
  module = config_help.load_module("configs/pretrain.py")
  for variant, recipe, extra in itertools.product(
      ("tiny", "base", "large"), member_registry.recipes(),
      ("", ",phase2", ",lamb_64k", ",lamb_64k,phase2")):
    c = module.get_config(f"{variant},recipe={recipe}{extra}")
    assert c.data.max_predictions_per_seq >= round(c.data.mask_prob * c.seq_len), (
        variant, recipe, extra, c.seq_len, c.data.max_predictions_per_seq)
