#!/bin/sh
# ensure_flydsl.sh: GEAK's ensure_flydsl skill, written by `ensure-flydsl skill` (ensure-flydsl @@VERSION@@;
# VERSION names its source and commit). It makes `import flydsl, kernels.moe_gemm_2stage` work from one tree.
#
#   bash ensure_flydsl.sh                 the blocking ensure, as GEAK's callers run it (also under nohup):
#                                         exit 0 and $FLYDSL_ROOT/flydsl_env.sh, or non-zero and
#                                         $(dirname $FLYDSL_ROOT)/.flydsl_build.failed
#   bash ensure_flydsl.sh start           detached; then `wait --timeout 540` again while it exits 75
#   bash ensure_flydsl.sh --json | status --json | doctor | verify | env | clean | --help
#
# It runs @@ZIPAPP@@ (the tool, with packaging, filelock and installer inside) with the python3 on PATH
# (3.9 or newer) and installs nothing; bash and sh run it alike. When the tool cannot run at all (no python3,
# an older one, a zipapp that is not the one VERSION names), this script says why in one line and, for a
# run, writes the failure marker itself, so that a poller of it is told at once.
set -u

quote() {  # $1 as one shell word
  printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

fail() {
  reason=$1
  shift
  printf 'ensure-flydsl: %s\n' "$reason" >&2
  quoted=$(printf '%s' "$reason" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')
  hint="fix what the reason names, then run it again"
  root=${FLYDSL_ROOT:-@@ROOT@@}
  marker=${FLYDSL_BUILD_FAILED:-}
  run=yes
  json=
  previous=
  for arg in "$@"; do
    case $previous in --root) root=$arg ;; --fail-marker) marker=$arg ;; esac
    case $arg in
      --root=*) root=${arg#--root=} ;;
      --fail-marker=*) marker=${arg#--fail-marker=} ;;
      --json) json=yes ;;  # its caller parses one JSON object on stdout, failures included
      status | wait | env | verify | doctor | cache | store | clean | stats | skill | help | completion | -h | \
        --help | -V | --version) run= ;;  # not a run: its caller reads this line, no marker is polled for
    esac
    previous=$arg
  done
  if [ -n "$json" ]; then
    printf '{"schema_version": 1, "ok": false, "built": false, "exit_code": 64, "stage": "settings", "how": null, %s}\n' \
      "\"reason\": \"$quoted\", \"hint\": \"$hint\", \"log\": null, \"run_id\": null, \"elapsed_s\": null, \"installed\": null"
  fi
  [ -n "$run" ] || exit 64
  [ -n "$marker" ] || marker="$(dirname -- "$root")/.flydsl_build.failed"
  folder=$(dirname -- "$marker")
  if [ -d "$folder" ] && [ ! -d "$marker" ] && [ ! -L "$marker" ]; then
    host=$(uname -n 2>/dev/null || echo unknown)
    when=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
    temporary="$folder/.$(basename -- "$marker").$$.tmp"
    printf '{"exit_code": 64, "stage": "settings", "reason": "%s", "hint": "%s", "log": null, "log_tail": [], %s}\n' \
      "$quoted" "$hint" \
      "\"run_id\": \"\", \"pid\": $$, \"host\": \"$host\", \"time\": \"$when\", \"request\": {}" \
      >"$temporary" 2>/dev/null && mv -f "$temporary" "$marker" 2>/dev/null || rm -f "$temporary"
  fi
  exit 64
}

case $0 in
  */*) here=$(CDPATH='' cd -- "${0%/*}" && pwd) ;;
  *) here=$(pwd) ;;  # sh ensure_flydsl.sh, from its own folder
esac
[ -n "$here" ] || fail "cannot find the folder of $0" "$@"
zipapp="$here/@@ZIPAPP@@"

python=$(command -v python3) ||
  fail "no python3 on PATH (${PATH:-unset}): the GEAK folder's tool needs Python 3.9 or newer as python3" "$@"
case $("$python" -V 2>&1) in
  "Python 3."[0-8].*) fail "python3 on PATH is $python ($("$python" -V 2>&1)); the GEAK folder's tool needs\
 Python 3.9 or newer: put one first on PATH and run it again" "$@" ;;
  "Python 3."*) ;;
  *) fail "python3 on PATH ($python) does not run: $("$python" -V 2>&1 | head -1)" "$@" ;;
esac

# The zipapp must be the one VERSION names (an edit, a truncated copy, a merge gone wrong run other code).
want=
if [ -f "$here/VERSION" ]; then
  while read -r word hash name; do
    if [ "$word" = "sha256:" ] && [ "$name" = "@@ZIPAPP@@" ]; then want=$hash; fi
  done <"$here/VERSION"
fi
if command -v sha256sum >/dev/null 2>&1; then
  got=$(sha256sum 2>/dev/null <"$zipapp")
else
  got=$("$python" -E -S -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
    "$zipapp" 2>/dev/null)
fi
if [ -z "$want" ] || [ "${got%% *}" != "$want" ]; then
  fail "$zipapp is not the zipapp $here/VERSION names (changed, truncated or missing): restore the folder from git\
 (\`git -C $(quote "$here") checkout -- .\`), or write it again where ensure-flydsl is installed\
 (\`ensure-flydsl skill $(quote "$here") --force\`)" "$@"
fi

skills=perf_knowledge/expert_skills/skills
if [ -z "${FLYDSL_SHIM_DIR:-}" ]; then
  # As the old script did: vLLM's FlyDSL shim (flydsl_moe_shim.py) lives in the apply skill's folder beside
  # this one, when this folder is GEAK's ($skills/ensure_flydsl under GEAK's top folder); elsewhere, none.
  case ${here%/*} in
    */$skills) export FLYDSL_SHIM_DIR="${here%/"$skills"/*}/$skills/apply_flydsl_moe_to_vllm" ;;
  esac
fi
# Every command the tool names in a message (a hint, a next step) is this script, as its caller invoked it.
case $0 in  # no subshell on the warm path unless the name needs one
  *\'*) script=$(quote "$0") ;;
  *) script="'$0'" ;;
esac
ENSURE_FLYDSL_COMMAND="bash $script"
export ENSURE_FLYDSL_COMMAND
# -E -S: the tool's own imports come from the zipapp and the standard library alone (not the caller's
# PYTHONPATH, nor site-packages and their .pth files); the environment itself is passed on untouched to
# everything the tool runs, the probe of the target interpreter included.  Once the zipapp has unpacked itself
# into this user's cache (named by the sha256 checked above), its copy runs: Python keeps the bytecode there.
cache=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
unpacked="$cache/ensure-flydsl/zipapp/$want"
case $cache in
  /*) if [ -O "$unpacked" ] && [ -f "$unpacked/__main__.py" ]; then
        exec "$python" -E -S "$unpacked/__main__.py" "$@"
      fi ;;
esac
exec "$python" -E -S "$zipapp" "$@"
