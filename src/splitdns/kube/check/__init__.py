"""The judgements: `splitdns check` (Corefiles, pod specs and VPN client configs read
together, each family of lints, manifests against their schemas) and `splitdns doctor` (a
cluster's pods against the webhook's injection). May read what deploy/ makes: a check
holds pods to it.
Tests: tests/test_check.py, tests/test_check_serve_agree.py, tests/test_check_truth.py.
"""
