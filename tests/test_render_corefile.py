"""`render --corefile FILE` and `inject --corefile FILE` carry the Corefile into the pod as it is:
every directive, option and comment, with only the lines the pod needs changed, each change said
on stderr with its file:line; the forms that hold only zones (the webhook, cluster-wide) refuse
with the lines they would lose."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from splitdns import cli, config, corefile
from splitdns.kube.deploy import inject

CLUSTER = "10.96.0.10"
TEAM = """\
# The team's Corefile: what they run today.
svc.acme.internal:53 {
    errors
    rewrite name db.svc.acme.internal primary.db.svc.acme.internal
    forward . 192.168.240.1 192.168.240.2 {
        policy sequential
    }
    cache 300 {
        serve_stale 1h
    }
}

.:53 {
    errors
    hosts {
        192.0.2.10 legacy.example.org
        fallthrough
    }
    template IN A blocked.example.org {
        answer "{{ .Name }} 60 IN A 192.0.2.99"
    }
    forward . 10.96.0.10
    health 127.0.0.1:8080
    prometheus
    reload
}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def statements(text: str, path: str) -> list[tuple[str, ...]]:
    """Each block's keys and every statement's words, nested bodies included, in order."""
    out: list[tuple[str, ...]] = []

    def walk(sts: tuple[corefile.Statement, ...]) -> None:
        for st in sts:
            out.append((st.name, *st.args))
            walk(st.body or ())

    for block in corefile.parse(text, path, {}):
        out.append(("KEYS", *(k.text for k in block.keys)))
        walk(block.directives)
    return out


@pytest.fixture
def team(tmp_path: Path) -> Path:
    path = tmp_path / "Corefile"
    path.write_text(TEAM)
    return path


def test_render_carries_every_directive_and_says_what_it_changed(
        team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", "--corefile", str(team), "--cluster-dns", CLUSTER)
    assert code == 0, err
    carried = next(yaml.safe_load_all(out))["data"]["Corefile"]
    assert "# The team's Corefile: what they run today." in carried  # comments too
    config.loads(carried, "Corefile", read_files=False)  # the resolver takes it
    given, kept = statements(TEAM, str(team)), statements(carried, "Corefile")
    changed = {("health", "127.0.0.1:8080"): ("health", ":8080"), ("prometheus",): ("prometheus", ":9153")}
    # Everything the file says is there, in its order, but the two lines the pod needs changed and
    # `ready`, which the probes ask, added at the end of the catch-all block (the file's last).
    expected = [changed.get(st, st) for st in given] + [("ready",)]
    assert kept[:len(expected)] == expected
    for line in ("rewrite name db.svc.acme.internal primary.db.svc.acme.internal", "policy sequential",
                 "serve_stale 1h", "cache 300 {", "192.0.2.10 legacy.example.org",
                 'answer "{{ .Name }} 60 IN A 192.0.2.99"', "reload"):
        assert line in carried, line
    # The cluster zone the file lacks comes after it, as a block of its own.
    assert carried.rstrip().endswith("}") and "cluster.local:53 {" in carried.split("reload")[1]
    # Each change on stderr with the file's line.
    assert f"{team}:23: `health 127.0.0.1:8080` -> `health :8080`" in err
    assert f"{team}:24: `prometheus` -> `prometheus :9153`" in err
    assert f"{team}:13: `ready` added to the block .:53" in err


def test_inject_carries_it_too_without_reload(team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app, image: a}]\n"
    pod_file = team.parent / "pod.yaml"
    pod_file.write_text(pod)
    code, out, err = run(capsys, "inject", "--corefile", str(team), "--cluster-dns", CLUSTER, str(pod_file))
    assert code == 0, err
    spec = yaml.safe_load(out)["spec"]
    (env,) = spec["initContainers"][0]["env"]
    assert env["name"] == inject.COREFILE_ENV
    text = env["value"]
    assert "policy sequential" in text and "serve_stale 1h" in text and "legacy.example.org" in text
    assert "reload" not in statements(text, "env")[0] and "\n    reload\n" not in text
    assert f"{team}:25: `reload` removed" in err
    assert f"{team}:23: `health 127.0.0.1:8080` -> `health :15380`" in err
    config.loads(text, "env", read_files=False)


