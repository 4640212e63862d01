#!/usr/bin/env bash
# The runtime on one GPU, in one command (a few minutes; each launch is bounded to 2):
#
#   tests/gpu/device_check.sh          # on a machine with a GPU: NCCL at world size 1 through
#                                      # wrap, and two ranks on gloo with CUDA tensors
#   tests/gpu/device_check.sh --cpu    # the same checks on CPU with gloo (the test suite's dry run)
#
# train and equal (full == plain DDP, bit for bit) run in both set-ups, throttle (paced
# all-reduces reach the emulated link's rate) on two ranks (at world size 1 nothing crosses a
# link): five torchrun launches of tests/gpu/device_check.py. Then the model zoo
# (tests/runtime/zoo_checks.py) in both set-ups, judged as tests/runtime/test_zoo.py judges
# it: on a GPU its representative subset plus clipping, checkpoint and bf16 under every
# strategy; in the CPU dry run one small case, to prove the plumbing.
# Prints one summary line; exits 1 if any check failed (with the failed launches' log tails).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-}"
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }

device=cuda single=nccl
if [ "${1:-}" = "--cpu" ]; then device=cpu single=gloo; fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1 GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" CUBLAS_WORKSPACE_CONFIG=:4096:8

for setup in "1 $single" "2 gloo"; do
  read -r world backend <<<"$setup"
  checks="train equal"
  [ "$world" -gt 1 ] && checks="$checks throttle"
  for check in $checks; do
    name="$check-$backend-$world"
    timeout 120 "$PY" -m torch.distributed.run --standalone --nnodes=1 \
      --nproc-per-node="$world" tests/gpu/device_check.py "$check" "$device" "$backend" \
      "$out/$name.json" >"$out/$name.log" 2>&1
    echo "$?" >"$out/$name.rc"
  done
done

cases="$("$PY" - "$device" <<'PYEOF'
import json, sys
sys.path.insert(0, "tests/runtime")
from test_zoo import STRATEGIES, SUBSET
every = STRATEGIES
extra = [["transformer", "clip", False, every], ["rnn_lm", "checkpoint", True, every],
         ["convnet", "bf16", False, every], ["bn_mlp", "no_sync", True, every]]
small = [["bn_mlp", "clip", False, ["plain", "full", "adaptive"]]]
print(json.dumps(SUBSET + extra if sys.argv[1] == "cuda" else small))
PYEOF
)"
for setup in "1 $single" "2 gloo"; do
  read -r world backend <<<"$setup"
  name="zoo-$backend-$world"
  ZOO_DEVICE="$device" ZOO_BACKEND="$backend" timeout 300 "$PY" -m torch.distributed.run \
    --standalone --nnodes=1 --nproc-per-node="$world" tests/runtime/zoo_checks.py \
    "$out/$name.json" "$cases" >"$out/$name.log" 2>&1
  echo "$?" >"$out/$name.rc"
done

"$PY" - "$out" "$device" <<'PYEOF'
import json, sys
from pathlib import Path

sys.path.insert(0, "tests/runtime")
from test_zoo import assert_promises_hold

out, device = Path(sys.argv[1]), sys.argv[2]
parts, failed = [], []
for rc_file in sorted(out.glob("*.rc")):
    name = rc_file.stem
    result_file = out / f"{name}.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    if name.startswith("zoo-") and isinstance(result, list):  # one row per case
        try:
            assert_promises_hold(result)
            result = {"ok": True, "runs": sum(len(case["runs"]) for case in result)}
        except AssertionError as broken:
            result = {"ok": False, "broken": repr(broken)[:500]}
    ok = rc_file.read_text().strip() == "0" and result.get("ok") is True
    figure = ""
    if "runs" in result:
        figure = f" {result['runs']} runs"
    elif "broken" in result:
        figure = f" {result['broken']}"
    elif "achieved_over_link" in result:
        figure = f" {result['achieved_over_link']:.2f}x"
    elif "max_abs_diff" in result:
        figure = f" diff {result['max_abs_diff']:g}"
    parts.append(f"{name} {'ok' if ok else 'FAILED'}{figure}")
    if not ok:
        failed.append(name)
print(f"device_check {device}: {len(parts) - len(failed)}/{len(parts)} ok | " + "; ".join(parts))
for name in failed:
    log = (out / f"{name}.log").read_text(errors="replace")
    ranks = "\n".join(line for line in log.splitlines() if line.startswith("[rank"))
    print(f"--- {name}.log (the ranks' last lines)\n" + (ranks or log)[-2000:])
sys.exit(1 if failed or len(parts) != 7 else 0)
PYEOF
