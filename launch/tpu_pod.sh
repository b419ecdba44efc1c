#!/usr/bin/env bash
# Runs bert_jax on a Cloud TPU VM pod slice: create (or reach) it, install this
# checkout on every worker, run one command on all workers at once.
#
# Usage: launch/tpu_pod.sh ACTION NAME [options] [-- CMD [ARGS...]]
#
# Actions:
#   create  create the TPU VM NAME unless it exists (needs --accelerator)
#   setup   copy this checkout (git HEAD plus uncommitted changes) to every
#           worker and pip install it with the 'tpu' extra into ~/bert_jax_venv
#   run     run CMD on every worker, in ~/bert_jax with the venv active and
#           BERT_JAX_DISTRIBUTED=auto (jax.distributed finds the other workers)
#   up      create + setup + run (run only when a CMD is given)
#   ssh     open a shell on worker 0 (or --worker N)
#   delete  delete the TPU VM
#
# Options:
#   --zone ZONE            (default: gcloud config compute/zone)
#   --project PROJECT      (default: gcloud config project)
#   --accelerator TYPE     e.g. v4-32, v5litepod-16, v5p-16, v6e-16 (create)
#   --version VERSION      TPU runtime (create; default from the accelerator:
#                          tpu-ubuntu2204-base for v4, v2-alpha-tpuv5-lite for
#                          v5e, v2-alpha-tpuv5 for v5p, v2-alpha-tpuv6e for v6e)
#   --spot                 create a Spot (preemptible) TPU VM
#   --worker N             worker for 'ssh' (default 0)
#
# Checkpoints and logs must go where every worker can write: use a gs:// workdir.
# A preempted (Spot) run resumes from its last checkpoint when run again.
#
# Example (BERT-large on a v4-32, FSDP over all 16 chips):
#   launch/tpu_pod.sh up bert-v4 --zone us-central2-b --accelerator v4-32 -- \
#     python -m bert_jax.pretrain --config configs/pretrain.py:large \
#       --workdir gs://BUCKET/bert_large --config.mesh.shape='(1,-1,1)' \
#       --config.mesh.preset=fsdp --config.model.dtype=bfloat16 \
#       --config.data.source=files --config.data.files='gs://BUCKET/corpus/*.txt'
set -euo pipefail

usage() {
  sed -n '2,37s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

die() {
  echo "tpu_pod: $*" >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
action=$1
name=$2
shift 2
case $action in
  create | setup | run | up | ssh | delete) ;;
  *) die "unknown action '$action' (create, setup, run, up, ssh, delete)" ;;
esac

# Before gcloud's configuration is read: without gcloud, say so (not "no zone").
command -v gcloud >/dev/null || die "gcloud not found: install the Google Cloud CLI"
zone=$(gcloud config get-value compute/zone 2>/dev/null || true)
project=""
accelerator=""
version=""
spot=()
worker=0
cmd=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --zone) zone=${2:?--zone needs a value}; shift 2 ;;
    --project) project=${2:?--project needs a value}; shift 2 ;;
    --accelerator) accelerator=${2:?--accelerator needs a value}; shift 2 ;;
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --spot) spot=(--spot); shift ;;
    --worker) worker=${2:?--worker needs a value}; shift 2 ;;
    --) shift; cmd=("$@"); break ;;
    *) die "unknown option '$1' (commands go after --)" ;;
  esac
done
[[ -n $zone ]] || die "no zone: pass --zone or run 'gcloud config set compute/zone ZONE'"
gflags=(--zone="$zone")
[[ -z $project ]] || gflags+=(--project="$project")
tpu=(gcloud compute tpus tpu-vm)
repo=$(cd "$(dirname "$0")/.." && pwd)
remote_dir=bert_jax
remote_venv=bert_jax_venv

default_version() {
  case $1 in
    v4-*) echo tpu-ubuntu2204-base ;;
    v5litepod-* | v5e-*) echo v2-alpha-tpuv5-lite ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
    *) die "no default --version for accelerator '$1'; pass --version" ;;
  esac
}

do_create() {
  if "${tpu[@]}" describe "$name" "${gflags[@]}" >/dev/null 2>&1; then
    echo "tpu_pod: $name exists in $zone"
    return
  fi
  [[ -n $accelerator ]] || die "create needs --accelerator (e.g. v4-32)"
  [[ -n $version ]] || version=$(default_version "$accelerator")
  echo "tpu_pod: creating $name ($accelerator, $version) in $zone"
  "${tpu[@]}" create "$name" "${gflags[@]}" --accelerator-type="$accelerator" \
    --version="$version" "${spot[@]}"
}

do_setup() {
  # Global, not local: the EXIT trap reads it after the function has returned. Removed however
  # setup ends: a failed copy (no such TPU, no network) must not leave a tarball of the checkout
  # in the temp directory.
  archive=$(mktemp -t bert_jax.XXXXXX.tar.gz)
  trap 'rm -f "$archive"' EXIT
  # The checkout as it is now: tracked files with their uncommitted changes, plus
  # untracked files that git does not ignore.
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | tar czf "$archive" --ignore-failed-read --null -T -)
  echo "tpu_pod: copying $(du -h "$archive" | cut -f1) to every worker of $name"
  "${tpu[@]}" scp "$archive" "$name":bert_jax.tar.gz --worker=all "${gflags[@]}"
  rm -f "$archive"
  trap - EXIT
  "${tpu[@]}" ssh "$name" --worker=all "${gflags[@]}" --command "set -e
    rm -rf ~/$remote_dir && mkdir -p ~/$remote_dir && tar xzf ~/bert_jax.tar.gz -C ~/$remote_dir
    python3 -m venv ~/$remote_venv 2>/dev/null || {
      sudo apt-get -qq update && sudo apt-get -qq install -y python3-venv
      python3 -m venv ~/$remote_venv
    }
    ~/$remote_venv/bin/pip install -q --upgrade pip
    cd ~/$remote_dir && ~/$remote_venv/bin/pip install -q -e '.[tpu]'
    ~/$remote_venv/bin/python -c 'import jax; print(jax.__version__, jax.device_count(), \"devices\")'"
}

do_run() {
  [[ ${#cmd[@]} -gt 0 ]] || die "run needs a command after --"
  local quoted
  quoted=$(printf '%q ' "${cmd[@]}")
  echo "tpu_pod: running on every worker of $name: $quoted"
  "${tpu[@]}" ssh "$name" --worker=all "${gflags[@]}" --command \
    "cd ~/$remote_dir && source ~/$remote_venv/bin/activate && BERT_JAX_DISTRIBUTED=auto $quoted"
}

case $action in
  create) do_create ;;
  setup) do_setup ;;
  run) do_run ;;
  up)
    do_create
    do_setup
    [[ ${#cmd[@]} -eq 0 ]] || do_run
    ;;
  ssh) "${tpu[@]}" ssh "$name" --worker="$worker" "${gflags[@]}" ;;
  delete) "${tpu[@]}" delete "$name" "${gflags[@]}" --quiet ;;
esac
