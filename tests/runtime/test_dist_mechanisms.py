"""The runtime's mechanisms on a real 2-rank gloo group (torchrun), one launch per check.

The checks themselves live in ``dist_checks.py`` (they run on every rank); these tests
launch them and assert on what rank 0 wrote.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from workers.runtime import protocol as p

pytestmark = pytest.mark.dist

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("dist_checks.py")


def run_check(name: str, tmp_path: Path, *, nproc: int = 2, **env: str) -> Any:
    out = tmp_path / f"{name}.json"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_")}
    full_env.update(
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        MASTER_ADDR="127.0.0.1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    full_env.update(env)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        str(SCRIPT),
        name,
        str(out),
    ]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


def alarms(r: redis.Redis, job: str, *kinds: str) -> list[dict[str, Any]]:
    """The job's alarm messages of ``kinds`` (a loaded host may add unrelated link alarms)."""
    stream = r.xrange(p.telemetry_stream(job))
    messages = [json.loads(f["data"]) for _, f in stream if f["type"] == p.MSG_ALARM]
    return [m for m in messages if m["kind"] in kinds]


def test_full_sync_through_our_hook_matches_plain_ddp_and_adaptive_keeps_critical_grads(
    tmp_path: Path,
) -> None:
    result = run_check("numerics", tmp_path)
    # Identical losses and parameters with fixed seeds: the hook, small buckets (50 KB; full
    # sends each whole, as DDP does, see test_zoo for 4 ranks) and the throttle (400 Mbit/s)
    # are numerically neutral.
    assert result["full"] == result["plain"]
    assert result["full_chunked_throttled"] == result["plain"]
    assert result["full_params_equal"] and result["full_chunked_throttled_params_equal"]
    assert result["full_chunked_throttled_paced_bytes"] > 0
    # Adaptive: critical (attention) gradients equal full sync's exactly (assert_close, atol 0
    # on the ranks); non-critical gradients stayed local.
    assert result["critical_checked"] == ["attn.weight", "attn.bias"]
    assert result["noncritical_differs"] is True


def test_powersgd_stays_finite_where_a_layer_has_zero_gradients(tmp_path: Path) -> None:
    result = run_check("powersgd_zero_gradients", tmp_path)
    # The dead layer's gradient is exactly zero on every step, through warm-up (steps 1-2,
    # plain all-reduce) and compression (3-6), and nothing turns into NaN.
    assert result["dead_grad_zero"] == [True] * 6
    assert all(math.isfinite(v) for v in result["losses"]), result["losses"]
    assert result["params_finite"] is True
    assert result["replicas_equal"] is True


def test_buffers_are_broadcast_where_replicas_are_identical_and_averaged_by_adaptive(
    tmp_path: Path,
) -> None:
    result = run_check("buffers", tmp_path)
    # full: DDP broadcasts rank 0's running statistics at every forward.
    assert result["full"]["buffers_equal"] is True
    # adaptive and none: each rank's own statistics (the ranks' batches differ)...
    assert result["adaptive"]["buffers_equal"] is False
    assert result["none"]["buffers_equal"] is False
    # ...until adaptive's synchronize() averages them with the parameters.
    assert result["adaptive"]["synced_equal"] is True
    assert result["adaptive"]["synced_is_mean"] is True
    # DDP's broadcast when the user asks for it through wrap().
    assert result["adaptive_broadcast"]["buffers_equal"] is True
    # The batch count advances alike everywhere.
    assert all(case["count_equal"] for case in result.values())


