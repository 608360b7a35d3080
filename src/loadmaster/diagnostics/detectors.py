"""Detectors: each reads a :class:`JobFrame` and returns findings of one kind.

Peers, not fixed thresholds: a GPU is compared with the other ranks of its
job at the same time (median and MAD across ranks), as MegaScale, C4 and
Greyhound do, so a job that is simply slow or simply bursty raises nothing.
Absolute rules are used only where a value means trouble on its own (an XID
code, an ECC count, a thermal clock-event bit, a gap in the data).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadmaster.diagnostics.findings import Evidence, Finding, FindingKind, confidence
from loadmaster.diagnostics.frame import JobFrame
from loadmaster.diagnostics.signals import (
    MAD_SCALE,
    BoolArray,
    FloatArray,
    merge_runs,
    nanmean,
    nanmedian,
    refine_run,
    rolling_mean,
    runs,
)

THERMAL_BITS = 0x20 | 0x40
"""NVML clock-event reasons for software and hardware thermal slowdown."""


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of every detector; seconds are converted to grid steps of the frame."""

    window_s: float = 60.0
    """Smoothing window for peer comparison: a few training steps, so a step's phases average out."""
    straggler_excess: float = 0.06
    """Minimum SM-activity excess over the job median for a straggler (the ratio, 0-1)."""
    straggler_z: float = 5.0
    """... and at least this many robust standard deviations (1.4826 MAD across ranks)."""
    straggler_min_s: float = 120.0
    straggler_group_ratio: float = 2.0
    """Stragglers at the same time are one finding only when their excesses are within this factor:
    one rank far slower than the others is reported alone, not merged with mildly slow neighbours."""
    comm_ib_ratio: float = 0.5
    """A node whose InfiniBand bytes fall below this share of the node median has a degraded link."""
    comm_min_s: float = 60.0
    thermal_min_s: float = 30.0
    hot_c: float = 85.0
    """Without clock-event bits: this hot and clocked 10% below peers counts as throttled."""
    leak_share: float = 0.03
    """FB_USED this share of total memory above the job median (and growing) is a leak."""
    leak_min_s: float = 120.0
    idle_min_s: float = 180.0
    """Shorter idle stretches are data-loading stalls or waits, not idle allocations."""
    idle_sm: float = 0.02
    idle_util_pct: float = 1.0
    missing_min_s: float = 30.0
    """A gap shorter than this (or than 3 of the GPU's own sampling intervals) is not reported."""
    merge_gap_s: float = 30.0
    min_telemetry_s: float = 120.0
    """Less telemetry than this (seconds with any sample of the job) gives no verdict: the diagnosis
    says there is too little to judge instead of reporting findings (the shortest detector needs 120 s)."""

    def steps(self, seconds: float, frame: JobFrame) -> int:
        """``seconds`` as a whole number of grid steps (at least 1)."""
        return max(1, round(seconds / frame.step_s))


Span = tuple[int, int, int, float]
"""(row, first step, last step, strength) of one per-GPU (or per-node) anomaly."""


def group_spans(spans: list[Span], max_ratio: float | None = None) -> list[list[Span]]:
    """Per-row spans grouped when they overlap with intersection-over-union >= 0.5 (one incident
    on several GPUs becomes one finding). With ``max_ratio``, a span joins a group only when the
    group's strengths stay within that factor of each other, so a GPU far worse than the rest
    (a severe straggler beside mildly slow neighbours) is reported alone."""
    groups: list[list[Span]] = []
    for span in sorted(spans, key=lambda s: (s[1], s[2])):
        for group in groups:
            a, b = group[0][1], group[0][2]
            inter = min(b, span[2]) - max(a, span[1]) + 1
            union = max(b, span[2]) - min(a, span[1]) + 1
            if inter > 0 and inter / union >= 0.5 and _comparable(group, span, max_ratio):
                group.append(span)
                break
        else:
            groups.append([span])
    return groups


def _comparable(group: list[Span], span: Span, max_ratio: float | None) -> bool:
    if max_ratio is None:
        return True
    levels = [abs(s[3]) for s in group] + [abs(span[3])]
    return max(levels) <= max_ratio * max(min(levels), 1e-12)


