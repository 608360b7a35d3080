"""k-medoids of diagnostics at scale: the same clusters as the dense form, thousands of ranks in seconds."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from loadmaster.diagnostics.signals import k_medoids, standardise


def dense_k_medoids(features: np.ndarray, k_max: int = 4, seed: int = 0) -> tuple[list[int], float]:
    """The former dense form (an n x n x d array, a Python loop per row), kept as the reference."""
    x = standardise(features)
    n = x.shape[0]
    dist = np.abs(x[:, None, :] - x[None, :, :]).sum(axis=2)

    def medoid(rows: np.ndarray) -> int:
        return int(rows[np.argmin(dist[np.ix_(rows, rows)].sum(axis=1))])

    def silhouette(labels: np.ndarray) -> float:
        k = int(labels.max()) + 1
        scores = np.zeros(labels.size)
        for i in range(labels.size):
            own = labels == labels[i]
            if own.sum() <= 1:
                continue
            a = dist[i, own].sum() / (own.sum() - 1)
            b = min(dist[i, labels == c].mean() for c in range(k) if c != labels[i] and np.any(labels == c))
            scores[i] = (b - a) / max(a, b, 1e-12)
        return float(scores.mean())

    best: tuple[list[int], float] = ([0] * n, 0.0)
    rng = np.random.default_rng(seed)
    for k in range(2, min(k_max, n - 1) + 1):
        medoids = [int(np.argmin(dist.sum(axis=1)))]
        while len(medoids) < k:
            d = dist[:, medoids].min(axis=1)
            medoids.append(int(np.argmax(d + 1e-12 * rng.random(d.size))))
        med = np.array(medoids)
        labels = np.argmin(dist[:, med], axis=1)
        for _ in range(20):
            new = np.array(
                [medoid(np.flatnonzero(labels == c)) if np.any(labels == c) else med[c] for c in range(k)]
            )
            labels = np.argmin(dist[:, new], axis=1)
            if np.array_equal(new, med):
                break
            med = new
        score = silhouette(labels)
        if score > max(0.5, best[1]):
            best = ([int(v) for v in labels], score)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_blocked_k_medoids_matches_the_dense_form(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40 + 10 * seed
    features = rng.normal(size=(n, 3))
    features[: n // 5] += 6.0 * (seed % 3)  # a separated group in most cases, none in some
    labels, score = dense_k_medoids(features, seed=seed)
    got = k_medoids(features, seed=seed)
    assert got.labels.tolist() == labels
    assert got.silhouette == pytest.approx(score, rel=1e-12, abs=1e-15)


def test_k_medoids_finds_the_slow_ranks_of_4096_in_bounded_memory() -> None:
    rng = np.random.default_rng(7)
    n, slow = 4096, np.arange(0, 4096, 97)  # 43 slow ranks spread over the job
    features = np.column_stack([rng.normal(1.0, 0.01, n), rng.normal(0.5, 0.01, n), rng.normal(0, 1e-3, n)])
    features[slow, 0] = 1.6
    tracemalloc.start()
    try:
        found = k_medoids(features).minority()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == slow.tolist()
    assert peak < 64 * 2**20  # a dense n x n distance matrix alone would be 128 MiB (n x n x d: 384 MiB)
