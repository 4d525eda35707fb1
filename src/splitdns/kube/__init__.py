"""The Kubernetes side: render manifests for the in-pod resolver, and lint a pod's DNS before deploy.

Nothing here is imported by `splitdns serve`: PyYAML, kubernetes-validate and lightkube are
imported inside these modules only, so the serving path stays light.
"""
