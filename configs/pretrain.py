r"""Pretraining configs: `configs/pretrain.py:VARIANT[,recipe=RECIPE][,lamb_64k][,phase2][,fused_attention]`.

VARIANT is the model size (tiny, mini, small, medium, base, large); RECIPE how it is trained
(bert, roberta, albert, electra, deberta, modernbert: the family member's pretrain_recipe in
bert_jax/members/), which sets the variant's default objective (and for deberta the encoder:
DeBERTa-v3's disentangled attention; for modernbert ModernBERT's: 30 % masking, packed rows,
and for base and large StableAdamW with a trapezoidal schedule).

The quick start (tiny, the built-in corpus of Python standard-library docstrings, no download,
on the CPU):

  python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny

Expected: 300 steps of batch 32 x 128; the loss falls from about 11 to about 6.7 and the MLM
accuracy rises to about 0.13 (seed 0); then the export to /tmp/bert_tiny/export and a fill-mask
example. About 2.5 to 6 minutes on a 2-core CPU (the progress line's ETA says how long on
yours).

Your own text (Google BERT layout: one sentence per line, a blank line between documents):

  python -m bert_jax.pretrain --config configs/pretrain.py:base --workdir runs/base \
      --config.data.source=files --config.data.files='corpus/*.txt'

Phase 2 of BERT's recipe (seq 512 from a phase-1 checkpoint):

  python -m bert_jax.pretrain --config configs/pretrain.py:base,phase2 --workdir DIR2 \
      --config.init_checkpoint=DIR1/checkpoints

ModernBERT's recipe (MLM at 30 % masking on packed rows; for base and large StableAdamW and the
trapezoidal schedule):

  python -m bert_jax.pretrain --config configs/pretrain.py:tiny,recipe=modernbert --workdir DIR

Expected: 300 steps as the quick start's, the loss about 5.4 and the MLM accuracy about 0.20 at
step 300 (seed 0); about the quick start's time. Its second phase, the context extension (base
and large: 8,192 tokens at a lower constant rate, from phase 1's checkpoint):

  python -m bert_jax.pretrain --config configs/pretrain.py:base,recipe=modernbert,phase2 \
      --workdir DIR2 --config.init_checkpoint=DIR/checkpoints

RoBERTa's recipe (full sentences, MLM only, packing, Adam b2 0.98, 8K batches by accumulation
for base and large):

  python -m bert_jax.pretrain --config configs/pretrain.py:base,recipe=roberta --workdir DIR

On a GPU or TPU, the recipe the speed figures use (benchmarks/README.md): no attention dropout,
so attention runs as cuDNN's fused flash attention or Pallas splash attention (hidden dropout
unchanged):

  python -m bert_jax.pretrain --config configs/pretrain.py:base,fused_attention --workdir DIR

BERT-large in 8,601 steps on a TPU pod (`lamb_64k`: You et al. 2019's LAMB at 65,536 sequences
of 128, then 32,768 of 512, as NVIDIA's DeepLearningExamples BERT trains it; phase 2 starts from
phase 1's checkpoint). On a v5p-512 slice (256 chips; every worker runs the same command):

  python -m bert_jax.pretrain --config configs/pretrain.py:large,lamb_64k --workdir gs://B/p1 \
      --config.data.prepared_dir=gs://B/corpus_prepared --config.model.scan_layers=True \
      --config.optimizer.grad_accum_steps=2
  python -m bert_jax.pretrain --config configs/pretrain.py:large,lamb_64k,phase2 \
      --workdir gs://B/p2 --config.init_checkpoint=gs://B/p1/checkpoints \
      --config.data.prepared_dir=gs://B/corpus_prepared --config.model.scan_layers=True \
      --config.optimizer.grad_accum_steps=8

The global batch is split over the chips (data parallel, the default mesh) and, where a chip's
share does not fit its memory, into microbatches (optimizer.grad_accum_steps: exact
accumulation, the same update). On v5p-512 that is 2 microbatches in phase 1 and 8 in phase 2;
on v5e-256 (16 GiB a chip) 32 and 128. Compiled for these slices on a CPU host, both phases are
estimated at about 1 h on v5p-512 and 2 to 3 h on v5e-256 at an assumed MFU of 40 %
(benchmarks/README.md, "Large-batch BERT on TPU pods": memory per chip, collectives, and the
assumptions). Check a slice before booking it:

  python -m bert_jax.aot_compile --config configs/pretrain.py:large,lamb_64k --topology v5p-512 \
      --config.model.scan_layers=True --config.optimizer.grad_accum_steps=2

Base and large are accelerator runs (BERT-Base's 1M steps of batch 256 took Google 4 days on 16
TPU chips); see docs/pretraining.md for meshes, pods and GPU clusters.

Every key is declared here (the model, optimizer and mesh sections, shared by all
entry points, in bert_jax/configuration/sections.py); `--config.a.b=v` overrides it, an
unknown key is an error.
"""
import math

