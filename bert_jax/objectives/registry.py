"""Which objective module serves a pretraining config: config.objective -> its Spec.

The built-in modules are listed in MODULES; an objective module from outside the
package registers its SPEC with `register`, and nothing else changes for it. The
objective modules import bert_jax.objectives.base, never this module.
"""
from bert_jax.objectives import base
from bert_jax.objectives import distill
from bert_jax.objectives import electra
from bert_jax.objectives import mlm_nsp

# config.objective -> the Spec serving it.
SPECS: dict[str, base.Spec] = {}


def register(spec: base.Spec) -> None:
  """Serves every objective name of `spec.data_modes` with `spec`."""
  taken = [name for name in spec.data_modes if SPECS.get(name, spec) is not spec]
  if taken:
    raise ValueError(f"objective(s) {taken} are already registered")
  SPECS.update({name: spec for name in spec.data_modes})


for _module in (mlm_nsp, electra, distill):
  register(_module.SPEC)


def names() -> list[str]:
  """Every registered objective name."""
  return list(SPECS)


def get(name: str) -> base.Spec:
  """The Spec serving objective `name` (KeyError when none does)."""
  return SPECS[name]


def owner_of(model_type: str) -> str:
  """The objective that alone trains `model_type`, or '' when any may."""
  return next((name for name, spec in SPECS.items() if model_type in spec.owns_model_types), "")
