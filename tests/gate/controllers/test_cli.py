"""`specgate rollout controller` on the embedded store: a Flagger link prints its hook token
once, and only its HMAC is stored; an Argo Rollouts link names the key Argo polls with."""

from __future__ import annotations

from sqlalchemy import select

from gate.db.engine import make_engine, session_factory
from gate.db.models import ControllerLink
from tests.deploy.compose import ROOT
from tests.test_cli_operators import run, store  # noqa: F401 (the fixture)


def test_linking_a_rollout_to_flagger_prints_the_token_once(store):  # noqa: F811
    for name, role in (("stable", "baseline"), ("canary", "candidate")):
        run("routes", "add", "--name", name, "--base-url", "http://127.0.0.1:9/v1",
            "--model", "m", "--role", role, cwd=store)  # fmt: skip
    run("rollout", "create", "--name", "r", "--alias", "m", "--baseline", "stable",
        "--candidate", "canary", cwd=store)  # fmt: skip
    out = run("rollout", "controller", "1", "--controller", "flagger", cwd=store).stdout
    token = out.strip().splitlines()[-1]
    assert token.startswith("sgh_") and "shown once" in out
    sessions = session_factory(make_engine(f"sqlite:///{store}/.specgate/specgate.db"))
    with sessions() as db:
        stored = db.scalars(select(ControllerLink.token_hash)).one()
    assert stored and token not in stored
    refused = run("rollout", "controller", "1", "--controller", "argo-rollouts", cwd=store,
                  check=False)  # fmt: skip
    assert refused.returncode != 0 and "--analysis-key" in refused.stderr
    run("keys", "create", "--name", "argo-analysis", "--scopes", "read", cwd=store)
    again = run("rollout", "controller", "1", "--controller", "argo-rollouts",
                "--analysis-key", "argo-analysis", cwd=store).stdout  # fmt: skip
    assert "sgh_" not in again and "counted from its first check-in" in again
    with sessions() as db:
        assert db.scalars(select(ControllerLink.analysis_key)).one() == "argo-analysis"


def test_linking_a_rollout_to_its_traffic_objects_reads_the_examples_link(store):  # noqa: F811
    for name, role in (("plain", "baseline"), ("eagle", "candidate")):
        run("routes", "add", "--name", name, "--base-url", "http://127.0.0.1:9/v1",
            "--model", "m", "--role", role, cwd=store)  # fmt: skip
    run("rollout", "create", "--name", "r", "--alias", "m", "--baseline", "plain",
        "--candidate", "eagle", cwd=store)  # fmt: skip
    example = ROOT / "deploy" / "k8s" / "traffic" / "gie" / "link.json"
    out = run("rollout", "controller", "1", "--controller", "k8s-traffic",
              "--target", str(example), cwd=store).stdout  # fmt: skip
    assert "drives HTTPRoute objects in llm" in out
    sessions = session_factory(make_engine(f"sqlite:///{store}/.specgate/specgate.db"))
    with sessions() as db:
        link = db.scalars(select(ControllerLink)).one()
    assert link.controller == "k8s-traffic" and link.target["name"] == "llama-8b"
    bad = store / "bad.yaml"
    bad.write_text("kind: HTTPRoute\nnamespace: llm\n")
    refused = run("rollout", "controller", "1", "--controller", "k8s-traffic",
                  "--target", str(bad), cwd=store, check=False)  # fmt: skip
    assert refused.returncode != 0 and "not a traffic target" in refused.stderr
    missing = run("rollout", "controller", "1", "--controller", "k8s-traffic", cwd=store,
                  check=False)  # fmt: skip
    assert missing.returncode != 0 and "target" in missing.stderr
