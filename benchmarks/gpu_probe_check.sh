#!/usr/bin/env bash
# The probe's GPU paths on a GPU machine, unattended: prints every figure beside its datasheet
# value and exits non-zero when a check fails (1) or the machine cannot run it (2).
#
#   benchmarks/gpu_probe_check.sh            # quick probe (what the agent runs), ~1 min
#   PROBE_FULL=1 benchmarks/gpu_probe_check.sh   # the long one (10240² matmuls, all pairs)
#
# Uses $PYTHON (default: .venv/bin/python if present, else python3) with numpy and torch;
# CuPy and nvidia-ml-py are used where installed. Installs nothing. Writes the JSON reports
# to ${OUT:-/tmp}/gpu_probe_check.json, and the CLI's own report beside it when the CLI's
# dependencies are there.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
echo "== gpu_probe_check: $(date -u +%FT%TZ) on $(hostname), python $("$PY" -V 2>&1)"
command -v nvidia-smi >/dev/null && nvidia-smi -L
args=()
[[ "${PROBE_FULL:-0}" == 1 ]] && args+=(--full)
timeout "${PROBE_TIMEOUT:-540}" "$PY" benchmarks/gpu_probe_check.py "${args[@]}" \
  --json "$OUTDIR/gpu_probe_check.json"
rc=$?
if [[ $rc -eq 124 ]]; then echo "FAILED: timed out"; exit 1; fi
if [[ $rc -eq 2 ]]; then exit 2; fi  # no GPU here: nothing the CLI could show either
# The command a user runs, where its dependencies (click, rich, pydantic ...) are installed.
if "$PY" -c "import click, rich, pydantic" 2>/dev/null; then
  echo "== provisioner probe --json"
  if "$PY" -m provisioner probe --json > "$OUTDIR/provisioner_probe.json"; then
    "$PY" - "$OUTDIR/provisioner_probe.json" <<'PYEOF' || rc=1
import json, sys
doc = json.load(open(sys.argv[1]))
s = doc["summary"]
print(f"  backend {doc['backend']}: {s['gpu_count']}x {s['gpu']}, {s['fraction']} of datasheet {s['precision']}")
sys.exit(0 if doc["backend"] != "numpy" and s["fraction"] else 1)
PYEOF
  else
    echo "FAILED: provisioner probe exited non-zero"; rc=1
  fi
fi
exit $rc
