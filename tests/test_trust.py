"""One trust setting for every connection to vLLM: a CA file the test makes, a local TLS vLLM.

The CA, the server's and the client's certificates come from the `openssl` command line, made
fresh for each test; the vLLM is a threaded HTTPS server on 127.0.0.1 answering /metrics with a
real capture and anything else with a small JSON body.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from fakevllm import serving
from sidecar_process import address_of, sidecar, sidecar_process, wait_for
from specdec_exporter.cli import COMMANDS, main
from specdec_exporter.commands.demo import DemoSettings, sidecar_command
from specdec_exporter.commands.exits import EXIT_USAGE
from specdec_exporter.commands.flags import add_settings_flags, settings_from_args
from specdec_exporter.devtools.calibrate.runner import CalibrateConfig
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.runner import build_client
from specdec_exporter.devtools.sweep.config import SweepConfig
from specdec_exporter.options import ConfigError
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.trust import vllm_ssl_context
from variants import capture

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

TALKS_TO_VLLM = ("run", "check", "calibrate", "load", "sweep", "demo")
NEW_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
MODELS_REPLY = b'{"object": "list", "data": [{"id": "tls-model", "object": "model"}]}'


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_both: Path
    """The client's certificate and key in one file."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(name: str, subject: str, extensions: str, folder: Path) -> None:
    _openssl(
        "req",
        *NEW_EC_KEY,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        subject,
        cwd=folder,
    )
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    _openssl(
        "req", "-x509", *NEW_EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=specdec test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=tmp_path,
    )  # fmt: skip
    _signed(
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        tmp_path,
    )
    _signed(
        "client",
        "/CN=specdec",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        tmp_path,
    )
    both = tmp_path / "client-both.pem"
    both.write_bytes(
        (tmp_path / "client.pem").read_bytes() + (tmp_path / "client.key").read_bytes()
    )
    return Pki(
        tmp_path / "ca.pem",
        tmp_path / "server.pem",
        tmp_path / "server.key",
        tmp_path / "client.pem",
        tmp_path / "client.key",
        both,
    )


@contextmanager
def https_vllm(pki: Pki, *, client_cert_required: bool = False) -> Iterator[str]:
    """A TLS vLLM stand-in on 127.0.0.1; yields its https:// URL."""
    metrics = capture("t3").encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = (
                (metrics, "text/plain; version=0.0.4")
                if self.path == "/metrics"
                else (MODELS_REPLY, "application/json")
            )
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if client_cert_required:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server) as port:
        yield f"https://127.0.0.1:{port}"


def get_models(url: str, context: ssl.SSLContext) -> int:
    with httpx.Client(verify=context, trust_env=False, timeout=10) as client:
        return client.get(f"{url}/v1/models").status_code


def test_the_ca_file_replaces_the_default_store(pki: Pki) -> None:
    with https_vllm(pki) as url:
        assert get_models(url, vllm_ssl_context(pki.ca)) == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            get_models(url, vllm_ssl_context())


