"""OAuth 2 access tokens for SASL OAUTHBEARER by the client credentials grant (RFC 6749 §4.4), as Kafka's
OAuthBearerLoginCallbackHandler gets them: the client id and secret sent with HTTP Basic to the token endpoint,
the token kept until most of its lifetime has passed and shared by every connection that needs one. kafka-python
calls `ClientCredentialsTokenProvider.token()`; the collector's own handshake `token_within(deadline)`.

The client secret is a pydantic `SecretStr`, and no error of this module repeats it, even when the endpoint
echoes it back."""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass

import httpx
from kafka.net.sasl.oauth import AbstractTokenProvider
from pydantic import SecretStr

from collector.security_errors import SecurityHandshakeError

OAUTH_TOKEN_TIMEOUT_S = 10.0     # for clients that ask for a token without a deadline of their own (kafka-python)
OAUTH_REFRESH_FRACTION = 0.8     # a token is fetched again after this part of its lifetime, as Kafka's clients do


@dataclass(frozen=True)
class OAuthClientCredentials:
    """OAuth 2 client credentials (RFC 6749 §4.4) for SASL OAUTHBEARER, as Kafka's OAuthBearerLoginCallbackHandler
    takes them."""

    token_endpoint_url: str
    client_id: str
    client_secret: SecretStr
    scope: str | None = None

    def basic_auth_pair(self) -> tuple[str, str]:
        """The client id and secret as HTTP Basic carries them to the token endpoint: each URL-encoded first
        (RFC 6749 §2.3.1), as Kafka's Java clients send them."""
        return (urllib.parse.quote(self.client_id, safe=""),
                urllib.parse.quote(self.client_secret.get_secret_value(), safe=""))


class ClientCredentialsTokenProvider(AbstractTokenProvider):
    """Access tokens from an OAuth token endpoint by the client credentials grant, as Kafka's
    OAuthBearerLoginCallbackHandler gets them (HTTP Basic auth with the URL-encoded id and secret), kept until
    80 % of their lifetime has passed and shared by every connection. kafka-python calls `token()`."""

    def __init__(self, credentials: OAuthClientCredentials, *, timeout_s: float = OAUTH_TOKEN_TIMEOUT_S) -> None:
        super().__init__()
        self.credentials = credentials
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0
        self.fetches = 0

    def __repr__(self) -> str:
        return f"ClientCredentialsTokenProvider({self.credentials.token_endpoint_url}, " \
               f"client {self.credentials.client_id!r})"

    def token(self) -> str:
        return self.token_within(time.monotonic() + self.timeout_s)

    def token_within(self, deadline: float) -> str:
        """A token valid now, fetched if the kept one is due; SecurityHandshakeError by the deadline."""
        if not self._lock.acquire(timeout=max(deadline - time.monotonic(), 0.001)):
            raise SecurityHandshakeError("OAuth: timed out waiting for another connection's token request")
        try:
            if self._token is None or time.monotonic() >= self._refresh_at:
                fetched_at = time.monotonic()
                self._token, lifetime_s = self._fetch(deadline)
                self._refresh_at = fetched_at + lifetime_s * OAUTH_REFRESH_FRACTION
            return self._token
        finally:
            self._lock.release()

    def _fetch(self, deadline: float) -> tuple[str, float]:
        c = self.credentials
        secret = c.client_secret.get_secret_value()
        basic = base64.b64encode(":".join(c.basic_auth_pair()).encode()).decode()
        form = {"grant_type": "client_credentials", **({"scope": c.scope} if c.scope else {})}
        where = f"OAuth token endpoint {c.token_endpoint_url}"
        try:
            response = httpx.post(c.token_endpoint_url, data=form, timeout=max(deadline - time.monotonic(), 0.001),
                                  headers={"Authorization": f"Basic {basic}", "Accept": "application/json"})
        except httpx.HTTPError as e:
            raise SecurityHandshakeError(_redacted(f"{where}: {e or type(e).__name__}", secret)) from None
        self.fetches += 1
        if response.status_code != 200:
            raise SecurityHandshakeError(_redacted(f"{where} answered HTTP {response.status_code}: "
                                                   f"{response.text[:300]}", secret))
        try:
            body = response.json()
            token = body["access_token"]
        except (ValueError, KeyError, TypeError):
            raise SecurityHandshakeError(f"{where} answered without an access_token") from None
        if not isinstance(token, str) or not token:
            raise SecurityHandshakeError(f"{where} answered an empty access_token")
        expires_in = body.get("expires_in")
        if isinstance(expires_in, int | float) and expires_in > 0:
            return token, float(expires_in)
        return token, _jwt_lifetime_s(token)


def _jwt_lifetime_s(token: str) -> float:
    """Seconds until the JWT's `exp` claim; 0 (fetch a new one for every connection) when it has none."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(float(claims["exp"]) - time.time(), 0.0)
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error):
        return 0.0


def _redacted(text: str, *secrets: str) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text
