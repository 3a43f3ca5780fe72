"""A throwaway certificate authority for the fixture's TLS listeners and the tests' clients (the `cryptography`
package; no keytool): a CA, broker certificates naming 127.0.0.1 and localhost, client certificates for mutual
TLS, written as PEM (Kafka reads PEM key and trust stores, KIP-651) or PKCS12."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "isrwatch tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate, its private key and the CA certificate that signed it."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey
    ca_certificate: x509.Certificate

    def chain_pem(self) -> bytes:
        """The certificate, then its CA's: what a keystore presents."""
        return _pem(self.certificate) + _pem(self.ca_certificate)

    def key_pem(self, password: str | None = None) -> bytes:
        """PKCS#8 PEM, encrypted when a password is given (BEGIN ENCRYPTED PRIVATE KEY)."""
        encryption = (serialization.NoEncryption() if password is None
                      else serialization.BestAvailableEncryption(password.encode()))
        return self.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              encryption)

    def write_pem_keystore(self, path: Path, password: str | None = None) -> Path:
        """Key and chain in one PEM file (Kafka's ssl.keystore.type=PEM)."""
        path.write_bytes(self.key_pem(password) + self.chain_pem())
        path.chmod(0o600)
        return path

    def write_pkcs12(self, path: Path, password: str) -> Path:
        """A PKCS12 keystore with the key, its certificate and the CA's."""
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"client", self.private_key, self.certificate, [self.ca_certificate],
            serialization.BestAvailableEncryption(password.encode())))
        path.chmod(0o600)
        return path


class TestCertificateAuthority:
    """A self-signed CA that issues server and client certificates, valid for two days from now."""

    __test__ = False   # not a pytest test class, despite its name

    def __init__(self, common_name: str = "isrwatch test CA") -> None:
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(self.private_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.private_key.public_key()), critical=False)
            .sign(self.private_key, hashes.SHA256()))

    def ca_pem(self) -> bytes:
        return _pem(self.certificate)

    def write_ca_pem(self, path: Path) -> Path:
        path.write_bytes(self.ca_pem())
        return path

    def write_pkcs12_truststore(self, path: Path, password: str) -> Path:
        """The CA certificate as a Java PKCS12 truststore (a trusted-certificate entry, as keytool -import makes)."""
        path.write_bytes(pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(self.certificate, b"ca")],
            serialization.BestAvailableEncryption(password.encode())))
        return path

    def issue(self, common_name: str, *, server: bool, dns_names: tuple[str, ...] = (),
              ip_addresses: tuple[str, ...] = ()) -> IssuedCertificate:
        """A certificate for a server (the names in its subject alternative names) or a TLS client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.private_key.public_key()),
                           critical=False))
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return IssuedCertificate(builder.sign(self.private_key, hashes.SHA256()), key, self.certificate)

    def issue_broker(self) -> IssuedCertificate:
        """What the fixture's brokers present: valid for 127.0.0.1 and localhost."""
        return self.issue("kafka broker", server=True, dns_names=("localhost",), ip_addresses=("127.0.0.1",))
