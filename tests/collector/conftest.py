"""The certificates the collector's security tests share: one test CA per module, a client certificate it issued."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.kafka.certificates import IssuedCertificate, TestCertificateAuthority


@pytest.fixture(scope="module")
def ca() -> TestCertificateAuthority:
    return TestCertificateAuthority()


@pytest.fixture(scope="module")
def client_cert(ca: TestCertificateAuthority) -> IssuedCertificate:
    return ca.issue("collector", server=False)


@pytest.fixture
def ca_file(tmp_path: Path, ca: TestCertificateAuthority) -> Path:
    return ca.write_ca_pem(tmp_path / "ca.pem")