import ml_collections

from bert_jax.configuration import reads as config_reads
from bert_jax.configuration import sections as config_sections
from bert_jax.data.sources import raw_docs
from bert_jax.members import registry as member_registry

# Per-variant sizes; model shapes come from bert_jax.modeling.model_config.VARIANTS.
_RECIPES = {
    # variant: (global batch, total steps, peak learning rate, warmup steps)
    "tiny": (32, 300, 1e-2, 30),  # LAMB, see below
    "mini": (128, 10_000, 5e-4, 1_000),
    "small": (256, 100_000, 3e-4, 10_000),
    "medium": (256, 500_000, 2e-4, 10_000),
    "base": (256, 1_000_000, 1e-4, 10_000),
    "large": (256, 1_000_000, 1e-4, 10_000),
}

# `lamb_64k`, per phase: (global batch, steps, peak learning rate, warmup as a fraction of the
# steps), NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT scripts/run_pretraining.sh
# (train_batch_size x gradient_accumulation_steps x 8 GPUs, learning_rate, warmup_proportion,
# train_steps and their _phase2 values); the batches are You et al. 2019's 64K/32K mixed-batch
# setting, which trained BERT-large in 8,599 steps.
_LAMB_64K = {
    "phase1": (65_536, 7_038, 6e-3, 0.2843),
    "phase2": (32_768, 1_563, 4e-3, 0.128),
}

# Keys read only in some settings (bert_jax.configuration.reads): a --config.KEY the run would
# not read is an error naming what reads it; where one setting alone reads it (data.files: source
# 'files'), giving the key alone chooses that setting and the run says so.
_TFDS = ("data.source", ("tfds",))
READ_ONLY_WHEN = {
    "data.files": ("data.source", ("files",), config_reads.CHOOSE),
    "data.format": ("data.source", ("files",)),
    "data.block_mb": ("data.source", ("files",)),
    "data.tfds_name": _TFDS + (config_reads.CHOOSE,),
    "data.tfds_data_dir": _TFDS,
    "data.tfds_split": _TFDS,
    "data.tfds_text_key": _TFDS,
    "data.tfds_docs_per_shard": _TFDS,
    "data.prepared_dir": ("data.source", ("prepared",), config_reads.CHOOSE),
    "data.vocab_file": ("data.tokenizer", ("wordpiece",)),
    "data.spm_model": ("data.tokenizer", ("sentencepiece",), config_reads.CHOOSE),
    "data.short_seq_prob": ("data.mode", ("nsp", "sop")),
    "electra.generator_hidden_fraction": ("objective", ("electra",)),
    "electra.disc_weight": ("objective", ("electra",)),
    "teacher_checkpoint": ("objective", ("distill",)),
    "distill.temperature": ("objective", ("distill",)),
    "distill.alpha_ce": ("objective", ("distill",)),
    "distill.alpha_mlm": ("objective", ("distill",)),
    "distill.alpha_cos": ("objective", ("distill",)),
    "distill.student_layers": ("objective", ("distill",)),
    "distill.init_from_teacher": ("objective", ("distill",)),
    "eval_batches": ("eval_every", None),
    "profile_num_steps": ("profile_start_step", None),
    "optimizer.poly_power": ("optimizer.schedule", ("polynomial",)),
}


