"""How every connection to vLLM is trusted: one CA-file setting (and an optional client
certificate for mutual TLS) shared by the scraper, the tap and every command that talks to vLLM,
and the one function that builds the ``ssl.SSLContext`` from it.

``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are honoured nowhere: without ``--vllm-ca-file`` the trust
store is certifi's bundle (httpx's default), for the tap as for the scraper; with it, that file
replaces the store, as ``curl --cacert`` does. So one setting decides, whatever the environment.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Annotated, Any, Self

import certifi
from pydantic import BaseModel, Field, model_validator

from specdec_exporter.options import FromEnv, Metavar

CA_FILE_VARIABLE = "SPECDEC_VLLM_CA_FILE"
CLIENT_CERT_VARIABLE = "SPECDEC_VLLM_CLIENT_CERT"
CLIENT_KEY_VARIABLE = "SPECDEC_VLLM_CLIENT_KEY"


def vllm_ssl_context(
    ca_file: Path | None = None, client_cert: Path | None = None, client_key: Path | None = None
) -> ssl.SSLContext:
    """A client context that verifies vLLM's certificate against ``ca_file`` (else certifi's
    bundle) and its host name, presenting ``client_cert`` (with ``client_key``, unless the cert
    file holds the key) when given. A file that cannot be used raises ValueError (one line)."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file or certifi.where()))
    except OSError as exc:  # ssl.SSLError is one
        raise ValueError(
            f"cannot use --vllm-ca-file (or {CA_FILE_VARIABLE}) {str(ca_file)!r}: {_reason(exc)}"
        ) from None
    if client_cert is not None:
        try:
            context.load_cert_chain(client_cert, client_key)
        except OSError as exc:  # ssl.SSLError is one
            raise ValueError(
                f"cannot use --vllm-client-cert (or {CLIENT_CERT_VARIABLE}) {str(client_cert)!r}: "
                f"{_reason(exc)}"
            ) from None
    return context


def _reason(exc: OSError) -> str:
    """OpenSSL's reason (``PEM_LIB``, ``NO_CERTIFICATE_OR_CRL_FOUND``) or the OS's."""
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    return str(exc.strerror or exc)


class VllmTrust(BaseModel):
    """The trust settings of connections to vLLM, a base of every settings model whose command
    talks to vLLM (`run`, `check`, `calibrate`, `load`, `sweep`, `demo`)."""

    vllm_ca_file: Annotated[Path | None, Metavar("PEM"), FromEnv(CA_FILE_VARIABLE)] = Field(
        None,
        description="CA certificates (PEM) that an https:// vLLM's certificate must chain to, "
        "instead of the default store (certifi's); SSL_CERT_FILE is not read",
    )
    vllm_client_cert: Annotated[Path | None, Metavar("PEM"), FromEnv(CLIENT_CERT_VARIABLE)] = Field(
        None, description="client certificate (PEM) for mutual TLS to vLLM"
    )
    vllm_client_key: Annotated[Path | None, Metavar("PEM"), FromEnv(CLIENT_KEY_VARIABLE)] = Field(
        None, description="the client certificate's private key (PEM), unless the cert file has it"
    )

    @model_validator(mode="after")
    def _check_trust(self) -> Self:
        """Read the files at start-up, so a bad one is a config error, not a failed scrape."""
        if self.vllm_client_key is not None and self.vllm_client_cert is None:
            raise ValueError("--vllm-client-key needs --vllm-client-cert")
        if self.vllm_ca_file is not None or self.vllm_client_cert is not None:
            self.vllm_ssl_context()
        return self

    def vllm_ssl_context(self) -> ssl.SSLContext:
        """A new context for connections to vLLM (see ``vllm_ssl_context``)."""
        return vllm_ssl_context(self.vllm_ca_file, self.vllm_client_cert, self.vllm_client_key)

    def vllm_trust(self) -> dict[str, Any]:
        """These settings as keyword arguments, for a model built from this one (a phase's
        LoadConfig) that talks to the same vLLM."""
        return self.model_dump(include=set(VllmTrust.model_fields))
