"""A stand-in for `kubectl`, for `splitdns verify --kubectl` tests. NOT a cluster.

No Kubernetes API server can run on this machine, so this small program answers the three
kubectl calls verify makes by acting on the namespace lab instead:

- `kubectl exec [-n NS] [-c C] TARGET -- CMD...`: runs CMD in the lab's pod namespace
  (`splitdns` becomes this Python's `-m splitdns`), as kubectl exec runs it in the container;
- `kubectl delete pod [-n NS] NAME [--wait=true]`: asks the test (through a request file in
  $LAB_CONTROL) to replace the pod for real (delete the namespace, create it from the spec),
  and waits until it is done;
- `kubectl rollout status TARGET ...`: the replacement is already ready when delete returns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    pod_ns, control = os.environ["LAB_POD_NS"], Path(os.environ["LAB_CONTROL"])
    if argv[:1] == ["exec"]:
        command = argv[argv.index("--") + 1:]
        if command[:1] == ["splitdns"]:
            command = [sys.executable, "-m", "splitdns", *command[1:]]
        done = subprocess.run(["ip", "netns", "exec", pod_ns, *command], timeout=120)
        return done.returncode
    if argv[:2] == ["delete", "pod"]:
        (control / "delete-request").write_text(" ".join(argv))
        for _ in range(600):  # bounded: 60 s
            if (control / "delete-done").exists():
                (control / "delete-done").unlink()
                return 0
            time.sleep(0.1)
        print("stand-in kubectl: the test did not replace the pod in 60 s", file=sys.stderr)
        return 1
    if argv[:2] == ["rollout", "status"]:
        print("deployment \"app\" successfully rolled out")
        return 0
    print(f"stand-in kubectl: unsupported call {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
