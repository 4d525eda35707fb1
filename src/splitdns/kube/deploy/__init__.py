"""What `splitdns render`, `splitdns inject` and the admission webhook make: the plan
(zones, owners, upstreams), the Corefile text, the manifests, the injection, and the forms
a user applies. Plain dicts; YAML is shared.yamlio's.
Tests: tests/test_inject.py, tests/test_monitoring_render.py, tests/test_wireguard_kube.py.
"""
