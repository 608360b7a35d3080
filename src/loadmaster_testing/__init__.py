"""Test doubles of the systems loadmaster talks to; not part of the runtime package.

:mod:`kube_api` is an in-process Kubernetes API server double that the
official client talks to over real HTTP, :mod:`kube_jobs` a double of the
Job controller. The tests and the benchmarks drive loadmaster against them;
the scheduler image does not ship them (``pip install loadmaster`` installs
the ``loadmaster`` package only; an editable checkout has both on its path).
"""
