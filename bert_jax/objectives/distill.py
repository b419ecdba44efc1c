"""DistilBERT's distillation (Sanh et al. 2019, arXiv:1910.01108): objective 'distill'.

As huggingface/transformers' examples/research_projects/distillation (distiller.py,
scripts/extract_distilbert.py):

  student   the teacher's architecture with fewer layers (default: half), initialised
            from the teacher: embeddings, MLM head, and encoder layer i from teacher layer
            i x L_teacher // L_student (every other layer at half depth); no pair head
  teacher   frozen: loaded once from config.teacher_checkpoint and passed to the step as
            frozen params (train_core.with_frozen), never in the train state, the
            optimizer state or the checkpoints
  loss      alpha_ce x T^2 x KL(softmax(teacher / T) || softmax(student / T))
            + alpha_mlm x the MLM cross-entropy on the labels
            + alpha_cos x (1 - cosine) between the last hidden states
            KL is the soft-target cross-entropy less the teacher's entropy (the same
            gradient; 0 when the student matches). Its mean is over the masked positions
            (distiller.py's restrict_ce_to_mask: the heads here compute logits only
            there), the cosine's over real tokens, the MLM's over the predictions.

Metrics: distill_loss (the T^2-scaled KL term), cos_loss, mlm_loss, student_mlm_accuracy
and teacher_mlm_accuracy (the same masked positions).
"""
import functools
from typing import Any, Callable, Sequence

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.modeling import compute_policy
from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.objectives import base
from bert_jax.objectives import mlm_nsp
from bert_jax.training import sharding
from bert_jax.training import train_core


