#!/usr/bin/env bash
# ensure_flydsl.sh: GEAK's ensure_flydsl skill, made by `ensure-flydsl skill` (ensure-flydsl @@VERSION@@;
# VERSION names the commit). It makes `import flydsl, kernels.moe_gemm_2stage` work from one tree.
#
#   bash ensure_flydsl.sh                 the blocking ensure, as GEAK's callers run it (also under nohup):
#                                         exit 0 and $FLYDSL_ROOT/flydsl_env.sh, or non-zero and
#                                         $(dirname $FLYDSL_ROOT)/.flydsl_build.failed
#   bash ensure_flydsl.sh start           detached; then `wait --timeout 540` again while it exits 75
#   bash ensure_flydsl.sh --json | status --json | doctor | verify | env | clean | --help
#
# It runs the ensure-flydsl vendored in tool/ with the python3 on PATH (3.9 or newer) and installs nothing.
# tool/ is never put on PYTHONPATH: the interpreter finds it as its script's folder, so the import probe
# and flydsl_env.sh see the caller's PYTHONPATH exactly as it was.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "${FLYDSL_SHIM_DIR:-}" ]; then
  # As the old script did: GEAK's root is four folders above this one (skills/expert_skills/perf_knowledge),
  # and vLLM's FlyDSL shim (flydsl_moe_shim.py) lives in the apply skill's folder.
  geak_root="$(cd "$here/../../../.." && pwd)" &&
    export FLYDSL_SHIM_DIR="$geak_root/perf_knowledge/expert_skills/skills/apply_flydsl_moe_to_vllm"
fi
# -E -S: the tool's own imports come from tool/ and the standard library alone (not the caller's PYTHONPATH,
# nor site-packages and their .pth files); the environment itself is passed on untouched to everything the
# tool runs, the probe of the target interpreter included.
exec python3 -E -S "$here/tool/run.py" "$@"
