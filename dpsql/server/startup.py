"""Startup-phase logic: validating the StartupMessage and authenticating (sans-IO).

``check_startup`` applies PostgreSQL's rules to the startup parameters (protocol version
negotiation, required ``user``, the served database name, replication refused, UTF8 only).
``Authenticator`` runs SCRAM-SHA-256 (or, only over TLS, a cleartext password checked
against the same stored verifier) and never a trust mode.  Unknown users go through a mock
SCRAM exchange, so they are indistinguishable from a wrong password.
"""

from __future__ import annotations

from dpsql.server import codec, scram


class Fatal(Exception):
    """A FATAL ErrorResponse that ends the connection."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint

    def encode(self) -> bytes:
        return codec.encode_error(self.sqlstate, self.message, severity="FATAL", hint=self.hint)


def check_startup(startup: codec.Startup, *, database: str) -> tuple[str, bytes | None]:
    """The user name and, when the client asked for more than 3.0, a NegotiateProtocolVersion."""
    if startup.major != 3:
        raise Fatal("0A000", f"unsupported frontend protocol {startup.major}.{startup.minor}: "
                    "server supports 3.0 to 3.0")
    unrecognized = sorted(k for k in startup.params if k.startswith("_pq_."))
    negotiate = None
    if startup.minor > 0 or unrecognized:
        negotiate = codec.encode_negotiate_version(0, unrecognized)
    user = startup.params.get("user", "")
    if not user:
        raise Fatal("28000", "no PostgreSQL user name specified in startup packet")
    if "replication" in startup.params and startup.params["replication"].lower() not in ("false", "off", "no", "0"):
        raise Fatal("0A000", "replication connections are not supported by dpsql")
    wanted = startup.params.get("database") or user
    if wanted != database:
        raise Fatal("3D000", f'database "{wanted}" does not exist', hint=f'connect to database "{database}"')
    encoding = startup.params.get("client_encoding")
    if encoding and encoding.replace("-", "").replace("'", "").upper() not in ("UTF8", "UNICODE"):
        raise Fatal("22023", f'invalid value for parameter "client_encoding": "{encoding}"')
    return user, negotiate


class Authenticator:
    """One authentication exchange; ``step`` consumes a PasswordMessage-family body."""

    def __init__(self, user: str, verifier: str | None, *, mock_key: bytes, method: str = "scram-sha-256",
                 tls: bool = False) -> None:
        if method == "password" and not tls:
            raise Fatal("28000", "cleartext password authentication requires TLS",
                        hint="connect with sslmode=require")
        self.user = user
        self.verifier = verifier
        self.method = method
        self._scram = scram.ScramExchange(user, verifier, mock_key=mock_key) if method == "scram-sha-256" else None
        self._stage = 0

    def begin(self) -> bytes:
        if self._scram is not None:
            return codec.encode_auth_sasl([scram.MECHANISM])
        return codec.AUTH_CLEARTEXT

    def step(self, body: bytes) -> tuple[bytes, bool]:
        """Reply to the client's message and whether authentication is complete (success).

        Raises ``scram.AuthFailure`` when it fails."""
        if self._scram is None:
            password = codec.BodyReader(body).cstring()
            if self.verifier is None or not scram.check_password(password, self.verifier):
                raise scram.AuthFailure("password authentication failed")
            return codec.AUTH_OK, True
        if self._stage == 0:
            mechanism, data = codec.decode_sasl_initial(body)
            if mechanism != scram.MECHANISM:
                raise scram.AuthFailure(f"unsupported SASL mechanism {mechanism}")
            self._stage = 1
            return codec.encode_auth_sasl_continue(self._scram.first(data)), False
        final = self._scram.final(body)
        return codec.encode_auth_sasl_final(final) + codec.AUTH_OK, True