def get_config(arg=None):
  """Returns the pretraining ConfigDict for `arg` =
  'VARIANT[,recipe=R][,lamb_64k][,phase2][,fused_attention]'."""
  options = config_sections.parse_arg(arg, positional="variant", variant="", recipe="bert",
                                      lamb_64k=False, phase2=False, fused_attention=False,
                                      example="configs/pretrain.py:base,phase2")
  variant = options.variant
  if not variant:  # the size decides hours of compute: never a silent default
    raise ValueError(f"configs/pretrain.py needs the model size: configs/pretrain.py:VARIANT, "
                     f"VARIANT one of {list(_RECIPES)} (the quick start: configs/pretrain.py:tiny)")
  if variant not in _RECIPES:
    raise ValueError(f"unknown variant {variant!r}; known: {sorted(_RECIPES)}")
  recipes = member_registry.recipes()
  if options.recipe not in recipes:
    raise ValueError(f"unknown recipe {options.recipe!r}; known: {list(recipes)}"
                     + ("; distillation is an objective: --config.objective=distill"
                        if options.recipe.startswith("distil") else ""))
  batch, steps, lr, warmup = _RECIPES[variant]

  c = ml_collections.ConfigDict()
  # Model variant name from bert_jax.modeling.model_config.VARIANTS.
  c.variant = variant
  # Random seed for init, dropout and the data stream.
  c.seed = 0
  # Global batch size (sequences per step, over all hosts and devices).
  c.batch_size = batch
  # Tokens per sequence (static).
  c.seq_len = 128
  # Training steps.
  c.total_steps = steps

  # Pretraining objective: 'mlm_nsp' (BERT: MLM + next-sentence prediction, data.mode='nsp'),
  # 'mlm' (MLM alone, any data mode), 'mlm_sop' (ALBERT: MLM + sentence order, data.mode='sop'),
  # 'electra' (replaced-token detection with a small generator; the `electra` section) or
  # 'distill' (DistilBERT: a student of teacher_checkpoint; the `distill` section).
  c.objective = "mlm_nsp"
  # The family member built with the variant's sizes (bert_jax/members/, its module's build):
  # 'bert'; 'roberta' (one token type, positions from the tokenizer's pad id + 1); 'albert'
  # (128-wide embeddings projected to hidden, half of hidden up to 128; one layer shared by
  # all); 'distilbert' (no token types or pooler: objective 'mlm'); 'electra' (objective
  # 'electra'); 'deberta-v2' (DeBERTa-v3's disentangled attention, 256 log position buckets,
  # no absolute positions or token types); 'modernbert' (pre-LN, GeGLU, rotary positions, every
  # third layer global and the others a 128-token window; no token types or pooler: objective
  # 'mlm'). The tokenizer is data.tokenizer's, any kind.
  c.model_type = "bert"
  # DeBERTa's enhanced mask decoder (model_type 'deberta-v2', objectives mlm / mlm_nsp /
  # mlm_sop): the MLM head reads the last layer run twice more on its own input with
  # absolute position embeddings added to the queries (a table of its own, saved in
  # checkpoints as emd/position_embeddings; left out of `convert --to hf`). bert_jax.modeling.emd.
  c.emd = False
  # objective='distill': the frozen teacher, any checkpoint with an MLM head (a bundle, a
  # converted checkpoint, a pretraining workdir); the student takes its shapes and vocab
  # (`variant` is then unused) with distill.student_layers layers.
  c.teacher_checkpoint = ""

  c.model = config_sections.model()
  # The MLM decoder's GEMM runs against the word embeddings padded with zero rows to a
  # multiple of this many (30,522 -> 30,592: aligned GPU tensor-core and TPU MXU tiles); the
  # logits are cut back to the vocabulary, so padded ids are never predicted or counted and
  # the params, checkpoints and exports keep the vocabulary's rows. 1: no padding; 0 (auto):
  # 128 on GPU/TPU, 1 on the CPU (where padding would change the losses' last bits).
  c.model.vocab_pad_multiple = 0

  c.electra = ml_collections.ConfigDict()
  # Generator hidden size as a fraction of the discriminator's (ELECTRA paper: 1/4 to 1/2);
  # its heads are hidden // 64 (at least 1) and its intermediate size 4 x hidden, as
  # google-research/electra's get_generator_config.
  c.electra.generator_hidden_fraction = 0.25
  # Weight of the discriminator's loss against the generator's MLM loss (ELECTRA: 50).
  c.electra.disc_weight = 50.0

  # DistilBERT's loss (Sanh et al. 2019; the defaults are the training command of
  # huggingface/transformers' examples/research_projects/distillation/README.md).
  c.distill = ml_collections.ConfigDict()
  # Softmax temperature T of the soft targets (the KL term is scaled by T^2).
  c.distill.temperature = 2.0
  # Weight of the soft-target term (KL of the student's from the teacher's MLM distribution).
  c.distill.alpha_ce = 5.0
  # Weight of the student's own MLM cross-entropy on the labels.
  c.distill.alpha_mlm = 2.0
  # Weight of 1 - cosine between the student's and the teacher's last hidden states.
  c.distill.alpha_cos = 1.0
  # Student encoder layers; 0: half the teacher's. Layer i starts from teacher layer
  # i x teacher layers // student layers (DistilBERT: every other layer).
  c.distill.student_layers = 0
  # Start the student from the teacher's layers (False: from scratch, for comparisons).
  c.distill.init_from_teacher = True

  c.data = ml_collections.ConfigDict()
  # Where text comes from: 'builtin' (no download), 'files' (glob), 'tfds' or 'prepared'
  # (pre-tokenized numpy parts in prepared_dir: needs no TensorFlow).
  c.data.source = "builtin"
  # Glob of text files (.txt or .gz) when source='files'; comma-separated globs allowed.
  c.data.files = ""
  # Text layout: 'sentence_per_line' (Google BERT: blank line between documents) or
  # 'document_per_line'.
  c.data.format = "sentence_per_line"
  # TFDS dataset name (e.g. 'wikipedia/20230601.en').
  c.data.tfds_name = ""
  # TFDS data_dir where the dataset is prepared (never downloaded).
  c.data.tfds_data_dir = ""
  # TFDS split to read.
  c.data.tfds_split = "train"
  # The text feature of the TFDS dataset.
  c.data.tfds_text_key = "text"
  # Tokenizer: 'wordpiece' (vocab_file), 'sentencepiece' (spm_model), or the path of a
  # tokenizer directory or file, kind from its files (vocab.txt; vocab.json + merges.txt: RoBERTa
  # BPE; spiece.model: ALBERT; spm.model: DeBERTa-v2/v3), with that family's casing.
  c.data.tokenizer = "wordpiece"
  # WordPiece vocab; empty means the bundled bert-base-uncased vocab.
  c.data.vocab_file = ""
  # SentencePiece model file when tokenizer='sentencepiece'.
  c.data.spm_model = ""
  # Lower-case and strip accents (uncased vocab).
  c.data.lowercase = True
  # 'nsp' (Google BERT sentence pairs, random next), 'sop' (ALBERT: consecutive segments of
  # one document, swapped with probability 1/2) or 'full_sentences' (RoBERTa, no pairs).
  c.data.mode = "nsp"
  # Probability of a shorter target length in nsp mode.
  c.data.short_seq_prob = 0.1
  # Fraction of tokens selected for masking.
  c.data.mask_prob = 0.15
  # What is masked together: 'token' (BERT), 'whole_word' (all pieces of a word) or 'ngram'
  # (ALBERT: spans of n <= 3 whole words, P(n) proportional to 1/n).
  c.data.masking = "token"
  # Masked positions per sequence (static); ~ seq_len * mask_prob.
  c.data.max_predictions_per_seq = 20
  # Pack several short examples into one row (block-diagonal attention).
  c.data.packing = False
  # Every host builds the global batch and keeps its rows, so the stream does not
  # depend on the process count (costs host CPU; default: each host reads its own part).
  c.data.host_invariant_stream = False
  # Documents held out for evaluation (every Nth document; 0 disables eval data).
  c.data.eval_every_nth_document = 100
  # Shuffling of the training stream: consecutive shards of the epoch's random order are pooled
  # until a pool holds this many MB of text, and its examples permuted (0 keeps source order).
  c.data.shuffle_mb = 4.0
  # Files larger than this (MB) are read in blocks of about this much text (bounded memory):
  # block i: the documents starting in its byte range, found by seeking; .gz files are read whole.
  c.data.block_mb = raw_docs.DEFAULT_BLOCK_MB
  # Pre-tokenized parts (source='prepared'), written by python -m bert_jax.prepare_data.
  c.data.prepared_dir = ""
  # What drives the stream's numpy stages: 'tf_data', 'python' (threads, no TensorFlow: for
  # source='prepared' on hosts without it; the same batches) or 'auto' (tf_data where
  # TensorFlow is installed, else python).
  c.data.loader = "auto"
  # Examples per shard of a TFDS split (shards are split between hosts when there are enough).
  c.data.tfds_docs_per_shard = 10_000

  c.optimizer = config_sections.optimizer()
  # Peak learning rate.
  c.learning_rate = lr
  # Linear warmup steps.
  c.warmup_steps = warmup

  # Console / TensorBoard / metrics.jsonl every N steps.
  c.log_every = 10
  # Evaluate on held-out data every N steps (0 disables).
  c.eval_every = 0
  # Batches of held-out data per evaluation.
  c.eval_batches = 10
  # Save a checkpoint every N steps (and at the end).
  c.checkpoint_every = 100
  # Checkpoints to keep.
  c.keep_checkpoints = 3
  # On NaN/inf loss: 'stop' (keep the last good checkpoint) or 'skip' the update.
  c.on_nan = "stop"
  # Stop when a log window's mean loss exceeds this times the lowest so far (a divergence
  # that stays finite); 0 disables. E.g. 2.0 for long runs; the loss falls ~10 -> ~2.
  c.divergence_factor = 0.0
  # Checkpoint (a pretraining checkpoints dir or a bert_jax params export) to start from.
  c.init_checkpoint = ""
  # The run continues another run's weights (True in ',phase2': phase 1's): a fresh start
  # without init_checkpoint is refused in one line; False trains from random weights.
  c.needs_init_checkpoint = False
  # A workdir whose checkpoints are all unreadable, or that holds an export/ but no checkpoint,
  # stops the run; True starts it over from step 0 (or init_checkpoint): the unreadable
  # checkpoints go to checkpoints_unreadable/, export/, metrics.jsonl and tensorboard/ to
  # before_start_over/ (kept). Readable checkpoints are always resumed.
  c.start_over = False
  # Comma-separated config keys a resumed run may change on purpose (e.g.
  # 'optimizer.weight_decay,learning_rate'); others stop the resume naming them. Always
  # allowed: bert_jax.pretraining.setup.RESUME_MAY_CHANGE (total_steps, log/checkpoint/eval
  # frequencies, mesh, ...); batch_size never (the saved data position counts batches).
  c.resume_allow_changes = ""
  # Profile steps [start, start+num) with jax.profiler into workdir/profile: the first
  # step (0 disables) ...
  c.profile_start_step = 0
  # ... and how many steps.
  c.profile_num_steps = 5
  # End the run with a fill-mask example from the new checkpoint ('' skips it).
  c.fill_mask_example = "the capital of france is [MASK] ."
  config_sections.compile_cache(c)

  c.mesh = config_sections.mesh()

  if variant == "tiny":
    # Short CPU runs (the quick start) must leave the unigram plateau within a few hundred
    # steps; each setting below raised the MLM accuracy after 300 steps (measurements:
    # benchmarks/README.md, "The tiny pretraining recipe").
    # No dropout: a 300-step run does not overfit.
    c.model.dropout_rate = 0.0
    c.model.attention_dropout_rate = 0.0
    # LAMB at the peak rate of 1e-2 (in _RECIPES): more accurate than every AdamW setting tried.
    c.optimizer.name = "lamb"
    # Constant after warmup: decay would spend the short run at lower rates.
    c.optimizer.schedule = "constant"
    # Shorter moment averages than BERT's 0.9 / 0.999 adapt faster in a short run.
    c.optimizer.b1 = 0.8
    c.optimizer.b2 = 0.98

  # How the member is trained: its module's pretrain_recipe (bert_jax/members/base.py).
  recipes[options.recipe].pretrain_recipe(c)

  if options.fused_attention:
    # The accelerator recipe: no attention dropout (MosaicBERT trains without it), so
    # model.attention_impl='auto' runs cuDNN's fused flash attention on a GPU, Pallas splash
    # attention on a TPU (XLA's fused attention elsewhere) instead of the explicit softmax that
    # attention dropout needs.
    # Hidden dropout stays the variant's.
    c.model.attention_dropout_rate = 0.0

  c.needs_init_checkpoint = options.phase2  # a second phase continues the first's weights
  if options.phase2 and recipes[options.recipe].pretrain_phase2:
    # The member's own second phase (ModernBERT's: the context extension to 8,192 tokens).
    recipes[options.recipe].pretrain_phase2(c)
  elif options.phase2:
    c.seq_len = 512
    c.data.max_predictions_per_seq = 80
    c.total_steps = max(1, steps // 9)  # BERT: 90% of steps at 128, 10% at 512.
    c.warmup_steps = max(1, warmup // 10)

  if options.lamb_64k:
    # The large-batch recipe; the model, objective and data stay the variant's and recipe's.
    batch, steps, lr, warmup_fraction = _LAMB_64K["phase2" if options.phase2 else "phase1"]
    c.batch_size = batch
    c.total_steps = steps
    c.learning_rate = lr
    # NVIDIA's PolyWarmUpScheduler warms up over warmup_proportion x steps (2,000.9 and 200.1):
    # 2,001 and 201 steps here. After the warmup this schedule decays from the peak, NVIDIA's from
    # peak x (1 - warmup_proportion)^0.5 (it steps down at the end of the warmup): the same
    # curve times 1 / 0.846 in phase 1 and 1 / 0.934 in phase 2.
    c.warmup_steps = math.ceil(warmup_fraction * steps)
    # NVIDIA run_pretraining.py: apex FusedLAMB at its defaults (betas 0.9 / 0.999, eps 1e-6,
    # max_grad_norm 1.0: global-norm clipping before the moments), weight decay 0.01 except
    # biases and LayerNorm (no_decay), PolyWarmUpScheduler(degree=0.5); You et al. 2019 use
    # the same betas, eps and decay for BERT.
    c.optimizer.name = "lamb"
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.eps = 1e-6
    c.optimizer.weight_decay = 0.01
    c.optimizer.grad_clip_norm = 1.0
    c.optimizer.schedule = "polynomial"
    c.optimizer.poly_power = 0.5
    # max_predictions_per_seq stays the variant's and recipe's: BERT's 20 of 128 and 80 of 512
    # (phase 2 above), a recipe's own for its lengths and masking rate.
  return c