def student_layers(teacher_layers: int, configured: int) -> int:
  """The student's depth: `configured`, or half the teacher's (at least 1) when 0."""
  return configured or max(1, teacher_layers // 2)


def teacher_layer_of(student_layer: int, teacher_layers: int, num_student_layers: int) -> int:
  """The teacher layer a student layer starts from (every other one at half depth)."""
  return student_layer * teacher_layers // num_student_layers


def load_teacher(path: str, num_student_layers: int, vocab: Sequence[str] = ()
                 ) -> loading.Pretrained:
  """The teacher's params (bert without pooler, MLM head) and description, checked.

  Args:
    path: any checkpoint loading.load_pretrained reads (a bundle, a converted
      checkpoint, a pretraining workdir or its checkpoints/).
    num_student_layers: the student's depth (<= the teacher's).
    vocab: the data tokenizer's tokens in id order; when given, the teacher's must be
      the same.

  Raises:
    ValueError: one line naming the path and the problem (no MLM head, another vocab,
      a student deeper than the teacher).
  """
  teacher = loading.load_pretrained(path)
  where = f"teacher_checkpoint {path}"
  if "mlm" not in teacher.params or "mlm_output_bias" not in teacher.params:
    raise ValueError(f"{where} has no MLM head (params {sorted(teacher.params)}); distillation "
                     "needs a masked-LM teacher (a bert_jax pretraining run or a converted "
                     "...ForMaskedLM / ...ForPreTraining checkpoint)")
  if not 1 <= num_student_layers <= teacher.config.num_layers:
    raise ValueError(f"bad config: distill.student_layers {num_student_layers} must be in [1, "
                     f"{teacher.config.num_layers}] (the teacher's layers)")
  if vocab and tuple(vocab) != tuple(teacher.vocab):
    first = next((i for i, (a, b) in enumerate(zip(vocab, teacher.vocab)) if a != b),
                 min(len(vocab), len(teacher.vocab)))
    raise ValueError(
        f"{where}: its vocab ({len(teacher.vocab)} tokens) is not the data's tokenizer's "
        f"({len(vocab)} tokens; first difference at id {first}); set data.vocab_file / "
        "data.tokenizer to the teacher's vocab")
  # DeBERTa's enhanced mask decoder, when the teacher was trained with it, serves its MLM head.
  params = {k: v for k, v in teacher.params.items()
            if k in ("bert", "mlm", "mlm_output_bias", "emd")}
  params["bert"] = {k: v for k, v in params["bert"].items() if k != "pooler"}
  return loading.Pretrained(params, teacher.config, teacher.vocab, teacher.lowercase,
                            teacher.source, teacher.tokenizer_file)


def student_config(teacher: BertConfig, num_layers: int) -> BertConfig:
  """The student: the teacher's shapes with `num_layers` layers."""
  return teacher.replace(num_layers=num_layers)


def student_from_teacher(teacher: loading.Pretrained, num_layers: int) -> loading.Pretrained:
  """The student's starting params: the teacher's with every other layer (DistilBERT's init).

  The encoder's params outside its layers (DeBERTa's relative-position table and its norm,
  ModernBERT's final norm) are the teacher's; ALBERT's one shared layer is kept whole, and the
  student applies it num_layers times.
  """
  encoder = teacher.params["bert"]["encoder"]
  n = teacher.config.num_layers
  outside = {k: v for k, v in encoder.items() if not k.startswith("layer_")}
  if teacher.config.share_layers:
    picked, layers = "shared", {k: v for k, v in encoder.items() if k.startswith("layer_")}
  else:
    picked = [teacher_layer_of(i, n, num_layers) for i in range(num_layers)]
    layers = {f"layer_{i}": encoder[f"layer_{t}"] for i, t in enumerate(picked)}
  params = {**teacher.params, "bert": {**teacher.params["bert"], "encoder": {**outside, **layers}}}
  return loading.Pretrained(
      params, student_config(teacher.config, num_layers), teacher.vocab, teacher.lowercase,
      f"{teacher.source} (teacher layers {picked})", teacher.tokenizer_file)


def objective(student: model_lib.BertForPreTraining, teacher: model_lib.BertForPreTraining,
              temperature: float, alpha_ce: float, alpha_mlm: float,
              alpha_cos: float) -> train_core.Objective:
  """DistilBERT's loss; sums() reads params {'trained': student's, 'frozen': teacher's}."""
  t = temperature

  def run(model, params, batch, rng, deterministic):
    return model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                       batch["segment_ids"], batch["masked_lm_positions"],
                       model_lib.batch_position_ids(batch, model.config),
                       deterministic=deterministic,
                       sequence_output=True, rngs=None if deterministic else {"dropout": rng})

  def sums(params, batch, rng, deterministic):
    s = run(student, params["trained"], batch, rng, deterministic)
    te = run(teacher, params["frozen"], batch, None, True)
    w = batch["masked_lm_weights"].astype(jnp.float32)  # [b, P]
    real = (batch["input_mask"] > 0).astype(jnp.float32)  # [b, L]
    xent, correct = mlm_nsp.mlm_xent_and_correct(s["mlm_logits"], batch["masked_lm_ids"])
    _, teacher_correct = mlm_nsp.mlm_xent_and_correct(te["mlm_logits"], batch["masked_lm_ids"])
    log_p_teacher = jax.nn.log_softmax(te["mlm_logits"] / t, axis=-1)  # [b, P, V]
    log_p_student = jax.nn.log_softmax(s["mlm_logits"] / t, axis=-1)
    kl = jnp.sum(jnp.exp(log_p_teacher) * (log_p_teacher - log_p_student), axis=-1)  # [b, P]
    hs = s["sequence_output"].astype(jnp.float32)  # [b, L, H]
    ht = te["sequence_output"].astype(jnp.float32)
    cos = jnp.sum(hs * ht, -1) / jnp.maximum(
        jnp.linalg.norm(hs, axis=-1) * jnp.linalg.norm(ht, axis=-1), 1e-8)  # [b, L]
    return {
        "mlm_xent": jnp.sum(xent * w),
        "mlm_correct": jnp.sum(correct * w),
        "teacher_mlm_correct": jnp.sum(teacher_correct * w),
        "mlm_weight": jnp.sum(w),
        "real_tokens": jnp.sum(real),
        "distill_kl": jnp.sum(kl * w),
        "cos_distance": jnp.sum((1.0 - cos) * real),
    }

  def denominators(batch):
    return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5,
            "tokens": jnp.sum(batch["input_mask"] > 0).astype(jnp.float32) + 1e-5}

  def loss(s, d):
    return (alpha_ce * t * t * s["distill_kl"] / d["mlm"] + alpha_mlm * s["mlm_xent"] / d["mlm"]
            + alpha_cos * s["cos_distance"] / d["tokens"])

  return train_core.Objective(sums=sums, denominators=denominators, loss=loss)


def summarize(sums: dict[str, Any], temperature: float, alpha_ce: float, alpha_mlm: float,
              alpha_cos: float) -> dict[str, float]:
  """Host-side: accumulated sums -> the logged means (the loss's weights for eval sums)."""
  out = train_core.step_means(sums)
  w = max(float(sums["mlm_weight"]), 1e-5)
  n = max(float(sums["real_tokens"]), 1.0)
  out["distill_loss"] = temperature ** 2 * float(sums["distill_kl"]) / w
  out["mlm_loss"] = float(sums["mlm_xent"]) / w
  out["cos_loss"] = float(sums["cos_distance"]) / n
  out["student_mlm_accuracy"] = float(sums["mlm_correct"]) / w
  out["teacher_mlm_accuracy"] = float(sums["teacher_mlm_correct"]) / w
  if "loss" not in sums:
    out["loss"] = (alpha_ce * out["distill_loss"] + alpha_mlm * out["mlm_loss"]
                   + alpha_cos * out["cos_loss"])
  return out


