"""A kubeconfig specgate cannot use is a ConfigError (the traffic job then holds every
linked rollout), and its inline certificates are written once, not on every pass."""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path

import pytest

from gate.controllers import kube
from gate.errors import ConfigError

CONTEXT = "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"


@pytest.mark.parametrize(
    "config",
    [
        # current-context names no context
        "current-context: missing\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
        "users: [{name: u, user: {token: t}}]\n",
        # a token file that does not exist
        CONTEXT + "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
        "users: [{name: u, user: {tokenFile: /nonexistent/token}}]\n",
        # a cluster without `server`
        CONTEXT + "clusters: [{name: c, cluster: {}}]\nusers: [{name: u, user: {token: t}}]\n",
        # inline certificate data that is not base64
        CONTEXT + "clusters: [{name: c, cluster: {server: 'https://x', "
        "certificate-authority-data: '@@@'}}]\nusers: [{name: u, user: {token: t}}]\n",
    ],
    ids=["no-context", "no-token-file", "no-server", "bad-base64"],
)
def test_a_kubeconfig_that_cannot_be_used_is_a_config_error(tmp_path: Path, config: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(config)
    with pytest.raises(ConfigError):
        kube.connect(path)


def test_connecting_every_pass_writes_the_inline_certificate_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=kube"],
        check=True, capture_output=True,
    )  # fmt: skip
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    data = base64.b64encode(cert.read_bytes()).decode()
    path = tmp_path / "kubeconfig"
    path.write_text(
        CONTEXT + f"clusters: [{{name: c, cluster: {{server: 'https://x', "
        f"certificate-authority-data: {data}}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\n"
    )
    for _ in range(3):
        kube.connect(path).close()
    assert len(list(spill.iterdir())) == 1
