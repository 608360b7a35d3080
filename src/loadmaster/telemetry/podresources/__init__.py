"""The kubelet's pod-resources API (v1): generated stubs (``v1``) and a fake server for tests (``fake``)."""
