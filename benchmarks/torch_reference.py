"""The PyTorch peer of benchmarks/train_step.py: transformers' BertForPreTraining, one training step.

SDPA attention (`attn_implementation="sdpa"`), bf16 autocast on CUDA when the run is
bfloat16 (float32 on the CPU, TF32 matmuls on CUDA for float32 runs, as XLA's default
precision), torch.compile of the model unless `compile_model=False` (a compile that
fails falls back to eager with one line saying so), torch.optim.AdamW (fused on CUDA;
lr 1e-4, betas 0.9/0.999, eps 1e-6, weight decay 0.01 on matrices and embeddings) after
clipping the global gradient norm to 1.0. The loss is the model's own: MLM cross-entropy
over the labelled (masked) positions plus NSP. Works with transformers 4.x and 5.x.
Imports torch and transformers only when built, never TensorFlow.
"""
import sys
import time


class TorchRunner:
  """Same interface as train_step.Runner: dispatch(), sync(), step() -> seconds."""

  def __init__(self, hf_cfg, inputs: dict, dtype: str, compile_model: bool = True):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.torch = torch
    self.cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if self.cuda else "cpu")
    if self.cuda:
      torch.set_float32_matmul_precision("high")
      self.device = f"cuda {torch.cuda.get_device_name(0)}"
    else:
      self.device = "cpu (torch)"
    torch.manual_seed(0)
    hf_cfg._attn_implementation = "sdpa"  # pylint: disable=protected-access
    model = transformers.BertForPreTraining(hf_cfg).to(dev).train()
    self.attention = getattr(model.config, "_attn_implementation", "?")
    self.autocast = dtype == "bfloat16" and self.cuda
    self.inputs = {k: torch.from_numpy(v).long().to(dev) for k, v in inputs.items()}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [dict(params=[p for p in params if p.ndim >= 2], weight_decay=0.01),
              dict(params=[p for p in params if p.ndim < 2], weight_decay=0.0)]
    self.params = params
    self.opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-6,
                                 **({"fused": True} if self.cuda else {}))
    self.eager = model
    self.model = torch.compile(model) if compile_model else model
    self.compiled = compile_model
    self.out = None
    t = time.perf_counter()
    try:
      self.step()  # the compile, here so that a failure can fall back to eager
    except Exception as e:  # pylint: disable=broad-except
      if not compile_model:
        raise
      print(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            "the torch reference runs eagerly", file=sys.stderr)
      self.opt.zero_grad(set_to_none=True)
      self.model, self.compiled = model, False
      self.step()
    self.first_step_s = time.perf_counter() - t
    precision = "bf16 autocast" if self.autocast else "fp32"
    self.name = (f"torch BertForPreTraining ({self.attention}, {precision}, "
                 f"{'compiled' if self.compiled else 'eager'})")

  def dispatch(self) -> None:
    torch = self.torch
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
      loss = self.model(**self.inputs).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(self.params, 1.0)
    self.opt.step()
    self.opt.zero_grad(set_to_none=True)
    self.out = loss.detach()

  def sync(self) -> None:
    if self.cuda:
      self.torch.cuda.synchronize()

  def step(self) -> float:
    t = time.perf_counter()
    self.dispatch()
    self.sync()
    return time.perf_counter() - t
