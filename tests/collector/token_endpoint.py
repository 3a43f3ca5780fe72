"""An OAuth 2 token endpoint on loopback for the collector's tests: `http.server` in a thread, recording each request.

`TokenEndpoint()` answers with the replies a test scripts; `TokenEndpoint(ClientCredentialsIssuer(...))` plays an
authorization server's client credentials grant (RFC 6749 §4.4) for one client, issuing unsecured JWTs that a
Kafka broker accepts with its default OAUTHBEARER validator, OAuthBearerUnsecuredValidatorCallbackHandler.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (request headers, form fields) -> (HTTP status, JSON body)
Answer = Callable[[Message, dict[str, str]], tuple[int, dict[str, Any]]]


class TokenEndpoint:
    """Records each POST (its Authorization header and form) and answers it with `answer`, or without one with the
    next scripted reply in `replies`."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, dict[str, Any]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                form = dict(urllib.parse.parse_qsl(body))
                endpoint.requests.append({"authorization": self.headers["Authorization"], "form": form})
                status, reply = answer(self.headers, form) if answer is not None else endpoint.replies.pop(0)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> TokenEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class TokenRequest:
    """One token request as the issuer saw it: who asked (the User-Agent header, None without one), whether the
    credentials were right, the scope asked for and the token issued (None when refused)."""

    user_agent: str | None
    granted: bool
    scope: str | None
    token: str | None = field(repr=False)   # a bearer credential: out of failure messages


def unsecured_jwt(claims: dict[str, Any]) -> str:
    """A JWT without a signature (RFC 7519 §6): header `{"alg":"none"}`, the claims, an empty third part."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part(claims)}."


class ClientCredentialsIssuer:
    """The client credentials grant for one client: the id and secret in HTTP Basic, each form-URL-encoded first and
    decoded here as RFC 6749 §2.3.1 says (`+` is a space). Answers with an unsecured JWT for `lifetime_s` whose `sub`
    is the client id and whose `scope` is the scope asked for; wrong credentials get HTTP 401 `invalid_client`."""

    def __init__(self, client_id: str, client_secret: str, lifetime_s: int = 3600) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.lifetime_s = lifetime_s
        self.requests: list[TokenRequest] = []

    def __call__(self, headers: Message, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        user_agent, scope = headers.get("User-Agent"), form.get("scope")
        if self._credentials(headers.get("Authorization", "")) != (self.client_id, self.client_secret):
            self.requests.append(TokenRequest(user_agent, False, scope, None))
            return 401, {"error": "invalid_client"}
        now = int(time.time())
        token = unsecured_jwt({"sub": self.client_id, "iat": now, "exp": now + self.lifetime_s,
                               **({"scope": scope} if scope else {})})
        self.requests.append(TokenRequest(user_agent, True, scope, token))
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime_s}

    @staticmethod
    def _credentials(authorization: str) -> tuple[str, str] | None:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            client_id, colon, secret = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return (urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)) if colon else None