def place_teacher(teacher: loading.Pretrained, init_params: Callable[[jax.Array], Any],
                  mesh, rules) -> tuple[Any, Any]:
  """The teacher's host params on the mesh, sharded as the same model's params would be.

  Args:
    teacher: load_teacher's result.
    init_params: rng -> the teacher model's boxed params (for their logical axes).
    mesh, rules: the run's mesh and logical rules.

  Returns:
    (params as global jax.Arrays, their NamedShardings).
  """
  target, shardings = sharding.abstract_state(init_params, mesh, rules, jax.random.PRNGKey(0))
  params = model_lib.match_scan_layout(teacher.params, teacher.config.replace(
      scan_layers="layers" in target["bert"]["encoder"]))
  merged = ckpt_lib.merge_params(target, params, teacher.source)

  def put(x, t):
    if isinstance(x, jax.ShapeDtypeStruct):
      raise ValueError(f"{teacher.source}: the teacher lacks params the model needs")
    x = np.asarray(x, t.dtype)
    return jax.make_array_from_callback(x.shape, t.sharding, lambda index: x[index])
  return jax.tree.map(put, merged, target), shardings


def check_config(options, bad) -> None:
  """What objective='distill' needs of a pretraining config (the teacher read, not loaded)."""
  d = options.distill
  if not options.teacher_checkpoint:
    bad("objective='distill' needs teacher_checkpoint (a bundle, converted checkpoint or "
        "pretraining workdir with an MLM head)")
  if options.init_checkpoint:
    bad("init_checkpoint is not used with objective='distill' (the student starts from the "
        "teacher's layers)")
  if d.temperature <= 0 or d.student_layers < 0:
    bad(f"distill.temperature ({d.temperature}) must be positive and distill.student_layers "
        f"({d.student_layers}) >= 0")
  if min(d.alpha_ce, d.alpha_mlm, d.alpha_cos) < 0 or d.alpha_ce + d.alpha_mlm + d.alpha_cos <= 0:
    bad(f"distill.alpha_ce/alpha_mlm/alpha_cos ({d.alpha_ce}, {d.alpha_mlm}, {d.alpha_cos}) "
        "must be >= 0 and not all 0")
  if not epath.Path(options.teacher_checkpoint).exists():
    bad(f"teacher_checkpoint {options.teacher_checkpoint} does not exist")
  loading.read_model_config(options.teacher_checkpoint)  # a checkpoint at all, before the data


def build(options, inputs: base.BuildInputs) -> base.Pretraining:
  """The student of config.teacher_checkpoint; the teacher is the step's frozen input."""
  d = options.distill
  stored = loading.read_model_config(options.teacher_checkpoint)
  layers = student_layers(stored.num_layers, d.student_layers)
  teacher = load_teacher(options.teacher_checkpoint, layers, inputs.vocab)
  if teacher.config.vocab_size != inputs.vocab_size:
    raise ValueError(f"teacher_checkpoint {options.teacher_checkpoint}: vocab_size "
                     f"{teacher.config.vocab_size}, the data's tokenizer has {inputs.vocab_size};"
                     " set data.vocab_file / data.tokenizer to the teacher's vocab")
  compute_policy.check_activation(options.model, teacher.config, options.teacher_checkpoint)
  teacher_cfg = compute_policy.model_config_from(options.model, teacher.config,
                                                 one_example_per_row=not options.data.packing)
  student_cfg = student_config(teacher_cfg, layers)
  emd = "emd" in teacher.params  # the teacher's MLM head as it was trained; the student's too
  teacher_model = model_lib.BertForPreTraining(teacher_cfg, with_nsp=False, emd=emd)
  student = model_lib.BertForPreTraining(student_cfg, with_nsp=False, emd=emd)
  seq_len, num_predictions = options.seq_len, options.data.max_predictions_per_seq
  teacher_init = mlm_nsp.init_fn(teacher_model, seq_len, num_predictions)
  weights = dict(temperature=d.temperature, alpha_ce=d.alpha_ce, alpha_mlm=d.alpha_mlm,
                 alpha_cos=d.alpha_cos)

  def flops(length, masked_fraction):  # the student's training and the teacher's forward pass
    return (flops_lib.train_flops_per_token(student_cfg, length, masked_fraction)
            + flops_lib.train_flops_per_token(teacher_cfg, length, masked_fraction) / 3)
  return base.Pretraining(
      student_cfg, objective(student, teacher_model, **weights), inputs.tx, inputs.schedule,
      functools.partial(train_core.init_state, mlm_nsp.init_fn(student, seq_len, num_predictions),
                        inputs.tx, prng_impl=inputs.prng_impl),
      functools.partial(summarize, **weights), lambda params: params, flops,
      start_from=student_from_teacher(teacher, layers) if d.init_from_teacher else None,
      place_frozen=functools.partial(place_teacher, teacher, teacher_init),
      frozen_init=teacher_init, prng_impl=inputs.prng_impl)


SPEC = base.Spec(data_modes={"distill": ("nsp", "sop", "full_sentences")},
                 options=("seq_len", "init_checkpoint", "teacher_checkpoint", "distill", "model",
                          "data"),
                 build=build,
                 check_config=check_config, reads_teacher=True,
                 console_metrics=("student_mlm_accuracy",))