def test_ssl_cert_file_is_read_nowhere(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    monkeypatch.setenv("SSL_CERT_DIR", str(pki.ca.parent))
    with https_vllm(pki) as url, pytest.raises(httpx.ConnectError, match="VERIFY_FAILED"):
        get_models(url, vllm_ssl_context())


def test_a_client_certificate_for_mutual_tls(pki: Pki) -> None:
    with https_vllm(pki, client_cert_required=True) as url:
        assert get_models(url, vllm_ssl_context(pki.ca, pki.client_cert, pki.client_key)) == 200
        assert get_models(url, vllm_ssl_context(pki.ca, pki.client_both)) == 200
        with pytest.raises(httpx.HTTPError):
            get_models(url, vllm_ssl_context(pki.ca))


@pytest.mark.parametrize("command", TALKS_TO_VLLM)
def test_every_command_that_talks_to_vllm_takes_the_trust_flags(command: str) -> None:
    module = __import__(f"specdec_exporter.commands.{command}", fromlist=["configure"])
    parser = argparse.ArgumentParser()
    module.configure(parser)
    text = parser.format_help()
    for flag in ("--vllm-ca-file", "--vllm-client-cert", "--vllm-client-key"):
        assert flag in text
    assert "SPECDEC_VLLM_CA_FILE" in text
    assert set(TALKS_TO_VLLM) == set(COMMANDS) - {"simulate", "install-probe"}  # no vLLM there


def test_the_variable_sets_the_ca_file_of_a_flags_only_command(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_VLLM_CA_FILE", str(pki.ca))
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, DemoSettings)
    assert settings_from_args(DemoSettings, parser.parse_args([])).vllm_ca_file == pki.ca
    assert Settings().vllm_ca_file == pki.ca


def test_a_file_that_is_no_certificate_is_a_config_error(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    assert main(["check", "--vllm-ca-file", str(junk)]) == EXIT_USAGE
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "--vllm-ca-file" in error and "junk.pem" in error
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Settings)
    for flags in (["--vllm-client-key", str(pki.client_key)], ["--vllm-client-cert", str(junk)]):
        with pytest.raises(ConfigError, match="--vllm-client-"):
            settings_from_args(Settings, parser.parse_args(flags))


def test_run_scrapes_and_taps_an_https_vllm_with_the_ca_file(pki: Pki) -> None:
    with https_vllm(pki) as url:
        extra = ("--vllm-ca-file", str(pki.ca), "--proxy-listen", "127.0.0.1:0")
        with sidecar(url, *extra) as (metrics_url, records):
            wait_for(metrics_url + "/metrics", "specdec_up 1.0")
            reply = httpx.get(f"http://{address_of(records, 'tap')}/v1/models", timeout=10)
            assert (reply.status_code, reply.content) == (200, MODELS_REPLY)


def test_without_the_ca_file_neither_side_trusts_vllm_even_with_ssl_cert_file(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's split: with SSL_CERT_FILE the tap trusted vLLM and the scraper did not."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    with https_vllm(pki) as url, sidecar_process(url, "--proxy-listen", "127.0.0.1:0") as running:
        failure = running.wait_for_record(lambda r: r.get("msg") == "vLLM scrape failed")
        assert "CERTIFICATE_VERIFY_FAILED" in str(failure)
        reply = httpx.get(f"http://{running.address('tap')}/v1/models", timeout=10)
        assert reply.status_code == 502
        assert running.stop() == 0


def test_check_reads_an_https_vllm_with_the_ca_file(pki: Pki) -> None:
    with https_vllm(pki) as url:
        window = ["--vllm-url", url, "--window", "0.1"]
        assert main(["check", *window]) == 3  # unreachable: the default store lacks the CA
        assert main(["check", *window, "--vllm-ca-file", str(pki.ca)]) != 3


def test_load_sweep_and_calibrate_connect_with_the_ca_file(pki: Pki) -> None:
    """Each dev tool's phases are LoadConfigs built from its config: the trust goes with them."""
    trust = {"vllm_ca_file": pki.ca}
    with https_vllm(pki) as url:
        load = LoadConfig(url=url, requests=1, **trust)

        async def model() -> str:
            async with build_client(load) as client:
                reply = await client.get("/v1/models")
                return str(reply.json()["data"][0]["id"])

        assert asyncio.run(model()) == "tls-model"
    sweep = SweepConfig(url=url, **trust)
    calibrate = CalibrateConfig(spec_urls=(url,), base_url=url, **trust)
    phases = (sweep.phase_load(0.0, "m"), calibrate.load(url, "m", 1, 0.0, 1))
    assert [phase.vllm_ca_file for phase in phases] == [pki.ca, pki.ca]


def test_demo_hands_the_trust_to_the_sidecar_it_starts(pki: Pki) -> None:
    settings = DemoSettings(vllm_ca_file=pki.ca, vllm_client_cert=pki.client_both)
    command = sidecar_command(settings, tap=True)
    assert command[-4:] == [
        "--vllm-ca-file",
        str(pki.ca),
        "--vllm-client-cert",
        str(pki.client_both),
    ]
