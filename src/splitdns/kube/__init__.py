"""The Kubernetes side: render manifests for the in-pod resolver, and check a pod's DNS before deploy.

Four parts, each importing only from those below it (pyproject.toml's contract; laid out by
tools/kube_layout.py):
- check/: `splitdns check` and `splitdns doctor`, the judgements;
- deploy/: what render, inject and the webhook make;
- tunnels/: per tunnel kind its modules, and the one table of kinds (tunnels/__init__.py);
- shared/: the findings, the lenient Corefile reading, check's inputs, YAML, the image's defaults.

Nothing here is imported by `splitdns serve`: PyYAML, kubernetes-validate and lightkube are
imported inside these modules only, so the serving path stays light.
Tests: tests/test_inject.py, tests/test_render.py, tests/test_wireguard_kube.py.
"""
