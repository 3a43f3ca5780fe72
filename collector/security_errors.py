"""The two ways a secured connection to Kafka fails, shared by the three modules of client security: reading the
client properties (`client_properties.py`), the TLS and SASL handshake (`client_security.py`) and the OAuth token
request inside it (`oauth_token.py`). Here, below all three, so that each raises them without importing the others."""

from __future__ import annotations


class SecurityConfigError(ValueError):
    """Raised when the client properties cannot be used: a missing or unreadable file, an unknown or
    unsupported property, a bad value, a wrong keystore password. The message names the file and the property."""


class SecurityHandshakeError(Exception):
    """Raised when a broker refuses the client's SASL authentication (its SaslAuthenticate error message is the
    cause shown), does not offer the configured mechanism, or the OAuth token endpoint gives no token."""