def test_peer_strategies_run_and_count_their_bytes(tmp_path: Path) -> None:
    result = run_check("peers", tmp_path)
    full = result["full"]["bytes"]
    assert result["full"]["replicas_equal"]
    # PowerSGD compresses after its warm-up (2 steps): far fewer bytes, replicas still equal.
    assert result["powersgd"]["bytes"][0] == full[0]
    assert max(result["powersgd"]["bytes"][3:]) < full[0] / 5
    assert result["powersgd"]["replicas_equal"]
    # Local SGD: at most the tiny agreed table between averaging steps (every 3 after
    # warm-up); an averaging step sends every parameter (full's first step: every gradient
    # and a table, 2 x 6 float64 = 96 bytes, that this step may not carry).
    local = result["localsgd"]["bytes"]
    assert local[3] < 1000 and local[4] < 1000 and local[5] >= full[0] - 96
    # Adaptive: critical parameters every step (critical_period 1 here) plus periodic
    # parameter averaging.
    # Here only attn.* (16.5k of 38k parameters) is critical, and H = 3 after warm-up.
    adaptive = result["adaptive"]["bytes"]
    assert adaptive[0] == full[0]  # warm-up: everything, every step
    # Step 2 ends warm-up, everything averaged, and its table (2 x 6 float64: 96 bytes alone)
    # rides the first critical average, counted in the step that average completes in.
    assert full[1] - 96 <= adaptive[1] < 1.5 * full[1]
    # Steps 3 and 4: critical averages only (~43% of full's bytes each). A step's average
    # counts in the step it completes in, this one or (thread timing) the next, so one of the
    # two may hold two: together they stay under 1.5 full steps (everything: 2).
    assert adaptive[2] + adaptive[3] < 1.5 * full[0]
    # Step 5 = warm-up end + H launches the average of non-critical params; it travels during
    # step 6 (overlapped with its compute) and is applied there. Bytes count in the step in
    # which the collective completed, which depends on thread timing, for the critical
    # averages too (seen once: steps 5-6 held one of them, not two), so check steps 5-7: the
    # non-critical average and at least two of the critical ones launched at steps 4-6
    # (three critical averages alone would fall short).
    critical = min(adaptive[2], adaptive[3])  # one average's bytes
    assert sum(adaptive[4:7]) >= 2 * critical + 0.9 * (full[0] - critical)


def test_adaptive_scales_the_local_steps_of_parameters_that_take_them(tmp_path: Path) -> None:
    result = run_check("local_step_scale", tmp_path)
    # AdamW on 2 ranks: 2^0.8 = 1.74 (non-critical), 2^0.5 = 1.41 (critical, averaged after
    # every step) automatically; SGD's local steps stay as they are.
    assert result["scale"] == pytest.approx(1.7411, abs=1e-4)
    assert result["critical_scale"] == pytest.approx(1.4142, abs=1e-4)
    assert result["sgd_scale"] == 1.0
    # Critical gradients averaged in backward: critical steps unscaled, the rest scaled.
    assert result["critical_equal"] is True
    assert result["noncritical_ratios"]
    for name, ratio in result["noncritical_ratios"].items():
        assert ratio == pytest.approx(result["scale"], rel=1e-4), name
    # Critical parameters averaged after the step take local steps: scaled by their factor.
    assert result["overlap_critical_ratios"] and result["overlap_noncritical_ratios"]
    for name, ratio in result["overlap_critical_ratios"].items():
        assert ratio == pytest.approx(result["critical_scale"], rel=1e-4), name
    for name, ratio in result["overlap_noncritical_ratios"].items():
        assert ratio == pytest.approx(result["scale"], rel=1e-4), name
    # Every parameter takes a scaled local step (AdamW, overlap): the step was taken with the
    # learning rate times the factor of the larger set, the other set interpolated; the
    # group's own learning rate is back after the step. With critical gradients averaged
    # in backward (unscaled critical steps) the learning rate is left alone.
    lr = result["lr"]
    larger = "critical_scale" if 2 * result["critical_numel"] > result["numel"] else "scale"
    assert result["lrs"]["overlap_auto"] == pytest.approx([lr * result[larger], lr])
    for name in ("overlap_unscaled", "grad_auto", "grad_unscaled"):
        assert result["lrs"][name] == [lr, lr], name


def test_background_averages_yield_the_link_to_gradients(tmp_path: Path) -> None:
    result = run_check("background_lane", tmp_path)
    assert result["sums_correct"] is True
    # Link time: background 320 KiB ~ 131 ms, gradient 32 KiB ~ 13 ms at 20 Mbit/s.
    assert result["background_s"] >= 0.13
    # Behind at most a 64 KiB chunk (~26 ms), not the whole average (FIFO: >= 144 ms).
    assert result["foreground_s"] < 0.5 * result["background_s"], result


def test_the_background_lane_waits_for_the_foreground_slot_to_end(tmp_path: Path) -> None:
    result = run_check("lane_gating", tmp_path)
    # Gated: the first background chunk launches only after the gradient's paced slot. The
    # two timestamps are taken on different threads; 5 ms of slack covers a thread that is
    # descheduled between the slot's end and its timestamp on a loaded 2-core machine.
    assert result["gated"]["first_bg_launch_after_fg_done_s"] > -0.005, result
    # The contrast: without yield_to it launches beside the gradient, ~26 ms before its end.
    assert result["ungated"]["first_bg_launch_after_fg_done_s"] < -0.01, result