@pytest.mark.parametrize("form", [["--form", "webhook"], ["--cluster-wide"]])
def test_the_forms_made_of_zones_refuse_with_what_they_would_lose(
        team: Path, capsys: pytest.CaptureFixture[str], form: list[str]) -> None:
    code, out, err = run(capsys, "render", "--corefile", str(team), "--cluster-dns", CLUSTER, *form)
    assert code == 2 and out == ""
    assert "would be lost" in err and f"`rewrite name db.svc.acme.internal primary.db.svc.acme.internal` " \
        f"({team}:4)" in err and f"({team}:8)" in err


def test_a_zone_given_twice_or_a_file_the_pod_lacks_is_refused(
        team: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "--corefile", str(team), "--cluster-dns", CLUSTER,
                       "--zone", "svc.acme.internal=192.0.2.53")
    assert code == 2 and "zone svc.acme.internal. is in" in err and "change it there" in err
    code, _, err = run(capsys, "render", "--corefile", str(team), "--cluster-dns", CLUSTER,
                       "--probe", "svc.acme.internal=db.svc.acme.internal")
    assert code == 2 and "add `ready { probe db.svc.acme.internal }`" in err
    (tmp_path / "extra.conf").write_text("log\n")
    importing = tmp_path / "Importing"
    importing.write_text(".:53 {\n    import extra.conf\n    forward . 10.96.0.10\n}\n")
    code, _, err = run(capsys, "render", "--corefile", str(importing), "--cluster-dns", CLUSTER)
    assert code == 2 and "comes from another file" in err and "inline it" in err
    unknown = tmp_path / "Unknown"
    unknown.write_text(".:53 {\n    forward . 10.96.0.10\n    kubernetes cluster.local\n}\n")
    code, _, err = run(capsys, "render", "--corefile", str(unknown), "--cluster-dns", CLUSTER)
    assert code == 2 and f"{unknown}:3:" in err and "kubernetes" in err


def test_a_line_the_pod_needs_changed_is_left_whole_with_its_body(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Corefile"
    path.write_text(".:53 {\n\tforward . 10.96.0.10\n\tready 127.0.0.1:8181 {\n\t\tprobe example.org\n\t}\n"
                    "\thealth\n\tprometheus :9153\n}\n")
    code, out, err = run(capsys, "render", "--corefile", str(path), "--cluster-dns", CLUSTER)
    assert code == 0, err
    carried = next(yaml.safe_load_all(out))["data"]["Corefile"]
    assert "\tready :8181 {\n\t\tprobe example.org\n\t}\n" in carried
    assert err.count("changed for the pod") == 1


def test_a_single_block_without_braces_gets_them_when_blocks_follow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Corefile"
    path.write_text(".:53\nforward . 10.96.0.10\nhealth\n")
    code, out, err = run(capsys, "render", "--corefile", str(path), "--cluster-dns", CLUSTER)
    assert code == 0, err
    carried = next(yaml.safe_load_all(out))["data"]["Corefile"]
    loaded = config.loads(carried, "Corefile", read_files=False)
    assert [b.name for b in loaded.blocks] == [".:53", "cluster.local.:53"]
    assert f"{path}:1: braces put around the block .:53" in err


def test_the_coredns_image_gets_bind_in_every_carried_block(
        team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", "--corefile", str(team), "--cluster-dns", CLUSTER,
                         "--resolver", "coredns")
    assert code == 0, err
    carried = next(yaml.safe_load_all(out))["data"]["Corefile"]
    blocks = corefile.parse(carried, "Corefile", {})
    assert all(any(st.name == "bind" and st.args == ("127.0.0.1",) for st in b.directives) for b in blocks)
    assert f"{team}:2: `bind 127.0.0.1` added" in err and f"{team}:13: `bind 127.0.0.1` added" in err
