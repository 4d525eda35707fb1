"""What check, deploy and the tunnel kinds all speak: the findings table, the lenient reading
of a Corefile, check's inputs, YAML in and out, what a tunnel kind is to kube/, and our
image's defaults. Imports nothing else of kube/.
Tests: tests/test_image.py, tests/test_image_defaults.py, tests/test_tunnel_kinds.py, tests/test_check.py.
"""