def test_a_transfer_cut_into_chunks_of_its_own_size_leaves_the_lanes_size_alone(
    tmp_path: Path,
) -> None:
    result = run_check("lane_chunks", tmp_path)
    assert result["sums_correct"] is True
    # 320 KiB: five 64 KiB chunks, two of 256 KiB, then five again.
    assert result["collectives"] == [5.0, 2.0, 5.0]


def test_adaptive_syncs_everything_while_the_link_is_cheap(tmp_path: Path) -> None:
    result = run_check("fast_link", tmp_path)
    steps = result["steps"]
    # Every figure the session reports is one the protocol names (and adaptive reports all).
    named = (*p.COMM_FIGURES, *p.LINK_FIGURES, *p.STRATEGY_FIGURES)
    assert result["figure_names"] == sorted(named)
    full_bytes = steps[0]["bytes"]  # warm-up step: every gradient
    # Slow steps (1-8): warm-up (steps 1-2) ends straight in fast-link mode, with no
    # selective step between; every gradient every step, replicas identical throughout.
    fast = steps[1:8]
    assert all(s["fast_link"] == 1.0 for s in fast), steps
    assert all(s["bytes"] >= full_bytes for s in fast), steps
    # ... fused as full's buckets are: one gradient collective (+ the agreed table), not
    # one per small adaptive bucket.
    assert all(s["collectives"] == 2 for s in fast), steps
    assert all(s["replicas_equal"] for s in steps[:8])
    # Quick steps (9-20): the link is no longer cheap; selective sync with fewer bytes once
    # most of the last 9 steps were quick, and it stays on through one slow step (17).
    selective = steps[14:]
    assert all(s["fast_link"] == 0.0 for s in selective), steps
    assert all(s["bytes"] < 0.6 * full_bytes for s in selective[1:]), steps


def test_promotion_by_score_is_stable_agreed_and_undone_when_a_parameter_stops_moving(
    tmp_path: Path,
) -> None:
    result = run_check("promotion", tmp_path)
    # Off by default (no budget): the same steps promote nothing.
    assert all(s["promoted"] == [] for s in result["default"]["steps"]), result["default"]
    assert result["default"]["state_averages"] == [], result["default"]
    steps = result["steps"]
    first = next(i for i, s in enumerate(steps) if s["promoted"])
    promoted = steps[first]["promoted"]
    # Only parameters that fit the byte budget; the large weights stay local.
    assert set(promoted) <= {"embed.bias", "mlp.bias", "head.weight", "head.bias"}, promoted
    # While they keep moving they stay promoted (no flapping): one promotion, one average
    # of their optimizer state.
    assert all(s["promoted"] == promoted for s in steps[first:24]), steps
    assert result["state_averages"] == [promoted], result["state_averages"]
    # Promoted parameters are synced every step: identical on every rank.
    assert all(s["promoted_equal"] for s in steps), steps
    # Learning rate 0 from step 25: no movement, demoted.
    assert steps[-1]["promoted"] == [], steps


def test_the_throttle_holds_three_rates_and_follows_a_live_allocation(
    tmp_path: Path, redis_url: str
) -> None:
    result = run_check("throttle", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="50")
    # Achieved / allocated. The throttle's promise is the cap: never above the allocation
    # (5% for the bucket's small idle credit and timer granularity). A loaded machine can
    # only slow the transfers, so the floor is loose; how close to the allocation a run
    # gets is measured by tests/benchmarks/bench_throttle.py, not asserted here.
    for rate in ("50", "100", "200"):
        assert 0.5 < result[rate] <= 1.05, (rate, result)
    # The live allocation change is followed: both rates are held too.
    assert all(0.5 < achieved <= 1.05 for achieved in result["live"]), result


