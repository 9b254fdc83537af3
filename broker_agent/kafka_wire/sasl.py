"""SASL/PLAIN on the Kafka listener: the same secret guards Kafka's protocol as the agents' HMAC
guards their HTTP API, so nothing reaches the simulated cluster unauthenticated.

The listener is ``SASL_PLAINTEXT`` with mechanism ``PLAIN``: user :data:`SASL_USERNAME`,
password the cluster secret (``<data>/secret``, or ``STRATA_AGENT_SECRET[_FILE]``). As on a
Kafka broker (``SaslServerAuthenticator``): before authentication only ApiVersions,
SaslHandshake (v1: the tokens then travel in SaslAuthenticate requests) and SaslAuthenticate are
answered, anything else closes the connection; a mechanism other than PLAIN is
UNSUPPORTED_SASL_MECHANISM; wrong credentials are SASL_AUTHENTICATION_FAILED and the connection
is closed after that answer.
"""

from __future__ import annotations

import hmac

import kafka.errors as Errors
from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker_agent.kafka_wire.api import Api

__all__ = ["APIS", "MECHANISM", "SASL_USERNAME", "plain_credentials_ok"]

SASL_USERNAME = "strata"
MECHANISM = "PLAIN"
FAILED = (
    f"Authentication failed during authentication due to invalid credentials with SASL "
    f"mechanism {MECHANISM}"
)


def plain_credentials_ok(auth_bytes: bytes, secret: bytes) -> bool:
    """RFC 4616 ``authzid NUL authcid NUL passwd``: user :data:`SASL_USERNAME` (an authzid, if
    any, the same user) and the cluster secret as password, compared in constant time."""
    parts = bytes(auth_bytes).split(b"\0")
    if len(parts) != 3:
        return False
    authzid, user, password = parts
    if user != SASL_USERNAME.encode() or authzid not in (b"", user):
        return False
    return hmac.compare_digest(password, secret)


def _handshake(_broker, request, _version, session: dict):
    if request.mechanism != MECHANISM:
        return SaslHandshakeResponse(
            error_code=Errors.UnsupportedSaslMechanismError.errno, mechanisms=[MECHANISM]
        )
    session["mechanism"] = MECHANISM
    return SaslHandshakeResponse(error_code=0, mechanisms=[MECHANISM])


def _authenticate(broker, request, _version, session: dict):
    if session.get("mechanism") == MECHANISM and plain_credentials_ok(
        request.auth_bytes, broker.secret
    ):
        session["authenticated"] = True
        return SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
        )
    session["close"] = True  # Kafka closes the connection after a failed authentication
    return SaslAuthenticateResponse(
        error_code=Errors.SaslAuthenticationFailedError.errno,
        error_message=FAILED,
        auth_bytes=b"",
        session_lifetime_ms=0,
    )


#: answered before authentication (the handlers take the connection's ``session`` too)
APIS = {
    ApiKey.SaslHandshake: Api(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1, _handshake),
    ApiKey.SaslAuthenticate: Api(
        SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2, _authenticate
    ),
}
