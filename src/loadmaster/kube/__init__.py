"""loadmaster as a Kubernetes scheduler: the only package that imports ``kubernetes``.

:mod:`translate` turns API objects into model objects (pure), :mod:`state`
builds each cycle's snapshot from the watched objects, :mod:`api` wraps the
official client (informers, leader Lease), :mod:`cluster` is the loop body
(:class:`KubeCluster`), :mod:`queues` merges the queues/quotas ConfigMap into
the profile, :mod:`snapshot` turns the live cluster into a cluster spec and a
trace, :mod:`semantics` adds kube-scheduler's default plugins to every
profile and turns advertised MIG devices into a MIG pool, :mod:`profiles`
runs several profiles by ``schedulerName``. The in-process API double the
tests and the benchmarks drive the official client against lives outside
the runtime package, in ``loadmaster_testing.kube_api``.
"""