def test_a_perturbed_rank_raises_a_drift_alarm_that_clears_after_enhancement(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_check("drift", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="51")
    trail = {row["step"]: row for row in result["trail"]}
    # Decisions read the previous step's agreed table: step 13 reports the drift of rank 1's
    # LR spike at step 12 and turns enhancement on; the average it starts lands at step 14's
    # start, so step 13 drifted as far (reported at 14) and step 14 is back (at 15).
    assert trail[13]["drift"] > 0.5 and trail[13]["enhanced"] == 1.0
    assert trail[14]["drift"] > 0.5 and trail[14]["enhanced"] == 1.0
    assert all(row["drift"] < 0.5 for s, row in trail.items() if s not in (13, 14))
    # One enhanced average, started at step 13. Step 13's drift (reported at 14) is of the
    # parameters that average took: it starts no second one at 14.
    assert 13 in result["launches"] and 14 not in result["launches"], result["launches"]
    assert result["raised"] == result["cleared"] == 1
    raised, cleared = alarms(r, "51", p.ALARM_SYNC_DRIFT)
    assert (raised["kind"], raised["state"], raised["step"], raised["threshold"]) == (
        "sync_drift",
        "raised",
        12,
        0.5,
    )
    assert raised["value"] > 0.5
    # Alarms name the step whose drift was measured.
    assert (cleared["state"], cleared["step"]) == ("cleared", 14)


def test_with_a_table_every_second_step_the_alarm_names_the_measured_step(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    # The default: critical parameters averaged after every second step, and a table agreed
    # with each average. Rank 1's LR spikes at step 14: step 14's drift is read at 16, which
    # raises the alarm and starts an enhanced average; 16's drift (taken before that average
    # started, so covered by it) is read at 18 and starts no second one; 18's is back.
    result = run_check(
        "drift_every_second", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="59"
    )
    trail = {row["step"]: row for row in result["trail"]}
    spiked = (16, 17, 18, 19)  # a step between tables reports the last table's figures
    assert all(trail[s]["drift"] > 0.5 and trail[s]["enhanced"] == 1.0 for s in spiked)
    assert all(row["drift"] < 0.5 for s, row in trail.items() if s not in spiked)
    assert all(trail[s + 1]["drift"] == trail[s]["drift"] for s in range(2, 24, 2))
    assert 16 in result["launches"] and 18 not in result["launches"], result["launches"]
    assert all(step % 2 == 0 for step in result["launches"])  # decided at agreeing steps
    assert result["raised"] == result["cleared"] == 1
    raised, cleared = alarms(r, "59", p.ALARM_SYNC_DRIFT)
    assert (raised["state"], raised["step"]) == ("raised", 14)
    assert (cleared["state"], cleared["step"]) == ("cleared", 18)


def test_adaptive_agrees_a_table_with_each_critical_average_covering_the_steps_since(
    tmp_path: Path,
) -> None:
    result = run_check("agree_cadence", tmp_path)
    # Every step in warm-up (steps 1-2, everything averaged), then with each critical
    # average (every second step); none between.
    assert result["agreed_at"] == [1, 2, 4, 6, 8, 10]
    # A row holds the mean loss of the steps it covers (this rank's own losses)...
    losses = result["losses"]
    covered = [[1], [2], [3, 4], [5, 6], [7, 8], [9, 10]]
    expected = [sum(losses[s - 1] for s in steps) / len(steps) for steps in covered]
    assert result["row_losses"] == pytest.approx(expected, rel=1e-6)
    # ...and their mean step time (a step of this small net takes well under a second).
    assert all(0 < t < 1 for t in result["row_step_times"]), result["row_step_times"]
    # From the end of warm-up the table rides each critical average: one collective, not
    # two. In warm-up (no critical average) it goes alone on the table's group.
    assert result["rode_at"] == [2, 4, 6, 8, 10] and result["alone_at"] == [1], result
    # Each agreeing step reads the last one's table, which holds every rank's row as sent
    # (riding in bf16 parts: to fp32's precision).
    assert [measured for measured, _ in result["arrived"]] == [1, 2, 4, 6, 8]
    for measured, table in result["arrived"]:
        for rank, sent in enumerate(result["sent"]):
            assert table[rank] == pytest.approx(sent[str(measured)], rel=1e-7, nan_ok=True)


def test_drift_is_the_replicas_disagreement_not_their_movement(tmp_path: Path) -> None:
    result = run_check("drift_together", tmp_path)
    rows = result["rows"]
    # Both ranks train on the same batches: their non-critical parameters move far from
    # the last synced copy (more than twice the 0.1 threshold) but alike.
    assert max(row["moved"] for row in rows[5:]) > 0.2, rows
    # Until the first average (started at step 4) shows how far apart the replicas are,
    # drift is all of the movement: one alarm, on step 4's 0.2. From then on it is the share
    # that average measured (bf16 rounding: ~1e-3 of the movement), and no alarm.
    assert rows[4]["drift"] == pytest.approx(rows[3]["moved"], rel=1e-4), rows
    assert all(row["drift"] < 0.01 for row in rows[5:]), rows
    assert result["raised"] == 1


def test_an_injected_delay_degrades_the_link_shrinks_chunks_and_escalates(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_check("fault", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="52")
    # Degraded from step 3; 8 degraded steps (3-10) escalate, on both ranks, at the end of
    # step 11, which decides on step 10's agreed table.
    assert result["failed_at"] == [11, 11]
    assert result["chunks"][:2] == [262144.0, 262144.0] and result["chunks"][-1] == 65536.0
    [straggler] = alarms(r, "52", p.ALARM_STRAGGLER)
    [raised] = alarms(r, "52", p.ALARM_LINK_DEGRADED)
    assert (raised["kind"], raised["state"], raised["step"]) == ("link_degraded", "raised", 3)
    assert raised["value"] > raised["threshold"] == 0.1
    # Rank 0 waits for rank 1 (the delayed one) inside every collective: rank 1 is named.
    assert (straggler["kind"], straggler["state"], straggler["step"]) == ("straggler", "raised", 3)
    assert "rank 1 arrives last" in straggler["detail"]


def test_full_agrees_a_table_every_few_short_steps_and_after_every_step_once_degraded(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_check(
        "table_cadence", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="59"
    )
    # Healthy: a table after steps 1 and 2 (no step time agreed yet), then every 8 steps
    # (the cap: 10 s of these steps would be far more).
    assert result["healthy"] == {"agreed": [1, 2, 10, 18, 26], "failed_at": None}
    # Degraded from step 5: the table of step 10 (steps 3-10) is read at step 18 and raises
    # link_degraded; from then on a table after every step, and the 8th degraded table
    # escalates at step 25 (a table after every step: at step 13, test above).
    degraded = result["degraded"]
    assert degraded == {"agreed": [1, 2, 10, *range(18, 25)], "failed_at": 25}, degraded
    [raised] = alarms(r, "59-degraded", p.ALARM_LINK_DEGRADED)
    assert (raised["state"], raised["step"]) == ("raised", 10)


def test_one_slow_step_raises_link_degraded_but_does_not_escalate(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_check("spike", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="58")
    assert result["failed_at"] is None and len(result["jitter"]) == 12
    # The spike moves the jitter estimate by about 1/16 of 0.5 s twice (up, then down), under
    # the 0.1 s threshold, and it decays after.
    assert max(result["jitter"]) < 0.1 and result["jitter"][-1] < max(result["jitter"])
    raised, cleared = alarms(r, "58", p.ALARM_LINK_DEGRADED)
    assert (raised["state"], raised["step"]) == ("raised", 3)
    assert (cleared["state"], cleared["step"]) == ("cleared", 6)  # 3 healthy steps after


def test_a_degraded_link_reissues_late_chunks_and_rides_out_a_blip_that_escalates_without(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_check("reissue", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="57")
    on, off = result["on"], result["off"]
    # Without re-issue, 8 degraded steps in a row (3 to 10) escalate, as for any slow link
    # (at the end of step 11, which decides on step 10's agreed table).
    assert off["failed_at"] == 11
    # With it: step 3 is degraded (the alarm, decided at the end of step 4 on step 3's table,
    # raises and turns re-issue on), then every step of the blip re-issues its late chunks
    # and goes through; the run outlasts the fault.
    assert on["failed_at"] is None and len(on["losses"]) == 20
    reissued = on["reissued"]
    assert reissued[:4] == [0, 0, 0, 0], reissued
    assert all(n >= 1 for n in reissued[4:12]), reissued  # steps 5 to 12
    assert reissued[-3:] == [0, 0, 0], reissued  # healthy again, re-issue off
    # A retry carries the chunk's own values: training is exactly the fault-free one.
    assert on["losses"] == result["clean"]
    assert on["replicas_equal"]
    [raised, cleared] = alarms(r, "57-on", p.ALARM_LINK_DEGRADED)
    assert (raised["state"], raised["step"]) == ("raised", 3)
    assert "re-issued" in raised["detail"]
    assert cleared["state"] == "cleared" and cleared["step"] >= 15
    assert f"({int(sum(reissued))} chunks re-issued)" in cleared["detail"]
    assert "re-issued" not in alarms(r, "57-off", p.ALARM_LINK_DEGRADED)[0]["detail"]
    # Adaptive (selective after step 2): the run goes through, its critical buckets are
    # re-issued during the blip, and the critical parameters stay identical on both ranks.
    adaptive = result["adaptive"]
    assert adaptive["failed_at"] is None
    assert all(n >= 1 for n in adaptive["reissued"][4:12]), adaptive  # steps 5 to 12
    assert adaptive["reissued"][-3:] == [0, 0, 0], adaptive
    assert adaptive["critical_equal"] is True


def test_probes_measure_the_link_matrix_and_flag_a_slow_rank(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    run_check("probes", tmp_path, SYNCLANE_REDIS_URL=redis_url, SYNCLANE_JOB_ID="53")
    links = [
        json.loads(f["data"])
        for _, f in r.xrange(p.telemetry_stream("53"))
        if f["type"] == p.MSG_LINK
    ]
    assert [(m["step"], m["src"], m["dst"]) for m in links] == [(2, 0, 1), (4, 0, 1)]
    healthy, slow = links
    # Latencies are judged against the delay rank 1 injects (a 50 ms RTT), not an absolute
    # bound: loopback on a loaded machine can take several milliseconds.
    assert healthy["state"] == "ok" and healthy["latency_s"] < 0.5 * slow["latency_s"]
    assert healthy["bandwidth_bps"] == pytest.approx(100e6, rel=0.25)  # the emulated link
    assert (
        slow["state"] == "degraded" and slow["latency_s"] > 0.025
    )  # half of the RTT rank 1 delays
    # The slow pair was probed once more and was slow again; the healthy one was not re-probed.
    assert (healthy["reissued"], slow["reissued"]) == (False, True)


def test_a_slow_probe_is_reissued_once_and_a_blip_does_not_mark_the_link_degraded(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    run_check(
        "probes",
        tmp_path,
        SYNCLANE_REDIS_URL=redis_url,
        SYNCLANE_JOB_ID="54",
        SYNCLANE_FAULT="rank=1,from_step=4,delay_s=0.06,blip=1",
    )
    links = [
        json.loads(f["data"])
        for _, f in r.xrange(p.telemetry_stream("54"))
        if f["type"] == p.MSG_LINK
    ]
    assert [(m["step"], m["reissued"]) for m in links] == [(2, False), (4, True)]
    # Step 4's first probe hit the delay; its re-issue went through and counts.
    blip = links[1]
    # Under half the injected delay: the delay did not apply to the re-issued probe.
    assert blip["state"] == "ok" and blip["latency_s"] < 0.03, blip


def test_error_feedback_formats_cut_adaptives_bytes_and_critical_replicas_stay_identical(
    tmp_path: Path,
) -> None:
    result = run_check("compress", tmp_path)
    fp32, bf16, int8 = result["none"], result["bf16"], result["int8"]
    # Critical gradients and the periodic averages' deltas go as bf16: about half the bytes
    # (the per-step agreement table stays fp64, hence not exactly half).
    assert bf16["bytes"] < 0.6 * fp32["bytes"]
    # The first warm-up step, before any step time is agreed, goes as full sends it (fp32);
    # warm-up with no known link rate then goes in the wire format (bf16 under int8 as well).
    assert fp32["first_bytes"] == bf16["first_bytes"] == int8["first_bytes"]
    assert fp32["first_bytes"] == fp32["warmup_bytes"]
    assert 0 < bf16["warmup_bytes"] < 0.6 * fp32["warmup_bytes"]
    assert int8["warmup_bytes"] == bf16["warmup_bytes"]
    # A step with no average sends the critical gradients only: int8 codes plus a scale per
    # 256 values, about half of bf16's bytes (26% of fp32's); the averages stay in bf16.
    assert int8["least_step_bytes"] < 0.53 * bf16["least_step_bytes"]
    assert int8["least_step_bytes"] < 0.27 * fp32["least_step_bytes"]
    assert int8["bytes"] < 0.75 * bf16["bytes"]
    assert abs(int8["loss"] - fp32["loss"]) < 0.05 * abs(fp32["loss"])
    for run in (fp32, bf16, int8):
        # Every rank receives the same reduced values, so critical replicas are bit-identical;
        # non-critical ones differ between averages, and synchronize() makes all identical.
        assert run["critical_equal"] is True
        assert run["noncritical_equal_before_sync"] is False
        assert run["all_equal_after_sync"] is True
    # Same training, within what bf16 rounding (fed back) moves in 14 steps.
    assert abs(bf16["loss"] - fp32["loss"]) < 0.05 * abs(fp32["loss"])


def test_auto_format_sends_critical_gradients_in_int8_where_that_saves_enough_link_time(
    tmp_path: Path,
) -> None:
    result = run_check("auto_format", tmp_path)
    attn, bias = result["attn"], result["bias"]
    table = bias["step_bytes"][4] - 128 * 2  # attn.bias in bf16, plus the agreed table
    # Warm-up (steps 1-4) averages all 38,280 values: in fp32 before any step time is
    # agreed (steps 1-2), then in bf16 (a 20 Mbit/s link: the wire format pays); then only
    # the critical ones go, with no periodic average before step 32.
    warmup = [38_280 * 4 + table] * 2 + [38_280 * 2 + table] * 2
    assert attn["step_bytes"][:4] == bias["step_bytes"][:4] == warmup
    # All of attn (16,512 values): 65 int8 rows of 256 codes + a 4-byte scale, padded to 66
    # for 2 ranks; from the first selective step on.
    assert attn["step_bytes"][4:] == [66 * 260 + table] * 4
    assert attn["quantize_9_to_12"] == [True] * 4
    # attn.bias alone would save ~0.05 ms a step: bf16.
    assert bias["step_bytes"][4:] == [128 * 2 + table] * 4
    assert bias["quantize_9_to_12"] == [False] * 4
    # The decision, [while in bf16, while in int8]: int8 from a saving of 8% of a step on,
    # kept down to 5% (no switching back and forth around one threshold).
    assert result["decisions"] == {
        "50 ms": [True, True],  # 13% of the step
        "100 ms": [False, True],  # 6.5%
        "200 ms": [False, False],  # 3.25%
    }


def test_a_transfer_keeps_the_reissue_mode_it_was_submitted_with(tmp_path: Path) -> None:
    # Found by bench_sync at 4 ranks: a critical average queued before LinkHealth turned
    # re-issue on went out plainly on one rank and through the re-issue path on three (hang).
    result = run_check("reissue_switch_while_queued", tmp_path)
    assert result == {"all_three": True, "reissued": 0, "chunk_bytes_after": 1024 * 1024}


def test_a_transfer_keeps_the_chunk_size_it_was_submitted_with(tmp_path: Path) -> None:
    # The same race for LinkHealth's chunk size: cut in 64 KB pieces on one rank and whole
    # on the other, the ranks' collectives would not match.
    result = run_check("chunk_switch_while_queued", tmp_path)
    assert result == {"all_three": True, "reissued": 0, "chunk_bytes_after": 64 * 1024}


def test_periodic_averages_take_at_most_a_tenth_of_a_step_on_the_link(tmp_path: Path) -> None:
    result = run_check("averaging_bound", tmp_path)
    # With no link rate H follows the loss alone: sync_period 2 times sqrt(loss / loss0),
    # the loss held at its baseline. The non-critical parameters (all but attn: 38,280 -
    # 16,512 = 21,768 values) in bf16 are 43,536 bytes, which a ring all-reduce at 2 ranks
    # sends whole: 17.4 ms at 20 Mbit/s.
    # H is the fewest steps whose tenth covers that (H x step / 10 >= 17.4 ms), bounded by
    # the loss's H below and max_sync_period (64) above. A quarter would give 2, 7 and 35.
    assert result == {
        "wire_share": 0.5,  # averages go in bf16
        "no link": 2,
        "500 ms": 2,  # 17.4 ms is under a tenth of the step: the loss decides
        "50 ms": 4,  # 17.4 / 5
        "10 ms": 18,  # 17.4 / 1
        "2 ms": 64,  # 87, capped
    }


def test_the_first_step_is_timed_from_its_forward_not_from_wrap(tmp_path: Path) -> None:
    # A 0.5 s pause between wrap() and the first forward is no step's time: the first step
    # takes tens of ms here (its warm-up sends everything), under 0.4 s on a loaded machine.
    # Timed from wrap() it would be over 0.5 s, and the decisions after it would read it.
    first, second = run_check("first_step_clock", tmp_path)["step_times_s"]
    assert 0 < first < 0.4
    assert 0 < second < 0.4


@pytest.mark.parametrize("world", [2, 3])
def test_int8_sums_match_the_exact_sum_within_rounding_and_feedback_removes_the_bias(
    tmp_path: Path, world: int
) -> None:
    result = run_check("int8_sum", tmp_path, nproc=world)
    # 9,300 values are 37 blocks of 256, padded to a multiple of the world size; 1 KB chunks
    # hold 3 rows (2 at two ranks: a whole share per rank), so several chunks go.
    assert result["rows"] == (38 if world == 2 else 39)
    assert result["collectives_first"] == result["rows"] // (2 if world == 2 else 3)
    # Every rank decodes the same gathered codes.
    assert result["same_on_all_ranks"] is True
    # One sum is within two int8 roundings (each under half a step of 1/127 of its block's
    # largest value) of the exact sum: about 1% here.
    assert 0 < result["first_error"] < 0.02 and result["max_error"] < 0.03
    # Fed back, what one sum rounds off goes with the next: over 50 sums the running total
    # is off by far less than one sum's error (not 50 of them).
    assert result["drift_after_50"] < result["first_error"] / 20


def test_late_critical_gives_the_optimizer_the_previous_steps_average_on_every_rank(
    tmp_path: Path,
) -> None:
    result = run_check("late_critical", tmp_path)
    # Warm-up is on time; the first selective step has no earlier average (zero on every
    # rank), then each step applies exactly the average the on-time hook applied a step before.
    assert result["warmup_equal"] is True
    assert result["first_selective_zero"] is True
    assert result["one_step_late"] == [True] * 5
    assert result["local_differs"] is True
    assert result["late_same_on_all_ranks"] is True
    # With AdamW and bf16 on the wire, critical parameters and their optimizer moments stay
    # identical; the rest differ until synchronize().
    assert result["critical_equal"] is True
    assert result["noncritical_equal_before_sync"] is False
    assert result["all_equal_after_sync"] is True


def test_overlap_critical_averages_critical_parameters_after_the_step(tmp_path: Path) -> None:
    result = run_check("overlap_critical", tmp_path)
    # Warm-up averages gradients; from the first selective step no gradient is averaged in
    # backward (each rank's own differs from the other's).
    assert result["warmup_grad_same"] is True
    assert result["selective_grads_local"] == [True] * 7
    # By default the critical parameters are averaged every second step: after steps 2, 4
    # and 6 (of the steps checked, 1-6). A step after one of those starts from the replicas'
    # mean plus the rank's own SGD step, the others from the rank's own values, to fp32
    # rounding: far under one local step.
    assert result["period"] == 2
    assert result["averaged_after"] == [2, 4, 6]
    assert result["max_error"] < 1e-5
    assert result["max_error"] < result["min_local_step"] / 100
    assert result["replicas_differ"] is True
    # AdamW, bf16: training goes on; replicas differ until synchronize() makes them equal.
    assert result["losses_finite"] is True
    assert result["equal_before_sync"] is False
    assert result["all_equal_after_sync"] is True


def test_warm_up_sends_fp32_where_the_wire_format_would_save_little(tmp_path: Path) -> None:
    result = run_check("sync_all_format", tmp_path)
    fp32, fast, slow = result["fast_fp32"], result["fast_bf16"], result["slow_bf16"]
    # Steps 1-2 have no timing (step 2's format is decided at the end of step 1, before any
    # table is agreed): fp32, as full sends it, whatever the link.
    assert fast[:2] == fp32[:2] and slow[:2] == fp32[:2]
    # Then, on a fast link, still what full sends: bf16 would save a small share of a step.
    assert fast[2:] == fp32[2:]
    # On a slow link bf16 saves most of a step: the wire format (about half the bytes).
    assert all(b < 0.6 * fp32[1] for b in slow[2:]), slow


def test_outer_momentum_moves_every_replica_by_the_mean_movement_plus_the_last_step(
    tmp_path: Path,
) -> None:
    result = run_check("outer_momentum", tmp_path)
    assert result["averages"] >= 8  # 24 steps, one average every 2 after warm-up
    assert result["synced_equal"] is True
    assert result["worst_relative_error"] < 1e-4
    # The momentum term was a real share of the steps (with beta 0 it would be 0).
    assert result["momentum_share"] > 0.1


def test_adaptive_on_a_fast_link_trains_exactly_as_full(tmp_path: Path) -> None:
    result = run_check("fast_link_equals_full", tmp_path)
    fast, slow = result["10000"], result["20"]
    # Warm-up (4 steps), then fast-link mode: the same parameters as full after every step.
    assert fast["fast_link_steps"] >= 10, fast
    assert fast["equal_steps"] == list(range(1, 17)), fast
    # The contrast: on a slow link adaptive syncs selectively, and its parameters part from
    # full's after warm-up.
    assert slow["fast_link_steps"] == 0, slow
    assert not set(range(6, 17)) & set(slow["equal_steps"]), slow


def test_critical_slices_of_several_buckets_go_in_one_collective_on_a_fast_link(
    tmp_path: Path,
) -> None:
    result = run_check("critical_fusion", tmp_path)
    by_time, fixed = result["by_link_time"], result["fixed_16k"]
    # 2 ms of a 400 Mbit/s link on a ring of 2: 100 KB, so both buckets' slices go together.
    assert by_time["fuse_bytes"] == [100_000] * 5
    assert fixed["fuse_bytes"] == [16 * 1024] * 5
    # The same steps, one collective fewer each: the first bucket's 33 KB no longer go alone.
    assert [a - b for a, b in zip(fixed["collectives"], by_time["collectives"], strict=True)] == [
        1
    ] * 5