def _targets(frame: JobFrame, rows: list[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """GPU names of ``rows`` and the nodes all of whose (job) GPUs are among them."""
    chosen = set(rows)
    gpus = tuple(frame.gpus[r].name for r in sorted(chosen))
    nodes = tuple(
        host
        for k, host in enumerate(frame.nodes)
        if all(r in chosen for r in np.flatnonzero(frame.node_of_gpu == k).tolist())
    )
    return gpus, nodes


def _finding(
    frame: JobFrame,
    kind: FindingKind,
    group: list[Span],
    evidence: Evidence,
    conf: float,
) -> Finding:
    first = int(np.median([s[1] for s in group]))
    last = max(first, int(np.median([s[2] for s in group])))
    start, end = frame.interval(first, last)
    gpus, nodes = _targets(frame, [s[0] for s in group])
    return Finding(kind, gpus, nodes, start, end, evidence, conf)


def _long_runs(mask: BoolArray, min_steps: int, gap: int) -> list[tuple[int, int]]:
    return [r for r in merge_runs(runs(mask), gap) if r[1] - r[0] + 1 >= min_steps]


# ---------------------------------------------------------------------------- data quality


def telemetry_began(frame: JobFrame) -> int:
    """The first step in which any GPU of the job sent a sample (the number of steps when none did)."""
    sent = np.flatnonzero(frame.present.any(axis=0))
    return int(sent[0]) if sent.size else int(frame.times_s.size)


def detect_missing(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """GPUs that sent nothing for at least ``missing_min_s`` (and 3 of their own intervals) after the
    job's telemetry began: the time before any GPU of the job reported is no gap (the window reached
    back before the job's telemetry), and :func:`~loadmaster.diagnostics.report.diagnose` says so."""
    began = telemetry_began(frame)
    spans: list[Span] = []
    for r in range(len(frame.gpus)):
        need = max(cfg.missing_min_s, 3 * float(frame.native_step_s[r]))
        for first, b in _long_runs(~frame.present[r], cfg.steps(need, frame), 0):
            a = max(first, began)
            if b - a + 1 >= cfg.steps(need, frame):
                spans.append((r, a, b, (b - a + 1) * frame.step_s))
    out = []
    for group in group_spans(spans):
        dur = float(np.median([s[3] for s in group]))
        ev = Evidence(
            ("all fields",), {"gap_s": dur, "gpus": float(len(group))}, f"no samples for {dur:.0f} s"
        )
        out.append(_finding(frame, FindingKind.MISSING, group, ev, 0.99))
    return out


# ---------------------------------------------------------------------------- errors


def detect_xid(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """Runs of a non-zero XID_ERRORS value, per code."""
    xid = np.nan_to_num(frame.metric("XID_ERRORS"))
    spans: list[Span] = []
    for r in range(len(frame.gpus)):
        for a, b in _long_runs(xid[r] > 0, 1, cfg.steps(cfg.merge_gap_s, frame)):
            spans.append((r, a, b, float(np.max(xid[r, a : b + 1]))))
    out = []
    for code in sorted({s[3] for s in spans}):
        for group in group_spans([s for s in spans if s[3] == code]):
            ev = Evidence(("XID_ERRORS",), {"xid": code}, f"XID {code:.0f} reported")
            out.append(_finding(frame, FindingKind.XID, group, ev, 0.99))
    return out


def detect_ecc(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """ECC counters that went up: the interval runs from the first to the last error, widened by the
    mean gap between errors (the errors are a sample of the faulty period, not its edges)."""
    sbe = np.diff(np.nan_to_num(_ffill(frame.metric("ECC_SBE_VOL_TOTAL"))), axis=1, prepend=np.nan)
    dbe = np.diff(np.nan_to_num(_ffill(frame.metric("ECC_DBE_VOL_TOTAL"))), axis=1, prepend=np.nan)
    spans: list[Span] = []
    totals: dict[int, tuple[float, float]] = {}
    for r in range(len(frame.gpus)):
        inc = np.nan_to_num(np.clip(sbe[r], 0, None)) + np.nan_to_num(np.clip(dbe[r], 0, None))
        events = np.flatnonzero(inc > 0)
        if events.size == 0:
            continue
        n = float(inc.sum())
        gap = (events[-1] - events[0]) / max(n - 1.0, 1.0) if n > 1 else cfg.steps(60.0, frame)
        a = max(0, int(np.rint(events[0] - gap)))
        b = min(frame.times_s.size - 1, int(np.rint(events[-1] + gap)))
        spans.append((r, a, b, n))
        totals[r] = (float(np.nansum(np.clip(sbe[r], 0, None))), float(np.nansum(np.clip(dbe[r], 0, None))))
    out = []
    for group in group_spans(spans):
        s_tot = sum(totals[s[0]][0] for s in group)
        d_tot = sum(totals[s[0]][1] for s in group)
        text = f"{s_tot:.0f} single-bit and {d_tot:.0f} double-bit ECC errors"
        ev = Evidence(("ECC_SBE_VOL_TOTAL", "ECC_DBE_VOL_TOTAL"), {"sbe": s_tot, "dbe": d_tot}, text)
        out.append(_finding(frame, FindingKind.ECC, group, ev, 0.99 if d_tot else 0.9))
    return out


def _ffill(x: FloatArray) -> FloatArray:
    from loadmaster.diagnostics.signals import forward_fill  # noqa: PLC0415 - tiny helper, avoids a cycle

    return forward_fill(x, np.full(x.shape[0], x.shape[1], dtype=np.int64))


# ---------------------------------------------------------------------------- activity


def idle_mask(frame: JobFrame, cfg: DetectorConfig) -> BoolArray:
    """(GPUs x steps): allocated to the job but doing nothing (absent samples are not idle)."""
    util = frame.metric("GPU_UTIL")
    sm = frame.metric("SM_ACTIVE")
    quiet = (np.nan_to_num(util, nan=100.0) <= cfg.idle_util_pct) & (
        np.nan_to_num(sm, nan=1.0) <= cfg.idle_sm
    )
    return np.asarray(quiet & frame.present, dtype=bool)


def detect_idle(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """GPUs idle for at least ``idle_min_s`` while allocated."""
    mask = idle_mask(frame, cfg)
    mem = frame.metric("FB_USED")
    spans: list[Span] = []
    for r in range(len(frame.gpus)):
        for a, b in _long_runs(mask[r], cfg.steps(cfg.idle_min_s, frame), 0):
            spans.append((r, a, b, float(nanmedian(mem[r, a : b + 1]))))
    out = []
    for group in group_spans(spans):
        dur = (group[0][2] - group[0][1] + 1) * frame.step_s
        held = float(np.nanmedian([s[3] for s in group])) if group else 0.0
        ev = Evidence(
            ("GPU_UTIL", "SM_ACTIVE", "FB_USED"),
            {"idle_s": dur, "memory_held_mib": held},
            f"GPU_UTIL <= {cfg.idle_util_pct:g}% and SM_ACTIVE <= {cfg.idle_sm:g} for {dur:.0f} s, "
            f"{held:.0f} MiB held",
        )
        conf = confidence(dur, cfg.idle_min_s, dur, cfg.idle_min_s)
        out.append(_finding(frame, FindingKind.IDLE, group, ev, conf))
    return out


def thermal_mask(frame: JobFrame, cfg: DetectorConfig) -> BoolArray:
    """(GPUs x steps): thermal clock-event bits set, or hot and clocked 10% below the job median."""
    bits = np.nan_to_num(frame.metric("CLOCKS_EVENT_REASONS")).astype(np.int64)
    flagged = (bits & THERMAL_BITS) != 0
    clock = frame.metric("SM_CLOCK")
    temp = frame.metric("GPU_TEMP")
    slow = clock < 0.9 * nanmedian(clock, axis=0)[None, :]
    hot = np.nan_to_num(temp) >= cfg.hot_c
    return np.asarray(flagged | (slow & hot), dtype=bool)


def detect_thermal(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """Clocks held down by heat, per GPU."""
    mask = thermal_mask(frame, cfg)
    clock = frame.metric("SM_CLOCK")
    temp = frame.metric("GPU_TEMP")
    med_clock = nanmedian(clock, axis=0)
    spans: list[Span] = []
    for r in range(len(frame.gpus)):
        for a, b in _long_runs(mask[r], cfg.steps(cfg.thermal_min_s, frame), cfg.steps(10.0, frame)):
            share = float(nanmedian(clock[r, a : b + 1] / np.maximum(med_clock[a : b + 1], 1.0)))
            spans.append((r, a, b, share))
    out = []
    for group in group_spans(spans):
        rows = [s[0] for s in group]
        a, b = group[0][1], group[0][2]
        t = float(nanmedian(temp[rows, a : b + 1]))
        share = float(np.median([s[3] for s in group]))
        ev = Evidence(
            ("CLOCKS_EVENT_REASONS", "SM_CLOCK", "GPU_TEMP"),
            {"clock_share_of_peers": share, "temp_c": t},
            f"thermal slowdown: clock at {share:.0%} of peers, {t:.0f} C",
        )
        out.append(_finding(frame, FindingKind.THERMAL, group, ev, 0.95))
    return out


def detect_straggler(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """GPUs whose SM activity stays above their peers' (they compute while the others wait).

    Samples where the GPU is thermally throttled are left out: heat explains that slowness and
    the thermal finding names it.
    """
    if len(frame.gpus) < 3:
        return []
    w = cfg.steps(cfg.window_s, frame)
    sm = np.where(idle_mask(frame, cfg) | ~frame.present, np.nan, frame.metric("SM_ACTIVE"))
    smooth = rolling_mean(sm, w)
    med = nanmedian(smooth, axis=0)
    mad = nanmedian(np.abs(smooth - med), axis=0) * MAD_SCALE
    excess = smooth - med
    threshold = np.maximum(cfg.straggler_excess, cfg.straggler_z * np.nan_to_num(mad))
    hot = rolling_mean(thermal_mask(frame, cfg).astype(np.float64), 3 * w) > 0
    flag = (np.nan_to_num(excess) > threshold) & ~hot
    quiet = ~rolling_mean(flag.astype(np.float64), 3 * w).astype(bool).any(axis=0) & np.isfinite(med)
    # The what-if reads SM activity with the waits left in (a peer idle at the barrier is waiting).
    busy = rolling_mean(np.where(frame.present, frame.metric("SM_ACTIVE"), np.nan), w)
    spans: list[Span] = []
    for r in range(len(frame.gpus)):
        for run in _long_runs(flag[r], cfg.steps(cfg.straggler_min_s, frame), w):
            level = float(nanmedian(excess[r, run[0] : run[1] + 1]))
            a, b = refine_run(np.where(hot[r], 0.0, excess[r]), run, level)
            spans.append((r, a, b, level))
    out = []
    for group in group_spans(spans, cfg.straggler_group_ratio):
        rows = [s[0] for s in group]
        a, b = group[0][1], group[0][2]
        level = float(np.median([s[3] for s in group]))
        peers = float(nanmedian(med[a : b + 1]))
        share, how = _whatif_step_time_share(busy, rows, (a, b), quiet)
        ev = Evidence(
            ("SM_ACTIVE",),
            {
                "sm_active": peers + level,
                "peer_median_sm_active": peers,
                "excess": level,
                "whatif_step_time_share": share,
                "whatif_speedup": 1.0 / share,
            },
            f"SM_ACTIVE {peers + level:.2f} against a peer median of {peers:.2f}: the peers wait for it; "
            f"at the peers' pace each step would take {100 * (1 - share):.0f}% less time "
            f"({1 / share:.2f}x faster, estimated {how})",
        )
        conf = confidence(level, cfg.straggler_excess, (b - a + 1) * frame.step_s, cfg.straggler_min_s)
        out.append(_finding(frame, FindingKind.STRAGGLER, group, ev, conf))
    return out


def _whatif_step_time_share(
    smooth: FloatArray, rows: list[int], span: tuple[int, int], quiet: BoolArray
) -> tuple[float, str]:
    """The share of today's step time a step would take if the straggling ``rows`` ran at their peers'
    median pace (synchronous training waits for the slowest rank at every step), and how it was found.

    SM activity is each rank's busy share of a step times its SMs' intensity while busy. With the
    straggler computing ``m`` times as long as the median peer (the ratio of their SM activity) and
    the busiest other rank ``m2`` times, a step of length T that would take T0 without any straggler
    takes ``T0 + (m2 - 1) c`` at the peers' pace, ``c`` being the peers' compute time,
    ``(T - T0) / (m - 1)``. T0 / T is the peers' SM activity during the episode over their activity
    in the job's quiet steps (same compute over a longer step); without quiet steps, c / T is the
    peers' SM activity over the job's busiest (95th percentile of its smoothed SM activity).
    """
    a, b = span
    median = nanmedian(smooth[:, a : b + 1], axis=0)
    peer = float(nanmean(median))
    if not peer > 0:
        return 1.0, "no peer activity"
    m = float(nanmean(nanmean(smooth[rows, a : b + 1], axis=0))) / peer
    others = np.delete(smooth[:, a : b + 1], rows, axis=0)
    m2 = float(nanmean(np.fmax.reduce(others, axis=0))) / peer if others.size else 1.0
    m2 = min(max(1.0, m2), m)
    if m <= 1.0:
        return 1.0, "no slowdown"
    if int(quiet.sum()) >= 10:
        healthy = float(nanmean(nanmedian(smooth[:, quiet], axis=0)))
        t0_share = min(1.0, peer / healthy) if healthy > 0 else 1.0
        share = t0_share + (m2 - 1.0) * (1.0 - t0_share) / (m - 1.0)
        how = "from the peers' SM activity against the job's quiet steps"
    else:
        busy = float(np.nanpercentile(smooth, 95)) if np.isfinite(smooth).any() else 1.0
        share = 1.0 - (m - m2) * peer / max(busy, peer)
        how = "from SM activity levels (no quiet steps to compare with)"
    return float(np.clip(share, 0.05, 1.0)), how


def detect_comm(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """A node whose InfiniBand bytes drop far below the other nodes' while its GPUs are busy: a
    degraded link that stalls every all-reduce of the job."""
    ib = frame.node_metrics.get("NODE_IB_TX_BYTES")
    rx = frame.node_metrics.get("NODE_IB_RX_BYTES")
    if ib is None or rx is None or len(frame.nodes) < 2:
        return []
    w = cfg.steps(cfg.window_s, frame)
    smooth = rolling_mean(ib + rx, w)
    med = nanmedian(smooth, axis=0)
    ratio = smooth / np.maximum(med, 1.0)
    sm = frame.metric("SM_ACTIVE")
    job_sm = rolling_mean(nanmedian(sm, axis=0)[None, :], w)[0]
    node_sm = np.vstack([nanmedian(sm[frame.node_of_gpu == k], axis=0) for k in range(len(frame.nodes))])
    busy = rolling_mean(node_sm, w) > 0.05
    flag = (np.nan_to_num(ratio, nan=1.0) < cfg.comm_ib_ratio) & busy & (med > 1e6)[None, :]
    spans: list[Span] = []
    for k in range(len(frame.nodes)):
        for run in _long_runs(flag[k], cfg.steps(cfg.comm_min_s, frame), w):
            deficit = 1.0 - np.nan_to_num(ratio[k], nan=1.0)
            level = float(nanmedian(deficit[run[0] : run[1] + 1]))
            a, b = refine_run(deficit, run, level)
            spans.append((k, a, b, 1.0 - level))
    out = []
    for group in group_spans(spans):
        nodes = tuple(frame.nodes[s[0]] for s in group)
        a, b = int(np.median([s[1] for s in group])), int(np.median([s[2] for s in group]))
        share = float(np.median([s[3] for s in group]))
        inside = float(nanmedian(job_sm[a : b + 1]))
        outside = float(nanmedian(np.concatenate([job_sm[:a], job_sm[b + 1 :]])))
        start, end = frame.interval(a, b)
        gpus = tuple(
            frame.gpus[r].name for r in np.flatnonzero(np.isin(frame.node_of_gpu, [s[0] for s in group]))
        )
        ev = Evidence(
            ("NODE_IB_TX_BYTES", "NODE_IB_RX_BYTES", "SM_ACTIVE"),
            {"ib_share_of_peers": share, "job_sm_active_during": inside, "job_sm_active_outside": outside},
            f"InfiniBand bytes at {share:.0%} of the other nodes'; job-wide SM_ACTIVE "
            f"{inside:.2f} during against {outside:.2f} outside (all-reduce stalls)",
        )
        conf = confidence(
            cfg.comm_ib_ratio - share + cfg.comm_ib_ratio,
            cfg.comm_ib_ratio,
            (b - a + 1) * frame.step_s,
            cfg.comm_min_s,
        )
        out.append(Finding(FindingKind.COMM, gpus, nodes, start, end, ev, conf))
    return out


def detect_memory_leak(frame: JobFrame, cfg: DetectorConfig) -> list[Finding]:
    """FB_USED growing above the job median; the start is where the growth line meets the median."""
    used = frame.metric("FB_USED")
    total = used + frame.metric("FB_FREE")
    total_mib = nanmedian(total, axis=1)
    med = nanmedian(used, axis=0)
    dev = rolling_mean((used - med) / np.maximum(total_mib, 1.0)[:, None], cfg.steps(10.0, frame))
    spans: list[Span] = []
    slopes: dict[tuple[int, int], tuple[float, float]] = {}
    for r in range(len(frame.gpus)):
        for a, b in _long_runs(np.nan_to_num(dev[r]) > cfg.leak_share, cfg.steps(cfg.leak_min_s, frame), 5):
            t = np.arange(a, b + 1, dtype=np.float64)
            y = dev[r, a : b + 1]
            ok = np.isfinite(y)
            if ok.sum() < 3:
                continue
            slope, icpt = np.polyfit(t[ok], y[ok], 1)
            if slope <= 0:
                continue
            zero = round(-icpt / slope)
            start = max(0, min(a, max(zero, a - 2 * (b - a + 1))))
            spans.append((r, start, b, float(slope)))
            last = used[r, b] if np.isfinite(used[r, b]) else float(nanmedian(used[r, a : b + 1]))
            slopes[(r, start)] = (float(slope) * total_mib[r] / frame.step_s, float(last / total_mib[r]))
    out = []
    for group in group_spans(spans):
        mib_s = float(np.median([slopes[(s[0], s[1])][0] for s in group]))
        share = float(np.max([slopes[(s[0], s[1])][1] for s in group]))
        free = float(np.median([total_mib[s[0]] for s in group])) * (1.0 - share)
        eta = free / mib_s if mib_s > 0 else float("inf")
        ev = Evidence(
            ("FB_USED", "FB_FREE"),
            {"growth_mib_per_min": 60.0 * mib_s, "used_share": share, "oom_in_s": eta},
            f"memory grows {60 * mib_s:.0f} MiB/min above its peers, {share:.0%} used, "
            f"out of memory in ~{eta / 60:.0f} min at this rate",
        )
        out.append(_finding(frame, FindingKind.MEMORY_LEAK, group, ev, 0.9))
    return out


DETECTORS: tuple[tuple[FindingKind, Callable[[JobFrame, DetectorConfig], list[Finding]]], ...] = (
    (FindingKind.MISSING, detect_missing),
    (FindingKind.XID, detect_xid),
    (FindingKind.ECC, detect_ecc),
    (FindingKind.IDLE, detect_idle),
    (FindingKind.THERMAL, detect_thermal),
    (FindingKind.STRAGGLER, detect_straggler),
    (FindingKind.COMM, detect_comm),
    (FindingKind.MEMORY_LEAK, detect_memory_leak),
)
"""Every detector, in the order findings are listed."""


def detect(frame: JobFrame, cfg: DetectorConfig | None = None) -> list[Finding]:
    """All findings of every detector on a frame."""
    config = cfg or DetectorConfig()
    return [f for _, run in DETECTORS for f in run(frame, config)]
